"""Check a job against the live cluster before submitting (``scontrol show partition/node``,
``sacctmgr``), saying what is wrong in one line that names the field, before sbatch would."""

from __future__ import annotations

import getpass
import json
import os
import re
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slinkyml.errors import EXIT_FAILED, SlinkyError
from slinkyml.jobs.spec import JobSpec, mem_mb, time_limit_seconds
from slinkyml.slurm import records
from slinkyml.slurm.errors import AccountingDisabled
from slinkyml.slurm.hostlist import HostlistError, expand_hostlist
from slinkyml.slurm.records import Record
from slinkyml.slurm.runner import Slurm
from slinkyml.specload import cache_dir, write_cache

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


def _own_associations(found: list[Record], user: str) -> list[tuple[str, str]]:
    """``scontrol -o show assoc_mgr flags=assoc users=USER`` records → the user's ``(account, partition)``."""
    return [(record.get("Account", ""), record.get("Partition", "")) for record in found
            if "ClusterName" in record and record.get("UserName", "").split("(")[0] == user]


def _confirmed(slurm: Slurm, user: str, account: str | None,
               rows: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """slurmctld's association rows, or ``sacctmgr``'s when they hold no match (a refusal never rests on
    the controller's cache alone); None on a cluster without accounting, where there are none to check
    (manifests/cpu-small renders none)."""
    if rows and (not account or any(acct == account for acct, _ in rows)):
        return rows
    where = ["show", "assoc", "where", f"user={user}"] + ([f"account={account}"] if account else [])
    try:
        found = records.sacctmgr(slurm, ("Account", "Partition"), where)
    except AccountingDisabled:
        return None
    return [(row["Account"], row["Partition"]) for row in found]


def user_associations(slurm: Slurm, user: str, account: str | None = None) -> list[tuple[str, str]] | None:
    """``(account, partition)`` of the user's associations: slurmctld's cache first, then
    ``sacctmgr`` when it has no match, so a refusal never rests on the cache alone; None when the cluster
    has no accounting (nothing to check).
    """
    out = slurm.run("scontrol", ["-o", "show", "assoc_mgr", "flags=assoc", f"users={user}"],
                    check=False).stdout
    return _confirmed(slurm, user, account, _own_associations(records.split_scontrol(out), user))


class ClusterAnswers:
    """What the check asks slurmctld: its partitions, its nodes, the user's ``(account, partition)``s.
    A plain class: a dataclass costs every submission's start ~0.5 ms to build."""

    __slots__ = ("associations", "nodes", "partitions")

    def __init__(self, partitions: list[Record], nodes: list[Record],
                 associations: list[tuple[str, str]] | None) -> None:
        self.partitions = partitions
        self.nodes = nodes
        self.associations = associations


#: node fields the check reads (a cached answer keeps only these)
_NODE_FIELDS = ("NodeName", "State", "CPUTot", "RealMemory", "Gres")
_PARTITION_FIELDS = ("PartitionName", "Default", "MaxTime", "Nodes")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@$-]*\Z")
#: a cached answer older than this is asked again (node states and associations change without slurm.conf)
CACHE_MAX_AGE_S = 600.0


def ask_cluster(slurm: Slurm, user: str, account: str | None = None) -> ClusterAnswers:
    """The three answers from one ``scontrol`` process (three commands on its stdin); when that fails, each
    asked alone, side by side, so a failure raises its own typed error where its answer is read."""
    got = None
    if _PLAIN_NAME.match(user):  # a line of scontrol's input: a name with spaces or newlines is asked alone
        got = records.scontrol_many(slurm, ["show partition", "show node",
                                            f"show assoc_mgr flags=assoc users={user}"],
                                    ("PartitionName", "NodeName", "ClusterName"), retries=0)  # the fallback retries
    if got is not None and got[0] and got[1]:
        return ClusterAnswers(got[0], got[1], _confirmed(slurm, user, account, _own_associations(got[2], user)))
    asked = _AtOnce({"partitions": lambda: slurm.show("partition"), "nodes": lambda: slurm.show("node"),
                     "associations": lambda: user_associations(slurm, user, account)})
    return ClusterAnswers(asked["partitions"], asked["nodes"], asked["associations"])


