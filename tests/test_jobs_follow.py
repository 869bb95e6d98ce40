"""The progress display's log reading: newest restart's step logs, labelled by node/task."""

from __future__ import annotations

import io

from slinkyml.jobs import follow as fl


def test_newest_lines_label_by_node_and_use_the_newest_restart(tmp_path):
    out = tmp_path / "run-42.out"
    out.write_text("batch\n")
    (tmp_path / "run-42-r0-node0.log").write_text("[rank 0] step 1\n")
    (tmp_path / "run-42-r1-node0.log").write_text("[rank 0] step 5\n[rank 0] step 6\n")
    (tmp_path / "run-42-r1-node1.log").write_text("[rank 1] step 6\n")
    (tmp_path / "run-43-r0-node0.log").write_text("another job\n")
    lines = fl.newest_lines(str(out), 42, lines=1)
    assert lines == ["[node0 r1] [rank 0] step 6", "[node1 r1] [rank 1] step 6"]
    assert [p.name for p in fl.log_files(str(out), 42)][0] == "run-42-r0-node0.log"


def test_follow_prints_state_changes_and_new_lines(tmp_path, monkeypatch):
    out = tmp_path / "run-7.out"
    (tmp_path / "run-7-r0-node0.log").write_text("[rank 0] all-reduce check ok\n")
    states = iter([fl.JobState(7, "PENDING", "Resources", stdout=str(out)),
                   fl.JobState(7, "RUNNING", "None", "00:00:03", nodes="n1", stdout=str(out)),
                   fl.JobState(7, "COMPLETED", "None", "00:00:09", nodes="n1", stdout=str(out))])
    monkeypatch.setattr(fl, "job_state", lambda slurm, job_id: next(states))
    stream = io.StringIO()
    final = fl.follow(object(), 7, stream=stream, poll=0)
    text = stream.getvalue()
    assert final.state == "COMPLETED" and "job 7 PENDING (reason: Resources)" in text
    assert text.count("[node0 r0] [rank 0] all-reduce check ok") == 1 and "job 7 RUNNING restarts=0 nodes=n1 00:00:03" in text
