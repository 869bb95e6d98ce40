"""``slinkyml.dev.images.training_images`` and the pre-built layers of ``images.py`` (offline: a small venv
and interpreter made here stand for the 6 GB stack; ``tests/test_kubelet_operator_live.py`` runs the real
images in the operator's pods)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import py_compile
import struct
import tarfile
from pathlib import Path

import pytest

from slinkyml.cluster import load_spec
from slinkyml.cluster.render import render
from slinkyml.dev.images.images import (
    BaseTree,
    Entry,
    ImageSpec,
    write_layer_file,
    write_oci_archive,
    write_oci_stream,
)
from slinkyml.dev.images.training_images import (
    PYTHON_HOME,
    VENV,
    VENV_PYTHON,
    Stack,
    rewrite_shebang,
    slinkyml_entries,
    source_tree,
    stack_layer,
    write_stack_layer,
)
from slinkyml.dev.kubernetes.operator_cluster import fit_spec
from slinkyml.errors import SlinkyError


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    data = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}").read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_a_pre_built_layer_sits_between_the_base_and_the_images_own_files(tmp_path: Path) -> None:
    """A Layer file goes into the archive as it is, by the digest recorded when it was written, between
    the base tree and the image's own entries; the stream writer makes the same bytes as the archive."""
    layer = write_layer_file(lambda fh: fh.write(b"x" * 1024), tmp_path / "cache" / "big.tar")
    assert layer.digest == "sha256:" + hashlib.sha256(b"x" * 1024).hexdigest() and layer.size == 1024
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text("sid\n")
    spec = ImageSpec("slinkyml.local/w:1", (Entry("own", data=b"mine"),), base=BaseTree(root), layers=(layer,))
    digest = write_oci_archive(spec, tmp_path / "image.tar")[spec.name]
    with tarfile.open(tmp_path / "image.tar") as tar:
        manifest = json.loads(_blob(tar, digest))
        digests = [x["digest"] for x in manifest["layers"]]
        assert len(digests) == 3 and digests[1] == layer.digest
        assert _blob(tar, layer.digest) == layer.path.read_bytes()
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
        with tarfile.open(fileobj=io.BytesIO(_blob(tar, digests[2]))) as own:
            assert own.getnames() == ["own"]
    assert config["rootfs"]["diff_ids"] == digests
    stream = io.BytesIO()
    assert write_oci_stream(spec, stream, tmp_path) == {spec.name: digest}
    assert stream.getvalue() == (tmp_path / "image.tar").read_bytes()


def test_shebangs_of_the_venv_are_rewritten_and_others_kept() -> None:
    assert rewrite_shebang(b"#!/v/bin/python\nimport x\n", "/v") == f"#!{VENV_PYTHON}\nimport x\n".encode()
    assert rewrite_shebang(b"#!/v/bin/python3.11 -u\nx\n", "/v") == f"#!{VENV_PYTHON}\nx\n".encode()
    for kept in (b"#!/bin/sh\necho\n", b"\x7fELF\x02", b"#!/other/bin/python\n"):
        assert rewrite_shebang(kept, "/v") == kept


def _pyc(source: Path) -> Path:
    cfile = source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"
    py_compile.compile(str(source), cfile=str(cfile), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return cfile


def _fake_stack(tmp_path: Path) -> Stack:
    """An interpreter (base prefix) and a venv made from it, with what the layer must keep, move or leave out."""
    base, venv = tmp_path / "pyenv" / "3.11.7", tmp_path / "venv"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.11").write_bytes(b"\x7fELF interpreter")
    (base / "bin" / "python3.11").chmod(0o755)
    (base / "bin" / "python3").symlink_to("python3.11")
    (base / "lib").mkdir()
    (base / "lib" / "libpython3.11.so.1.0").write_bytes(b"\x7fELF lib")
    std = base / "lib" / "python3.11"
    (std / "test").mkdir(parents=True)
    (std / "test" / "test_os.py").write_text("pass\n")
    (std / "site-packages" / "awscli").mkdir(parents=True)
    (std / "os.py").write_text("sep = '/'\n")
    _pyc(std / "os.py")
    (std / "stale.py").write_text("a = 1\n")
    _pyc(std / "stale.py")
    (std / "stale.py").write_text("a = 22\n")  # changed after it was compiled
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\n")
    (venv / "bin" / "python3").symlink_to(base / "bin" / "python3")
    (venv / "bin" / "python").symlink_to("python3")
    for script in ("torchrun", "slinkyml"):
        (venv / "bin" / script).write_text(f"#!{venv}/bin/python\nimport sys\n")
        (venv / "bin" / script).chmod(0o755)
    (venv / "bin" / "activate").write_text(f'VIRTUAL_ENV="{venv}"\n')
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("__version__ = '2.13.0'\n")
    for dist in ("torch-2.13.0.dist-info", "slinkyml-0.1.0.dist-info"):
        (site / dist).mkdir()
        (site / dist / "METADATA").write_text(f"Name: {dist.split('-')[0]}\n")
    (site / "__editable__.slinkyml-0.1.0.pth").write_text("import __editable___slinkyml_0_1_0_finder\n")
    (site / "__editable___slinkyml_0_1_0_finder.py").write_text("MAPPING = {}\n")
    _pyc(site / "__editable___slinkyml_0_1_0_finder.py")
    (venv / "lib64").symlink_to("lib")
    return Stack(venv, base, "3.11.7")


def test_the_stack_layer_moves_the_venv_and_its_interpreter_to_opt(tmp_path: Path) -> None:
    """The venv at /opt/slinkyml/venv naming the interpreter at /opt/slinkyml/python, a link at the
    interpreter's old path, shebangs and links moved, compiled files valid for mtime 0 (stale ones
    dropped), the test suite, the interpreter's own site-packages and slinkyml's editable install left out;
    every owner and mtime 0; the same bytes twice."""
    stack = _fake_stack(tmp_path)
    first, second = io.BytesIO(), io.BytesIO()
    write_stack_layer(stack, first)
    write_stack_layer(stack, second)
    assert first.getvalue() == second.getvalue()
    with tarfile.open(fileobj=io.BytesIO(first.getvalue())) as tar:
        members = {m.name: m for m in tar.getmembers()}

        def read(name: str) -> bytes:
            return tar.extractfile(name).read()

        py, venv, site = PYTHON_HOME.lstrip("/"), VENV.lstrip("/"), f"{VENV.lstrip('/')}/lib/python3.11/site-packages"
        assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 and not m.uname for m in members.values())
        assert read(f"{venv}/bin/torchrun") == f"#!{VENV_PYTHON}\nimport sys\n".encode()
        assert read(f"{venv}/bin/activate") == f'VIRTUAL_ENV="{VENV}"\n'.encode()
        assert members[f"{venv}/bin/python3"].linkname == f"{PYTHON_HOME}/bin/python3"
        assert members[f"{venv}/bin/python"].linkname == "python3" and members[f"{venv}/lib64"].linkname == "lib"
        assert read(f"{venv}/pyvenv.cfg").decode().startswith(f"home = {PYTHON_HOME}/bin\n")
        assert members[str(stack.base).lstrip("/")].linkname == PYTHON_HOME
        assert members["usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"].linkname == \
            f"{PYTHON_HOME}/lib/libpython3.11.so.1.0"
        pyc = read(f"{py}/lib/python3.11/__pycache__/os.cpython-311.pyc")
        flags, mtime, size = struct.unpack_from("<III", pyc, 4)
        assert (flags, mtime, size) == (0, 0, len("sep = '/'\n"))
        assert f"{py}/lib/python3.11/__pycache__/stale.cpython-311.pyc" not in members
        assert f"{py}/lib/python3.11/stale.py" in members and f"{py}/lib/python3.11/site-packages" in members
        assert not [n for n in members if "/test/" in n or n.endswith("/test") or "awscli" in n]
        assert f"{site}/torch/__init__.py" in members and f"{site}/torch-2.13.0.dist-info/METADATA" in members
        assert not [n for n in members if "slinkyml" in n.removeprefix("opt/slinkyml")], "slinkyml's own install"


