"""The one slurm.conf builder: records first, text last; every writer selects records, none re-parses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slinkyml.cluster import EXAMPLES_DIR, load_spec, workers
from slinkyml.cluster.helm import render_values
from slinkyml.dev.slurm.config import DevClusterSpec, render_slurm_conf
from slinkyml.jobs.shapecheck import partition_names
from slinkyml.jobs.shapecheck import render_slurm_conf as check_conf
from slinkyml.slurm.conf import SlurmConfBuilder, parse_line
from slinkyml.slurm.version import SlurmVersion


def test_builder_keeps_order_and_renders_text_last() -> None:
    conf = (SlurmConfBuilder().comment("head").set("ClusterName", "c").node("n[1-2]", [("CPUs", 4)])
            .partition("debug", [("Nodes", "n[1-2]"), ("Default", "YES")], "MaxTime=1:00:00")
            .extra("# mine\nSchedulerParameters=bf_continue\nPartitionName=x Nodes=n1  # spare\n").build())
    assert conf.text() == ("# head\nClusterName=c\nNodeName=n[1-2] CPUs=4\n"
                           "PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=1:00:00\n"
                           "# mine\nSchedulerParameters=bf_continue\nPartitionName=x Nodes=n1  # spare\n")
    assert conf.settings() == {"ClusterName": "c", "SchedulerParameters": "bf_continue"}
    assert [p.value for p in conf.partitions()] == ["debug", "x"]
    assert conf.partitions()[0].param("maxtime") == "1:00:00" and conf.partitions()[1].param("Nodes") == "n1"
    assert "PartitionName" not in conf.select(lambda line: not line.is_record).text()


def test_parse_line_classifies_without_changing_the_text() -> None:
    for text, key, value in [("  NodeName=a CPUs=2", "NodeName", "a"), ("Foo = bar", "Foo", "bar"),
                             ("# c", "", "c"), ("", "", ""), ("include /x", "", "include /x")]:
        line = parse_line(text)
        assert (line.key, line.value, line.text()) == (key, value, text)
    assert parse_line("PartitionName=p Nodes=a State=UP").params == (("Nodes", "a"), ("State", "UP"))


def test_dev_conf_is_built_from_records() -> None:
    spec = DevClusterSpec(state_dir=Path("/tmp/slinkyml-conf-test"), controller_host="h", gpus=2, nodes=2,
                          extra_slurm_conf="PartitionName=big Nodes=n1,n2 MaxTime=2:00:00")
    text = render_slurm_conf(spec, SlurmVersion.parse("slurm 24.11.5"))
    lines = [parse_line(x) for x in text.splitlines()]
    assert [x.value for x in lines if x.key == "PartitionName"] == ["debug", "short", "big"]
    assert [x.param("Gres") for x in lines if x.key == "NodeName"] == ["gpu:1", "gpu:1"]
    assert text.endswith("# extra configuration\nPartitionName=big Nodes=n1,n2 MaxTime=2:00:00\n")


def test_cluster_records_feed_controller_helm_and_sbatch_check() -> None:
    spec = load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")
    spec = replace(spec, controller=replace(spec.controller, extra_conf="SchedulerParameters=bf_continue\n"
                                                                      "PartitionName=mine Nodes=llm-cpu"))
    conf = workers.slurm_conf(spec)
    assert [p.value for p in conf.partitions()] == ["gpu", "cpu", "mine"]
    values = render_values(spec)
    # Helm: partitions become the chart's own entries; the user's line stays out of both, as before
    # (after the Slurm settings the tests run with: cluster/workers.py, issue 39)
    assert values["controller"]["extraConf"].endswith("\nGresTypes=gpu\nSchedulerParameters=bf_continue\n")
    assert "ProctrackType=proctrack/cgroup\n" in values["controller"]["extraConf"]
    assert "PartitionName" not in values["controller"]["extraConf"]
    assert values["partitions"]["gpu"] == {"enabled": True, "nodesets": ["h100"],
                                           "config": "Default=YES MaxTime=7-00:00:00 OverSubscribe=EXCLUSIVE"}
    assert set(values["partitions"]) == {"all", "gpu", "cpu"}
    # sbatch check: the same records, the user's partition included
    assert partition_names(spec) == ["gpu", "cpu", "mine"]
    text = check_conf(spec, state_dir=Path("/tmp/s"), port=1, slurmd_port=2, munge_socket=Path("/m"),
                      user="u", host="h")
    assert "\nSchedulerParameters=bf_continue\n" in text and text.endswith("PartitionName=mine Nodes=llm-cpu\n")
