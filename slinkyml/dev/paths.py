"""Where the local dev cluster keeps its state (one directory, nothing elsewhere but /etc/hosts)."""

from __future__ import annotations

import os
from pathlib import Path

#: root's default state dir: the machine's shared cluster.
SHARED_STATE_DIR = Path("/var/lib/slinkyml/dev")


def default_state_dir() -> Path:
    """``$SLINKYML_STATE_DIR``; for root ``/var/lib/slinkyml/dev``; else ``~/.local/state/slinkyml/dev``.

    Root's home is private (mode 700), yet the cluster's other Unix users must reach the munge
    socket and slurm.conf, so root's default lives outside it.
    """
    env = os.environ.get("SLINKYML_STATE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return SHARED_STATE_DIR
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "slinkyml" / "dev"
