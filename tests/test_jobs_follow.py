"""The progress display's log reading: newest restart's step logs, labelled by node/task."""

from __future__ import annotations

import io

from slinkyml.jobs import follow as fl


def test_follow_prints_state_changes_and_new_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path / "records"))  # not this machine's own jobs
    out = tmp_path / "run-7.out"
    (tmp_path / "run-7-r0-node0.log").write_text("[rank 0] all-reduce check ok\n")
    states = iter([fl.JobState(7, "PENDING", "Resources", stdout=str(out)),
                   fl.JobState(7, "RUNNING", "None", "00:00:03", nodes="n1", stdout=str(out)),
                   fl.JobState(7, "COMPLETED", "None", "00:00:09", nodes="n1", stdout=str(out))])
    monkeypatch.setattr(fl, "job_state", lambda slurm, job_id, name=None: next(states))
    stream = io.StringIO()
    final = fl.follow(object(), 7, stream=stream, poll=0)
    text = stream.getvalue()
    assert final.state == "COMPLETED" and "job 7 PENDING (reason: Resources)" in text
    assert text.count("[node0 r0] [rank 0] all-reduce check ok") == 1 and "job 7 RUNNING restarts=0 nodes=n1 00:00:03" in text


def test_a_record_of_another_job_under_the_same_id_is_not_used(tmp_path, monkeypatch):
    """A reset cluster hands job ids out again: the client's record of an older job 7 must not
    send the log reader to that job's files when Slurm names another batch log."""
    from slinkyml.jobs import logs, records

    monkeypatch.setenv("SLINKYML_RECORDS_DIR", str(tmp_path / "records"))
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d in (old_dir, new_dir):
        d.mkdir()
        (d / "run-7.out").write_text(f"{d.name}\n")
        (d / "run-7-r0-node0.log").write_text(f"{d.name} rank log\n")
    records.save(records.SubmissionRecord("7", "sbatch", "run", str(old_dir),
                                          batch_log=str(old_dir / "run-7.out")), None)
    found = logs.locate(7, stdout=str(new_dir / "run-%j.out"))
    assert found.batch_log == new_dir / "run-7.out"
    assert [r.path for r in found.ranks] == [new_dir / "run-7-r0-node0.log"]
    # the record still serves when Slurm says nothing that contradicts it (sacct < 23.02 has no StdOut)
    assert logs.locate(7).batch_log == old_dir / "run-7.out"
