"""The worker and login images with the training stack, built here on top of the Slurm images of
``slurm_images.py``, as ``containers/worker`` and ``containers/login`` build them for EKS.

Those Dockerfiles make a venv at ``/opt/slinkyml`` with torch, DeepSpeed and slinkyml from PyPI. No index
is reachable here, so the stack is the one this process runs from, moved to fixed paths in the image:

* the interpreter the venv was made from (``sys.base_prefix``, a pyenv CPython whose programs find
  libpython by an absolute RUNPATH) at ``/opt/slinkyml/python``, with a symbolic link at its old absolute
  path (the trick ``slurm_images`` uses for relinked Slurm programs) and ``libpython`` linked into the
  system library folder for users who may not enter ``/root``; its test suite and its own site-packages
  (which a venv does not see) left out;
* a venv at ``/opt/slinkyml/venv``: ``pyvenv.cfg`` naming that interpreter, the venv's third-party
  site-packages as installed from PyPI (never slinkyml's editable install), its console scripts with their
  shebang rewritten to ``/opt/slinkyml/venv/bin/python``;
* then slinkyml itself from the source tree, installed as a regular package (dist-info, entry points), in
  each image's own small layer.

The stack layer (about 6 GB) is written once per machine, cached by a key (Python version, base prefix,
the sorted dist-info names of site-packages) under ``/var/lib/slinkyml/images/`` under a lock, and every
entry fixed (owners 0, mtime 0, sorted), so its digest is stable. Compiled ``.pyc`` files record their
source's mtime; a valid one is kept with that field set to 0 to match the layer's mtime (a stale one is
dropped), so imports in the pods read them instead of compiling torch again in every container.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import json
import os
import platform
import stat
import struct
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import slinkyml
from slinkyml.dev.images import slurm_images
from slinkyml.dev.images.images import Entry, ImageSpec, Layer, write_layer_file
from slinkyml.errors import SlinkyError
from slinkyml.process import exclusive_lock

CACHE_DIR = Path("/var/lib/slinkyml/images")
PREFIX = "/opt/slinkyml"
PYTHON_HOME = f"{PREFIX}/python"
VENV = f"{PREFIX}/venv"
VENV_PYTHON = f"{VENV}/bin/python"
#: changes whenever the layer's layout changes, so an old cached layer is not taken for a new one
LAYOUT = 1
REPOSITORY = f"{slurm_images.REGISTRY}/slinkyml"
#: the Slurm image each of ours is made from (containers/worker: slurmd; containers/login: login)
ROLES = {"worker": "slurmd", "login": "login"}
ENV = (f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"VIRTUAL_ENV={VENV}")
#: the system folder the dynamic loader searches last, without ld.so.cache (Debian's multiarch)
SYSTEM_LIB = "usr/lib/x86_64-linux-gnu"
#: interpreters' prefixes that are the image's own system folders, never replaced by a link
SYSTEM_PREFIXES = ("/", "/usr", "/usr/local", "/opt", PREFIX)
#: a pyc's header: magic, flags, then (flags 0: mtime-checked) the source's mtime and size
PYC_HEADER = struct.Struct("<4sIII")


@dataclass(frozen=True)
class Stack:
    """A venv and the interpreter it was made from: what the stack layer copies."""

    venv: Path
    base: Path
    version: str  # e.g. 3.11.7
    own: tuple[str, ...] = ("slinkyml",)  # distributions the layer leaves out (the image adds them itself)

    @classmethod
    def running(cls) -> Stack:
        """This process's venv."""
        if sys.prefix == sys.base_prefix:
            raise SlinkyError(f"{sys.executable}: not run from a venv (the images copy the venv's site-packages)")
        return cls(Path(sys.prefix), Path(sys.base_prefix), platform.python_version())

    @property
    def short(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def site_packages(self) -> Path:
        return self.venv / "lib" / f"python{self.short}" / "site-packages"

    def is_own(self, name: str) -> bool:
        """Whether a site-packages or bin entry belongs to a left-out distribution (its package, dist-info,
        editable .pth and finder, console scripts)."""
        stem = name.lower().removeprefix("__editable__").lstrip("._")
        return any(stem == own or stem.startswith((f"{own}-", f"{own}_", f"{own}.")) for own in self.own)

    def dist_infos(self) -> list[str]:
        return sorted(p.name for p in self.site_packages.glob("*.dist-info") if not self.is_own(p.name))

    def key(self) -> str:
        data = json.dumps([LAYOUT, self.version, str(self.base), self.dist_infos()])
        return hashlib.sha256(data.encode()).hexdigest()[:16]


def _walk(root: Path, prune: Callable[[Path], bool] = lambda _: False) -> Iterator[Path]:
    """Every path under ``root`` (itself first), each folder's entries in name order, parents first; a path
    ``prune`` names left out with all under it."""
    yield root
    if root.is_dir() and not root.is_symlink():
        for child in sorted(root.iterdir(), key=lambda p: p.name):
            if not prune(child):
                yield from _walk(child, prune)


def _pyc(path: Path, data: bytes) -> bytes | None:
    """A compiled file made valid for a source of mtime 0 (what the layer gives every file) if it matches
    its source now; None for a stale one (the interpreter would recompile it anyway)."""
    if len(data) < PYC_HEADER.size:
        return None
    magic, flags, mtime, size = PYC_HEADER.unpack_from(data)
    if flags != 0:  # hash-based: independent of mtimes
        return data
    source = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
    try:
        st = source.stat()
    except OSError:
        return data  # no source beside it: the interpreter never checks it against one
    if (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) != (mtime, size):
        return None
    return PYC_HEADER.pack(magic, flags, 0, size) + data[PYC_HEADER.size:]


def rewrite_shebang(data: bytes, old_prefix: str) -> bytes:
    """A script of the venv's bin/ started by ``/opt/slinkyml/venv/bin/python`` instead of the host's."""
    first, nl, rest = data.partition(b"\n")
    if first.startswith(b"#!") and first[2:].strip().startswith(f"{old_prefix}/bin/python".encode()):
        return b"#!" + VENV_PYTHON.encode() + nl + rest
    return data


class _LayerWriter:
    """The stack layer's tar: every owner 0, every mtime 0, names sorted, hard links kept."""

    def __init__(self, tar: tarfile.TarFile, stack: Stack):
        self.tar, self.stack = tar, stack
        self.dirs: set[str] = set()

    def dir(self, name: str, mode: int = 0o755) -> None:
        if name not in self.dirs:
            self.dirs.add(name)
            self.tar.addfile(_info(name, tarfile.DIRTYPE, mode))

    def link(self, name: str, target: str) -> None:
        self.tar.addfile(_info(name, tarfile.SYMTYPE, 0o777, link=target))

    def data(self, name: str, data: bytes, mode: int) -> None:
        self.tar.addfile(_info(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))

    def path(self, path: Path, name: str, content: bytes | None = None) -> None:
        """``path`` as ``name``: a folder, a link (an absolute one into the venv or interpreter moved with
        them), a file (``content`` instead of its own if given; a .pyc made valid or dropped)."""
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            self.dir(name, mode)
        elif stat.S_ISLNK(st.st_mode):
            self.link(name, self.moved(os.readlink(path)))
        elif stat.S_ISREG(st.st_mode):
            if content is None and path.suffix == ".pyc" and path.parent.name == "__pycache__":
                content = _pyc(path, path.read_bytes())
                if content is None:
                    return
            if content is not None:
                self.data(name, content, mode)
                return
            info = self.tar.gettarinfo(str(path), name)  # a second name of an inode added before: a hard link
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(path, "rb") as fh:
                    self.tar.addfile(info, fh)
            else:
                self.tar.addfile(info)

    def moved(self, target: str) -> str:
        for old, new in ((str(self.stack.venv), VENV), (str(self.stack.base), PYTHON_HOME)):
            if target == old or target.startswith(old + "/"):
                return new + target[len(old):]
        return target

    def tree(self, root: Path, dest: str, prune: Callable[[Path], bool] = lambda _: False) -> None:
        for path in _walk(root, prune):
            rel = path.relative_to(root).as_posix()
            self.path(path, dest if rel == "." else f"{dest}/{rel}")


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = info.mtime = 0
    info.uname = info.gname = ""
    return info


def write_stack_layer(stack: Stack, out: Any) -> None:
    """The stack layer (module docstring) as a tar written to ``out``."""
    short = stack.short
    site = f"lib/python{short}/site-packages"
    if str(stack.base) in SYSTEM_PREFIXES:  # its old path cannot become a link: it holds the image's system
        raise SlinkyError(f"{stack.venv}: made from the system's Python ({stack.base}); the images move a venv "
                          "made from a self-contained interpreter (pyenv, a python.org build) to /opt/slinkyml")
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        w = _LayerWriter(tar, stack)
        w.dir("opt")
        w.dir(PREFIX.lstrip("/"))
        # the interpreter: no test suite, no site-packages of its own (the venv does not see them)
        test, base_site = stack.base / f"lib/python{short}/test", stack.base / site
        w.tree(stack.base, PYTHON_HOME.lstrip("/"), prune=lambda p: p == test or p.parent == base_site)
        venv = VENV.lstrip("/")
        w.dir(venv)
        bin_dir = stack.venv / "bin"
        w.dir(f"{venv}/bin")
        for path in sorted(bin_dir.iterdir(), key=lambda p: p.name):
            name = f"{venv}/bin/{path.name}"
            if stack.is_own(path.name):
                continue
            if path.is_symlink() or not path.is_file():
                w.path(path, name)
                continue
            data = path.read_bytes()
            if path.name.startswith("activate"):  # they name the venv's folder in their text
                data = data.replace(str(stack.venv).encode(), VENV.encode())
            w.path(path, name, rewrite_shebang(data, str(stack.venv)))
        own_site, own_cache = stack.site_packages, stack.site_packages / "__pycache__"

        def left_out(p: Path) -> bool:  # slinkyml's own: its dist-info, editable .pth and finder (and its .pyc)
            return p.parent in (own_site, own_cache) and stack.is_own(p.name)

        for child in sorted(stack.venv.iterdir(), key=lambda p: p.name):
            if child.name not in ("bin", "pyvenv.cfg"):
                w.tree(child, f"{venv}/{child.name}", prune=left_out)
        cfg = (f"home = {PYTHON_HOME}/bin\ninclude-system-site-packages = false\nversion = {stack.version}\n"
               f"executable = {PYTHON_HOME}/bin/python{short}\n")
        w.data(f"{venv}/pyvenv.cfg", cfg.encode(), 0o644)
        # the interpreter's programs find libpython by RUNPATH at their old absolute path
        parents = PurePosixPath(str(stack.base).lstrip("/")).parents
        for parent in reversed(parents):
            if str(parent) != ".":
                w.dir(str(parent), 0o700 if str(parent) == "root" else 0o755)  # /root as Debian has it
        w.link(str(stack.base).lstrip("/"), PYTHON_HOME)
        # ... which a user other than root cannot enter: the loader's last resort, the system folder
        libpython = f"libpython{short}.so.1.0"
        if (stack.base / "lib" / libpython).exists():
            for part in ("usr", "usr/lib", SYSTEM_LIB):
                w.dir(part)
            w.link(f"{SYSTEM_LIB}/{libpython}", f"{PYTHON_HOME}/lib/{libpython}")


def stack_layer(stack: Stack | None = None, cache_dir: Path = CACHE_DIR,
                log: Callable[[str], None] = lambda _: None) -> Layer:
    """The stack layer of ``stack`` (default: this process's venv), written once per key into ``cache_dir``."""
    stack = stack or Stack.running()
    key = stack.key()
    out = cache_dir / f"stack-{key}.tar"
    meta = out.with_suffix(".json")

    def cached() -> Layer | None:
        try:
            found = json.loads(meta.read_text())
            return Layer(out, found["digest"], found["size"]) if out.stat().st_size == found["size"] else None
        except (OSError, ValueError, KeyError):
            return None

    if layer := cached():
        return layer
    cache_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir / f".stack-{key}.lock"):
        if layer := cached():
            return layer
        log(f"writing the training-stack layer of {stack.venv} (Python {stack.version}) to {out}")
        layer = write_layer_file(lambda fh: write_stack_layer(stack, fh), out)
        meta.write_text(json.dumps({"digest": layer.digest, "size": layer.size, "venv": str(stack.venv),
                                    "base_prefix": str(stack.base)}) + "\n")
        return layer


