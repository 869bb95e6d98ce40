"""The accounting reports as pandas DataFrames: usage, efficiency, cost and fair share (what
``slinkyml.accounting`` exports). Everything goes through a backend (the Slurm CLIs by default), so results do not depend on it; with
the CLI backend the records come through the incremental store (``accounting/store.py``) unless a
caller passes ``cache=False``, as the commands do with ``--no-cache``.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import pandas as pd

from slinkyml.accounting import cost, efficiency, sacct, sharetree, usage
from slinkyml.accounting.backends import get_backend
from slinkyml.accounting.timeparse import parse_when
from slinkyml.errors import SlinkyError
from slinkyml.slurm.runner import Slurm


def _backend(backend, slurm: Slurm | None):
    if backend is None or isinstance(backend, str):
        return get_backend(backend or "cli", slurm)
    return backend


def _window(since, until, *, job_ids, backend, slurm: Slurm | None, cache: bool, store_dir, max_age_s: float):
    """The window's (start, end), the backend, and the store to read it from, synced first unless synced
    less than ``max_age_s`` ago; the store is None when the records come straight from the backend: with
    ``cache=False``, for named jobs (``sacct -j`` ignores the window, a store read would not) and for the
    restapi/pyslurm backends (the store syncs by sacct's window rule, which their queries do not follow)."""
    start, end = parse_when(since, "--since"), parse_when(until, "--until")
    if end <= start:
        raise SlinkyError(f"--until: {end:%Y-%m-%dT%H:%M:%S} is not after --since "
                          f"{start:%Y-%m-%dT%H:%M:%S}")
    source = _backend(backend, slurm)
    if not cache or job_ids or getattr(source, "name", None) != "cli":
        return start, end, source, None
    from slinkyml.accounting import store  # lazy: the store only for a report that reads it

    kept = store.AccountingStore.for_backend(source, store_dir)
    if not kept.fresh(start, max_age_s):
        kept.sync(since=start)
    return start, end, source, kept


def load_jobs(since="1d", until="now", *, users=None, accounts=None, job_ids=None,
              backend=None, slurm: Slurm | None = None, cache: bool = True, store_dir=None,
              max_age_s: float = 0, columns=None, step_stats: bool = False):
    """Jobs and steps (a :class:`~slinkyml.accounting.sacct.SacctTable`) overlapping the window:
    through the incremental store (in ``store_dir`` or the default place) or straight from the backend
    (``_window`` says when). ``columns`` and ``step_stats`` narrow a store read to what one report
    needs (see ``AccountingStore.table``)."""
    start, end, source, kept = _window(since, until, job_ids=job_ids, backend=backend, slurm=slurm, cache=cache,
                                       store_dir=store_dir, max_age_s=max_age_s)
    if kept is None:
        return source.jobs(start, end, users=users, accounts=accounts, job_ids=job_ids)
    return kept.table(start, end, users=users, accounts=accounts, columns=columns, step_stats=step_stats)


def load_runs(since="1d", until="now", *, users=None, accounts=None, job_ids=None, backend=None,
              slurm: Slurm | None = None, cache: bool = True, store_dir=None, max_age_s: float = 0):
    """``efficiency.runs`` over the window, as :func:`load_jobs` would give its records: through the
    store the runs are computed where the records lie (the same SQL), not from a frame of them."""
    start, end, source, kept = _window(since, until, job_ids=job_ids, backend=backend, slurm=slurm, cache=cache,
                                       store_dir=store_dir, max_age_s=max_age_s)
    if kept is None:
        table = source.jobs(start, end, users=users, accounts=accounts, job_ids=job_ids)
        return efficiency.runs(table.jobs, table.steps)
    return kept.runs(start, end, users=users, accounts=accounts)


def load_report(since="1d", until="now", *, users=None, accounts=None, partitions=None, backend=None,
                slurm: Slurm | None = None, cache: bool = True, store_dir=None, max_age_s: float = 0,
                columns=None) -> tuple[sacct.SacctTable, Future | None]:
    """What the dashboard draws, from one sync: the window's records (``columns`` of them) and, through
    the store, their runs (records of ``partitions`` only, when given) as a Future computed by DuckDB's
    threads while this one reads and draws the records (the figures of records need no runs). Straight
    from the backend the runs are None: ``dashboard.collect`` computes them from the records and steps."""
    start, end, source, kept = _window(since, until, job_ids=None, backend=backend, slurm=slurm, cache=cache,
                                       store_dir=store_dir, max_age_s=max_age_s)
    if kept is None:
        return source.jobs(start, end, users=users, accounts=accounts), None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slinkyml-runs")
    pending = pool.submit(kept.runs, start, end, users=users, accounts=accounts, partitions=partitions)
    pool.shutdown(wait=False)  # its one task still runs to the end
    return kept.table(start, end, users=users, accounts=accounts, columns=columns), pending


def usage_report(since="1d", until="now", by=("account", "user"), *, backend=None, slurm: Slurm | None = None,
                 users=None, accounts=None, with_cost: bool = True, cache: bool = True):
    """CPU/GPU/billing hours (and cost) per group over the window, pro-rated at its edges."""
    start, end = parse_when(since, "--since"), parse_when(until, "--until")
    table = load_jobs(start, end, users=users, accounts=accounts, backend=backend, slurm=slurm, cache=cache,
                      columns=usage.COLUMNS)
    report = usage.usage(table.jobs, start, end, by=by)
    if with_cost and len(table.jobs):
        seconds = usage.overlap_seconds(table.jobs, start, end)
        costs = cost.cost(table.jobs, by=by, seconds=seconds)
        report = report.merge(costs, on=list([by] if isinstance(by, str) else by), how="left")
    report.attrs["malformed"] = table.malformed
    return report


def fairshare_report(*, algorithm: str | None = None, backend=None, slurm: Slurm | None = None):
    """The association tree recomputed by slinkyml (Fair Tree or classic; default: slurmctld's
    PriorityFlags) beside sshare's columns (``*_sshare``) and the difference (``*_diff``)."""
    be = _backend(backend, slurm)
    assocs, usage_raw = be.shares_snapshot()  # the selected backend's shares()
    done = sharetree.report(assocs.to_dict("records"), usage_raw, be.config(), algorithm)
    merged = pd.DataFrame(done.rows)
    merged["rank"] = merged["rank"].astype("Int64")
    merged.attrs.update(algorithm=done.algorithm, slurm_algorithm=done.slurm_algorithm, tree=done.tree,
                        users=done.users, sshare_ranked_over=done.sshare_ranked_over, calc_period=done.calc_period)
    return merged


def efficiency_report(since="1d", until="now", *, users=None, accounts=None, job_ids=None,
                      backend=None, slurm: Slurm | None = None, cache: bool = True):
    """One row per training run (requeued segments stitched) with efficiency and waste."""
    return load_runs(since, until, users=users, accounts=accounts, job_ids=job_ids, backend=backend, slurm=slurm,
                     cache=cache)


def cost_report(since="1d", until="now", by=("account", "user"), *, prices=None, backend=None,
                slurm: Slurm | None = None, users=None, accounts=None, cache: bool = True):
    start, end = parse_when(since, "--since"), parse_when(until, "--until")
    table = load_jobs(start, end, users=users, accounts=accounts, backend=backend, slurm=slurm, cache=cache,
                      columns=usage.COLUMNS)
    seconds = usage.overlap_seconds(table.jobs, start, end)
    return cost.cost(table.jobs, by=by, prices=cost.load_prices(prices), seconds=seconds)
