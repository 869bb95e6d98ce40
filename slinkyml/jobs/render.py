"""JobSpec → sbatch script text. Pure: no Slurm, no file system, same spec → same bytes.

Spec values reach the shell quoted (``#SBATCH`` lines with sbatch's own escapes); only words this
module writes itself expand.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from slinkyml import DATA_DIR, rendezvous
from slinkyml.jobs.presets import preset_env_lines
from slinkyml.jobs.request import SlurmJobRequest, safe_name
from slinkyml.jobs.spec import NODE_PYTHON, JobSpec
from slinkyml.slurm import causes, protocol
from slinkyml.slurm.protocol import ENV_CHECKPOINT_DIR, ENV_DS_CONFIG, ENV_LOG_DIR, ENV_RESTART, ENV_SIGNAL

#: each srun task hands its node index to torchrun's --node-rank (srun cannot set per-task variables)
NODE_RANK_WRAPPER = ("bash", "-c", 'PET_NODE_RANK="$SLURM_NODEID" exec "$@"', "slinkyml-node")
#: the batch script's shell parts, real files under data/shell (shellchecked as they are)
SHELL_DIR = DATA_DIR / "shell"
#: What every rank started by DeepSpeed's slurm launcher runs first: that launcher (``SlurmRunner``,
#: read in deepspeed 0.19.8) sets no RANK/LOCAL_RANK/WORLD_SIZE, ignores ``--module`` and
#: double-quotes some exported values, which srun keeps literally. This entry undoes all three.
DS_RANK_ENTRY = (SHELL_DIR / "ds_rank_entry.py").read_text()


class Raw(str):
    """A shell word this module wrote itself: emitted as is (it may expand ``"$VAR"``)."""


_ANSI_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_NEEDS_ANSI_QUOTING = re.compile(r"[$`\x00-\x1f\x7f]").search
_PLAIN_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:=@+/%-]+").fullmatch


def quote(value: str) -> str:
    """Quote one literal shell word; ``$'...'`` for ``$``, backticks or control characters, so it
    reads unambiguously and shellcheck sees no forgotten expansion.
    """
    value = str(value)
    if not _NEEDS_ANSI_QUOTING(value):
        return shlex.quote(value)
    out = []
    for ch in value:
        if ch in _ANSI_ESCAPES:
            out.append(_ANSI_ESCAPES[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def shell_word(word: str) -> str:
    return str(word) if isinstance(word, Raw) else quote(str(word))


def shell_join(words: Sequence[str]) -> str:
    return " ".join(shell_word(w) for w in words)


def sbatch_value(value: str) -> str:
    """Quote a value for an ``#SBATCH`` line: sbatch honours double quotes and backslash escapes."""
    value = str(value)
    if _PLAIN_SBATCH_VALUE(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def entry_argv(spec: JobSpec, *, python: str | None = None) -> list[str]:
    """What one training process runs (without any launcher)."""
    entry = spec.entry
    py = python or spec.python or NODE_PYTHON
    if entry.module is not None:
        return [py, "-m", entry.module, *entry.args]
    if entry.is_python:
        return [py, str(entry.script), *entry.args]
    return [str(entry.script), *entry.args]


def launch_argv(spec: JobSpec, head_node: str, port: int | str | None = None, *,
                nnodes: int | str | None = None, rdzv_id: str = "slinkyml", node_rank: int | str | None = None,
                rdzv_endpoint: str | None = None, ds_hostfile: str | None = None,
                ds_rank_entry: str | None = None, ds_srun_output: str | None = None) -> list[str]:
    """The launch command for ONE node (torchrun/deepspeed/neuron/srun task) as an argv list.

    torchrun runs as ``python -m torch.distributed.run`` so the job's interpreter is used;
    ``head_node``/``port`` are the c10d endpoint; text words (``Raw(...)``) are kept as given.
    DeepSpeed's own launcher runs once on the batch node and starts all ranks with one ``srun``.
    """
    port = (spec.rdzv_port or rendezvous.PORT_BASE) if port is None else port
    nnodes = _word(spec.nodes if nnodes is None else nnodes)
    endpoint = rdzv_endpoint or f"{head_node}:{port}"
    if spec.launcher == "srun":
        return entry_argv(spec)
    if spec.uses_deepspeed_launcher:
        procs = spec.effective_procs_per_node
        argv = [spec.python or NODE_PYTHON, "-m", "deepspeed.launcher.runner", "--launcher", "slurm",
                "--hostfile", ds_hostfile or "hostfile", "--num_nodes", nnodes]
        if spec.gpus_per_node and spec.gpus_per_node == procs:
            argv += ["--num_gpus", str(procs)]  # becomes srun --gpus-per-node; a CPU job must not ask
        srun_args = ["--kill-on-bad-exit=1"]
        if ds_srun_output:
            srun_args.append(f"--output={ds_srun_output}")
        argv += ["--master_addr", head_node, "--master_port", _word(port),
                 "--no_ssh_check",  # the nodes are reached through srun, not ssh
                 "--force_multi",  # one node too: srun, not a local launch inside the batch step
                 # added to DeepSpeed's srun line, after its shlex.split (exact for any value)
                 f"--launcher_args={shlex.join([*srun_args, *spec.srun_args])}",
                 ds_rank_entry or "ds_rank_entry.py"]
        return argv + entry_argv(spec)[1:]  # DeepSpeed's srun line supplies the interpreter
    entry = entry_argv(spec)[1:]  # torchrun supplies the interpreter
    # static rendezvous: each node knows its rank (SLURM_NODEID), so no c10d join rounds; torchrun
    # forwards only --signals-to-handle and waits --shutdown-timeout for the checkpoint
    rank = [] if node_rank is None else ["--node-rank", _word(node_rank)]
    return [spec.python or NODE_PYTHON, "-m", "torch.distributed.run", "--nnodes", nnodes,
            "--nproc-per-node", str(spec.effective_procs_per_node),
            *protocol.torchrun_signal_args(spec.requeue.signal, spec.requeue.grace_seconds), "--rdzv-id", rdzv_id,
            "--rdzv-backend", "static", *rank, "--rdzv-endpoint", endpoint, *entry]


def deepspeed_config_for(spec: JobSpec) -> dict[str, Any] | str:
    """The spec's DeepSpeed config, or the planner's default for its world size (ZeRO-2)."""
    if spec.deepspeed_config is not None:
        return spec.deepspeed_config if isinstance(spec.deepspeed_config, str) else dict(spec.deepspeed_config)
    from slinkyml.plan import deepspeed_config  # lazy: slinkyml.plan costs `sbatch submit` ~60 ms

    return deepspeed_config(micro_batch=1, grad_accum=1, dp=spec.world_size, zero=2)


#: the batch script's shell function that keeps a requeued run off the nodes that just failed
EXCLUDE_FAILED_NODES_SH = (DATA_DIR / "templates" / "exclude_failed_nodes.sh").read_text()


def render_sbatch(spec: JobSpec, request: SlurmJobRequest | None = None) -> str:
    """The complete sbatch script for ``spec``; ``request``: its :class:`SlurmJobRequest` where the caller
    has built it already (one request from the spec to the backend)."""
    sig = spec.requeue.signal
    # srun passes the signal on to its tasks; DeepSpeed's launcher has no handler, so its srun gets it
    forward = (f'pkill -{sig} -P "$launcher_pid"' if spec.uses_deepspeed_launcher
               else f'kill -s {sig} "$launcher_pid"')
    lines = ["#!/bin/bash",
             f"# {safe_name(spec.name)}: rendered by `slinkyml sbatch render` from its job spec; "
             "re-render rather than edit.",
             f"# Needs the log directory to exist before submission: mkdir -p {shlex.quote(spec.log_dir)}"]
    for option, value in (request or SlurmJobRequest.from_spec(spec)).sbatch_directives():
        lines.append(f"#SBATCH {option}" if value is None else f"#SBATCH {option}={sbatch_value(value)}")
    launch = _launch_lines(spec)
    launch_text = "\n".join(launch)
    settings = {
        "log_dir": spec.log_dir,
        "log_name": safe_name(spec.name),
        "max_restarts": str(spec.requeue.max_restarts),
        "requeue_on": " ".join(spec.requeue.on),
    }
    environment = [f"export {ENV_CHECKPOINT_DIR}={quote(spec.checkpoint_dir)}"] if spec.checkpoint_dir else []
    environment += preset_env_lines(spec)
    environment += [f"export {key}={quote(value)}" for key, value in spec.env.items()]
    lines.append(fill(shell_part("run_settings.sh"), {
        "SETTINGS": "\n".join(f"{key}={quote(value)}" for key, value in settings.items()
                              if key != "log_name" or f"${key}" in launch_text),
        "RDZV_PORT": "\n".join(_rdzv_port_lines(spec)) if "$rdzv_port" in launch_text else "",
        "NETWORK": spec.network, "ENV_RESTART": ENV_RESTART, "ENV_SIGNAL": ENV_SIGNAL, "ENV_LOG_DIR": ENV_LOG_DIR,
        "SIG": sig, "ENVIRONMENT": "\n".join(environment)}).rstrip("\n"))
    lines.append(fill(shell_part("run_setup.sh"), {"LOG_NAME": safe_name(spec.name)}).rstrip("\n"))
    if spec.launcher == "deepspeed":
        config = deepspeed_config_for(spec)
        if isinstance(config, str):
            lines.append(f"export {ENV_DS_CONFIG}={quote(config)}")
        else:
            lines.append(fill(shell_part("ds_config.sh"), {
                "ENV_DS_CONFIG": ENV_DS_CONFIG, "DS_CONFIG_JSON": json.dumps(config, indent=2, sort_keys=True)})
                .rstrip("\n"))
    lines.append(_run_start())
    lines += launch
    # what follows the launch depends on four values only: joined once per process for each
    return "\n".join(lines) + "\n" + _run_end(sig, forward, spec.requeue.grace_seconds, spec.checkpoint_dir or "")


_RENDERED_FROM = "# -- rendered from here"
_PLACEHOLDER = re.compile(r"__([A-Z][A-Z_]*[A-Z])__")
#: a placeholder alone on its line, or anywhere in one
_FILLED = re.compile(rf"^{_PLACEHOLDER.pattern}\n|{_PLACEHOLDER.pattern}", re.MULTILINE)


@functools.cache
def shell_part(name: str) -> str:
    """``data/shell/NAME`` from its ``# -- rendered from here`` line on, its shellcheck directives left out."""
    text = (SHELL_DIR / name).read_text()
    body = text[text.index("\n", text.index(_RENDERED_FROM)) + 1:]
    return "".join(line for line in body.splitlines(keepends=True) if not line.lstrip().startswith("# shellcheck "))


def fill(part: str, values: dict[str, str]) -> str:
    """``part`` with each ``__NAME__`` replaced by ``values[NAME]`` (in one pass: a value is never re-read);
    a placeholder alone on its line that fills with nothing leaves no empty line."""
    def value(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return values[match.group(2)]
        whole = values[match.group(1)]
        return whole + "\n" if whole else ""
    return _FILLED.sub(value, part)


@functools.cache
def _run_start() -> str:
    """The lines between the settings and the launch: the same for every job (data/shell/run_start.sh)."""
    return fill(shell_part("run_start.sh"), {
        "INFRA_REGEX": quote(causes.infra_regex()), "EVENTS_FILE": protocol.SH_EVENTS_FILE,
        "BATCH_NODES": protocol.SH_BATCH_NODES, "EXCLUDE_FAILED_NODES": EXCLUDE_FAILED_NODES_SH.rstrip("\n")})


@functools.lru_cache(maxsize=64)
def _run_end(sig: str, forward: str, grace_seconds: int, checkpoint_dir: str) -> str:
    """The script after the launch line (data/shell/run_end.sh): stop signals, the wait, the cause and its
    requeue rule."""
    return fill(shell_part("run_end.sh"), {
        "SIG": sig, "FORWARD": forward,
        "FORWARD_TERM": forward.replace(f"-{sig}", "-TERM").replace(f"-s {sig}", "-s TERM"),
        "GRACE_S": str(grace_seconds), "CHECKPOINT_DIR": quote(checkpoint_dir),
        "WARNING_SLACK_S": str(causes.table()["warning_slack_s"]),
        "CAUSE_RULES": causes.cause_rules(), "REQUEUE_RULES": causes.requeue_rules(),
        "DECIDE_FUNCTIONS": causes.shell_function().rstrip("\n"),
        "STEP_ERRORS": protocol.SH_STEP_ERRORS, "PREEMPTED_MARKER": protocol.SH_PREEMPTED_MARKER,
        "FAILURE_MARKER": protocol.SH_FAILURE_MARKER, "NODE_FAILURE": causes.NODE_FAILURE,
        "TIME_LIMIT": causes.TIME_LIMIT, "EXIT_FAILED": str(protocol.EXIT_FAILED)})


def _rdzv_port_lines(spec: JobSpec) -> list[str]:
    """``rdzv_port``: the spec's, or derived from the job id and restart count exactly as
    :func:`slinkyml.rendezvous.port_candidates` does (a requeued run never meets its old
    store), the first candidate nothing listens on here, on the head node (two jobs sharing it)."""
    if spec.rdzv_port is not None:
        return [f"rdzv_port={spec.rdzv_port}"]
    return [
        "# rendezvous port: from the job id and restart, the first one free on this (the head) node",
        *rendezvous.bash_lines(),
    ]


def _srun_prefix(spec: JobSpec, tasks_per_node: int, *, label: str) -> list[str]:
    argv: list[str] = [Raw("srun"), Raw("--kill-on-bad-exit=1"), Raw('--nodes="$SLURM_NNODES"'),
            Raw(f"--ntasks-per-node={tasks_per_node}"),
            Raw(f'--output="$log_dir/$log_name-$SLURM_JOB_ID-r$restart_count-{label}%t.log"')]
    if spec.container is not None:
        argv.append(f"--container-image={spec.container.image}")
        if spec.container.mounts:
            argv.append(f"--container-mounts={','.join(spec.container.mounts)}")
        if spec.container.workdir:
            argv.append(f"--container-workdir={spec.container.workdir}")
    argv += list(spec.srun_args)
    return argv


def _array(name: str, words: Sequence[str]) -> list[str]:
    """A bash array, an option and its value per line, so long commands stay readable."""
    body: list[str] = []
    i = 0
    while i < len(words):
        word = shell_word(words[i])
        nxt = words[i + 1] if i + 1 < len(words) else None
        if (str(words[i]).startswith("-") and "=" not in str(words[i]) and nxt is not None
                and not str(nxt).startswith("-")):
            word += " " + shell_word(nxt)
            i += 1
        body.append(f"  {word}")
        i += 1
    return [f"{name}=(", *body, ")"]


def _launch_lines(spec: JobSpec) -> list[str]:
    head, port, nnodes = Raw('"$head_node"'), Raw('"$rdzv_port"'), Raw('"$SLURM_NNODES"')
    rdzv = Raw('"$SLURM_JOB_ID"')
    if spec.launcher == "srun":
        out = ["# -- launch: one task per device (or per node), the command as written"]
        return out + _array("launch", [*_srun_prefix(spec, spec.effective_tasks_per_node, label="task"),
                                       *entry_argv(spec)])
    if spec.uses_deepspeed_launcher:
        return _deepspeed_launcher_lines(spec, head, port, nnodes)
    argv = launch_argv(spec, head, port, nnodes=nnodes, rdzv_id=rdzv,
                       rdzv_endpoint=Raw('"$head_node:$rdzv_port"'))
    out = ["# -- launch: one torchrun (python -m torch.distributed.run) per node, static rendezvous "
           "on the first node (node rank: the task's SLURM_NODEID, as PET_NODE_RANK)"]
    prefix = [*_srun_prefix(spec, 1, label="node"), *NODE_RANK_WRAPPER]
    signals = protocol.torchrun_signals(spec.requeue.signal)  # quoted: a comma list is one word (SC2054)
    argv = [Raw(f"'{w}'") if w == signals else w for w in argv]
    if spec.launcher == "neuron" and spec.neuron_precompile:
        out += [f"# Trainium: extract and compile the graphs once (first run only; {spec.neuron_compile_steps} "
                "steps into their own output directory), then train",
                *_array("precompile", [*prefix, "neuron_parallel_compile", *neuron_compile_argv(spec, argv)]),
                'if (( restart_count == 0 )); then "${precompile[@]}"; fi']
    return out + _array("launch", [*prefix, *argv])


def neuron_compile_argv(spec: JobSpec, argv: list[str]) -> list[str]:
    """The training command capped for ``neuron_parallel_compile``: ``--max_steps`` and ``--output_dir``
    (Hugging Face TrainingArguments, which optimum-neuron's scripts parse) replaced or added, as
    optimum-neuron's finetune_llama.sh and AWS's samples do for the graph-extraction run."""
    start = _entry_start(argv) + (1 if spec.entry.module is not None else 0) + 1
    head, args = argv[:start], list(argv[start:])
    output = _arg_value(args, "--output_dir")
    compile_dir = spec.neuron_compile_dir or (f"{output.rstrip('/')}-neuron-compile" if output
                                              else f"{spec.log_dir.rstrip('/')}/neuron-compile")
    for flag, value in (("--max_steps", str(spec.neuron_compile_steps)), ("--output_dir", compile_dir)):
        args = _set_arg(args, flag, value)
    return head + args


def _arg_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _set_arg(args: list[str], flag: str, value: str) -> list[str]:
    out: list[str] = []
    found, skip = False, False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == flag and i + 1 < len(args):
            out += [flag, value]
            found, skip = True, True
        elif arg.startswith(flag + "="):
            out.append(f"{flag}={value}")
            found = True
        else:
            out.append(arg)
    return out if found else out + [flag, value]


def _deepspeed_launcher_lines(spec: JobSpec, head: Raw, port: Raw, nnodes: Raw) -> list[str]:
    """DeepSpeed's launcher, once on the batch node: hostfile, rank entry, MASTER_ADDR/PORT
    (data/shell/deepspeed_launch.sh), argv."""
    out = [fill(shell_part("deepspeed_launch.sh"), {
        "SLOTS": str(spec.effective_procs_per_node), "DS_RANK_ENTRY": DS_RANK_ENTRY.rstrip("\n")}).rstrip("\n")]
    # per-rank logs like the other launchers' (srun expands %j/%t; '%' in the folder is escaped);
    # the restart count is only known at run time, so that one word is assembled around it
    mark = "@RESTART@"  # shlex-safe, so it does not make shlex.join quote the word
    log_dir = spec.log_dir.replace("%", "%%").rstrip("/") or "/"
    output = f"{log_dir}/{safe_name(spec.name)}-%j-r{mark}-rank%t.log"
    entry = Raw('"$rank_entry"')
    argv = launch_argv(spec, head, port, nnodes=nnodes, ds_hostfile=Raw('"$hostfile"'), ds_rank_entry=entry,
                       ds_srun_output=output)
    n_opts = argv.index(entry) + 1  # launcher options end here; the rest is the user's
    words: list[str] = []
    for word in argv[:n_opts]:
        if word.startswith("--launcher_args="):
            before, after = word.removeprefix("--launcher_args=").rsplit(mark, 1)
            word = Raw("--launcher_args=" + quote(before) + '"$restart_count"' + quote(after))
        words.append(word)
    return out + _array("launch", words + argv[n_opts:])


def _entry_start(argv: list[str]) -> int:
    """Index of the first word after torchrun's own options (module flag or script)."""
    return argv.index("--rdzv-endpoint") + 2


def _word(value: int | str) -> str:
    """A number as text; text (a :class:`Raw` word included) as it is."""
    return value if isinstance(value, str) else str(value)


__all__ = ["Raw", "deepspeed_config_for", "entry_argv", "launch_argv", "render_sbatch", "safe_name",
           "sbatch_value", "shell_join", "shell_word"]
