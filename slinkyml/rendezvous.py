"""The rendezvous port of a job, from its id and restart count: one rule for the sbatch script's
bash, ``submit()``'s tasks and :class:`~slinkyml.dispatch.launch.NodeLauncher`; a requeued run never
meets its previous attempt's store.
"""

from __future__ import annotations

#: ports we derive from, away from the ephemeral range (32768+) and well-known services.
PORT_BASE = 15000
PORT_SPAN = 15000
PORT_TRIES = 32
JOB_FACTOR, RESTART_FACTOR, STRIDE = 7919, 104729, 389


def port_candidates(job_id: int | str, restart: int = 0) -> list[int]:
    """The ports a job tries, in order."""
    base = int(str(job_id).split("_")[0])
    start = (base * JOB_FACTOR + int(restart) * RESTART_FACTOR) % PORT_SPAN
    return [PORT_BASE + (start + i * STRIDE) % PORT_SPAN for i in range(PORT_TRIES)]


def bash_lines(job_var: str = "SLURM_JOB_ID", restart_var: str = "restart_count",
               out_var: str = "rdzv_port") -> list[str]:
    """The same choice in bash, run on the head node: the first candidate nothing listens on."""
    return [
        f"{out_var}=$(( {PORT_BASE} + ({job_var} * {JOB_FACTOR} + {restart_var} * {RESTART_FACTOR}) "
        f"% {PORT_SPAN} ))",
        f"for (( try = 0; try < {PORT_TRIES}; try++ )); do",
        f"  port=$(( {PORT_BASE} + (({out_var} - {PORT_BASE}) + try * {STRIDE}) % {PORT_SPAN} ))",
        f'  if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then {out_var}=$port; break; fi',
        "done",
    ]


__all__ = ["PORT_BASE", "PORT_SPAN", "PORT_TRIES", "bash_lines", "port_candidates"]
