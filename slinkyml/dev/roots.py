"""Which Slurm the local cluster runs: the machine's own, or another release from a Debian root.

Another release (:data:`RELEASES`) is unpacked once with ``debootstrap`` into a shared cache. It is
not chrooted (jobs must run the host's userland): its Slurm ELF files are relinked with ``patchelf``
to its own loader and libraries, and ``PluginDir`` and slurmd's ``-d`` are set explicitly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from slinkyml.dev.process import exclusive_lock
from slinkyml.dev.progress import ticking
from slinkyml.errors import SlinkyError
from slinkyml.slurm.version import SlurmVersion

#: release → the Debian suite that packages it
RELEASES: dict[str, str] = {"26.05": "sid"}
SYSTEM = "system"
ROOTS_DIR = Path("/var/lib/slinkyml/roots")
#: what the root needs: the daemons, JWT auth, libslurm's headers (pyslurm), patchelf for the relinking
ROOT_PACKAGES = ("slurm-wlm", "slurmrestd", "slurmdbd", "munge", "slurm-wlm-jwt-plugin", "libslurm-dev",
                 "patchelf")
MULTIARCH = "x86_64-linux-gnu"
#: the Slurm programs the cluster and its users run (``-wlm`` names: the plain ones are
#: /etc/alternatives links, which outside the root would lead to the machine's own Slurm)
DAEMONS = {"slurmctld": "usr/sbin/slurmctld-wlm", "slurmd": "usr/sbin/slurmd-wlm",
           "slurmstepd": "usr/sbin/slurmstepd-wlm", "slurmdbd": "usr/sbin/slurmdbd",
           "slurmrestd": "usr/sbin/slurmrestd"}
CLIENTS = ("sbatch", "srun", "salloc", "sattach", "sbcast", "scancel", "scontrol", "sinfo", "squeue",
           "sacct", "sacctmgr", "sshare", "sreport", "sdiag", "sprio", "sstat", "strigger")
MARKER = ".slinkyml-root.json"
BUILD_TIMEOUT_S = 1800


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


def install(release: str, roots_dir: Path | None = None, *, build: bool = True) -> SlurmInstall:
    """The Slurm for ``release`` (``system`` or a key of :data:`RELEASES`), building its root when
    it is missing or broken (and ``build``)."""
    if release == SYSTEM:
        return SlurmInstall()
    if release not in RELEASES:
        raise SlinkyError(f"--slurm-version: expected one of {', '.join(valid_choices())}, got {release!r}")
    root = (roots_dir or ROOTS_DIR) / f"{RELEASES[release]}-{release}"
    if build:
        ensure_root(release, root)
    return SlurmInstall(release, root)


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


def ensure_root(release: str, root: Path) -> None:
    """Build the root once (debootstrap, relink); a second ``up`` waiting on the lock finds it done."""
    if root_ok(release, root):
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root.parent / f".{root.name}.lock"):
        if root_ok(release, root):
            return
        if os.geteuid() != 0:
            raise SlinkyError(f"building the Slurm {release} root {root} needs root (debootstrap)")
        debootstrap = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
        if not debootstrap:
            raise SlinkyError("--slurm-version: debootstrap not found (Debian package debootstrap; "
                              "`apt-get install debootstrap`)")
        building = Path(tempfile.mkdtemp(prefix=f"{root.name}.build-", dir=root.parent))
        os.chmod(building, 0o755)  # it becomes the root's "/": munge's set-up refuses a private one
        try:
            print(f"building the Slurm {release} root from Debian {RELEASES[release]} (debootstrap, about 3 min "
                  "the first time)", file=sys.stderr, flush=True)
            with ticking(f"building the Slurm {release} root"):
                _run([debootstrap, "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}",
                      RELEASES[release], str(building)], f"debootstrap {RELEASES[release]}")
            shutil.rmtree(root, ignore_errors=True)
            os.rename(building, root)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        relink(root)
        (root / MARKER).write_text(json.dumps({"release": release, "suite": RELEASES[release],
                                               "packages": list(ROOT_PACKAGES)}) + "\n")
        if not root_ok(release, root):
            raise SlinkyError(f"the Slurm {release} root {root} was built but its slurmctld does not run")


def relink(root: Path) -> None:
    """Point the root's Slurm executables at its own loader and every Slurm ELF file at its libraries
    (as ``RPATH``, which wins over ``LD_LIBRARY_PATH`` and the machine's ld.so.cache).
    """
    libs = f"{root}/usr/lib/{MULTIARCH}"
    rpath = f"{libs}/slurm-wlm:{libs}"
    loader = f"{root}/usr/lib64/ld-linux-x86-64.so.2"
    executables = [DAEMONS[name] for name in DAEMONS] + [f"usr/bin/{name}" for name in CLIENTS]
    libraries = sorted(str(p.relative_to(root)) for p in (root / "usr" / "lib" / MULTIARCH / "slurm-wlm")
                       .glob("*.so"))
    for inside in executables:
        _patchelf(root, "--set-interpreter", loader, "--force-rpath", "--set-rpath", rpath, f"/{inside}")
    for inside in libraries:
        _patchelf(root, "--force-rpath", "--set-rpath", rpath, f"/{inside}")


def _patchelf(root: Path, *args: str) -> None:
    _run(["chroot", str(root), "patchelf", *args], f"patchelf {args[-1]}")


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlinkyError(f"{what}: no result after {BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise SlinkyError(f"{what} failed (exit {proc.returncode}):\n{tail}")
