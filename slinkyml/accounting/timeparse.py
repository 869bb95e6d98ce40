"""``--since``/``--until`` values: ISO dates/times (UTC unless an offset is given), ``now``,
or a relative ``7d``/``12h``/``30m``/``90s`` (ago)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from slinkyml.errors import SlinkyError

_REL = re.compile(r"^(?:now-)?(\d+)\s*(s|m|h|d|w)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


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
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise SlinkyError(f"{flag}: cannot read {value!r} as a time (use 2026-01-31, "
                          "2026-01-31T12:00, now, or 7d / 12h / 30m ago)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
