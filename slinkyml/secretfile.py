"""Secret files (keys, passwords, credential Secrets) written so that no one else can ever read them.

The text is written to a fresh file in the target's folder (``mkstemp``: ``O_CREAT|O_EXCL``, mode 0600,
so it is private from its first byte), fsynced, given its mode with ``fchmod`` (whatever the umask),
then put in place in one step: ``link`` (fails if the name exists: an existing file or symlink is
refused, never truncated or written through) or, with ``force``, ``rename`` (replaces the name itself —
a symlink is replaced, its target left alone). Afterwards the name is checked to be a regular file of
ours with exactly that mode; if not, it is removed and the write refused. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from slinkyml.errors import SlinkyError


class SecretFileError(SlinkyError):
    """A secret file that could not be written safely: one line naming the file (exit 2)."""


def write_secret(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, force: bool = False,
                 force_flag: str = "--force") -> Path:
    """Write ``data`` to ``path`` with ``mode`` atomically (see the module); ``force`` replaces an
    existing file, else it is refused naming ``force_flag``. Returns the path written."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise SecretFileError(f"{target}: cannot write secrets: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _place(Path(tmp), target, force=force, force_flag=force_flag)
    except OSError as exc:
        raise SecretFileError(f"{target}: cannot write secrets: {exc.strerror}") from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    check_secret_mode(target, mode)
    return target


def _place(tmp: Path, target: Path, *, force: bool, force_flag: str) -> None:
    if force:
        if os.path.isdir(target) and not os.path.islink(target):
            raise SecretFileError(f"{target}: is a folder; give a file name")
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target, follow_symlinks=False)
    except FileExistsError:
        kind = "a symlink" if os.path.islink(target) else "a folder" if os.path.isdir(target) else "a file"
        raise SecretFileError(f"{target}: already exists ({kind}); refusing to overwrite it with secrets "
                              f"(give {force_flag} to replace it)") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        _create_exclusive(tmp, target)  # a filesystem without hard links: O_EXCL|O_NOFOLLOW instead


def _create_exclusive(tmp: Path, target: Path) -> None:
    """Copy ``tmp`` to a new ``target`` opened O_CREAT|O_EXCL|O_NOFOLLOW (private from the start)."""
    mode = stat.S_IMODE(os.stat(tmp).st_mode)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise SecretFileError(f"{target}: already exists; refusing to overwrite it with secrets") from None
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        out.write(tmp.read_bytes())
        out.flush()
        os.fsync(out.fileno())


def check_secret_mode(path: str | os.PathLike[str], mode: int = 0o600) -> None:
    """Refuse (and remove) ``path`` unless it is a regular file owned by us with exactly ``mode``:
    a filesystem that ignores modes (vfat, some network mounts) must not leave secrets readable."""
    target = Path(path)
    info = os.lstat(target)
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == mode:
        return
    found = oct(stat.S_IMODE(info.st_mode))[2:] if stat.S_ISREG(info.st_mode) else "not a regular file"
    if stat.S_ISREG(info.st_mode):
        target.unlink()
    raise SecretFileError(f"{target}: mode after writing is {found}, not {oct(mode)[2:]} (does this "
                          "filesystem keep modes?); removed it")
