"""The one way a test waits for something outside it (a job, a pod, a file): poll until it is there."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T], *, timeout: float = 120.0, every: float = 0.5,
               retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """``probe()``'s first truthy result, asked every ``every`` s; fails the test naming ``what`` once
    ``timeout`` s have passed (the probe is asked once more at the deadline, so a slow machine that gets
    there just in time passes). ``retry_on``: exceptions that mean "not yet" (a pod being replaced)."""
    deadline = time.monotonic() + timeout
    while True:
        past = time.monotonic() > deadline
        try:
            got = probe()
        except retry_on:
            got = None  # type: ignore[assignment]
        if got:
            return got
        if past:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
