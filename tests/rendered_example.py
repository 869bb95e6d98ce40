"""An example cluster under a fresh name and namespace, rendered by the CLI into a folder: what a user's
`slinkyml cluster render -o` writes, for the tests that install it (install.sh, Helm) beside other runs."""

from __future__ import annotations

import secrets
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import yaml

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.spec import SlurmCluster, to_dict


def render_renamed(example: str, prefix: str, namespace_prefix: str, tmp_path: Path) -> tuple[SlurmCluster, Path, Path]:
    """``manifests/EXAMPLE`` named ``PREFIX<6 hex>-<name>`` in namespace ``NAMESPACE_PREFIX-<6 hex>``, rendered
    by ``slinkyml cluster render`` into ``tmp_path/out``: the cluster, its spec file and that folder."""
    base = load_spec(EXAMPLES_DIR / example / "cluster.yaml")
    tag = secrets.token_hex(3)
    cluster = replace(base, name=f"{prefix}{tag}-{base.name}", namespace=f"{namespace_prefix}-{tag}")
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(yaml.safe_dump(to_dict(cluster), sort_keys=False))
    folder = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "slinkyml", "cluster", "render", str(spec_file), "-o", str(folder)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return cluster, spec_file, folder
