"""The progress display's log reading: newest restart's step logs, labelled by node/task."""

from __future__ import annotations

import io

from slinkyml.jobs import follow as fl


def test_follow_prints_state_changes_and_new_lines(tmp_path, monkeypatch):
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
