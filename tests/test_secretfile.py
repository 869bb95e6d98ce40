"""Secret files are created atomically with mode 0600, never onto an existing file or through a
symlink unless --force (which replaces the name, not what a link points to), and their mode is checked
after writing: ``slinkyml.secretfile`` and ``cluster render --secrets-out``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slinkyml.secretfile import SecretFileError, check_secret_mode, write_secret

REPO = Path(__file__).resolve().parents[1]
SPEC = str(REPO / "manifests" / "cpu-small" / "cluster.yaml")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_new_file_is_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        path = write_secret(tmp_path / "key", b"secret")
    finally:
        os.umask(old)
    assert (path.read_bytes(), _mode(path)) == (b"secret", 0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]  # no temp file left behind


def test_existing_0644_file_is_refused_then_replaced_with_force(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text("mine\n")
    os.chmod(path, 0o644)
    with pytest.raises(SecretFileError, match=r"already exists \(a file\).*give --force"):
        write_secret(path, b"secret")
    assert (path.read_text(), _mode(path)) == ("mine\n", 0o644)  # untouched
    write_secret(path, b"secret", force=True)
    assert (path.read_bytes(), _mode(path)) == (b"secret", 0o600)  # a new inode: never 0644 with secrets
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secrets.yaml"]


def test_a_symlink_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("public\n")
    os.chmod(victim, 0o644)
    link = tmp_path / "secrets.yaml"
    link.symlink_to(victim)
    with pytest.raises(SecretFileError, match=r"already exists \(a symlink\)"):
        write_secret(link, b"secret")
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SecretFileError, match="a symlink"):
        write_secret(dangling, b"secret")
    assert not (tmp_path / "nowhere").exists()
    write_secret(link, b"secret", force=True)  # replaces the link itself
    assert not link.is_symlink() and _mode(link) == 0o600 and link.read_bytes() == b"secret"
    assert (victim.read_text(), _mode(victim)) == ("public\n", 0o644)


def test_unwritable_places_are_one_line(tmp_path):
    for path, needle in [(tmp_path / "missing" / "key", "No such file or directory"),
                         (Path("/proc/x"), "cannot write secrets")]:
        with pytest.raises(SecretFileError, match=needle) as caught:
            write_secret(path, b"secret")
        assert len(caught.value.lines()) == 1
    (tmp_path / "dir").mkdir()
    with pytest.raises(SecretFileError, match="a folder"):
        write_secret(tmp_path / "dir", b"secret")
    with pytest.raises(SecretFileError, match="is a folder"):
        write_secret(tmp_path / "dir", b"secret", force=True)


def test_mode_is_checked_after_writing(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(b"secret")
    os.chmod(path, 0o640)  # as a filesystem that ignores fchmod would leave it
    with pytest.raises(SecretFileError, match="mode after writing is 640, not 600"):
        check_secret_mode(path)
    assert not path.exists()  # not left readable


def test_cli_secrets_out(cli, tmp_path):
    target = tmp_path / "secrets.yaml"
    target.write_text("")
    os.chmod(target, 0o644)
    code, out, err = cli("cluster", "render", SPEC, "--secrets-out", str(target))
    assert (code, out) == (2, "") and err == (f"slinkyml: error: {target}: already exists (a file); refusing to "
                                              "overwrite it with secrets (give --force to replace it)\n")
    assert target.read_text() == "" and _mode(target) == 0o644
    code, out, err = cli("cluster", "render", SPEC, "--secrets-out", str(target), "--force")
    assert code == 0 and "(mode 0600, checked)" in err and _mode(target) == 0o600
    assert "slurm.key" in target.read_text()
