"""Finding and reading a job's logs (records, Slurm's paths, submitit's), following them losslessly,
and the failure diagnosis on recorded logs of real 2-node torchrun jobs from the local cluster."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from slinkyml.jobs import records
from slinkyml.jobs.diagnose import diagnose, last_exception
from slinkyml.jobs.follow import JobState
from slinkyml.jobs.logs import LogTail, expand_pattern, locate, read_tail

DATA = Path(__file__).parent / "data" / "jobs"


@pytest.fixture(autouse=True)
def _records(tmp_path, monkeypatch):
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path / "records"))


def test_tail_by_offset_loses_and_repeats_nothing(tmp_path):
    log = tmp_path / "a.log"
    tail = LogTail()
    log.write_bytes(b"one\ntwo\nthr")
    assert tail.read(log) == ["one", "two"]
    assert tail.read(log) == []  # nothing new; the half line is held back
    with open(log, "ab") as fh:
        fh.write(b"ee\n" + b"same\n" * 50)  # repeated lines are all shown
    assert tail.read(log) == ["three"] + ["same"] * 50
    with open(log, "ab") as fh:
        fh.write(b"last, no newline")
    assert tail.read(log, final=True) == ["last, no newline"]
    log.write_bytes(b"new file\n")  # replaced by a shorter one: read from its start
    assert tail.read(log) == ["new file"]
    assert tail.read(tmp_path / "missing.log") == []


def test_read_tail_reads_only_the_end(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert read_tail(log, 2) == ["line 99998", "line 99999"]
    assert len(read_tail(log, 0)) == 100_000


def test_patterns_expand_as_sbatch_does():
    assert expand_pattern("logs/%x-%j.out", "41", "train") == "logs/train-41.out"
    assert expand_pattern("o/%A_%a.%5j", "41_3", "t") == "o/41_3.00041"
    assert expand_pattern("100%%-%j", "7") == "100%-7"


def test_logs_found_from_the_record_then_from_workdir(tmp_path):
    logs = tmp_path / "work" / "logs"
    logs.mkdir(parents=True)
    for name in ("run-5.out", "run-5-r0-node0.log", "run-5-r1-node0.log", "run-5-r1-node1.log",
                 "run-55-r0-node0.log"):
        (logs / name).write_text(name + "\n")
    # sacct on 22.05 has no StdOut: WorkDir + the rendered layout
    found = locate(5, workdir=str(tmp_path / "work"), name="run")
    assert found.kind == "sbatch" and found.batch_log == logs / "run-5.out"
    assert [r.name for r in found.rank_logs()] == ["node0", "node1"] and found.newest_restart == 1
    assert [r.restart for r in found.rank_logs(0, restart=0)] == [0]
    # a record wins (log_dir elsewhere); one naming another job's name is ignored
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(logs, elsewhere)
    records.record_sbatch(5, name="run", cwd=str(tmp_path), log_dir=str(elsewhere),
                          batch_log=str(elsewhere / "run-5.out"), conf=None)
    assert locate(5, name="run").batch_log == elsewhere / "run-5.out"
    assert locate(5, name="other job").kind == "unknown"


def test_a_record_serialised_before_its_job_id_loads_with_it(tmp_path, monkeypatch):
    """submit() appends the record to this host's journal under the job id once sbatch answers (its
    batch log's %j filled by load); the line is what to_json writes; the newest submission of a
    reused id wins, a job's own file (submitit) beside the journal too, and a torn line is skipped."""
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path))
    shape = {"name": "run", "cwd": "/w", "log_dir": "/w/logs", "batch_log": "/w/logs/run-%j.out"}
    first = records.PendingRecord(None, **shape)
    first.open()
    first.commit(4242)
    loaded = records.load("4242_3", None)
    assert loaded is not None and (loaded.job_id, loaded.batch_log) == ("4242", "/w/logs/run-4242.out")
    assert loaded == first.record("4242") and loaded.submitted_at == first.submitted_at
    folder = records.records_dir(None)
    assert [p.name for p in folder.iterdir()] == [records.journal_path(folder).name]  # nothing per job
    line = records.journal_path(folder).read_text()
    assert line == "\n4242\t" + replace(first.record(""), batch_log="/w/logs/run-%j.out").to_json()
    assert records.load(424, None) is None and records.load(42420, None) is None  # ids are whole words
    odd = dict(shape, name='a "submitted_at": 0.5 name')  # the cut is at the key, never in a value
    records.PendingRecord(None, **odd, submitted_at=first.submitted_at + 5).commit(4242)  # 4242 handed out again
    records.PendingRecord(None, **shape).commit(77)
    assert records.load(4242, None).name == odd["name"] and records.load(77, None).batch_log == "/w/logs/run-77.out"
    with open(records.journal_path(folder), "ab") as journal:  # a writer killed mid-line, then a new line
        journal.write(b'4242\t{"name": "tor')
    records.PendingRecord(None, **shape, submitted_at=0.0).commit(5)
    assert records.load(4242, None).name == odd["name"] and records.load(5, None) is not None
    records.save(replace(first.record("77"), kind="submitit", submitted_at=first.submitted_at + 9), None)
    assert records.load(77, None).kind == "submitit"  # the newer of its file and its journal line
    assert [(r.job_id, r.name, r.kind) for r in records.all_records(None)] == [
        ("5", "run", "sbatch"), ("77", "run", "submitit"), ("4242", odd["name"], "sbatch")]


