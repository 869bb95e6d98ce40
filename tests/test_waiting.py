"""tests/waiting.py: the one poll loop the tests wait with."""

from __future__ import annotations

import pytest
from waiting import wait_until


def test_gives_the_first_truthy_answer() -> None:
    answers = iter([None, 0, "", "there", "later"])
    assert wait_until("an answer", lambda: next(answers), every=0) == "there"


def test_fails_the_test_naming_what_it_waited_for() -> None:
    asked = []
    with pytest.raises(pytest.fail.Exception, match="timed out after 0 s waiting for the moon"):
        wait_until("the moon", lambda: asked.append(1), timeout=0, every=0)
    assert asked  # asked at least once, the last time after the deadline


def test_retries_only_the_exceptions_it_is_told_are_not_yet() -> None:
    answers = iter([LookupError("not yet"), LookupError("not yet"), 7])

    def probe() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until("seven", probe, every=0, retry_on=(LookupError,)) == 7
    with pytest.raises(ZeroDivisionError):
        wait_until("nothing", lambda: 1 // 0, every=0, retry_on=(LookupError,))
