"""The default backend: ``sacct``/``sshare``/``sreport``/``sacctmgr`` through :class:`Slurm`;
``--parsable2 --noconvert`` gives exact units and unambiguous fields on every release.

pandas and the frames' transform load in the methods that return frames: the store's plain read
(``slinkyml usage`` and ``efficiency`` on a small cluster) takes this backend for its Slurm and place only."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from slinkyml.accounting import sharetree
from slinkyml.accounting.sacct_fields import sacct_text, slurm_time
from slinkyml.slurm import records
from slinkyml.slurm.runner import Slurm

if TYPE_CHECKING:
    import pandas as pd

    from slinkyml.accounting.sacct import SacctTable


class CliBackend:
    name = "cli"

    def __init__(self, slurm: Slurm | None = None):
        self.slurm = slurm or Slurm()

    def jobs(self, start: datetime, end: datetime, *, users=None, accounts=None,
             job_ids=None) -> SacctTable:
        from slinkyml.accounting.sacct_arrow import parse_sacct  # lazy: pandas (see the module's note)

        return parse_sacct(self.sacct_text(start, end, users=users, accounts=accounts, job_ids=job_ids))

    def sacct_text(self, start: datetime, end: datetime, *, users=None, accounts=None, job_ids=None) -> str:
        """sacct's answer as text (what :meth:`jobs` parses; the store's plain sync reads it itself)."""
        return sacct_text(self.slurm, start, end, users=users, accounts=accounts, job_ids=job_ids)

    def shares(self) -> pd.DataFrame:
        from slinkyml.accounting import fairshare  # lazy: pandas (see the module's note)

        return fairshare.share_frame(records.sshare(self.slurm))

    def shares_snapshot(self, attempts: int = 5) -> tuple[pd.DataFrame, dict[str, float]]:
        """sshare plus the finer raw usage of ``scontrol show assoc_mgr``, from one priority
        calculation (:func:`sharetree.snapshot`)."""
        import pandas as pd  # lazy: see the module's note

        from slinkyml.accounting import fairshare

        rows, usage = sharetree.snapshot(self.slurm, attempts)
        return pd.DataFrame(rows, columns=fairshare.SHARE_COLUMNS), usage

    def sreport_account_user(self, start: datetime, end: datetime,
                             unit: str = "Seconds") -> pd.DataFrame:
        """``sreport cluster AccountUtilizationByUser`` (CPU, whole hours) as a DataFrame."""
        out = self.slurm.run("sreport", ["--parsable2", "--noheader", "cluster",
                                         "AccountUtilizationByUser", "-t", unit,
                                         f"start={slurm_time(start)}", f"end={slurm_time(end)}"]
                             ).stdout
        return parse_sreport_account_user(out)

    def rollup(self, start: datetime, end: datetime) -> None:
        """Force slurmdbd's usage rollup for [start, end) (sreport reads only rolled-up data)."""
        self.slurm.run("sacctmgr", ["-i", "rollup", slurm_time(start), slurm_time(end)])

    def account_parents(self) -> dict[str, str | None]:
        """account → parent account, deleted accounts included (sreport still counts their
        usage, and :func:`~slinkyml.accounting.usage.reconcile_sreport` adds it up the tree)."""
        rows = records.sacctmgr(self.slurm, ("Account", "ParentName", "User"),
                                ["list", "associations", "withdeleted"])
        return {row["Account"]: row["ParentName"] or None for row in rows if row["Account"] and not row["User"]}

    def config(self) -> dict[str, str]:
        return self.slurm.show_config()


def parse_sreport_account_user(text: str) -> pd.DataFrame:
    """``Cluster|Account|Login|Proper Name|Used|Energy`` rows → DataFrame (user None for the
    account totals, which include sub-accounts)."""
    import pandas as pd  # lazy: see the module's note

    rows = [dict(cluster=row["Cluster"], account=row["Account"], user=row["Login"] or None, used=int(row["Used"]))
            for row in records.sreport_account_user(text) if row["Used"].strip().isdigit()]
    return pd.DataFrame(rows, columns=["cluster", "account", "user", "used"])


class SlurmctldShares:
    """Fair share and settings from slurmctld's own commands, for backends whose job source has no
    fair-share API (slurmrestd on 22.05, pyslurm 25.11): one delegation instead of one per backend."""

    slurm: Slurm

    def shares(self) -> pd.DataFrame:
        return CliBackend(self.slurm).shares()

    def shares_snapshot(self) -> tuple[pd.DataFrame, dict[str, float]]:
        return CliBackend(self.slurm).shares_snapshot()

    def config(self) -> dict[str, str]:
        return self.slurm.show_config()