def test_the_stack_layer_is_cached_by_its_key(tmp_path: Path) -> None:
    """Written once per key (Python version, base prefix, third-party dist-infos): a second call reads the
    recorded digest; slinkyml's own dist-info does not count, a new package does."""
    stack = _fake_stack(tmp_path)
    cache = tmp_path / "cache"
    layer = stack_layer(stack, cache)
    written = os.stat(layer.path).st_mtime_ns
    assert stack_layer(stack, cache) == layer and os.stat(layer.path).st_mtime_ns == written
    assert layer.digest == "sha256:" + hashlib.sha256(layer.path.read_bytes()).hexdigest()
    key = stack.key()
    (stack.site_packages / "slinkyml-0.2.0.dist-info").mkdir()
    assert stack.key() == key
    (stack.site_packages / "deepspeed-0.19.8.dist-info").mkdir()
    assert stack.key() != key


def test_slinkyml_is_installed_from_the_source_tree_with_its_entry_points() -> None:
    """The package's files, a dist-info naming its console scripts, and a ``slinkyml`` script run by the
    image's venv."""
    entries = {e.path: e for e in slinkyml_entries(source_tree(), "3.11")}
    site = f"{VENV.lstrip('/')}/lib/python3.11/site-packages"
    assert f"{site}/slinkyml/__init__.py" in entries and f"{site}/slinkyml/cli/__init__.py" in entries
    assert not [p for p in entries if "__pycache__" in p]
    points = entries[f"{site}/slinkyml-0.1.0.dist-info/entry_points.txt"].data
    assert points is not None and "slinkyml = slinkyml.cli:main" in points.decode()
    script = entries[f"{VENV.lstrip('/')}/bin/slinkyml"]
    assert script.data is not None and script.data.startswith(f"#!{VENV_PYTHON}\n".encode()) and script.mode == 0o755


def test_fit_spec_names_the_images_through_the_specs_image_fields() -> None:
    """The local cluster names its worker and login images as a user would: the spec's ``node_sets[].image``
    and ``login.image``, which the rendered NodeSet and LoginSet (what the operator makes pods from) carry."""
    images = {"worker": "slinkyml.local/slinkyml/worker:26.05-abc", "login": "slinkyml.local/slinkyml/login:26.05-abc"}
    cluster = fit_spec(load_spec(Path(__file__).resolve().parents[1] / "manifests" / "cpu-small" / "cluster.yaml"),
                       images)
    objects = {o["kind"]: o for o in render(cluster).objects if o["kind"] in ("NodeSet", "LoginSet")}
    assert objects["NodeSet"]["spec"]["slurmd"]["image"] == images["worker"]
    assert objects["LoginSet"]["spec"]["login"]["image"] == images["login"]
    assert cluster.controller.cpu == "1" and fit_spec(cluster).node_sets[0].image == images["worker"]


def test_a_venv_of_the_systems_python_is_refused_in_one_line(tmp_path: Path) -> None:
    """Its interpreter's old path would become a link over the image's own /usr."""
    stack = Stack(tmp_path, Path("/usr"), "3.11.7")
    with pytest.raises(SlinkyError, match=r"made from the system's Python \(/usr\)") as err:
        write_stack_layer(stack, io.BytesIO())
    assert "\n" not in str(err.value)
