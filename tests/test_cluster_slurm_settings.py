"""The rendered cluster runs Slurm as the local cluster's tests do: slurmd registers the instance
model's allocatable share (the operator derives POD_CPUS/POD_MEMORY from the container's limits),
and the Controller carries the cgroup, accounting and node-loss settings of ``slinkyml dev``'s
slurm.conf and cgroup.conf. Offline; the operator-generated slurm.conf is read live by issue 37's tests.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.addons import slurmd_request
from slinkyml.cluster.render import render
from slinkyml.cluster.spec import from_dict, to_dict
from slinkyml.cluster.workers import CGROUP_CONF, TESTED_SETTINGS
from slinkyml.dev import DevClusterSpec
from slinkyml.dev.slurm.config import render_cgroup_conf, render_slurm_conf
from slinkyml.instances import get_instance_type
from slinkyml.kube import quantity
from slinkyml.slurm import SlurmVersion
from slinkyml.slurm.conf import pairs

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]


def _settings(text: str) -> dict[str, str]:
    """``Key=value`` settings of a conf text (first word of each line)."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.split()[0].partition("=")
            out[key] = value
    return out


def _operator_pod_cpus_and_memory(resources: dict) -> tuple[int, int]:
    """slurm-operator workerbuilder getResourceLimits: Quantity.Value() (rounded up) of the CPU
    limit, the memory limit in MiB (rounded down)."""
    limits = resources["limits"]
    return math.ceil(quantity(str(limits["cpu"]))), int(quantity(str(limits["memory"])) // 2**20)


@pytest.mark.parametrize("name", EXAMPLES)
def test_pod_cpus_and_memory_are_the_allocatable_share(name: str) -> None:
    spec = load_spec(EXAMPLES_DIR / name / "cluster.yaml")
    out = render(spec)
    nodesets = {o["metadata"]["labels"]["slinkyml.io/nodeset"]: o for o in out.objects if o["kind"] == "NodeSet"}
    for ns in spec.node_sets:
        cpu_millis, memory_mib = slurmd_request(get_instance_type(ns.instance_type))
        expected = (cpu_millis // 1000, memory_mib)
        for resources in (nodesets[ns.name]["spec"]["slurmd"]["resources"],
                          out.helm_values["nodesets"][ns.name]["slurmd"]["resources"]):
            assert _operator_pod_cpus_and_memory(resources) == expected, ns.name
            assert {k: resources["requests"][k] for k in ("cpu", "memory")} == \
                {k: resources["limits"][k] for k in ("cpu", "memory")}  # no more asked than slurmd offers
            assert expected[0] * 1000 <= cpu_millis < (expected[0] + 1) * 1000


@pytest.mark.parametrize("name", EXAMPLES)
def test_controller_has_the_settings_the_dev_cluster_tests_run_with(name: str, tmp_path: Path) -> None:
    dev = _settings(render_slurm_conf(DevClusterSpec(state_dir=tmp_path, nodes=2), SlurmVersion(22, 5, 8)))
    dev_cgroup = _settings(render_cgroup_conf(SlurmVersion(22, 5, 8), True) or "")
    out = render(load_spec(EXAMPLES_DIR / name / "cluster.yaml"))
    controller = next(o for o in out.objects if o["kind"] == "Controller")
    extra = _settings(controller["spec"]["extraConf"])
    for key, value in TESTED_SETTINGS:
        assert extra[key] == value == dev[key], key
    assert {"JobAcctGatherType", "ProctrackType", "TaskPlugin", "SlurmdTimeout", "ReturnToService"} <= set(extra)
    # cgroup.conf through configFileRefs (the operator then writes none of its own) and the chart's configFiles
    ref = controller["spec"]["configFileRefs"][0]["name"]
    config_map = next(o for o in out.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref)
    assert config_map["data"]["cgroup.conf"] == out.helm_values["configFiles"]["cgroup.conf"] == CGROUP_CONF
    cgroup = _settings(CGROUP_CONF)
    for key in ("ConstrainCores", "ConstrainRAMSpace"):
        assert cgroup[key] == dev_cgroup[key] == "yes", key
    assert cgroup["CgroupPlugin"] == "cgroup/v2" and cgroup["IgnoreSystemd"] == "yes"  # the operator's own
    assert "ProctrackType=proctrack/cgroup" in out.helm_values["controller"]["extraConf"]


def test_users_extra_conf_wins_over_a_tested_setting() -> None:
    raw = to_dict(load_spec(EXAMPLES_DIR / "cpu-small" / "cluster.yaml"))
    raw["controller"]["extra_conf"] = "SlurmdTimeout=300\nJobAcctGatherFrequency=task=30"
    out = render(from_dict(raw))
    extra = next(o for o in out.objects if o["kind"] == "Controller")["spec"]["extraConf"]
    assert [value for key, value in pairs(extra) if key == "SlurmdTimeout"] == ["300"]
    assert "ReturnToService=2" in extra and "JobAcctGatherFrequency=task=30" in extra