def test_the_journal_follows_a_removed_records_dir(tmp_path, monkeypatch):
    """The journal's descriptor is kept open; a state dir cleaned meanwhile gets a new journal
    (not lines appended to a removed file)."""
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path / "records"))
    shape = {"name": "run", "cwd": "/w", "log_dir": "/w/logs", "batch_log": "/w/logs/run-%j.out"}
    records.PendingRecord(None, **shape).commit(1)
    shutil.rmtree(tmp_path / "records")
    records.PendingRecord(None, **shape).commit(2)
    assert records.load(2, None) is not None and records.load(1, None) is None


def test_gone_files_say_where_they_were_looked_for(tmp_path):
    found = locate(9, workdir=str(tmp_path), name="x")
    assert not found.exists and str(tmp_path / "logs" / "x-9.out") in found.tried


def test_submitit_ranks(tmp_path):
    folder = tmp_path / ".slinkyml" / "submitit"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"12_{rank}_log.out").write_text(f"out {rank}\n")
        (folder / f"12_{rank}_log.err").write_text(f"err {rank}\n")
    (folder / "120_0_log.out").write_text("another job\n")
    found = locate(12, workdir=str(tmp_path), name="fn")
    assert found.kind == "submitit"
    assert [r.name for r in found.rank_logs()] == ["rank0", "rank0 err", "rank1", "rank1 err"]


def _recorded(case: str, job: int, name: str, exit_code: str) -> tuple[JobState, object]:
    folder = DATA / case
    state = JobState(job, "FAILED", exit_code=exit_code, nodes="dl[1-2]", stdout=str(folder / f"{name}-{job}.out"),
                     name=name)
    return state, locate(job, stdout=state.stdout, name=name)


def test_diagnosis_names_the_raising_rank_not_the_sigterm():
    state, logs = _recorded("torchrun-rank1-raises", 1, "failer", "1:0")
    found = diagnose(None, 1, state=state, logs=logs, steps=[])
    assert (found.kind, found.rank, found.host, found.exit_code) == ("exception", 1, "dl2", "1")
    assert found.exception == "RuntimeError: boom on rank 1"
    assert found.summary == "job 1 FAILED (exception): rank 1 on dl2 exited 1: RuntimeError: boom on rank 1"
    first = found.evidence[0]
    assert first.path.name == "failer-1-r0-node1.log" and "RuntimeError: boom" in first.context[first.line - first.first]


def test_diagnosis_of_an_exit_without_exception():
    state, logs = _recorded("torchrun-rank1-exit3", 2, "exit3", "137:0")
    found = diagnose(None, 2, state=state, logs=logs, steps=[])
    assert (found.kind, found.rank, found.host, found.exit_code, found.exception) == ("failed", 1, "dl2", "3", "")


