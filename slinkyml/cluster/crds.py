"""Find the Slinky CRDs (the schemas they hold are applied by :mod:`.schemas`).

Lookup: ``$SLINKYML_CRD_DIR``, ``<repo>/../shared/slinky-crds``, then the copies in ``data/crds``.
"""

from __future__ import annotations

import json
import os
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml import DATA_DIR, specload
from slinkyml.errors import SlinkyError

PACKAGED_DIR = DATA_DIR / "crds"
REPO_SHARED_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "slinky-crds"


def crd_dir() -> Path:
    """The directory holding the current CRDs (``slinky.slurm.net_*.yaml``)."""
    env = os.environ.get("SLINKYML_CRD_DIR")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise SlinkyError(f"SLINKYML_CRD_DIR={env}: not a directory")
        return p
    shared = REPO_SHARED_DIR.resolve()
    if shared.is_dir() and any(shared.glob("slinky.slurm.net_*.yaml")):
        return shared
    return PACKAGED_DIR


def crd_files(operator_version: str | None = None) -> list[Path]:
    """CRD files for an operator release: current by default, else a ``legacy/v<version>*`` folder."""
    base = crd_dir()
    if operator_version in (None, "", "current", "latest", "v1beta1"):
        files = sorted(base.glob("slinky.slurm.net_*.yaml"))
    else:
        want = operator_version if operator_version.startswith("v") else f"v{operator_version}"
        legacy = base / "legacy"
        folders = sorted(p for p in legacy.glob(f"{want}*") if p.is_dir()) if legacy.is_dir() else []
        if not folders:
            known = sorted(p.name for p in legacy.iterdir()) if legacy.is_dir() else []
            raise SlinkyError(f"--operator-version {operator_version}: no CRDs for it under {legacy} "
                              f"(known: {', '.join(known) or 'none'}; current v1beta1 is the default)")
        files = sorted(folders[-1].glob("*.yaml"))
    if not files:
        raise SlinkyError(f"no Slinky CRD files in {base}")
    return files


@lru_cache(maxsize=4)
def crd_documents(operator_version: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(file, parsed CRD) of every Slinky CRD of an operator release (:func:`crd_files`);
    :mod:`.schemas` turns them into validators."""
    return [(str(f), _parsed(f.read_text())) for f in crd_files(operator_version)]


def _parsed(text: str) -> Any:
    """A CRD's data, through a JSON copy in slinkyml's cache keyed by the file's content: parsing
    the six Slinky CRDs' YAML costs ~0.1 s of `cluster validate`'s 0.3 s, reading JSON a tenth."""
    cached = specload.cache_dir() / f"crd-{zlib.crc32(text.encode()):08x}-{len(text)}.json"
    try:
        return json.loads(cached.read_bytes())
    except (OSError, ValueError):
        data = specload.load_data(text)
        specload.write_cache(cached, json.dumps(data, separators=(",", ":")).encode())
        return data
