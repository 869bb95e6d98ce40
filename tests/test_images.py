"""``slinkyml.dev.images.images``: the OCI image layout archives the kubelet node imports (offline: the archive's
structure, content addresses and determinism; ``tests/test_kubelet_live.py`` imports and runs them)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from slinkyml.dev.images.images import (
    CONTAINERD_NAME_ANNOTATION,
    BaseTree,
    Entry,
    ImageSpec,
    write_oci_archive,
)


def _spec(tmp_path: Path) -> ImageSpec:
    tool = tmp_path / "tool"
    tool.write_bytes(b"\x7fELF not really\n")
    return ImageSpec("slinkyml.local/test:1", (Entry("bin/tool", source=tool), Entry("bin/sh", link="tool"),
                                               Entry("etc/motd", data=b"hi\n", mode=0o644),
                                               Entry("tmp", mode=0o1777)),
                     entrypoint=("/bin/tool",), cmd=("--help",))


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    data = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}").read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest  # content-addressed
    return data


def test_archive_is_an_oci_layout_with_verified_blobs(tmp_path: Path) -> None:
    digest = write_oci_archive(_spec(tmp_path), tmp_path / "image.tar")["slinkyml.local/test:1"]
    with tarfile.open(tmp_path / "image.tar") as tar:
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(tar.extractfile("index.json").read())
        (desc,) = index["manifests"]
        assert desc["digest"] == digest
        assert desc["annotations"][CONTAINERD_NAME_ANNOTATION] == "slinkyml.local/test:1"
        manifest = json.loads(_blob(tar, digest))
        assert desc["size"] == len(_blob(tar, digest))
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
        (layer_desc,) = manifest["layers"]
        layer = _blob(tar, layer_desc["digest"])
    assert config["config"]["Entrypoint"] == ["/bin/tool"] and config["config"]["Cmd"] == ["--help"]
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]  # uncompressed: diff ID = digest
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        members = {m.name: m for m in files.getmembers()}
        assert list(members) == ["bin", "etc", "bin/tool", "bin/sh", "etc/motd", "tmp"]  # parents first
        assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in members.values())
        assert members["bin/sh"].issym() and members["bin/sh"].linkname == "tool"
        assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
        assert files.extractfile("etc/motd").read() == b"hi\n"


def test_same_input_same_digest(tmp_path: Path) -> None:
    """Byte-identical archives for identical input: the digest decides whether to import again."""
    spec = _spec(tmp_path)
    first = write_oci_archive(spec, tmp_path / "a.tar")
    assert write_oci_archive(spec, tmp_path / "b.tar") == first
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    (tmp_path / "tool").write_bytes(b"changed")
    assert write_oci_archive(spec, tmp_path / "c.tar") != first


@pytest.mark.parametrize("bad", [dict(name="no-tag"), dict(name="x:a/b"),
                                 dict(entries=(Entry("tmp"),), name="a:1", path="/abs")])
def test_bad_specs_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        if "path" in bad:
            Entry(bad["path"])
        else:
            ImageSpec(bad["name"], ())


def test_base_tree_is_one_shared_layer_with_ids_mapped(tmp_path: Path) -> None:
    """Two images on one base tree: the tree is one blob, its owners mapped (root's SlurmUser -> 401),
    the contents of dev/ left out; each image's own files are a second layer."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "null-ish").write_text("x")
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("root\n")
    os.chown(root / "etc" / "hostname", 64030, 64030)
    base = BaseTree(root, ((64030, 401),))
    specs = [ImageSpec(f"slinkyml.local/{n}:1", (Entry("entry", data=n.encode()),), base=base) for n in ("a", "b")]
    digests = write_oci_archive(specs, tmp_path / "two.tar")
    with tarfile.open(tmp_path / "two.tar") as tar:
        layers = [json.loads(_blob(tar, d))["layers"] for d in digests.values()]
        assert layers[0][0] == layers[1][0] and layers[0][1] != layers[1][1]
        blobs = [m for m in tar.getnames() if m.startswith("blobs/sha256/")]
        assert len(blobs) == len(set(blobs)) == 2 * 3 + 1  # per image: config, manifest, own layer; one base
        with tarfile.open(fileobj=io.BytesIO(_blob(tar, layers[0][0]["digest"]))) as files:
            members = {m.name: m for m in files.getmembers()}
    assert set(members) == {"dev", "etc", "etc/hostname"}
    assert (members["etc/hostname"].uid, members["etc/hostname"].gid) == (401, 401)
