"""Every template, preset and image against the upstream facts in tests/data/upstream_facts.yaml.

One test per template (and per image): each variable and argument is compared with what the
hardware's own upstream (aws-ofi-nccl, libfabric, AWS's samples, optimum-neuron, DeepSpeed, NVIDIA)
documents, so an upstream change is one edit of the facts file and these tests name what follows.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from slinkyml.instances import get_instance_type
from slinkyml.jobs.presets import declared_versions, load_presets, network_env, runtime_env, version_below
from slinkyml.jobs.render import neuron_compile_argv, render_sbatch
from slinkyml.jobs.spec import JobSpec
from slinkyml.plan.hardware import peak_for_device_name

REPO = Path(__file__).resolve().parent.parent
FACTS = yaml.safe_load((REPO / "tests" / "data" / "upstream_facts.yaml").read_text())
WORKER = (REPO / "containers" / "worker" / "Dockerfile").read_text()
NCCL_TESTS_IMAGE = (REPO / "containers" / "nccl-tests" / "Dockerfile").read_text()
#: Version pairs the EFA facts are checked at: every documented boundary, either side of it.
VERSION_GRID = [(lf, ofi) for lf in ("1.16.1", "1.17.9", "1.18.0", "1.22.0", "2.1.0amzn5.0", "2.6.0amzn1.0")
                for ofi in ("1.5.0", "1.6.0", "1.6.9", "1.7.0", "1.12.1", "1.13.0", "1.16.3", "1.21.1")]


def _arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", WORKER, re.M)
    assert match, f"containers/worker/Dockerfile has no ARG {name}"
    return match.group(1)


def _spec(name: str) -> JobSpec:
    return JobSpec.from_yaml(REPO / "sbatch" / f"{name}.yaml")


def _expected_efa_env(libfabric: str, ofi: str, rdma: bool) -> dict[str, str]:
    """What aws-ofi-nccl's doc asks for at these versions: the facts, applied independently."""
    have = {"libfabric": libfabric, "aws-ofi-nccl": ofi}
    out = {}
    for var, fact in FACTS["aws_ofi_nccl"]["needed_when"].items():
        if fact.get("rdma_only") and not rdma:
            continue
        if any(version_below(have[lib], bound) for lib, bound in fact["below"].items()):
            out[var] = fact["value"]
    return out


def _accepted_net_names(ofi: str) -> set[str]:
    names: set[str] = set()
    for entry in FACTS["aws_ofi_nccl"]["net_names"]:
        if not version_below(ofi, entry["from"]):
            names = {n.lower() for n in entry["names"]}
    return names


def _check_efa_network(spec: JobSpec) -> None:
    rdma = get_instance_type(spec.instance_type).efa_rdma if spec.instance_type else False
    for libfabric, ofi in VERSION_GRID:
        env = network_env("efa", {"libfabric": libfabric, "aws-ofi-nccl": ofi}, rdma=rdma)
        expected = _expected_efa_env(libfabric, ofi, rdma)
        for var in FACTS["aws_ofi_nccl"]["needed_when"]:
            assert env.get(var) == expected.get(var), (spec.name, var, libfabric, ofi, rdma)
        for var in FACTS["aws_ofi_nccl"]["never_set"]:
            assert var not in env, (spec.name, var)
        assert env["NCCL_NET"].lower() in _accepted_net_names(ofi), (spec.name, ofi, env["NCCL_NET"])
        if spec.launcher == "neuron":
            assert env["NCCL_NET"] in FACTS["aws_ofi_nccl"]["neuron_net_names"]
    script = render_sbatch(spec)
    for var in FACTS["aws_ofi_nccl"]["never_set"]:
        assert var not in script, (spec.name, var)
    assert spec.env.get("NCCL_NET") is None, "the template must not override the plugin selection"


def test_instance_rdma_flags_follow_the_plugin_doc():
    facts = FACTS["rdma_instance_types"]
    for name in facts["rdma"]:
        assert get_instance_type(name).efa_rdma, name
    for name in facts["no_rdma"]:
        assert not get_instance_type(name).efa_rdma, name


def test_worker_image_versions_are_the_presets_defaults_and_the_installers_contents():
    installer = _arg("EFA_INSTALLER_VERSION")
    assert installer == FACTS["efa_installer"]["worker_image"]
    ships = FACTS["efa_installer"]["releases"][installer]
    defaults = load_presets()["efa"]["defaults"]
    for library, arg in (("libfabric", "LIBFABRIC_VERSION"), ("aws-ofi-nccl", "AWS_OFI_NCCL_VERSION")):
        assert ships[library].startswith(_arg(arg)), (library, ships[library], _arg(arg))
        assert defaults[library] == _arg(arg), (library, defaults[library], _arg(arg))
    # the build itself refuses an installer that installed other versions
    assert 'grep -q "^libfabric: ${LIBFABRIC_VERSION}"' in WORKER
    assert 'grep -aq "aws-ofi-nccl ${AWS_OFI_NCCL_VERSION}"' in WORKER
    # the nccl-tests image runs the same stack
    assert f"ARG EFA_INSTALLER_VERSION={installer}" in NCCL_TESTS_IMAGE


