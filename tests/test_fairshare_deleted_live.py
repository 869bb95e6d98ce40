"""Fair share as the scheduler sees it after user associations are deleted (issue 29, item 5).

slurmctld stores each association's FairShare at its priority calculation (every PriorityCalcPeriod,
one minute on the dev cluster) and orders jobs by it until the next. Deleting user associations takes
them out of sshare's tree at once, but the ranks sshare prints stay those of the last calculation, out
of the old number of users (recorded here: 1/9 steps with 6 users left). `slinkyml fairshare` shows both:
its recomputation (what the next calculation gives) beside sshare's (what the scheduler uses now), and
says why they differ; after the next calculation they agree again. Live: three users are added, a
calculation ranks them, they are deleted right after it, and the report is read before the next one."""

from __future__ import annotations

import time

import pytest

from slinkyml.accounting import fairshare_report
from slinkyml.accounting.backends.cli import CliBackend

pytestmark = pytest.mark.slurm

NAMES = ("fsdel1", "fsdel2", "fsdel3")


def _users(slurm) -> set[str]:
    out = slurm.run("sshare", ["-a", "-n", "-P", "-o", "User"]).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def test_deleted_users_stay_in_the_schedulers_ranks_until_its_next_calculation(local_cluster, cli):
    slurm = local_cluster.slurm
    backend = CliBackend(slurm)
    if "NO_FAIR_TREE" in backend.config().get("PriorityFlags", ""):
        pytest.skip("slurmctld runs classic fair share here; this is about Fair Tree's ranks")
    slurm.run("sacctmgr", ["-i", "add", "user", ",".join(NAMES), "account=bio"])
    try:
        # a calculation has ranked the new users: sshare's ranks are out of the current count
        deadline = time.monotonic() + 200
        while True:
            table = fairshare_report(backend=backend)
            if set(NAMES) <= _users(slurm) and table.attrs["sshare_ranked_over"] is None:
                break
            assert time.monotonic() < deadline, "no priority calculation ranked the added users"
            time.sleep(1)
        before = table.attrs["users"]
        slurm.run("sacctmgr", ["-i", "delete", "user", ",".join(NAMES)])
        deleted_at = time.monotonic()
        table = fairshare_report(backend=backend)
        if table.attrs["sshare_ranked_over"] is None:  # a calculation fell in between (rare): say so
            pytest.fail(f"slurmctld recalculated within {time.monotonic() - deleted_at:.1f} s of the deletion")
        assert table.attrs["users"] == before - len(NAMES)
        assert table.attrs["sshare_ranked_over"] == before
        assert table["fairshare_diff"].abs().max() > 0.01  # ours: the next calculation; sshare's: the last one
        code, out, err = cli("fairshare")
        assert code == 0, err
        text = " ".join(out.split())
        assert f"ranked {before} user associations; there are {before - len(NAMES)} now" in text
        assert "The scheduler orders jobs by sshare's values until its next calculation" in text
        # the next calculation agrees with the recomputation
        deadline = time.monotonic() + 200
        while True:
            table = fairshare_report(backend=backend)
            if table.attrs["sshare_ranked_over"] is None:
                break
            assert time.monotonic() < deadline, "slurmctld did not recalculate"
            time.sleep(2)
        assert table["fairshare_diff"].abs().max() < 1e-5
    finally:
        slurm.run("sacctmgr", ["-i", "delete", "user", ",".join(NAMES)], check=False)
