"""Accounting from slurmdbd as pandas DataFrames: usage, efficiency, cost and fair-share reports
(``reports.py``), the record store, the transform of sacct's text and the dashboard.

The package imports nothing heavy: a submodule's import (``jobs list``'s of ``timeparse``) runs this
``__init__`` first, and must not load pandas and DuckDB, which the reports' names bring on first use.
"""

from typing import TYPE_CHECKING

from slinkyml import lazy_names

if TYPE_CHECKING:
    from slinkyml.accounting.reports import (
        cost_report,
        efficiency_report,
        fairshare_report,
        load_jobs,
        load_report,
        load_runs,
        usage_report,
    )
    from slinkyml.accounting.timeparse import parse_when

__all__ = ["load_jobs", "load_runs", "load_report", "usage_report", "fairshare_report", "efficiency_report", "cost_report",
           "parse_when"]

# lazy: the reports import pandas (0.4 s) and DuckDB; `jobs list` imports `timeparse` alone
__getattr__ = lazy_names("slinkyml.accounting", {**dict.fromkeys(__all__, "slinkyml.accounting.reports"),
                                                 "parse_when": "slinkyml.accounting.timeparse"})
