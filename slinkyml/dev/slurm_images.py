"""Slurm images for the kubelet node, built from the Debian sid root of Slurm 26.05 (``roots.py``).

No registry is reachable, so the slurmctld, slurmd, slurmdbd and slurmrestd images the operator's pods
name are made here: one base layer, the root that the dev 26.05 cluster already unpacks (shared by all of
them), and a small layer per image. slurmctld's and slurmd's entrypoints are ours
(``slinkyml/data/images/*-entrypoint.sh``), to the contract of Slinky's images: arguments and
``$SLURMCTLD_OPTIONS``/``$SLURMD_OPTIONS`` are the daemon's options, the daemon runs in the foreground,
``$POD_CPUS``/``$POD_MEMORY``/``$POD_TOPOLOGY`` become slurmd ``--conf`` items; SlurmUser ``slurm`` is
uid/gid 401 as the operator's pods run it.

The root's Slurm executables are relinked to the root's own loader and libraries by absolute path on
this machine (``roots.relink``); inside the image that path is a symbolic link to ``/``, so the same
files run there unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from slinkyml.dev import roots
from slinkyml.dev.images import BaseTree, Entry, ImageSpec, write_oci_archive
from slinkyml.errors import SlinkyError

#: the SlurmUser uid/gid the operator's pods run as (slurm-operator's builder: slurmUserUid/Gid)
SLURM_UID = 401
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "images"
REGISTRY = "slinkyml.local"
#: image -> (entrypoint, default arguments), as Slinky's images of that name start (theirs put ``tini -g --``
#: before slurmdbd and slurmrestd; here the daemon is the container's first process, which reaps its own)
ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
COMPONENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "slurmctld": ((ENTRYPOINT,), ()),
    "slurmd": ((ENTRYPOINT,), ()),
    "slurmdbd": (("slurmdbd", "-D"), ()),
    "slurmrestd": (("slurmrestd",), ("0.0.0.0:6820",)),
}


def image_name(component: str, release: str) -> str:
    return f"{REGISTRY}/{component}:{release}-debian-{roots.RELEASES[release]}"


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


def image_specs(root: Path, release: str) -> list[ImageSpec]:
    """The slurmctld, slurmd, slurmdbd and slurmrestd images of ``release`` from its root."""
    passwd, old_uid = _with_slurm_id((root / "etc" / "passwd").read_text(), SLURM_UID)
    group, old_gid = _with_slurm_id((root / "etc" / "group").read_text(), SLURM_UID)
    if old_uid != old_gid:
        raise SlinkyError(f"the Slurm root's slurm user ({old_uid}) and group ({old_gid}) differ")
    base = BaseTree(root, ((old_uid, SLURM_UID),))
    common = (Entry("etc/passwd", data=passwd.encode(), mode=0o644),
              Entry("etc/group", data=group.encode(), mode=0o644),
              # the relinked executables name their loader and libraries under the root's path here
              Entry(str(root).lstrip("/"), link="/"))
    specs = []
    for component, (entrypoint, cmd) in COMPONENTS.items():
        script = DATA_DIR / f"{component}-entrypoint.sh"
        own = (Entry(ENTRYPOINT.lstrip("/"), source=script),) if entrypoint == (ENTRYPOINT,) else ()
        specs.append(ImageSpec(
            image_name(component, release), (*common, *own), entrypoint=entrypoint, cmd=cmd, base=base,
            env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"SLURM_VERSION={release}"),
            labels={"org.opencontainers.image.title": component, "slinkyml.io/slurm-release": release}))
    return specs


def build(release: str, out_dir: Path) -> tuple[Path, dict[str, str]]:
    """The images' archive (written once per root and entrypoint version) and each image's digest."""
    root = roots.install(release).root
    if root is None:
        raise SlinkyError(f"Slurm {release}: images are built from a Debian root (one of {', '.join(roots.RELEASES)})")
    key = hashlib.sha256()
    for f in (root / roots.MARKER, root / "etc" / "passwd", root / "etc" / "group",
              *sorted(DATA_DIR.glob("*-entrypoint.sh")), Path(__file__), Path(__file__).with_name("images.py")):
        key.update(f.read_bytes())
    archive = out_dir / f"slurm-{release}-{key.hexdigest()[:12]}.tar"
    digests_file = archive.with_suffix(".json")
    try:
        return archive, json.loads(digests_file.read_text())
    except (OSError, ValueError):
        pass
    for old in out_dir.glob(f"slurm-{release}-*"):
        old.unlink()
    digests = write_oci_archive(image_specs(root, release), archive)
    digests_file.write_text(json.dumps(digests) + "\n")
    return archive, digests
