"""Building the Debian root of a Slurm release for the local cluster (``dev up --slurm-version``);
where a root is and what it holds is the product's ``slurm/roots.py``.

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
from pathlib import Path

from slinkyml.dev.slurm.progress import ticking
from slinkyml.errors import SlinkyError
from slinkyml.process import exclusive_lock
from slinkyml.slurm.roots import CLIENTS, DAEMONS, MARKER, MULTIARCH, RELEASES, SlurmInstall, find, root_ok

#: what the root needs: the daemons, JWT auth, libslurm's headers (pyslurm), patchelf for the relinking
ROOT_PACKAGES = ("slurm-wlm", "slurmrestd", "slurmdbd", "munge", "slurm-wlm-jwt-plugin", "libslurm-dev",
                 "patchelf")
BUILD_TIMEOUT_S = 1800


def install(release: str, roots_dir: Path | None = None) -> SlurmInstall:
    """The Slurm for ``release`` (``system`` or a key of :data:`RELEASES`), building its root when it
    is missing or broken."""
    found = find(release, roots_dir)
    if found.root is not None:
        ensure_root(release, found.root)
    return found


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