def test_worker_image_sets_no_job_settings_and_no_fixed_plugin_path():
    env_lines = " ".join(re.findall(r"^ENV (.*(?:\\\n.*)*)", WORKER, re.M))
    assert not re.search(r"\b(FI|NCCL|RDMAV)_\w+=", env_lines), env_lines
    assert "LD_LIBRARY_PATH" not in env_lines and "ofi-nccl/lib" not in env_lines
    assert "ldconfig" in WORKER  # plugin and libfabric registered wherever the packaging put them


def test_worker_image_deepspeed_is_the_one_the_launcher_is_written_for():
    facts = FACTS["deepspeed"]
    pinned = _arg("DEEPSPEED_VERSION")
    assert not version_below(pinned, facts["launcher_written_for"]), pinned
    assert facts["slurm_gpus_flag"][facts["launcher_written_for"]] == "--gpus-per-node"
    render_src = (REPO / "slinkyml" / "jobs" / "render.py").read_text()
    assert f"read in deepspeed {facts['launcher_written_for']}" in render_src


def test_torchrun_ddp_template():
    spec = _spec("torchrun-ddp")
    assert spec.network == "efa" and spec.instance_type
    _check_efa_network(spec)
    assert spec.effective_procs_per_node == get_instance_type(spec.instance_type).accelerator.count


def test_deepspeed_zero3_template():
    spec = _spec("deepspeed-zero3")
    _check_efa_network(spec)
    assert spec.deepspeed_via == "torchrun" or spec.uses_deepspeed_launcher


def test_nccl_allreduce_template():
    spec = _spec("nccl-allreduce")
    facts = FACTS["nccl_tests"]
    _check_efa_network(spec)
    assert spec.launcher == "srun" and spec.container is not None
    assert Path(spec.entry.script).parent == Path(facts["binary_dir"])
    assert list(spec.entry.args) == facts["all_reduce_args"]
    for arg in facts["srun_args"]:
        assert arg in spec.srun_args, arg
    assert spec.effective_tasks_per_node == spec.gpus_per_node  # one MPI rank per GPU
    # the image the template names builds that binary, with MPI
    for flag in facts["build_flags"]:
        assert flag in NCCL_TESTS_IMAGE, flag
    assert f"test -x {facts['binary_dir']}/all_reduce_perf" in NCCL_TESTS_IMAGE


def test_trainium_optimum_neuron_template():
    spec = _spec("trainium-optimum-neuron")
    facts = FACTS["optimum_neuron"]
    _check_efa_network(spec)
    assert spec.launcher == "neuron" and Path(spec.entry.script).name == facts["script"]
    flags = [a for a in spec.entry.args if a.startswith("--")]
    for flag in flags:
        assert flag in facts["arguments"], f"{flag}: not an argument finetune_llama.py takes"
    for flag in facts["not_arguments"]:
        assert flag not in spec.entry.args, flag
    per = facts["per_instance"][spec.instance_type]
    assert spec.effective_procs_per_node == per["processes_per_node"]
    args = list(spec.entry.args)
    assert args[args.index("--tensor_parallel_size") + 1] == str(per["tensor_parallel_size"])
    # the compile-only run: a few steps, its own output directory
    compile_args = neuron_compile_argv(spec, ["python", "-m", "torch.distributed.run", "--rdzv-endpoint", "H:0",
                                              spec.entry.script, *args])
    assert compile_args[compile_args.index("--max_steps") + 1] == str(facts["compile_max_steps"])
    assert facts["compile_max_steps"] <= FACTS["awsome_trainium"]["compile_max_steps_at_most"]
    out = args[args.index("--output_dir") + 1]
    assert compile_args[compile_args.index("--output_dir") + 1] not in (out, out.rstrip("/"))
    script = render_sbatch(spec)
    assert "neuron_parallel_compile" in script and f"--max_steps {facts['compile_max_steps']}" in script
    # the runtime settings AWS's and optimum-neuron's scripts export
    env = runtime_env("neuron") | dict(spec.env)
    for key, value in {**FACTS["awsome_trainium"]["env"], **facts["env"]}.items():
        assert env.get(key) == value, key
        assert f"export {key}={shlex.quote(value)}" in script, key
    for flag in facts["neuron_cc_flags"]:
        assert flag in env["NEURON_CC_FLAGS"], flag


@pytest.mark.parametrize("instance", sorted(FACTS["optimum_neuron"]["per_instance"]))
def test_neuron_ranks_per_node_follow_the_instance(instance):
    per = FACTS["optimum_neuron"]["per_instance"][instance]
    devices = get_instance_type(instance).accelerator.count
    spec = JobSpec.from_dict({"name": "n", "entry": {"script": "finetune_llama.py"}, "launcher": "neuron",
                              "neuron_devices_per_node": devices, "instance_type": instance})
    assert spec.effective_procs_per_node == per["processes_per_node"]


def test_gpu_check_peak_comes_from_the_detected_model():
    for name, peak in FACTS["nvidia_peaks"]["devices"].items():
        found = peak_for_device_name(name)
        assert found is not None and found[1] == peak, name
    check = yaml.safe_load((REPO / "benchmarks" / "gpu-check.yaml").read_text())
    assert "--peak-tflops" not in check["entry"]["args"] and "checkpoint_dir" not in check


def test_efa_defaults_are_what_the_detected_path_falls_back_to():
    spec = _spec("torchrun-ddp")
    assert declared_versions("efa") == load_presets()["efa"]["defaults"]
    script = render_sbatch(spec)
    for library, version in load_presets()["efa"]["defaults"].items():
        assert f':-{version}}}"' in script, library
