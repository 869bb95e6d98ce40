"""``--since``/``--until`` values: ISO dates/times (UTC unless an offset is given), ``now``,
or a relative ``7d``/``12h``/``30m``/``90s`` (ago)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from slinkyml.errors import SlinkyError

_REL = re.compile(r"^(?:now-)?(\d+)\s*(s|m|h|d|w)$", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


#: the times a report can cover: Slurm counts from the Unix epoch; pandas' nanosecond timestamps,
#: which the reports compute with, end in April 2262
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2262, 1, 1, tzinfo=UTC)


def parse_when(text: str | datetime, flag: str = "--since", now: datetime | None = None
               ) -> datetime:
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    value = str(text).strip()
    if value == "now":
        return now
    match = _REL.match(value)
    if match:
        try:
            when = now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        except OverflowError:
            when = EARLIEST - timedelta(days=1)  # before the epoch: refused below
        return _within(when, value, flag)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise SlinkyError(f"{flag}: cannot read {value[:60]!r} as a time (use 2026-01-31, "
                          "2026-01-31T12:00, now, or 7d / 12h / 30m ago)") from None
    return _within(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC), value, flag)


def _within(when: datetime, value: str, flag: str) -> datetime:
    if not EARLIEST <= when < LATEST:
        raise SlinkyError(f"{flag}: {value[:60]!r} is outside {EARLIEST:%Y-%m-%d} .. {LATEST:%Y-%m-%d} "
                          "(Slurm counts from 1970; the reports' timestamps end in 2262)")
    return when
