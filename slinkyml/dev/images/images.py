"""Container images built on this machine, written as OCI image layout archives for ``ctr images import``.

No registry is reachable, so every image the local kubelet runs (the pod sandbox's pause program, test
images) is built here. Own code rather than ``umoci``/``buildah``: an image here is one layer of files we
name, and writing the OCI layout (``oci-layout``, ``index.json``, content-addressed blobs) is a few dozen
lines of ``tarfile`` and ``hashlib``, with no package to install, no rootfs copy to unpack and repack,
and byte-identical output for identical input (every entry's owner, mtime and order fixed), so an image's
digest is a cache key. Layers are uncompressed tar (``application/vnd.oci.image.layer.v1.tar``): they
only travel to the local containerd, where gzip would cost CPU on both sides and save nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
#: the annotation containerd's importer names an image by (the ref name alone would be just the tag)
CONTAINERD_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Entry:
    """One thing in the image's file system: a file copied from ``source`` (or holding ``data``), a
    symbolic link to ``link``, or a directory (neither)."""

    path: str
    source: Path | None = None
    data: bytes | None = None
    link: str | None = None
    mode: int = 0o755

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.source, self.data, self.link)) > 1:
            raise ValueError(f"{self.path}: at most one of source, data, link")
        if PurePosixPath(self.path).is_absolute() or ".." in PurePosixPath(self.path).parts:
            raise ValueError(f"{self.path}: must be relative to the image root, without '..'")


@dataclass(frozen=True)
class BaseTree:
    """A whole directory tree as an image's first layer (a Debian root): owners kept by number except
    those ``ids`` maps (old uid/gid -> new), the contents of ``dev``, ``proc`` and ``sys`` left out (the
    runtime mounts its own)."""

    root: Path
    ids: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Layer:
    """A layer tar already written (``write_layer_file``): added to an archive as is, by the digest and
    size recorded when it was written, so a 6 GB layer is read once per archive and never hashed again."""

    path: Path
    digest: str
    size: int


@dataclass(frozen=True)
class ImageSpec:
    """An image: its name (``registry/repository:tag``), an optional base tree (its own layer, shared by
    every image of one archive that names it), pre-built ``layers`` on that, files on top and run-time
    defaults."""

    name: str
    entries: tuple[Entry, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)
    base: BaseTree | None = None
    user: str = ""
    layers: tuple[Layer, ...] = ()

    def __post_init__(self) -> None:
        repository, sep, tag = self.name.rpartition(":")
        if not sep or not repository or "/" in tag or not tag:
            raise ValueError(f"image name {self.name!r}: expected REPOSITORY:TAG")

    @property
    def tag(self) -> str:
        return self.name.rpartition(":")[2]


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def _parents(entries: Iterable[Entry]) -> list[str]:
    """Every directory the entries need, parents first (a tar without them unpacks with mode 0755
    directories anyway, but containerd's differ wants them present to be exact)."""
    dirs = {str(p) for e in entries for p in PurePosixPath(e.path).parents if str(p) != "."}
    return sorted(dirs, key=lambda d: (d.count("/"), d))


def write_layer(entries: Iterable[Entry], out: Any) -> None:
    """The layer tar: directories first, then entries in the order given, every owner and mtime fixed."""
    entries = list(entries)
    explicit_dirs = {e.path for e in entries if e.source is None and e.data is None and e.link is None}
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in _parents(entries):
            if d not in explicit_dirs:
                tar.addfile(_tarinfo(d, tarfile.DIRTYPE, 0o755))
        for e in entries:
            if e.link is not None:
                tar.addfile(_tarinfo(e.path, tarfile.SYMTYPE, 0o777, link=e.link))
            elif e.source is not None:
                size = e.source.stat().st_size
                with open(e.source, "rb") as fh:
                    tar.addfile(_tarinfo(e.path, tarfile.REGTYPE, e.mode, size), fh)
            elif e.data is not None:
                tar.addfile(_tarinfo(e.path, tarfile.REGTYPE, e.mode, len(e.data)), io.BytesIO(e.data))
            else:
                tar.addfile(_tarinfo(e.path, tarfile.DIRTYPE, e.mode))


SKIPPED_CONTENTS = ("dev", "proc", "sys")


def write_tree_layer(base: BaseTree, out: Any) -> None:
    """The base tree as a layer: top-level entries in name order, each walked by ``tarfile`` (which sorts
    directory listings), hard links kept, every owner name dropped and the mapped ids changed."""
    ids = dict(base.ids)

    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = info.name.split("/")
        if len(parts) > 1 and parts[0] in SKIPPED_CONTENTS:
            return None
        info.uid, info.gid = ids.get(info.uid, info.uid), ids.get(info.gid, info.gid)
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(base.root.iterdir()):
            tar.add(child, arcname=child.name, recursive=True, filter=normalize)


class _HashingWriter:
    """A file object that writes through to ``fh`` while hashing and counting, so a layer is read once
    (tarfile needs only ``write`` and ``tell``)."""

    def __init__(self, fh: Any):
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.fh.write(data)
        self.sha.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size


def _descriptor(media_type: str, digest: str, size: int, **annotations: str) -> dict[str, Any]:
    desc: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        desc["annotations"] = annotations
    return desc


def _json_blob(obj: dict[str, Any]) -> tuple[bytes, str]:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(tmp: Path, write: Any) -> tuple[Path, str, int]:
    """Write one layer through ``write(fileobj)`` into ``tmp``; its file, digest and size."""
    fd, name = tempfile.mkstemp(dir=tmp, suffix=".tar")
    with os.fdopen(fd, "wb") as fh:
        hashing = _HashingWriter(fh)
        write(hashing)
    return Path(name), "sha256:" + hashing.sha.hexdigest(), hashing.size


def write_layer_file(write: Any, out: Path) -> Layer:
    """A layer written once through ``write(fileobj)`` to ``out`` (atomically), hashed as it is written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    file, digest, size = _layer(out.parent, write)
    os.replace(file, out)
    return Layer(out, digest, size)


def write_oci_archive(specs: ImageSpec | list[ImageSpec], out: Path, docker: bool = False) -> dict[str, str]:
    """Write the images as one OCI image layout in a tar archive at ``out`` (atomically); return each
    image's manifest digest, its identity in containerd. A base tree several images share is one blob.

    ``docker``: also ``manifest.json``, the index ``docker load`` reads (Docker's engine before 25 reads only
    that one, not ``index.json``), naming the same blobs: one archive for both importers."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".image-") as tmp_name:
        partial = Path(tmp_name) / "image.tar"
        with open(partial, "wb") as fh:
            digests = write_oci_stream(specs, fh, Path(tmp_name), docker=docker)
        os.replace(partial, out)
    return digests


def write_oci_stream(specs: ImageSpec | list[ImageSpec], out: Any, tmp: Path, docker: bool = False) -> dict[str, str]:
    """``write_oci_archive``'s tar written in one pass to the file object ``out`` (a pipe to ``ctr images
    import -`` as well as a file: no archive on disk), its layers first written to files in ``tmp``
    (except pre-built ``Layer`` files, which are copied from where they are)."""
    specs = [specs] if isinstance(specs, ImageSpec) else list(specs)
    digests: dict[str, str] = {}
    blobs: dict[str, tuple[Path | bytes, int]] = {}  # digest -> file or data, size
    bases: dict[BaseTree, tuple[str, int]] = {}
    manifests = []
    #: config digest -> (layer digests, names): the entries of Docker's manifest.json
    docker_images: dict[str, tuple[list[str], list[str]]] = {}
    for spec in specs:
        layers: list[tuple[str, int]] = []
        if spec.base is not None:
            if spec.base not in bases:
                file, digest, size = _layer(tmp, lambda fh, b=spec.base: write_tree_layer(b, fh))
                blobs[digest] = (file, size)
                bases[spec.base] = (digest, size)
            layers.append(bases[spec.base])
        for layer in spec.layers:
            blobs[layer.digest] = (layer.path, layer.size)
            layers.append((layer.digest, layer.size))
        if spec.entries or spec.base is None:
            file, digest, size = _layer(tmp, lambda fh, e=spec.entries: write_layer(e, fh))
            blobs[digest] = (file, size)
            layers.append((digest, size))
        config: dict[str, Any] = {
            "architecture": "amd64", "os": "linux",
            "config": {"Env": list(spec.env), "WorkingDir": spec.workdir, "Labels": dict(spec.labels),
                       **({"Entrypoint": list(spec.entrypoint)} if spec.entrypoint else {}),
                       **({"Cmd": list(spec.cmd)} if spec.cmd else {}),
                       **({"User": spec.user} if spec.user else {})},
            # an uncompressed layer's diff ID is its own digest
            "rootfs": {"type": "layers", "diff_ids": [d for d, _ in layers]},
        }
        config_data, config_digest = _json_blob(config)
        manifest_data, manifest_digest = _json_blob({
            "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
            "config": _descriptor(CONFIG_MEDIA_TYPE, config_digest, len(config_data)),
            "layers": [_descriptor(LAYER_MEDIA_TYPE, d, n) for d, n in layers]})
        blobs[config_digest] = (config_data, len(config_data))
        blobs[manifest_digest] = (manifest_data, len(manifest_data))
        manifests.append(_descriptor(MANIFEST_MEDIA_TYPE, manifest_digest, len(manifest_data),
                                     **{CONTAINERD_NAME_ANNOTATION: spec.name, REF_NAME_ANNOTATION: spec.tag}))
        digests[spec.name] = manifest_digest
        docker_images.setdefault(config_digest, ([d for d, _ in layers], []))[1].append(spec.name)
    index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": manifests}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes) -> None:
            tar.addfile(_tarinfo(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))

        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index, sort_keys=True).encode())
        if docker:
            add("manifest.json", json.dumps([
                {"Config": _blob_path(config), "RepoTags": names, "Layers": [_blob_path(d) for d in layers]}
                for config, (layers, names) in docker_images.items()], sort_keys=True).encode())
        tar.addfile(_tarinfo("blobs", tarfile.DIRTYPE, 0o755))
        tar.addfile(_tarinfo("blobs/sha256", tarfile.DIRTYPE, 0o755))
        for digest, (content, size) in blobs.items():
            info = _tarinfo(f"blobs/sha256/{digest.removeprefix('sha256:')}", tarfile.REGTYPE, 0o644, size)
            if isinstance(content, bytes):
                tar.addfile(info, io.BytesIO(content))
            else:
                with open(content, "rb") as blob:
                    tar.addfile(info, blob)
    return digests


def _blob_path(digest: str) -> str:
    return f"blobs/sha256/{digest.removeprefix('sha256:')}"


def busybox_entries(busybox: Path, applets: Iterable[str]) -> Iterator[Entry]:
    """A shell userland from one static busybox (Debian's busybox-static): the binary and a link per applet."""
    yield Entry("bin/busybox", source=busybox)
    for applet in applets:
        yield Entry(f"bin/{applet}", link="busybox")