def source_tree() -> Path:
    """The source tree slinkyml is imported from (a checkout: setup.cfg beside the package)."""
    tree = Path(slinkyml.__file__).resolve().parents[1]
    if not (tree / "setup.cfg").is_file():
        raise SlinkyError(f"{tree}: no setup.cfg; the images install slinkyml from a source checkout")
    return tree


def slinkyml_entries(tree: Path, short: str) -> list[Entry]:
    """slinkyml as ``pip install`` of the source tree leaves it in the venv: the package (no compiled
    files), its dist-info with the entry points, a console script per entry point."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(tree / "setup.cfg")
    name, version = cfg["metadata"]["name"], cfg["metadata"]["version"]
    site = f"{VENV}/lib/python{short}/site-packages".lstrip("/")
    entries = []
    for path in _walk(tree / name):
        rel = path.relative_to(tree).as_posix()
        if "__pycache__" in path.parts or path.suffix == ".pyc" or path.is_dir():
            continue
        entries.append(Entry(f"{site}/{rel}", source=path, mode=0o644))
    scripts = [line.split("=", 1) for line in cfg.get("options.entry_points", "console_scripts",
                                                       fallback="").splitlines() if "=" in line]
    dist = f"{site}/{name}-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                f"Summary: {cfg['metadata'].get('description', '')}\n"
                f"Requires-Python: {cfg['options'].get('python_requires', '')}\n")
    points = "[console_scripts]\n" + "".join(f"{k.strip()} = {v.strip()}\n" for k, v in scripts)
    entries += [Entry(f"{dist}/METADATA", data=metadata.encode(), mode=0o644),
                Entry(f"{dist}/entry_points.txt", data=points.encode(), mode=0o644),
                Entry(f"{dist}/top_level.txt", data=f"{name}\n".encode(), mode=0o644),
                Entry(f"{dist}/INSTALLER", data=b"slinkyml-images\n", mode=0o644)]
    for script, target in scripts:
        module, _, func = target.strip().partition(":")
        text = (f"#!{VENV_PYTHON}\nimport sys\nfrom {module} import {func}\n"
                f"if __name__ == \"__main__\":\n    sys.exit({func}())\n")
        entries.append(Entry(f"{VENV}/bin/{script.strip()}".lstrip("/"), data=text.encode(), mode=0o755))
    return entries


def image_specs(release: str, slurm_digests: dict[str, str], stack: Stack | None = None,
                cache_dir: Path = CACHE_DIR, log: Callable[[str], None] = lambda _: None) -> dict[str, ImageSpec]:
    """The worker and login images of ``release`` (role -> spec): the slurmd and login images of
    ``slurm_images`` (whose digests, as imported, are ``slurm_digests``), the stack layer, slinkyml. Each
    tag says what it is made of, so a node that holds the name holds the image."""
    stack = stack or Stack.running()
    layer = stack_layer(stack, cache_dir, log)
    root, relinked_at = slurm_images.image_root(release)
    bases = {s.name: s for s in slurm_images.image_specs(root, release, relinked_at)}
    own = slinkyml_entries(source_tree(), stack.short)
    content = hashlib.sha256(layer.digest.encode())
    for e in own:
        content.update(e.path.encode() + b"\0" + (e.data if e.data is not None else
                                                 e.source.read_bytes() if e.source else b""))
    specs = {}
    for role, component in ROLES.items():
        base = bases[slurm_images.image_name(component, release)]
        digest = slurm_digests[base.name]
        tag = hashlib.sha256(content.hexdigest().encode() + digest.encode()).hexdigest()[:12]
        specs[role] = replace(
            base, name=f"{REPOSITORY}/{role}:{release}-{tag}", layers=(layer,), entries=(*base.entries, *own),
            env=(*ENV, f"SLURM_VERSION={release}"),
            labels={**base.labels, "org.opencontainers.image.title": f"slinkyml-{role}",
                    "slinkyml.io/stack-key": stack.key()})
    return specs
