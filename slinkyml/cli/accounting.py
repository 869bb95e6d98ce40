"""``slinkyml usage | fairshare | efficiency | report``: accounting reports from slurmdbd.
Stdlib only at module level (CLI start-up); pandas, rich and matplotlib load in the handlers."""

from __future__ import annotations

import argparse
import math
import sys

from slinkyml.errors import SlinkyError
from slinkyml.slurm.jobid import plain_job_id_argument


def _common(p: argparse.ArgumentParser, window: bool = True, formats: bool = True) -> None:
    if window:
        p.add_argument("--since", default="1d", help="window start: 2026-01-31[T12:00], now, "
                       "or 7d/12h/30m ago (default 1d)")
        p.add_argument("--until", default="now", help="window end (default now)")
        p.add_argument("--user", action="append", help="only this user (repeatable)")
        p.add_argument("--account", action="append", help="only this account (repeatable)")
    p.add_argument("--backend", default="cli", choices=("cli", "restapi", "rest", "pyslurm"),
                   help="where to read accounting from (default: the Slurm CLIs; rest = restapi)")
    if window:
        _store_options(p)
    if not formats:
        return
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON records")
    fmt.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("--png", help="also write a plot to this PNG file")


def _store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true",
                   help="read slurmdbd directly instead of through the incremental accounting store")
    p.add_argument("--store", metavar="DIR", type=_store_dir,
                   help="where the accounting store lives (default $SLINKYML_ACCOUNTING_STORE, else "
                   "$XDG_STATE_HOME/slinkyml/accounting)")
    p.add_argument("--max-age", type=_margin, default=0, metavar="SECONDS",
                   help="read the store without syncing it when its last sync is younger than this "
                   "(e.g. kept fresh by `slinkyml accounting sync` from cron; default 0: always sync)")


def _store_dir(text: str) -> str:
    """A directory name for the store: not empty, no NUL (the OS refuses it)."""
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give a directory")
    return text


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: a port is 0 to 65535")
    return int(text)


