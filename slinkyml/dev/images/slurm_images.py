"""Slurm images for the kubelet node, built from the Debian sid root of Slurm 26.05 (``roots.py``).

No registry is reachable, so the slurmctld, slurmd, login, slurmdbd and slurmrestd images the operator's
pods name are made here: one base layer, the images' root (a copy of the root the dev 26.05 cluster
unpacks, plus sackd and sshd for the login image), shared by all of them, and a small layer per image.
The entrypoints are ours (``slinkyml/data/images/*-entrypoint.sh``), to the contract of Slinky's images:
arguments and ``$SLURMCTLD_OPTIONS``/``$SLURMD_OPTIONS``/``$SACKD_OPTIONS``/``$SSHD_OPTIONS`` are the
daemons' options, daemons run in the foreground, ``$POD_CPUS``/``$POD_MEMORY``/``$POD_TOPOLOGY`` become
slurmd ``--conf`` items; SlurmUser ``slurm`` is uid/gid 401 as the operator's pods run it.

Each of Slinky's images is also named as the rendered manifests name it
(``ghcr.io/slinkyproject/<component>:<tag>``, ``cluster/spec.py``'s tag of the release): the same
manifest under a second name, so the operator's pods run here from manifests applied unchanged (the
kubelet never pulls; on a node that holds the name, ``IfNotPresent`` takes the local image).

The root's Slurm executables are relinked to the root's own loader and libraries by absolute path on
this machine (``roots.relink``); inside the image that path is a symbolic link to ``/``, so the same
files run there unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from slinkyml import DATA_DIR as PACKAGE_DATA
from slinkyml.cluster.spec import IMAGE_REGISTRY, SLURM_IMAGE_TAGS
from slinkyml.dev.images.images import BaseTree, Entry, ImageSpec, write_oci_archive
from slinkyml.dev.slurm import roots
from slinkyml.errors import SlinkyError
from slinkyml.process import exclusive_lock

#: the SlurmUser uid/gid the operator's pods run as (slurm-operator's builder: slurmUserUid/Gid)
SLURM_UID = 401
DATA_DIR = PACKAGE_DATA / "images"
REGISTRY = "slinkyml.local"
#: image -> (entrypoint, default arguments), as Slinky's images of that name start (SlinkyProject/containers,
#: schedmd/slurm/26.05: ENTRYPOINT and CMD of each target; the operator sets only arguments, never a command)
ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
BUILD_TIMEOUT_S = 1800
COMPONENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "slurmctld": ((ENTRYPOINT,), ()),
    "slurmd": ((ENTRYPOINT,), ()),
    "login": ((ENTRYPOINT,), ()),
    "slurmdbd": (("tini", "-g", "--", "slurmdbd", "-D"), ()),
    "slurmrestd": (("tini", "-g", "--", "slurmrestd"), ("0.0.0.0:6820",)),
    # not one of Slinky's: the database slurmdbd needs (the operator's charts take mariadb-operator's)
    "mariadb": ((ENTRYPOINT,), ()),
}
#: the images Slinky publishes under these names, which the rendered manifests use
SLINKY_COMPONENTS = ("slurmctld", "slurmd", "login", "slurmdbd", "slurmrestd")


#: what the images need beyond the dev cluster's root: sackd and sshd for the login image (Slinky's login
#: image runs both); systemd-standalone-sysusers satisfies openssh-server's "systemd | ..." without systemd;
#: the shared libraries that the training stack's Python and torch (``training_images.py``) load from the
#: system (ctypes: libffi.so.8, torch: libgomp.so.1); Debian's MariaDB for the accounting database;
#: tini, which Slinky's slurmdbd and slurmrestd images start under and the operator's reconfigure sidecar runs
IMAGE_EXTRA_PACKAGES = ("sackd", "openssh-server", "systemd-standalone-sysusers", "libffi8", "libgomp1",
                        "mariadb-server", "tini")
IMAGE_ROOT_MARKER = ".slinkyml-image-root.json"
POLICY_RC_D = "#!/bin/sh\n# no service starts while packages install into an image root\nexit 101\n"


def image_root(release: str) -> tuple[Path, Path]:
    """The images' root: a copy of the dev cluster's root of ``release`` (never changed: a running 26.05
    cluster uses it) with IMAGE_EXTRA_PACKAGES installed by apt from Debian, built once beside it;
    also the original root's path, which its relinked Slurm programs name."""
    base = roots.install(release).root
    if base is None:
        raise SlinkyError(f"Slurm {release}: images are built from a Debian root (one of {', '.join(roots.RELEASES)})")
    marker = json.dumps({"from": json.loads((base / roots.MARKER).read_text()),
                         "extra": list(IMAGE_EXTRA_PACKAGES)}) + "\n"
    # named by its contents: a checkout with other packages builds its own beside, never replaces one in use
    dest = base.with_name(f"{base.name}-images-{hashlib.sha256(marker.encode()).hexdigest()[:8]}")

    def ready() -> bool:
        try:
            return (dest / IMAGE_ROOT_MARKER).read_text() == marker
        except OSError:
            return False

    if ready():
        return dest, base
    with exclusive_lock(dest.parent / f".{dest.name}.lock"):
        if ready():
            return dest, base
        building = Path(tempfile.mkdtemp(prefix=f"{dest.name}.build-", dir=dest.parent))
        try:
            _run(["cp", "-a", f"{base}/.", str(building)], f"copy {base}")
            policy = building / "usr" / "sbin" / "policy-rc.d"
            policy.write_text(POLICY_RC_D)
            policy.chmod(0o755)
            shutil.copyfile("/etc/resolv.conf", building / "etc" / "resolv.conf")  # apt's lookups, in the copy
            _run(["mount", "-t", "proc", "proc", str(building / "proc")], "mount proc")
            try:
                # the sid mirror these machines reach is a snapshot whose Release is past its Valid-Until
                # (apt: "Release file ... is expired"); debootstrap, which made the root, does not check it
                _run(["chroot", str(building), "apt-get", "-o", "Acquire::Check-Valid-Until=false", "update",
                      "-qq"], "apt-get update (sid)")
                _run(["chroot", str(building), "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                      "-qq", "--no-install-recommends", *IMAGE_EXTRA_PACKAGES], "apt-get install")
                _run(["chroot", str(building), "apt-get", "clean"], "apt-get clean")
            finally:
                _run(["umount", "-l", str(building / "proc")], "umount proc")
            policy.unlink()
            for key in (building / "etc" / "ssh").glob("ssh_host_*"):  # each login pod gets its own
                key.unlink()
            # mariadb-server's postinst made a database (143 MB): each database pod makes its own
            for entry in (building / "var" / "lib" / "mariadb").glob("*"):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            (building / IMAGE_ROOT_MARKER).write_text(marker)
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(building, dest)
        except BaseException:
            subprocess.run(["umount", "-l", str(building / "proc")], capture_output=True, check=False)
            shutil.rmtree(building, ignore_errors=True)
            raise
    return dest, base


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise SlinkyError(f"image root: {what} failed (exit {proc.returncode}):\n{tail}")


def image_name(component: str, release: str) -> str:
    return f"{REGISTRY}/{component}:{release}-debian-{roots.RELEASES[release]}"


def slinky_name(component: str, release: str) -> str:
    """The name the rendered manifests give Slinky's image of ``component`` for ``release``."""
    return f"{IMAGE_REGISTRY}/{component}:{SLURM_IMAGE_TAGS[release]}"


def _with_slurm_id(text: str, uid: int) -> tuple[str, int]:
    """``/etc/passwd`` or ``/etc/group`` text with user/group ``slurm`` at ``uid``; also its old id."""
    m = re.search(r"^slurm:[^:]*:(\d+):", text, re.MULTILINE)
    if not m:
        raise SlinkyError("the Slurm root has no slurm user or group (its slurm-wlm package creates them)")
    taken = re.search(rf"^(?!slurm:)[^:]+:[^:]*:{uid}:", text, re.MULTILINE)
    if taken:
        raise SlinkyError(f"the Slurm root already uses id {uid} for {taken.group(0).split(':')[0]}")
    start, end = m.span(1)
    line_end = text.index("\n", end)
    line = text[m.start():line_end]
    fields = line.split(":")
    fields[2] = str(uid)
    if len(fields) > 3 and fields[3].isdigit():  # passwd: the primary group too
        fields[3] = str(uid)
    return text[:m.start()] + ":".join(fields) + text[line_end:], int(m.group(1))


def image_specs(root: Path, release: str, relinked_at: Path | None = None) -> list[ImageSpec]:
    """The slurmctld, slurmd, login, slurmdbd and slurmrestd images of ``release`` from ``root``, whose
    relinked Slurm programs name ``relinked_at`` (default: ``root`` itself) as their loader's folder."""
    passwd, old_uid = _with_slurm_id((root / "etc" / "passwd").read_text(), SLURM_UID)
    group, old_gid = _with_slurm_id((root / "etc" / "group").read_text(), SLURM_UID)
    if old_uid != old_gid:
        raise SlinkyError(f"the Slurm root's slurm user ({old_uid}) and group ({old_gid}) differ")
    base = BaseTree(root, ((old_uid, SLURM_UID),))
    common = (Entry("etc/passwd", data=passwd.encode(), mode=0o644),
              Entry("etc/group", data=group.encode(), mode=0o644),
              # the relinked executables name their loader and libraries under the root's path here
              Entry(str(relinked_at or root).lstrip("/"), link="/"))
    specs = []
    for component, (entrypoint, cmd) in COMPONENTS.items():
        script = DATA_DIR / f"{component}-entrypoint.sh"
        own = (Entry(ENTRYPOINT.lstrip("/"), source=script),) if entrypoint == (ENTRYPOINT,) else ()
        spec = ImageSpec(
            image_name(component, release), (*common, *own), entrypoint=entrypoint, cmd=cmd, base=base,
            env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"SLURM_VERSION={release}"),
            labels={"org.opencontainers.image.title": component, "slinkyml.io/slurm-release": release})
        specs.append(spec)
        if component in SLINKY_COMPONENTS and release in SLURM_IMAGE_TAGS:
            specs.append(replace(spec, name=slinky_name(component, release)))  # the same manifest and digest
    return specs


def build(release: str, out_dir: Path, docker: bool = False, archive_needed: bool = True) -> tuple[Path, dict[str, str]]:
    """The images' archive (written once per root and entrypoint version) and each image's digest;
    ``docker``: an archive ``docker load`` also reads (``images.write_oci_archive``), named apart.
    ``archive_needed=False``: the digests alone do, from an archive deleted once imported (it is
    written again when it is needed again)."""
    root, relinked_at = image_root(release)
    key = hashlib.sha256()
    for f in (root / IMAGE_ROOT_MARKER, root / "etc" / "passwd", root / "etc" / "group",
              *sorted(DATA_DIR.glob("*.sh")), Path(__file__), Path(__file__).with_name("images.py")):
        key.update(f.read_bytes())
    kind = "slurm-docker" if docker else "slurm"
    archive = out_dir / f"{kind}-{release}-{key.hexdigest()[:12]}.tar"
    digests_file = archive.with_suffix(".json")
    try:
        if archive.exists() or not archive_needed:
            return archive, json.loads(digests_file.read_text())
    except (OSError, ValueError):
        pass
    for old in out_dir.glob(f"{kind}-{release}-*"):
        old.unlink()
    digests = write_oci_archive(image_specs(root, release, relinked_at), archive, docker=docker)
    digests_file.write_text(json.dumps(digests) + "\n")
    return archive, digests
