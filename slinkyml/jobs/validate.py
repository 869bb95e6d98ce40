"""Check a job against the live cluster before submitting (``scontrol show partition/node``,
``sacctmgr``), saying what is wrong in one line that names the field, before sbatch would."""

from __future__ import annotations

import getpass
import re
import threading
from collections.abc import Callable
from typing import Any

from slinkyml.errors import EXIT_FAILED, SlinkyError
from slinkyml.jobs.spec import JobSpec, mem_mb, time_limit_seconds
from slinkyml.slurm import records
from slinkyml.slurm.hostlist import HostlistError, expand_hostlist
from slinkyml.slurm.runner import Slurm

_BAD_NODE_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "INVAL")


class JobCheckError(SlinkyError):
    """The job cannot run on this cluster as written: a failed check (1), not a usage error."""

    exit_code = EXIT_FAILED


def expand_nodes(slurm: Slurm, nodelist: str) -> list[str]:
    """A host list's names as ``scontrol show hostnames`` gives them: expanded here (hostlist.py
    follows Slurm's hostlist.c; a process less per check), by scontrol where the text is not one."""
    if not nodelist or nodelist == "(null)":
        return []
    try:
        return expand_hostlist(nodelist)
    except HostlistError:
        return records.hostnames(slurm, nodelist)


class _AtOnce:
    """Calls made side by side (slurmctld answers each in a few ms; one after the other, their process
    starts and round trips add up); ``[name]`` is that call's answer, or raises its failure as the
    call alone would have, when (and only when) the check reads it."""

    def __init__(self, calls: dict[str, Callable[[], Any]]) -> None:
        self._answers: dict[str, Any] = {}
        self._failures: dict[str, BaseException] = {}
        threads = [threading.Thread(target=self._ask, args=item, daemon=True) for item in calls.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _ask(self, name: str, call: Callable[[], Any]) -> None:
        try:
            self._answers[name] = call()
        except BaseException as exc:  # noqa: BLE001 - raised where the answer is read, in the caller's thread
            self._failures[name] = exc

    def __getitem__(self, name: str) -> Any:
        if name in self._failures:
            raise self._failures[name]
        return self._answers[name]


def gres_count(gres: str, kind: str) -> int:
    """``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:2,neuron:16`` → the count of ``kind``."""
    total = 0
    for item in (gres or "").split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == kind and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def user_associations(slurm: Slurm, user: str, account: str | None = None) -> list[tuple[str, str]]:
    """``(account, partition)`` of the user's associations: slurmctld's cache first, then
    ``sacctmgr`` when it has no match, so a refusal never rests on the cache alone.
    """
    out = slurm.run("scontrol", ["-o", "show", "assoc_mgr", "flags=assoc", f"users={user}"],
                    check=False).stdout
    rows = [(record.get("Account", ""), record.get("Partition", ""))
            for record in records.split_scontrol(out)
            if "ClusterName" in record and record.get("UserName", "").split("(")[0] == user]
    if rows and (not account or any(acct == account for acct, _ in rows)):
        return rows
    where = ["show", "assoc", "where", f"user={user}"] + ([f"account={account}"] if account else [])
    return [(row["Account"], row["Partition"]) for row in records.sacctmgr(slurm, ("Account", "Partition"), where)]


def problems(spec: JobSpec, slurm: Slurm, *, user: str | None = None) -> list[str]:
    """Every reason the job cannot start here (empty when it can)."""
    found: list[str] = []
    user = user or getpass.getuser()
    asked = _AtOnce({"partitions": lambda: slurm.show("partition"), "nodes": lambda: slurm.show("node"),
                      "associations": lambda: user_associations(slurm, user, spec.account)})
    partitions = {p.get("PartitionName"): p for p in asked["partitions"]}
    name = spec.partition or next((n for n, p in partitions.items() if p.get("Default") == "YES"), None)
    part = partitions.get(name)
    if part is None:
        have = ", ".join(sorted(n for n in partitions if n))
        found.append(f"partition {name!r} does not exist (have: {have})" if spec.partition
                     else "no partition given and the cluster has no default partition")
        return found
    max_time = part.get("MaxTime", "UNLIMITED")
    if max_time not in ("UNLIMITED", "INFINITE"):
        limit = time_limit_seconds(max_time)
        if limit is not None and spec.time_limit_seconds > limit:
            found.append(f"time_limit {spec.time_limit} exceeds partition {name}'s MaxTime {max_time}")
    members = set(expand_nodes(slurm, part.get("Nodes", "")))
    if spec.nodelist:
        wanted = set(expand_nodes(slurm, spec.nodelist))
        if not wanted <= members:
            found.append(f"nodelist {spec.nodelist} has nodes outside partition {name}: "
                         f"{','.join(sorted(wanted - members))}")
        members &= wanted
    kind, count = ("gpu", spec.gpus_per_node) if spec.gpus_per_node else ("neuron", spec.neuron_devices_per_node)
    cpus = spec.effective_tasks_per_node * spec.cpus_per_task
    mem = mem_mb(spec.mem_per_node) if spec.mem_per_node else 0
    usable = 0
    largest = (0, 0)  # the most CPUs and memory (MB) of any up node there: what the job can have
    for node in asked["nodes"]:
        if node.get("NodeName") not in members:
            continue
        state = node.get("State", "")
        if any(bad in state for bad in _BAD_NODE_STATES):
            continue
        node_cpus, node_mem = int(node.get("CPUTot", "0") or 0), int(node.get("RealMemory", "0") or 0)
        largest = (max(largest[0], node_cpus), max(largest[1], node_mem))
        if count and gres_count(node.get("Gres", ""), kind) < count:
            continue
        if node_cpus < cpus or node_mem < mem:
            continue
        usable += 1
    if usable < spec.nodes:
        need = f", {kind}:{count}" if count else ""
        found.append(f"the job needs {spec.nodes} node(s) with {cpus} CPUs{need}"
                     f"{f' and {spec.mem_per_node} memory' if mem else ''} each; partition {name} has {usable} "
                     f"such node(s) up (its largest: {largest[0]} CPUs, {largest[1]} MB)")
    if spec.container is not None and "--container-image" not in slurm.run("srun", ["--help"], check=False).stdout:
        found.append("container is set but this cluster's srun has no --container-image option "
                     "(the pyxis SPANK plugin is not installed in plugstack.conf)")
    rows = asked["associations"]
    if spec.account and not any(acct == spec.account and (not p or p == name) for acct, p in rows):
        found.append(f"user {user} has no association with account {spec.account!r}")
    elif not spec.account and not rows:
        found.append(f"user {user} has no account association on this cluster")
    return found


def check_job(spec: JobSpec, slurm: Slurm, *, user: str | None = None) -> None:
    found = problems(spec, slurm, user=user)
    if found:
        raise JobCheckError(f"job {spec.name!r} cannot run here: " + "; ".join(found))
