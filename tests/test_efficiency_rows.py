"""The plain-Python efficiency path (``sacct_rows`` + ``efficiency_rows``, what ``slinkyml efficiency
--no-cache`` and ``--job`` run on a small answer) against the frames' (``sacct_arrow`` + DuckDB's
``efficiency.runs``): the same bytes printed as JSON, CSV and a text table, on recorded and crafted sacct
text and on synthetic requeued runs with steps, missing values and long float sums."""

from __future__ import annotations

import argparse
import random
from datetime import UTC, datetime, timedelta

import pytest
from test_usage_rows import TEXTS

from slinkyml.accounting import sacct_rows
from slinkyml.accounting.sacct import FIELDS, SEP
from slinkyml.cli import accounting as cli

pytestmark = pytest.mark.offline


def _requeued(n: int, seed: int, gpu_always: bool = False) -> str:
    """Job ids run up to four times (segments by submit time, a DBIndex each; some ties in submit),
    each segment with steps (MaxRSS, TRES memory, GPU utilisation, some missing), states lost or not,
    pending segments without a start, arrays; ``gpu_always``: every step with a GPU utilisation (no NaN:
    pandas then sums the steps' in group order by reduceat)."""
    rng = random.Random(seed)
    lines = []
    base = datetime(2026, 11, 29, 12, tzinfo=UTC)
    index = 9000
    for i in range(n):
        job = 3000 + i
        array = rng.random() < 0.2
        display = f"{2900 + i}_{i % 5}" if array else str(job)
        submit = base + timedelta(seconds=rng.randrange(0, 40000))
        for _segment in range(rng.choice([1, 1, 2, 3, 4])):
            index += 1
            start = submit + timedelta(seconds=rng.randrange(0, 900))
            elapsed = rng.randrange(1, 20000)
            end = start + timedelta(seconds=elapsed)
            pending = rng.random() < 0.1
            cpus, gpus = rng.choice([1, 3, 7, 96]), rng.choice([0, 1, 3, 8])
            state = "PENDING" if pending else rng.choice(["COMPLETED", "FAILED", "REQUEUED", "TIMEOUT", "CANCELLED by 0"])
            tres = f"billing={cpus},cpu={cpus},{f'gres/gpu={gpus},' if gpus else ''}mem={cpus * 700}M,node=1"
            f = dict.fromkeys(FIELDS, "")
            f.update({"JobID": display, "JobIDRaw": str(job), "DBIndex": str(index), "JobName": f"run{i}",
                      "User": rng.choice(["alice", "bob"]), "Account": "ml", "Partition": "gpu", "QOS": "normal",
                      "State": state, "ExitCode": "0:0", "Submit": f"{submit:%Y-%m-%dT%H:%M:%S}",
                      "Eligible": f"{submit + timedelta(seconds=rng.randrange(0, 5)):%Y-%m-%dT%H:%M:%S}",
                      "Start": "Unknown" if pending else f"{start:%Y-%m-%dT%H:%M:%S}",
                      "End": "Unknown" if pending else f"{end:%Y-%m-%dT%H:%M:%S}",
                      "ElapsedRaw": "0" if pending else str(elapsed),
                      "TimelimitRaw": rng.choice(["60", "1440", "UNLIMITED", "0"]), "AllocCPUS": str(cpus),
                      "NNodes": "1", "AllocTRES": "" if pending else tres, "ReqTRES": tres,
                      "ReqMem": rng.choice([f"{cpus * 700}M", "", "2000Mc"]),
                      "TotalCPU": f"{rng.randrange(0, 3)}:{rng.randrange(0, 60):02d}:{rng.randrange(0, 60):02d}.{rng.randrange(0, 999):03d}",
                      "CPUTimeRAW": str(cpus * elapsed), "Cluster": "slinkyml"})
            lines.append(SEP.join(f[name] for name in FIELDS))
            for step in ([] if pending else ["batch", "extern", "0"][:rng.randrange(0, 4)]):
                s = dict(f)
                s.update({"JobID": f"{display}.{step}", "JobIDRaw": f"{job}.{step}", "JobName": step, "User": "",
                          "Partition": "", "QOS": "", "Account": "ml" if step == "0" else "",
                          "MaxRSS": rng.choice(["", str(rng.randrange(1, 10**9))]),
                          "TRESUsageInTot": rng.choice(["", f"cpu=00:00:01,mem={rng.randrange(1, 10**6)}K"]),
                          "TRESUsageInAve": rng.choice(["" if not gpu_always else "gres/gpuutil=1.5",
                                                        f"gres/gpuutil={rng.randrange(0, 100)},mem=1",
                                                        f"gres/gpuutil={rng.random() * 100!r}"])})
                lines.append(SEP.join(s[name] for name in FIELDS))
        submit += timedelta(seconds=rng.randrange(0, 2))
    return "\n".join(lines) + "\n"


CASES = {**{name: TEXTS[name] for name in ("sacct_2205", "sacct_efficiency_2205", "common_case", "crafted",
                                           "odd_rows", "synthetic", "empty")},
         "requeued": lambda: _requeued(150, 11), "requeued2": lambda: _requeued(60, 5),
         "gpu_always": lambda: _requeued(12, 3, gpu_always=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_plain_efficiency_prints_what_the_frames_print(capsys, name):
    text = CASES[name]()
    records = sacct_rows.parse(text)
    start, end = datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    for fmt in ("json", "csv", "text"):
        args = argparse.Namespace(json=fmt == "json", csv=fmt == "csv", png=None, summary=False)
        assert cli._efficiency_plain(args, records.jobs, records.steps) == 0
        plain = capsys.readouterr()
        assert cli._efficiency_frames(args, start, end, text) == 0
        frames = capsys.readouterr()
        assert (plain.out, plain.err) == (frames.out, frames.err), (name, fmt)
