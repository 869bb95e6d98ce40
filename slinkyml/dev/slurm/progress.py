"""A line every 30 s while a long set-up step runs (torch's download, debootstrap, image builds), so that a
newcomer's terminal is never silent for long. Standard library only: the Makefile runs it with the machine's
``python3`` before the venv exists (``python3 slinkyml/dev/slurm/progress.py WHAT -- COMMAND...``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

EVERY_S = 30.0


@contextmanager
def ticking(what: str, every: float = EVERY_S, stream: TextIO | None = None) -> Iterator[None]:
    """Print ``... still WHAT (N s)`` every ``every`` seconds until the block ends."""
    out = stream or sys.stderr
    stop = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not stop.wait(every):
            print(f"  ... still {what} ({time.monotonic() - start:.0f} s)", file=out, flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: progress.py WHAT -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    what, command = argv[0], argv[2:]
    print(f"{what} ...", file=sys.stderr, flush=True)
    with ticking(what):
        return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