def test_a_rank_that_dies_before_training_is_named_with_the_interpreters_line():
    """Recorded on the local cluster (22.05): `slinkyml run --python /usr/bin/python3 -m slinkyml.train` with no
    torch for that python; torchrun never starts, so no traceback: the interpreter's one line is the exception."""
    state, logs = _recorded("torchrun-no-torch", 536, "notorch", "1:0")
    found = diagnose(None, 536, state=state, logs=logs, steps=[])
    line = ("/usr/bin/python3: Error while finding module specification for 'torch.distributed.run' "
            "(ModuleNotFoundError: No module named 'torch')")
    assert (found.kind, found.rank, found.host, found.exception) == ("exception", 0, "h1", line), found
    assert found.summary == f"job 536 FAILED (exception): rank 0 on h1 exited 1: {line}"
    first = found.evidence[0]
    assert first.path.name == "notorch-536-r0-node0.log" and first.context[first.line - first.first] == line


def test_a_script_that_cannot_import_its_module_is_named_with_the_error_line():
    """Recorded: `slinkyml run --launcher srun -N 2 --python /usr/bin/python3 train.py` whose first line imports
    torch, missing for that python: the failing task's traceback gives the line; the killed task is not it."""
    state, logs = _recorded("srun-no-torch", 537, "train", "1:0")
    found = diagnose(None, 537, state=state, logs=logs, steps=[])
    assert (found.kind, found.rank, found.host) == ("exception", 0, "h1"), found
    assert found.summary == "job 537 FAILED (exception): rank 0 on h1 exited 1: ModuleNotFoundError: No module named 'torch'"
    assert found.evidence[0].path.name == "train-537-r0-task0.log"


def test_launcher_tracebacks_are_not_the_exception():
    lines = (DATA / "torchrun-rank1-raises" / "failer-1-r0-node0.log").read_text().splitlines()
    assert last_exception(lines) is None  # only torchrun's SignalException there


@pytest.mark.parametrize(("state", "steps", "batch", "kind"), [
    ("OUT_OF_MEMORY", [{"JobID": "3.0", "State": "OUT_OF_MEMORY", "NodeList": "dl1"}], [], "oom"),
    ("FAILED", [], ["slurmstepd: error: Detected 1 oom_kill event in StepId=3.0. Some of the step tasks "
                    "have been OOM Killed."], "oom"),
    ("NODE_FAIL", [{"JobID": "3", "State": "NODE_FAIL", "NodeList": "dl2"}], [], "node_fail"),
    ("TIMEOUT", [], ["slurmstepd: error: *** JOB 3 ON dl1 CANCELLED AT 2026-11-30T10:00:00 DUE TO TIME "
                     "LIMIT ***"], "timeout"),
    ("PREEMPTED", [], [], "preempted"),
    ("FAILED", [], ["srun: error: dl1: task 0: Exited with exit code 2",
                    "/work/python: can't open file '/nope.py': [Errno 2] No such file or directory"], "launch"),
    ("CANCELLED by 0", [], [], "cancelled"),
])
def test_each_kind_of_ending_is_recognised(tmp_path, state, steps, batch, kind):
    out = tmp_path / "j-3.out"
    out.write_text("\n".join(batch) + "\n")
    found = diagnose(None, 3, state=JobState(3, state, stdout=str(out), name="j"),
                     logs=locate(3, stdout=str(out), name="j"), steps=steps)
    assert found.kind == kind, found
    if kind == "node_fail":
        assert found.host == "dl2"


def test_oom_kill_by_slurms_memory_limit():
    """Recorded on the local cluster with JobAcctGatherParams=OverMemoryKill (before it enforced memory
    with cgroups: task/none), --mem 200M, a task allocating 2 GB: slurmstepd's kill, not the kernel's."""
    state, logs = _recorded("srun-oom-overmemorykill", 481, "hog", "9:0")
    found = diagnose(None, 481, state=state, logs=logs,
                     steps=[{"JobID": "481.0", "State": "CANCELLED by 0", "NodeList": "dl1"}])
    assert (found.kind, found.rank, found.host) == ("oom", 0, "dl1"), found
    assert found.summary.startswith("job 481 FAILED (out of memory): rank 0 on dl1")
    assert "slurmstepd killed it over its memory limit" in found.detail and "not the kernel's" in found.detail
    assert "exceeded memory limit" in found.evidence[0].context[found.evidence[0].line - found.evidence[0].first] or \
        "Exceeded job memory limit" in found.evidence[0].context[found.evidence[0].line - found.evidence[0].first]


