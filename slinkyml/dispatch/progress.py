"""A progress bar for waiting on jobs: an HTML widget in notebooks, one rewritten line in terminals.

No dependency beyond IPython (present in notebooks). In a terminal the bar rewrites one line on
stderr; when stderr is not a terminal (CI logs) it prints a line only when the counts change.
"""

from __future__ import annotations

import sys
import time
from collections import Counter


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except AttributeError:
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


class Progress:
    """``update(done, total, states)``; ``close()`` when finished."""

    def __init__(self, label: str, total: int, *, stream=None, enabled: bool = True):
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self._last = ""
        self._key: tuple = ()
        self._handle = None
        self._notebook = enabled and _in_notebook()

    def render_text(self, done: int, states: Counter) -> str:
        width = 30
        filled = int(width * done / self.total) if self.total else width
        counts = " ".join(f"{k.lower()}={v}" for k, v in sorted(states.items()) if v)
        return (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                f"{time.monotonic() - self.started:5.1f}s {counts}")

    def render_html(self, done: int, states: Counter) -> str:
        pct = 100.0 * done / self.total if self.total else 100.0
        counts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(states.items()) if v)
        return (f"<div><b>{self.label}</b> <progress value='{done}' max='{self.total}' style='width:40%'>"
                f"</progress> {done}/{self.total} ({pct:.0f}%) · {counts} · "
                f"{time.monotonic() - self.started:.0f} s</div>")

    def update(self, done: int, states: Counter | None = None) -> None:
        if not self.enabled:
            return
        states = states or Counter()
        if self._notebook:
            from IPython.display import HTML, display  # lazy: only inside a notebook

            html = HTML(self.render_html(done, states))
            if self._handle is None:
                self._handle = display(html, display_id=True)
            else:
                self._handle.update(html)
            return
        text = self.render_text(done, states)
        if self.stream.isatty():
            self.stream.write("\r" + text.ljust(len(self._last)))
            self.stream.flush()
        elif (done, tuple(sorted(states.items()))) != self._key:
            self.stream.write(text + "\n")
        self._key = (done, tuple(sorted(states.items())))
        self._last = text

    def close(self) -> None:
        if self.enabled and not self._notebook and self.stream.isatty() and self._last:
            self.stream.write("\n")
            self.stream.flush()
