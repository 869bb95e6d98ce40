"""Kept for ``dev/kube.py``, ``kubenode.py`` and ``slurm_images.py`` only, which another branch (the
``dev/`` split of issue 41, item 4) is moving: daemons by PID, ports and locks are
:mod:`slinkyml.process` now; that branch imports them from there and removes this file."""

from slinkyml.process import (
    Daemon,
    cmdline,
    exclusive_lock,
    is_alive,
    port_in_use,
    port_open,
    unix_connectable,
)

__all__ = ["Daemon", "cmdline", "exclusive_lock", "is_alive", "port_in_use", "port_open", "unix_connectable"]
