"""The accounting dashboard: DataFrames first, HTML drawn from them, checked in a real browser.

Offline tests use recorded sacct/sshare output (tests/data/accounting) and rows synthesised in the
same layout (benchmarks/accounting.py). The browser tests open the page in Debian's headless
Chromium through Playwright (no browser download: `executable_path=/usr/bin/chromium`), and keep
their screenshots in out/test-artifacts/dashboard/.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slinkyml.accounting import dashboard, usage
from slinkyml.accounting.fairshare import parse_sshare
from slinkyml.accounting.sacct_arrow import parse_sacct

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "accounting"
ARTIFACTS = REPO / "out" / "test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _synthesise(rows: int):
    spec = importlib.util.spec_from_file_location("bench_accounting", REPO / "benchmarks" / "accounting.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return parse_sacct(module.synthesise(rows))


@pytest.fixture(scope="module")
def shares():
    return parse_sshare((DATA / "sshare_fairtree_2205.txt").read_text())


@pytest.fixture(scope="module")
def synthetic():
    return _synthesise(40_000)


@pytest.fixture(scope="module")
def month(synthetic, shares):
    # the window cuts jobs at both edges: pro-rating must agree with usage()
    start, end = pd.Timestamp("2026-11-03T05:30", tz="UTC"), pd.Timestamp("2026-11-27T17:10", tz="UTC")
    pending = pd.DataFrame([{"job_id": "901", "user": "alice", "account": "physics", "partition": "gpu",
                             "reason": "Priority", "submit": pd.Timestamp("2026-11-27T17:00", tz="UTC"),
                             "wait_s": 600.0}])
    return dashboard.collect(synthetic, shares, start, end, pending=pending, now=end), start, end


def test_bins_follow_the_window():
    t = pd.Timestamp("2026-11-30T00:00", tz="UTC")
    assert dashboard.choose_bin(t, t + pd.Timedelta("1h"))[0] == "1min"
    assert dashboard.choose_bin(t, t + pd.Timedelta("1D"))[0] == "15min"
    assert dashboard.choose_bin(t, t + pd.Timedelta("7D"))[0] == "6h"
    assert dashboard.choose_bin(t, t + pd.Timedelta("30D"))[0] == "1D"
    assert dashboard.choose_bin(t, t + pd.Timedelta("365D"))[0] == "7D"


def test_usage_over_time_adds_up_to_the_window_usage(month, synthetic):
    data, start, end = month
    over_time = data.usage_over_time.groupby("account")[["cpu_hours", "gpu_hours"]].sum()
    whole = usage.usage(synthetic.jobs, start, end, by=("account",), now=end).set_index("account")
    for account in whole.index:
        assert over_time.loc[account, "cpu_hours"] == pytest.approx(whole.loc[account, "cpu_hours"], rel=1e-9)
        assert over_time.loc[account, "gpu_hours"] == pytest.approx(whole.loc[account, "gpu_hours"], rel=1e-9)
    by_account = data.usage_by["account"].set_index("account")
    assert by_account["cpu_hours"].sum() == pytest.approx(whole["cpu_hours"].sum(), rel=1e-9)
    # cost per bin sums to the cost table's total
    assert data.usage_over_time["cost_usd"].sum() == pytest.approx(by_account["cost_usd"].sum(), rel=1e-6)
    bins = data.usage_over_time["bin_start"].drop_duplicates()
    assert len(bins) <= dashboard.MAX_BINS and bins.iloc[0] == start


def test_binned_hours_brute_force():
    """The O(N log N) integral against a per-bin loop of usage() on a small table."""
    table = _synthesise(600)
    start, end = pd.Timestamp("2026-11-02T00:00", tz="UTC"), pd.Timestamp("2026-11-05T07:00", tz="UTC")
    weights = pd.DataFrame({"cpu_hours": table.jobs["alloc_cpu"].fillna(0)})
    fast = dashboard.binned_hours(table.jobs, start, end, 6 * 3600, weights, now=end)
    slow = usage.usage_over_time(table.jobs, start, end, freq="6h", by="account", kind="cpu", now=end)
    pivot = fast.pivot_table(index="bin_start", columns="account", values="cpu_hours", aggfunc="sum").fillna(0)
    assert np.allclose(pivot.reindex(columns=slow.columns).to_numpy(), slow.to_numpy())


def test_fairshare_tree_keeps_infinity_and_both_ranks(shares):
    tree = dashboard.fairshare_tree(shares)
    users = tree[tree["is_user"]]
    assert sorted(users["rank"].tolist()) == sorted(users["sshare_rank"].tolist()) == list(range(1, len(users) + 1))
    zero = shares.copy()
    zero.loc[zero["key"] == "physics/alice", "raw_usage"] = 0.0
    page = dashboard.render_html(dashboard.DashboardData(
        start=pd.Timestamp("2026-11-30", tz="UTC"), end=pd.Timestamp("2026-12-01", tz="UTC"), bin="15min", records=0,
        usage_over_time=pd.DataFrame(columns=["bin_start", "account", "cpu_hours", "gpu_hours", "cost_usd"]),
        usage_by={g: pd.DataFrame(columns=[g, "jobs", "cpu_hours", "gpu_hours", "cost_usd"])
                  for g in ("account", "user", "partition")},
        fairshare=dashboard.fairshare_tree(zero), runs=pd.DataFrame(columns=["segments"]),
        distributions=dashboard._distributions(pd.DataFrame()), lost=dashboard._lost(parse_sacct("").jobs),
        waits=dashboard._waits(pd.DataFrame(), None, 60), pending=dashboard.pending_jobs(None),
        top_jobs=pd.DataFrame()))
    assert '<td data-v="Infinity" class="inf">∞</td>' in page  # a value, never a full bar


def test_lost_hours_count_each_segment(shares):
    table = parse_sacct((DATA / "sacct_2205.txt").read_text())
    data = dashboard.collect(table, shares, pd.Timestamp("2026-11-30T00:00", tz="UTC"),
                             pd.Timestamp("2026-11-30T03:00", tz="UTC"))
    lost = data.lost.set_index("state")
    jobs = table.jobs
    for state in dashboard.LOST_STATES:
        mine = jobs[jobs["state"] == state]
        assert lost.loc[state, "segments"] == len(mine)
        assert lost.loc[state, "cpu_hours"] == pytest.approx((mine["elapsed_s"] * mine["alloc_cpu"]).sum() / 3600)
    assert data.top_jobs["job"].str.contains("_").any()  # array tasks as 724_0, not their raw ids


def test_partition_filter(synthetic, shares):
    start, end = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")
    data = dashboard.collect(synthetic, shares, start, end, partitions=["cpu"], now=end)
    assert data.usage_by["partition"]["partition"].tolist() == ["cpu"]
    assert data.usage_over_time["gpu_hours"].sum() == 0


def test_hundred_thousand_records_stay_small(shares, tmp_path):
    table = _synthesise(400_000)  # 100,000 job records plus their steps
    assert len(table.jobs) == 100_000
    start, end = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")
    path = dashboard.write(dashboard.collect(table, shares, start, end, now=end), tmp_path / "d.html")
    assert path.stat().st_size < 20e6
    text = path.read_text()
    assert len(re.findall(r"<tr class=\"detail\">", text)) == dashboard.TOP_JOBS


def test_page_is_self_contained(month):
    page = dashboard.render_html(month[0])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    for section in ("usage-over-time", "usage", "fairshare", "efficiency", "queue", "top-jobs"):
        assert f'<section id="{section}">' in page


def test_serve_builds_the_page_once_per_refresh_not_per_load(month):
    import threading
    import urllib.error
    import urllib.request

    from slinkyml.accounting import serve

    builds = []

    def build():
        builds.append(1)
        return dashboard.render_html(month[0], refresh_s=60).encode()

    server = serve.make_server(build, port=0, refresh_s=60)
    server.cache.refresh()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/"
        for _ in range(3):
            page = urllib.request.urlopen(url, timeout=30).read().decode()
            assert '<meta http-equiv="refresh" content="60">' in page and '<section id="fairshare">' in page
        assert len(builds) == 1
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "elsewhere", timeout=30)
    finally:
        server.shutdown()
        server.server_close()


# -- in a real browser -------------------------------------------------------------------------
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or importlib.util.find_spec("playwright") is None,
    reason="needs Debian's chromium (apt-get install chromium) and playwright (pip install '.[dev]')")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run"])
        yield chromium
        chromium.close()


def _open(browser, path: Path, width: int):
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems, requests = [], []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems, requests


def _column(page, table_id: str, index: int) -> list[float]:
    return page.evaluate(f"""Array.from(document.querySelectorAll('#{table_id} > tbody > tr:not(.detail)'))
        .map(r => parseFloat(r.cells[{index}].dataset.v))""")


@needs_browser
@pytest.mark.parametrize("width", [1400, 800])
def test_dashboard_in_chromium(browser, month, width):
    data = month[0]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = dashboard.write(data, ARTIFACTS / "dashboard.html")
    page, problems, requests = _open(browser, path, width)
    try:
        assert problems == [] and requests == [path.as_uri()]  # no errors, nothing fetched
        for section in ("usage-over-time", "usage", "fairshare", "efficiency", "queue", "top-jobs"):
            assert page.evaluate(f"document.querySelector('#{section}').innerText.trim().length") > 40, section
        assert page.evaluate("document.querySelectorAll('#usage-over-time svg rect').length") > 0
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{width}.png"), full_page=True)
        # the DOM's numbers are the DataFrames'
        frame = data.usage_by["account"]
        assert page.evaluate("Array.from(document.querySelectorAll('#usage-account > tbody > tr'))"
                             ".map(r => r.cells[0].textContent)") == frame["account"].tolist()
        for index, column in ((1, "jobs"), (2, "cpu_hours"), (3, "gpu_hours"), (4, "cost_usd")):
            assert np.allclose(_column(page, "usage-account", index), frame[column].to_numpy(dtype=float))
        tree = data.fairshare
        for index, column in ((2, "norm_shares"), (3, "sshare_norm_shares"), (7, "level_fs"), (11, "rank"),
                              (12, "sshare_rank")):
            dom = _column(page, "fairshare-tree", index)
            assert np.allclose(dom, tree[column].to_numpy(dtype=float), equal_nan=True), column
        assert np.allclose(_column(page, "lost", 3), data.lost["gpu_hours"].to_numpy(dtype=float))
        assert page.evaluate("document.querySelectorAll('#pending > tbody > tr').length") == len(data.pending)
        assert page.evaluate("document.querySelectorAll('#top-jobs-table > tbody > tr:not(.detail)').length") \
            == len(data.top_jobs)
        assert page.evaluate("document.querySelectorAll('[class=\"chart\"] svg, #efficiency svg').length") >= 4
    finally:
        page.close()


@needs_browser
def test_dashboard_interactions(browser, month):
    data = month[0]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = dashboard.write(data, ARTIFACTS / "interactions.html")
    page, problems, _ = _open(browser, path, 1400)
    try:
        # switch the usage chart to GPU-hours, then cost
        page.click("button.m[data-metric=gpu_hours]")
        shown = page.evaluate("Array.from(document.querySelectorAll('.chart')).filter(c => c.style.display !== 'none')"
                              ".map(c => c.dataset.metric)")
        assert shown == ["gpu_hours"]
        # sort the user table by CPU-hours, ascending then descending
        header = page.locator("#usage-user thead th").nth(2)
        header.click()
        ascending = _column(page, "usage-user", 2)
        header.click()
        assert ascending == sorted(ascending) and _column(page, "usage-user", 2) == sorted(ascending, reverse=True)
        # the filter box keeps only matching rows
        page.fill('input[data-table="usage-user"]', "alice")
        visible = page.evaluate("Array.from(document.querySelectorAll('#usage-user > tbody > tr'))"
                                ".filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent)")
        assert visible == ["alice"]
        # a top job's segments open in place, and stay with their job when the table is sorted
        first = page.evaluate("document.querySelector('#top-jobs-table > tbody > tr').cells[0].textContent")
        page.locator("#top-jobs-table thead th").nth(7).click()
        page.locator("#top-jobs-table thead th").nth(7).click()
        pairs = page.evaluate("""Array.from(document.querySelectorAll('#top-jobs-table > tbody > tr.detail'))
            .every(d => !d.previousElementSibling.classList.contains('detail'))""")
        assert pairs
        page.locator("#top-jobs-table details summary").first.click()
        assert page.evaluate("document.querySelector('#top-jobs-table details').open")
        assert first
        assert problems == []
    finally:
        page.close()


@pytest.mark.slurm
def test_report_cli_writes_the_dashboard(local_cluster, cli, tmp_path):
    """`slinkyml report --html` against the live cluster, on a window with no jobs: still a whole page."""
    code, out, err = cli("report", "--since", "2000-01-01", "--until", "2000-01-02", "--html", str(tmp_path / "r.html"))
    assert code == 0 and out.startswith("wrote "), err
    page = (tmp_path / "r.html").read_text()
    assert '<section id="fairshare">' in page and "No usage in this window." in page
    assert 'id="fairshare-tree"' in page  # the live association tree is there
