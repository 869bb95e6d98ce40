"""The one job id parser (``slurm/jobid.py``): Slurm's forms and limits, every other text one line
and exit 2 — never an id that Slurm's 32-bit fields wrap into another job's. Cancelling a job Slurm
does not know is exit 1 with Slurm's reason (live)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slinkyml.slurm.jobid import MAX_ARRAY_TASK, MAX_JOB_ID, JobId, JobIdError


@pytest.mark.parametrize(("text", "expected"), [
    ("1", JobId(1)), ("0042", JobId(42)), (str(MAX_JOB_ID), JobId(MAX_JOB_ID)),
    ("67108864", JobId(67108864)),  # above one cluster's MAX_JOB_ID: a federated id (cluster 1)
    ("12_0", JobId(12, "0")), ("12_007", JobId(12, "7")), (f"12_{MAX_ARRAY_TASK}", JobId(12, str(MAX_ARRAY_TASK))),
    ("12_[1-5,7,10-20:2]", JobId(12, "[1-5,7,10-20:2]")), ("12+0", JobId(12, None, 0)), ("12+127", JobId(12, None, 127)),
])
def test_slurm_forms_parse_and_print_as_slurm_spells_them(text, expected):
    parsed = JobId.parse(text)
    assert parsed == expected and JobId.parse(str(parsed)) == parsed


@pytest.mark.parametrize(("text", "needle"), [
    ("0", "job ids are 1 to 4294967293"),
    ("4294967294", "job ids are 1 to"),  # NO_VAL
    ("4294967295", "job ids are 1 to"),  # INFINITE
    ("4294967296", "job ids are 1 to"),  # 2^32: wrapped to 0 by Slurm
    ("4294967752", "job ids are 1 to"),  # wrapped to 456: the job that got cancelled
    ("9" * 5000, "longer than 1024 characters"),
    ("-1", "not a job id"), ("+1", "not a job id"), (" 1", "not a job id"), ("1 ", "not a job id"),
    ("", "not a job id"), ("1.0", "not a job id"), ("0x10", "not a job id"), ("١٢", "not a job id"),
    ("12_", "not a job id"), ("12_*", "not a job id"), ("12_[]", "not a job id"),
    (f"12_{MAX_ARRAY_TASK + 1}", "array task indexes are 0 to 4000000"),
    ("12_[1-4000001]", "array task indexes are 0 to 4000000"),
    ("12_[5-1]", "must ascend"), ("12_[1-5:0]", "must ascend"), ("12_[1,,2]", "array tasks are N"),
    ("12+128", "het job component offset is 0 to 127"), ("12_1+0", "cannot be combined"),
])
def test_anything_else_is_one_line(text, needle):
    with pytest.raises(JobIdError, match=needle) as caught:
        JobId.parse(text)
    assert len(caught.value.lines()) == 1 and caught.value.exit_code == 2


def test_plain_takes_only_a_jobs_own_number():
    assert JobId.parse("77", plain=True) == JobId(77)
    for text in ("77_1", "77+0", "77_[1-2]"):
        with pytest.raises(JobIdError, match="give a job's number"):
            JobId.parse(text, plain=True)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.one_of(st.text(max_size=40), st.integers(-(2**70), 2**70).map(str),
                 st.from_regex(r"[0-9]{1,12}(_([0-9]{1,8}|\[[0-9,:\-]{1,20}\]))?(\+[0-9]{1,4})?", fullmatch=True)))
def test_every_text_is_a_job_id_or_one_line(text):
    try:
        parsed = JobId.parse(text)
    except JobIdError as exc:
        assert "\n" not in str(exc)
        return
    assert 1 <= parsed.job <= MAX_JOB_ID and JobId.parse(str(parsed)) == parsed


@pytest.mark.parametrize("argv", [("jobs", "cancel", "4294967752"), ("jobs", "status", "0"), ("jobs", "why", "0"),
                                  ("jobs", "logs", "4294967296"), ("jobs", "status", "12_[1-3]"),
                                  ("jobs", "why", "12+1"), ("jobs", "status", "12_4000001"),
                                  ("efficiency", "--job", "0")])
def test_cli_refuses_before_asking_slurm(cli, argv):
    code, out, err = cli(*argv)
    assert (code, out) == (2, "") and err.startswith("slinkyml: error: ") and err.count("\n") == 1, err


@pytest.mark.slurm
def test_cancel_of_an_unknown_job_is_exit_1_with_slurms_reason(cli, slurm, own):
    job_id = str(slurm.sbatch("#!/bin/bash\n#SBATCH -o /dev/null\nsleep 60\n", ()))
    own.append(job_id)
    unknown = str(int(job_id) + 100000)
    code, out, err = cli("jobs", "cancel", unknown, job_id)
    assert code == 1 and out == f"cancelled {job_id}\n"
    assert err == f"slinkyml: error: job {unknown}: Invalid job id specified\n"
    code, out, err = cli("jobs", "cancel", unknown)
    assert (code, out, err) == (1, "", f"slinkyml: error: job {unknown}: Invalid job id specified\n")
