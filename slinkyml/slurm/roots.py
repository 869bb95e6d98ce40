"""Where a Slurm's programs are: the machine's own, or another release in a Debian root.

The product reads these (``sbatch check`` judges with a spec's release when its root is here); only
the local cluster's ``dev/slurm/roots.py`` builds a root (``debootstrap`` into :data:`ROOTS_DIR`, its ELF
files relinked to its own loader and libraries, so it runs unchrooted with an explicit ``PluginDir``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from slinkyml.errors import SlinkyError
from slinkyml.slurm.version import SlurmVersion

#: release → the Debian suite that packages it
RELEASES: dict[str, str] = {"26.05": "sid"}
SYSTEM = "system"
ROOTS_DIR = Path("/var/lib/slinkyml/roots")
MULTIARCH = "x86_64-linux-gnu"
#: the Slurm programs the cluster and its users run (``-wlm`` names: the plain ones are
#: /etc/alternatives links, which outside the root would lead to the machine's own Slurm)
DAEMONS = {"slurmctld": "usr/sbin/slurmctld-wlm", "slurmd": "usr/sbin/slurmd-wlm",
           "slurmstepd": "usr/sbin/slurmstepd-wlm", "slurmdbd": "usr/sbin/slurmdbd",
           "slurmrestd": "usr/sbin/slurmrestd"}
CLIENTS = ("sbatch", "srun", "salloc", "sattach", "sbcast", "scancel", "scontrol", "sinfo", "squeue",
           "sacct", "sacctmgr", "sshare", "sreport", "sdiag", "sprio", "sstat", "strigger")
MARKER = ".slinkyml-root.json"


def valid_choices() -> tuple[str, ...]:
    return (SYSTEM, *RELEASES)


@dataclass(frozen=True)
class SlurmInstall:
    """Where one Slurm's programs and plugins are: the machine's (``root`` None) or a root's."""

    release: str = SYSTEM
    root: Path | None = None

    @property
    def is_system(self) -> bool:
        return self.root is None

    def program(self, name: str) -> str:
        """Path (or, for the system Slurm, the bare name found on PATH) of a daemon or client."""
        if self.root is None:
            return name
        return str(self.root / DAEMONS[name]) if name in DAEMONS else str(self.root / "usr" / "bin" / name)

    @property
    def plugin_dir(self) -> Path | None:
        """PluginDir for the configs; None = Slurm's compiled-in default (the system Slurm)."""
        return None if self.root is None else self.root / "usr" / "lib" / MULTIARCH / "slurm-wlm"

    def version(self) -> SlurmVersion:
        """From the controller daemon (clients need a config before they print a version)."""
        binary = self.program("slurmctld") if self.root else shutil.which("slurmctld")
        if not binary:
            raise SlinkyError("slurmctld not found: install Debian packages slurm-wlm slurmdbd slurmrestd munge "
                              "mariadb-server (`make setup` does)")
        try:
            out = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=30)
        except OSError as exc:
            raise SlinkyError(f"{binary}: {exc}") from None
        return SlurmVersion.parse(out.stdout or out.stderr)

    def link_clients(self, bin_dir: Path) -> None:
        """``bin_dir`` gets one link per client command of this Slurm (``slinkyml dev env`` puts it first
        on PATH; :class:`~slinkyml.slurm.Slurm` uses it for a slurm.conf in the same state dir)."""
        assert self.root is not None
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in CLIENTS:
            link, target = bin_dir / name, self.program(name)
            if link.is_symlink() and os.readlink(link) == target:
                continue
            link.unlink(missing_ok=True)
            link.symlink_to(target)


def find(release: str, roots_dir: Path | None = None) -> SlurmInstall:
    """The Slurm for ``release`` (``system`` or a key of :data:`RELEASES`) where its root would be;
    nothing is built here (``dev/slurm/roots.install`` builds it)."""
    if release == SYSTEM:
        return SlurmInstall()
    if release not in RELEASES:
        raise SlinkyError(f"--slurm-version: expected one of {', '.join(valid_choices())}, got {release!r}")
    return SlurmInstall(release, (roots_dir or ROOTS_DIR) / f"{RELEASES[release]}-{release}")


def root_ok(release: str, root: Path) -> bool:
    """The marker says it was completed for this release and its slurmctld runs and says so."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if marker.get("release") != release:
        return False
    try:
        out = subprocess.run([str(root / DAEMONS["slurmctld"]), "-V"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and f" {release}." in out.stdout