def _host_port(text: str) -> str:
    """A ``Host`` header value the server also answers: a name or address and its port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536 \
            or any(c.isspace() or c in "/@?#" for c in host):
        raise argparse.ArgumentTypeError(f"{text[:60]!r}: give HOST:PORT, e.g. localhost:9000")
    return text


def _refresh(text: str) -> int:
    """Seconds between page builds: at least 5 (each build reads slurmdbd), at most a day."""
    if not (text.isascii() and text.isdigit()) or not 5 <= int(text) <= 86400:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: seconds from 5 to 86400")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    acct = subparsers.add_parser(
        "accounting", description="The incremental accounting store every report reads by default: "
        "the first sync ingests the window, later ones fetch only what changed in slurmdbd since the last "
        "(new, still running or pending, late and requeued records).")
    sub = acct.add_subparsers(dest="accounting_command", metavar="COMMAND")
    p = sub.add_parser("sync", description="Bring the store up to date (reports do this themselves; run it "
                       "from cron to keep reports fast).")
    p.add_argument("--since", help="also cover records from here on (default: what the store covers, or "
                   "30d for a new store); same syntax as the reports' --since")
    p.add_argument("--rebuild", action="store_true", help="throw the store away and ingest the window afresh "
                   "(a damaged store, or one of another format)")
    p.add_argument("--margin", type=_margin, default=300, metavar="SECONDS",
                   help="look back this far past the last sync (clock skew, slurmdbd's commit lag; default 300)")
    p.add_argument("--store", metavar="DIR", type=_store_dir, help="the store's directory (as the reports')")
    p.set_defaults(handler=_sync, backend="cli")
    p = sub.add_parser("status", description="What the store covers, its last sync and size.")
    p.add_argument("--store", metavar="DIR", type=_store_dir, help="the store's directory (as the reports')")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_store_status, backend="cli")
    acct.set_defaults(handler=lambda args: (acct.print_help(), 2)[1])

    p = subparsers.add_parser("usage", description="Usage over a window from sacct, pro-rating jobs that "
                              "cross its edges. Equals sreport cluster AccountUtilizationByUser "
                              "on whole-hour windows; sreport rounds other windows to the "
                              "nearest hours (at least one hour), which this command says when "
                              "it happens.")
    _common(p)
    p.add_argument("--by", default="account,user",
                   help="comma list of user, account, partition, gpu_type (default account,user)")
    p.set_defaults(handler=_usage)

    p = subparsers.add_parser("fairshare", description="The association tree recomputed by slinkyml (Fair "
                              "Tree or classic, fairshare=parent included), each column beside "
                              "sshare's and the difference; explain a rank, try share/usage "
                              "changes.")
    _common(p, window=False)
    p.add_argument("--algorithm", choices=("fair_tree", "classic"),
                   help="recompute with this algorithm (default: what slurm.conf PriorityFlags "
                   "selects; sshare's columns are always slurmctld's)")
    p.add_argument("--explain", metavar="USER", help="explain this user's rank")
    p.add_argument("--vs", metavar="USER", help="...against this user (default: the next one "
                   "above)")
    p.add_argument("--set-shares", action="append", default=[], metavar="ASSOC=N",
                   help="what-if: RawShares of ACCOUNT or ACCOUNT/USER")
    p.add_argument("--add-usage", action="append", default=[], metavar="ASSOC=N",
                   help="what-if: add raw usage (CPU-seconds × billing) to ACCOUNT[/USER]")
    p.add_argument("--recovery", metavar="ACCOUNT/USER",
                   help="time until this association's LevelFS decays back to 1")
    p.set_defaults(handler=_fairshare)

    p = subparsers.add_parser("efficiency", description="seff's efficiency per run (requeued segments "
                              "stitched): CPU = TotalCPU / (Elapsed × CPUs); memory = the largest "
                              "step's TRESUsageInTot mem (all its tasks, all nodes) / the job's "
                              "requested memory; time = Elapsed / Timelimit. Array tasks are "
                              "shown as ARRAYID_TASK with array_job_id/array_task_id columns.")
    _common(p)
    p.add_argument("--job", action="append", type=plain_job_id_argument, help="only this job id (repeatable)")
    p.add_argument("--summary", action="store_true", help="one row per user instead of per run")
    p.set_defaults(handler=_efficiency)

    p = subparsers.add_parser(
        "report",
        description="Usage over time, usage and cost by account/user/partition, the fair-share tree "
        "(slinkyml's recomputation beside sshare's), efficiency distributions and lost hours, queue waits "
        "and the pending queue, top jobs with their segments — one HTML file with no network fetches "
        "(inline SVG/CSS/JS), or served on 127.0.0.1 with --serve.")
    _common(p, formats=False)
    p.add_argument("--partition", action="append", help="only this partition (repeatable)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--html", metavar="FILE", help="write the page here")
    out.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 (built once per "
                     "--refresh interval, served from memory)")
    p.add_argument("--port", type=_port, default=8765, help="port for --serve (default 8765; 0: any free one)")
    p.add_argument("--refresh", type=_refresh, default=300, metavar="SECONDS",
                   help="--serve rebuilds the page this often (default 300, at least 5)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST:PORT", type=_host_port,
                   help="--serve also answers this Host header (e.g. localhost:9000 behind kubectl "
                   "port-forward 9000:8765); others get 400 (DNS rebinding)")
    p.set_defaults(handler=_report)


def _emit(args: argparse.Namespace, df, title: str, footer: str = "") -> int:
    """A report's table (a DataFrame, or plain ``rows.Rows``) as JSON, CSV or a text table."""
    from slinkyml.accounting import rows

    if isinstance(df, rows.Rows):
        render = rows
    else:
        from slinkyml.accounting import render  # type: ignore[no-redef]  # lazy: pandas, for DataFrames only

    if args.json or args.csv:
        sys.stdout.write(render.to_json(df) + "\n" if args.json else render.to_csv(df))
        if footer:  # machine-readable stdout stays clean; the notes still reach the user
            print(footer, file=sys.stderr)
    else:
        from rich.console import Console

        console = Console(width=200) if not sys.stdout.isatty() else Console()
        console.print(render.rich_table(df, title=title))
        if footer:
            console.print(footer)
    return 0


