"""`--backend restapi` gives the reports the CLI backend gives: jobs from slurmdbd's API filled into the
same transform, fair-share through the selected backend's shares()."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from slinkyml.jobs.follow import wait

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(180)
def test_restapi_backend_reports_equal_the_clis(slurm, shared_tmp, own, cli, monkeypatch, restapi):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    if restapi["url"]:
        monkeypatch.setenv("SLINKYML_RESTAPI_URL", restapi["url"])
    if restapi["token"]:
        monkeypatch.setenv("SLURM_JWT", restapi["token"])
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    # account ml: other tests' jobs (root's, in root) do not change the window between the two reports
    job = slurm.sbatch("#!/bin/bash\nsleep 1\n", ["--job-name", "backend|same\nname", "-A", "ml", "-o",
                                                  str(shared_tmp / "%j.out"), f"--chdir={shared_tmp}"])
    own.append(str(job))
    wait(slurm, job, timeout=60, poll=0.5)
    end = (datetime.now(UTC) + timedelta(minutes=1)).replace(microsecond=0)
    window = ["--since", start.strftime("%Y-%m-%dT%H:%M:%S"), "--until", end.strftime("%Y-%m-%dT%H:%M:%S"),
              "--account", "ml"]
    for _ in range(30):  # until slurmdbd has the job's end (both backends read it)
        code, out, err = cli("usage", *window, "--json")
        if code == 0 and "malformed" not in err and json.loads(out):
            break
        time.sleep(1)
    reports = {}
    for backend in ("cli", "restapi"):
        code, out, err = cli("usage", *window, "--by", "account,user", "--backend", backend, "--json")
        assert code == 0 and "malformed" not in err, err
        reports[backend] = json.loads(out)
    assert reports["cli"] and reports["restapi"] == reports["cli"]
    shares = {}
    for backend in ("cli", "restapi"):
        code, out, err = cli("fairshare", "--backend", backend, "--json")
        assert code == 0, err
        shares[backend] = json.loads(out)
    def static(rows: list[dict]) -> list[tuple]:  # usage decays between two snapshots; the tree does not
        return [(row["key"], row["account"], row["user"], row["raw_shares"], row["norm_shares"]) for row in rows]

    assert shares["cli"] and static(shares["restapi"]) == static(shares["cli"])