def test_the_run_protocols_marker_and_events_come_first(tmp_path):
    """The ranks' failure marker names the first rank that raised (global rank and host) and the
    events file the batch script's decision; both are shown as evidence."""
    from slinkyml.slurm import protocol

    out = tmp_path / "t-8.out"
    out.write_text("srun: error: n2: task 1: Exited with exit code 1\nsrun: error: n1: task 0: Exited with exit code 1\n")
    (tmp_path / "t-8-r0-node0.log").write_text("ok\n")
    (tmp_path / "t-8-r0-node1.log").write_text("[rank3]: Traceback (most recent call last):\n"
                                               "[rank3]:   File \"x.py\", line 1\n[rank3]: ValueError: bad batch\n")
    protocol.failure_marker(tmp_path, 8, 0).write_text("user rank 3 on n2: ValueError: bad batch\n"
                                                      "communication rank 0 on n1: DistNetworkError: peer gone\n")
    protocol.events_file(tmp_path, 8).write_text("r0 failed user_error: user rank 3 on n2: ValueError: bad batch\n")
    found = diagnose(None, 8, state=JobState(8, "FAILED", exit_code="1:0", stdout=str(out), name="t"),
                     logs=locate(8, stdout=str(out), name="t"), steps=[])
    assert (found.kind, found.rank, found.host, found.exception) == ("exception", 3, "n2", "ValueError: bad batch")
    assert [e.path.name for e in found.evidence][:2] == ["t-8-r0-node1.log", ".failed-8-r0"]
    assert any(e.path.name == "slinkyml-8.events" for e in found.evidence)
    protocol.failure_marker(tmp_path, 8, 0).unlink()
    protocol.events_file(tmp_path, 8).write_text("r0 failed node_failure: srun: error: Node failure on n2\n")
    (tmp_path / "t-8-r0-node1.log").write_text("lost\n")
    found = diagnose(None, 8, state=JobState(8, "FAILED", exit_code="1:0", stdout=str(out), name="t"),
                     logs=locate(8, stdout=str(out), name="t"), steps=[])
    assert found.kind == "node_fail"


def test_a_time_limit_is_never_called_a_preemption(tmp_path):
    """The issue's `slinkyml run -N 1 -t 2 --max-restarts 0 sleeper.py` was 'FAILED (preempted): ... a
    higher-priority job took the nodes'. The run's own decision and Slurm's TIMEOUT both say time limit."""
    from slinkyml.slurm import protocol

    out = tmp_path / "sleeper-20.out"
    out.write_text("slinkyml: SIGUSR2 received; forwarding to the training processes\n"
                   "srun: error: c1: task 0: Exited with exit code 1\n")
    protocol.events_file(tmp_path, 20).write_text("r0 failed time_limit: SIGUSR2 (no checkpoint since the run started)\n")
    for state in ("TIMEOUT", "FAILED"):
        found = diagnose(None, 20, state=JobState(20, state, exit_code="0:0", run_time="00:02:08",
                                                  stdout=str(out), name="sleeper"),
                         logs=locate(20, stdout=str(out), name="sleeper"), steps=[])
        assert found.kind == "timeout", found
        assert found.summary == (f"job 20 {state} (time limit): reached its time limit (00:02:08); not requeued: "
                                 "no checkpoint since the run started")


def test_the_ending_rules_are_data_checked_against_the_state_names(tmp_path: Path) -> None:
    """data/diagnose_rules.json names every failed ending once, ends with a rule that always matches,
    and a state name that slurm/states.py does not spell is refused when the table is read."""
    from slinkyml.jobs.diagnose import KINDS, RULES_FILE, ending_kind, load_rules

    rules = load_rules()
    assert sorted(kind for kind, _ in rules) == sorted(set(KINDS) - {"running", "completed"})
    assert rules[-1] == ("failed", [{}])
    facts = {"state": "FAILED", "step_states": {"OUT_OF_MEMORY"}, "event": "", "cancel_why": "", "oom_line": False,
             "launch_line": False, "exception": True}
    assert ending_kind(facts) == "oom"
    assert ending_kind({**facts, "step_states": set()}) == "exception"
    bad = tmp_path / "rules.json"
    bad.write_text(RULES_FILE.read_text().replace('"state": "OUT_OF_MEMORY"', '"state": "OOM"'))
    with pytest.raises(ValueError, match="'OOM' is not a name of slurm/states.py"):
        load_rules(bad)