def _window(args):
    from slinkyml.accounting import parse_when
    from slinkyml.errors import SlinkyError

    start, end = parse_when(args.since, "--since"), parse_when(args.until, "--until")
    if end <= start:
        raise SlinkyError("--until: must be after --since")
    return start, end


def _margin(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 86400:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: seconds from 0 to 86400")
    return int(text)


def _store(args: argparse.Namespace, margin_s: float | None = None):
    from slinkyml.accounting import store as store_mod
    from slinkyml.accounting.backends import get_backend

    return store_mod.AccountingStore.for_backend(get_backend(args.backend), args.store,
                                                 margin_s=store_mod.MARGIN_S if margin_s is None else margin_s)


def _load(args, start, end, job_ids=None, columns=None, step_stats=False):
    """The window's records as the options ask: through the store, or straight from their source with
    --no-cache (``load_jobs`` says when else)."""
    from slinkyml.accounting import load_jobs

    return load_jobs(start, end, users=args.user, accounts=args.account, job_ids=job_ids, backend=args.backend,
                     columns=columns, step_stats=step_stats, **_store_read(args))


def _store_read(args) -> dict:
    """--no-cache, --store and --max-age as ``load_jobs``/``load_runs`` take them."""
    return {"cache": not getattr(args, "no_cache", True), "store_dir": getattr(args, "store", None),
            "max_age_s": getattr(args, "max_age", 0)}


def _sync(args: argparse.Namespace) -> int:
    from slinkyml.accounting import parse_when

    since = parse_when(args.since, "--since") if args.since else None
    store = _store(args, margin_s=args.margin)
    stats = store.sync(since=since, rebuild=args.rebuild)
    held = " (held: slurmctld still had messages for slurmdbd)" if stats.watermark_held else ""
    print(f"{store.path}: {stats.kind} sync in {stats.seconds:.2f} s: fetched {stats.fetched_jobs:,} job and "
          f"{stats.fetched_steps:,} step records ({stats.refetched_ids:,} unfinished jobs fetched by id); "
          f"{stats.stored_jobs:,} jobs and {stats.stored_steps:,} steps stored; next sync looks back to "
          f"{stats.watermark:%Y-%m-%dT%H:%M:%S}Z{held}")
    return 0


def _store_status(args: argparse.Namespace) -> int:
    import json

    info = _store(args).status()
    if args.json:
        print(json.dumps(info))
    elif not info["exists"]:
        print(f"{info['path']}: no store yet (the first report or `slinkyml accounting sync` creates it)")
    else:
        print(f"{info['path']}: {info['jobs']:,} jobs, {info['steps']:,} steps, {info['bytes'] / 1e6:.1f} MB; "
              f"covers {info['covered_since']} on; last sync {info['last_sync']}; watermark {info['watermark']}")
    return 0


def _usage(args: argparse.Namespace) -> int:
    from slinkyml.accounting import usage_rows

    start, end = _window(args)
    by = [b.strip() for b in args.by.split(",") if b.strip()]
    unknown = [b for b in by if b not in usage_rows.GROUPS]
    if unknown or not by or len(set(by)) != len(by):
        problem = (f"unknown grouping {unknown[0][:40]!r}" if unknown else "nothing to group by" if not by
                   else "a grouping given twice")
        raise SlinkyError(f"--by {args.by[:60]!r}: {problem} (a comma list of {', '.join(usage_rows.GROUPS)})")
    text = None
    if args.backend == "cli" and not args.png and getattr(args, "no_cache", False):
        # plain Python for what sacct returns (no pandas: most of a small report's run was importing it);
        # text the plain reader declines takes the pandas path below, unparsed again there but not refetched
        from slinkyml.accounting import sacct_rows
        from slinkyml.accounting.sacct_fields import sacct_text
        from slinkyml.slurm.runner import Slurm

        text = sacct_text(Slurm(), start, end, users=args.user, accounts=args.account)
        try:
            records = sacct_rows.parse(text)
        except sacct_rows.Declined:
            pass
        else:
            return _usage_plain(args, records.jobs, start, end, by)
    elif args.backend == "cli" and not args.png:
        jobs = _store_rows(args, start, lambda kept, con: kept.table_rows(
            start, end, columns=usage_rows.COLUMNS, users=args.user, accounts=args.account, con=con))
        if jobs is not None:
            return _usage_plain(args, jobs, start, end, by)
    return _usage_frames(args, start, end, by, text)


def _store_rows(args: argparse.Namespace, start, read):
    """``read(store, connection)`` on the sync's own connection after the store's plain sync (unless fresh
    for --max-age: then ``read(store, None)``): a report's records without pandas. None (the frames' way then) for sacct text only the frames read (nothing was
    written then) or more than ``sacct_rows.LIMIT`` records."""
    from slinkyml.accounting import sacct_rows

    kept = _store(args)
    try:
        if kept.fresh(start, args.max_age):
            return read(kept, None)
        return kept.sync(since=start, plain=True, then=lambda con: read(kept, con)).read  # one connection
    except sacct_rows.Declined:  # a large answer or window: the frames' way is faster
        return None


def _usage_plain(args: argparse.Namespace, jobs: list, start, end, by: list[str], now=None) -> int:
    """The usage table from plain records (``usage_rows``), printed as the pandas path prints it
    (``now``: the end of running jobs, default the clock's)."""
    from slinkyml.accounting import usage_rows
    from slinkyml.accounting.prices import load_prices

    table, prices = usage_rows.report(jobs, start, end, by, load_prices, now=now)
    notes = usage_rows.unpriced(jobs, prices) if prices is not None else []
    notes += [note] if (note := usage_rows.sreport_window_note(start, end)) else []
    return _emit(args, table, f"Usage {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC", "\n".join(notes))


def _usage_frames(args: argparse.Namespace, start, end, by: list[str], text: str | None, now=None) -> int:
    """The usage table from the transform's frames (the store, other backends, --png; ``text``: sacct's
    answer already fetched; ``now`` as for :func:`_usage_plain`)."""
    from slinkyml.accounting import cost, plots, usage

    if text is not None:
        from slinkyml.accounting.sacct_arrow import parse_sacct

        table = parse_sacct(text)
    else:
        table = _load(args, start, end, columns=None if args.png else usage.COLUMNS)
    report = usage.usage(table.jobs, start, end, by=by, now=now)
    prices = cost.load_prices() if len(report) else {}  # once: the costs and the note on unpriced partitions
    if len(report):
        seconds = usage.overlap_seconds(table.jobs, start, end, now=now)
        report = report.merge(cost.cost(table.jobs, by=by, prices=prices, seconds=seconds), on=by, how="left")
    if args.png:
        series = usage.usage_over_time(table.jobs, start, end, by="account",
                                       kind="gpu" if report.get("gpu_hours", [0]).sum() else "cpu")
        plots.usage_over_time_png(series, args.png,
                                  kind="GPU" if report.get("gpu_hours", [0]).sum() else "CPU")
    cols = by + [c for c in ("jobs", "cpu_hours", "gpu_hours", "billing_hours", "cost_usd")
                 if c in report]
    notes = [f"{table.malformed} malformed sacct line(s) skipped"] if table.malformed else []
    if len(report):
        notes += cost.unpriced(table.jobs, prices)
    notes += [note] if (note := usage.sreport_window_note(start, end)) else []
    footer = "\n".join(notes)
    return _emit(args, report[cols] if len(report) else report.reindex(columns=cols),
                 f"Usage {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC", footer)


#: RawShares is a uint32 in Slurm (sacctmgr Fairshare=); the two values above are NO_VAL/INFINITE
MAX_SHARES = 0xFFFFFFFD


def _pairs(values: list[str], flag: str) -> dict[str, float]:
    """``ASSOC=N`` what-ifs: shares are whole numbers 0..MAX_SHARES (as sacctmgr takes them), added usage
    a finite number of at least 0; NaN, infinities, negatives and fractions of a share are refused."""
    out = {}
    for value in values:
        key, sep, number = value.partition("=")
        try:
            parsed = float(number)
        except ValueError:
            parsed = math.nan
            sep = sep if number.strip() else ""
        if not sep or not key.strip():
            raise SlinkyError(f"{flag}: expected ASSOC=NUMBER, got {value[:60]!r}")
        shares = flag == "--set-shares"
        if not math.isfinite(parsed) or parsed < 0 or (shares and (parsed != int(parsed) or parsed > MAX_SHARES)):
            wanted = f"a whole number of shares, 0 to {MAX_SHARES}" if shares else "a finite usage of at least 0"
            raise SlinkyError(f"{flag} {value[:60]!r}: {number.strip()[:30]!r} is not {wanted}")
        out[key.strip()] = int(parsed) if shares else parsed
    return out


def _fairshare(args: argparse.Namespace) -> int:
    from slinkyml.accounting import rows, sharetree

    shares, added = _pairs(args.set_shares, "--set-shares"), _pairs(args.add_usage, "--add-usage")  # before Slurm
    done = _share_report(args)
    root = done.tree
    lines = []
    if args.explain:
        ft = sharetree.fair_tree(root)
        other = args.vs or sharetree.next_above(ft, sharetree.find_user(root, args.explain).key)
        lines.append(sharetree.explain(root, args.explain, other, ft) if other else
                     f"{args.explain} has the highest fair-share rank")
    if args.recovery:
        half = sharetree.parse_half_life(_slurm_config(args).get("PriorityDecayHalfLife", "7-00:00:00"))
        seconds = sharetree.recovery_to_fair(root, args.recovery, half)
        lines.append(f"{args.recovery}: LevelFS back to 1 in "
                     + ("never by decay alone (decay scales everyone's usage alike; its siblings' usage "
                        "must grow)" if math.isinf(seconds) else f"{seconds / 3600:.1f} h")
                     + f" (half-life {half / 86400:g} d, siblings' usage held constant)")
    if args.set_shares or args.add_usage:
        from slinkyml.accounting import fairshare  # lazy: pandas, for the what-if's table only

        diff = fairshare.what_if(root, shares=shares, add_usage=added)
        return _emit(args, diff, "What-if: Fair Tree ranks before → after", "\n".join(lines))
    if args.png:
        import pandas as pd  # lazy: the plot's frame only

        from slinkyml.accounting import plots

        table = pd.DataFrame(done.rows)
        table["rank"] = table["rank"].astype("Int64")
        plots.fairshare_tree_png(table, args.png)
    algo, theirs = done.algorithm, done.slurm_algorithm
    compared = [c for c in sharetree.COMPARED if algo == "fair_tree" or c != "level_fs"]
    cols = ["key", "account", "user", "raw_shares", "raw_usage"]
    for column in compared:
        cols += [column, f"{column}_sshare", f"{column}_diff"]
    if algo == "fair_tree":
        cols += ["rank"]
    data = [[_shares(row[c]) if c == "raw_shares" else float(row[c]) if c not in _AS_IS else row[c]
             for c in cols] for row in done.rows]
    if not (args.json or args.csv):  # the tree by indentation, sshare's names; keys in records
        for row, shown in zip(done.rows, data, strict=True):
            shown[1] = " " * int(row["depth"]) + row["account"]
        data = [row[1:] for row in data]
        cols = [_HEADERS.get(c, "sshare" if c.endswith("_sshare") else "diff" if c.endswith("_diff") else c)
                for c in cols[1:]]
    numeric = frozenset(c for c in cols if c not in ("key", "account", "user", "raw_shares", "Account", "User",
                                                       "RawShares"))
    lines.append(_agreement(done, compared, algo, theirs))
    return _emit(args, rows.Rows(cols, data, numeric), f"Fair-share ({algo}): slinkyml's recomputation, sshare's, "
                 "difference", "\n".join(lines))


#: fair-share columns shown as they are (text, and rank: a whole number or none); the others are floats
_AS_IS = frozenset({"key", "account", "user", "rank"})


def _share_report(args: argparse.Namespace):
    """The recomputed tree beside sshare's: straight from sshare and scontrol with the CLI backend
    (no pandas: the whole command is then ~0.1 s of Python), through the backend otherwise."""
    from slinkyml.accounting import sharetree

    if args.backend == "cli":
        from slinkyml.slurm.runner import Slurm

        assocs, usage_raw = sharetree.snapshot(Slurm())
        return sharetree.report(assocs, usage_raw, _slurm_config(args), args.algorithm)
    from slinkyml.accounting.backends import get_backend

    backend = get_backend(args.backend)
    frame, usage_raw = backend.shares_snapshot()
    return sharetree.report(frame.to_dict("records"), usage_raw, backend.config(), args.algorithm)


def _slurm_config(args: argparse.Namespace) -> dict[str, str]:
    """slurmctld's settings (``scontrol show config``), read once per command."""
    if getattr(args, "_config", None) is None:
        from slinkyml.slurm.runner import Slurm

        args._config = Slurm().show_config()
    return args._config


def _shares(value: float) -> int | str | None:
    """RawShares as sshare prints it: a whole number, ``parent``, or nothing (the root)."""
    return "parent" if value == -1 else None if math.isnan(value) else int(value)


#: sshare's column names for the text table
_HEADERS = {"account": "Account", "user": "User", "raw_shares": "RawShares",
            "raw_usage": "RawUsage", "norm_shares": "NormShares", "effectv_usage": "EffectvUsage",
            "level_fs": "LevelFS", "fairshare": "FairShare", "rank": "Rank"}


def _agreement(done, compared: list[str], algo: str, theirs: str) -> str:
    """One line: how far the recomputation is from sshare, per column."""
    from slinkyml.accounting.rows import column_max_abs

    worst = ", ".join(f"{_HEADERS[c]} {column_max_abs([row[f'{c}_diff'] for row in done.rows]):.2g}"
                      for c in compared)
    line = (f"max |slinkyml - sshare| over {len(done.rows)} associations: {worst} (raw usage from "
            "scontrol show assoc_mgr, two decimals; sshare prints six)")
    if algo != theirs:
        line += (f"; slurmctld runs {theirs.replace('_', ' ')}, so sshare's columns are "
                 f"{theirs.replace('_', ' ')}'s, not {algo.replace('_', ' ')}'s")
    then = done.sshare_ranked_over
    if then:
        line += (f"\nsshare's FairShare is slurmctld's last priority calculation, which ranked "
                 f"{then} user associations; there are {done.users} now (one was added or deleted "
                 "since). The scheduler orders jobs by sshare's values until its next calculation "
                 f"(PriorityCalcPeriod {done.calc_period or 'unknown'}); slinkyml's are what that "
                 "calculation will give")
    return line


def _efficiency(args: argparse.Namespace) -> int:
    from slinkyml.accounting.timeparse import parse_when

    start, end = parse_when(args.since, "--since"), parse_when(args.until, "--until")
    if end <= start:  # worded as the reports' loaders word it (this command's message before)
        raise SlinkyError(f"--until: {end:%Y-%m-%dT%H:%M:%S} is not after --since {start:%Y-%m-%dT%H:%M:%S}")
    text = None
    # straight from sacct (--no-cache, or named jobs, which never go through the store): plain Python for
    # the runs of what sacct returns (no pandas or DuckDB, most of a small report's run); text the plain
    # reader declines takes the frames' path, unparsed again there but not refetched
    if args.backend == "cli" and not args.png and not args.summary and (args.job or getattr(args, "no_cache", False)):
        from slinkyml.accounting import sacct_rows
        from slinkyml.accounting.sacct_fields import sacct_text
        from slinkyml.slurm.runner import Slurm

        text = sacct_text(Slurm(), start, end, users=args.user, accounts=args.account, job_ids=args.job)
        try:
            records = sacct_rows.parse(text)
        except sacct_rows.Declined:
            pass
        else:
            return _efficiency_plain(args, records.jobs, records.steps)
    elif args.backend == "cli" and not args.png and not args.summary:
        found = _store_rows(args, start, lambda kept, con: kept.runs_rows(start, end, users=args.user,
                                                                          accounts=args.account, con=con))
        if found is not None:
            from slinkyml.accounting import efficiency_rows

            return _emit(args, efficiency_rows.printed(found), "Efficiency per run")
    return _efficiency_frames(args, start, end, text)


def _efficiency_plain(args: argparse.Namespace, jobs: list, steps: list) -> int:
    """The runs of plain records (``efficiency_rows``), printed as the frames' path prints them."""
    from slinkyml.accounting import efficiency_rows

    return _emit(args, efficiency_rows.table(jobs, steps), "Efficiency per run")


def _efficiency_frames(args: argparse.Namespace, start, end, text: str | None) -> int:
    """The runs from the transform's frames (the store, other backends, --png, --summary; ``text``:
    sacct's answer already fetched)."""
    from slinkyml.accounting import efficiency, load_runs, plots

    if text is not None:
        from slinkyml.accounting.sacct_arrow import parse_sacct

        table = parse_sacct(text)
        runs = efficiency.runs(table.jobs, table.steps)
    else:
        runs = load_runs(start, end, users=args.user, accounts=args.account, job_ids=args.job,
                         backend=args.backend, **_store_read(args))
    if args.png:
        plots.efficiency_hist_png(runs, args.png)
    if args.summary:
        return _emit(args, efficiency.summary(runs), "Efficiency per user")
    from slinkyml.accounting.efficiency_rows import COLUMNS

    return _emit(args, runs.reindex(columns=list(COLUMNS)), "Efficiency per run")


def _report(args: argparse.Namespace) -> int:
    from slinkyml.accounting import dashboard

    if args.serve:
        from slinkyml.accounting import serve

        return serve.serve(lambda: dashboard.render_html(_dashboard(args), refresh_s=args.refresh).encode(),
                           port=args.port, refresh_s=args.refresh, allowed_hosts=args.allow_host)
    path = dashboard.write(_dashboard(args), args.html)
    print(f"wrote {path}")
    return 0


def _dashboard(args: argparse.Namespace):
    from slinkyml.accounting import dashboard, fairshare_report, load_report, parse_when
    from slinkyml.slurm import Slurm

    start, end = parse_when(args.since, "--since"), parse_when(args.until, "--until")
    # the page's columns of the records, and their runs computed in the store meanwhile (of its partitions)
    table, runs = load_report(start, end, users=args.user, accounts=args.account, partitions=args.partition,
                              backend=args.backend, columns=dashboard.COLUMNS, **_store_read(args))
    shares = fairshare_report(backend=args.backend)
    slurm = Slurm()
    return dashboard.collect(table, shares, start, end, pending=dashboard.pending_jobs(slurm), runs=runs,
                             partitions=args.partition, algorithm=shares.attrs.get("algorithm", "fair_tree"))