def _cache_file(slurm: Slurm, user: str) -> tuple[Path, list[object]] | None:
    """Where one cluster's answers for one user are kept, and the key they are valid for: slurm.conf's
    path, mtime and size (a changed slurm.conf, i.e. a reconfigured cluster, asks again)."""
    conf = slurm.conf or "/etc/slurm/slurm.conf"
    try:
        st = os.stat(conf)
    except OSError:
        return None
    key: list[object] = [os.path.realpath(conf), st.st_mtime_ns, st.st_size, user, slurm.bin_dir or ""]
    tag = zlib.crc32(json.dumps(key).encode())
    return cache_dir() / f"cluster-answers-{tag:08x}.json", key


def cached_answers(slurm: Slurm, user: str, account: str | None = None, *, fresh: bool = False
                   ) -> tuple[ClusterAnswers, bool]:
    """The answers, from the cache when they are there for this slurm.conf (unchanged) and at most
    :data:`CACHE_MAX_AGE_S` old (unless ``fresh``), else asked and kept; and whether they came from the cache."""
    where = _cache_file(slurm, user)
    if where is not None and not fresh:
        try:
            data = json.loads(where[0].read_bytes())
            if data["key"] == where[1] and 0 <= time.time() - data["at"] < CACHE_MAX_AGE_S and (
                    not account or any(acct == account for acct, _ in data["associations"])):
                return ClusterAnswers(data["partitions"], data["nodes"],
                                      [(a, p) for a, p in data["associations"]]), True
        except (OSError, ValueError, KeyError, TypeError):
            pass
    answers = ask_cluster(slurm, user, account)
    # rows narrowed to one account by sacctmgr are kept too: a job of another account misses the cache above;
    # none kept means "ask again" (an association added since must be seen)
    if where is not None and answers.associations:
        kept = {"key": where[1], "at": time.time(),
                "partitions": [{k: p[k] for k in _PARTITION_FIELDS if k in p} for p in answers.partitions],
                "nodes": [{k: n[k] for k in _NODE_FIELDS if k in n} for n in answers.nodes],
                "associations": answers.associations}
        write_cache(where[0], json.dumps(kept).encode())
    return answers, False


def problems(spec: JobSpec, slurm: Slurm, *, user: str | None = None, cache: bool = False) -> list[str]:
    """Every reason the job cannot start here (empty when it can). ``cache``: judge on the answers kept
    from an earlier check (:func:`cached_answers`) when they pass; a refusal is always judged again on
    fresh answers, so a job is never refused on what the cluster said before."""
    user = user or getpass.getuser()
    if not cache:
        return judge(spec, slurm, user, ask_cluster(slurm, user, spec.account))
    answers, was_cached = cached_answers(slurm, user, spec.account)
    found = judge(spec, slurm, user, answers)
    if found and was_cached:  # asked again (and kept): the cluster may have changed since
        found = judge(spec, slurm, user, cached_answers(slurm, user, spec.account, fresh=True)[0])
    return found


def judge(spec: JobSpec, slurm: Slurm, user: str, answers: ClusterAnswers) -> list[str]:
    """Every reason the job cannot start on the cluster that gave ``answers``."""
    found: list[str] = []
    partitions = {p.get("PartitionName"): p for p in answers.partitions}
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
    for node in answers.nodes:
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
    rows = answers.associations
    if rows is None:  # no accounting on this cluster: no association is enforced, so none is checked
        pass
    elif spec.account and not any(acct == spec.account and (not p or p == name) for acct, p in rows):
        found.append(f"user {user} has no association with account {spec.account!r}")
    elif not spec.account and not rows:
        found.append(f"user {user} has no account association on this cluster")
    return found


def check_job(spec: JobSpec, slurm: Slurm, *, user: str | None = None, cache: bool = False) -> None:
    found = problems(spec, slurm, user=user, cache=cache)
    if found:
        raise JobCheckError(f"job {spec.name!r} cannot run here: " + "; ".join(found))
