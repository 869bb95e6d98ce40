"""The run protocol's pure parts: torchrun's flags, failure kinds, the requeue causes the schema accepts."""

from __future__ import annotations

import pytest

from slinkyml import specload
from slinkyml.errors import SpecError
from slinkyml.jobs.spec import JobSpec
from slinkyml.slurm import protocol, states


def test_torchrun_gets_the_preemption_signal_and_a_long_enough_shutdown():
    assert protocol.torchrun_signals("USR2") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2"
    assert protocol.torchrun_signals("SIGTERM") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    assert protocol.shutdown_timeout(120) == 120 and protocol.shutdown_timeout(10) == 30


def test_failure_kinds():
    assert protocol.failure_kind(ValueError("bad shape")) == protocol.USER
    assert protocol.failure_kind(RuntimeError("[gloo] Read error: Connection reset by peer")) == protocol.COMMUNICATION
    assert protocol.failure_kind(type("DistNetworkError", (RuntimeError,), {})("x")) == protocol.COMMUNICATION


def test_requeue_on_is_the_protocols_causes():
    node = specload.schema("job")["$defs"]["requeue"]["properties"]["on"]
    assert tuple(node["items"]["enum"]) == protocol.REQUEUE_CAUSES
    spec = JobSpec.from_dict({"name": "x", "entry": {"module": "m"}, "requeue": {"on": ["any_failure"]}})
    assert spec.requeue.on == ("any_failure",)
    assert JobSpec.from_dict({"name": "x", "entry": {"module": "m"}}).requeue.on == protocol.DEFAULT_REQUEUE_ON
    with pytest.raises(SpecError, match=r"requeue\.on"):
        JobSpec.from_dict({"name": "x", "entry": {"module": "m"}, "requeue": {"on": ["sometimes"]}})


def test_one_set_of_job_states():
    assert states.is_terminal("CANCELLED by 0") and states.is_terminal("PREEMPTED")
    assert not states.is_terminal("REQUEUED") and not states.is_terminal("PENDING")
    assert states.FAILED == states.TERMINAL - {"COMPLETED"}
