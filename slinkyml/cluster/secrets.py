"""Credential Secrets: generated at random, kept out of rendered manifests.

``cluster apply`` creates missing ones (never overwrites or prints), ``render --secrets-out`` writes
them to a separate 0600 file; Secrets named in the spec are the user's and never generated.
"""

from __future__ import annotations

import base64
import secrets as _random
import shlex
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.cluster import names
from slinkyml.cluster.spec import SlurmCluster

#: role -> number of random bytes (slurm.key: the chart uses 1024 random characters).
SIZES = {"slurm_key": 1024, "jwt_key": 64, "db_password": 32, "db_root_password": 32}


def _value(role: str) -> bytes:
    n = SIZES[role]
    if role in ("db_password", "db_root_password"):
        return _random.token_urlsafe(n).encode()  # printable: it ends up in a MySQL client config
    return _random.token_bytes(n)


def generated_refs(c: SlurmCluster) -> list[names.SecretRef]:
    """References slinkyml owns (not named by the user in ``secrets:``)."""
    return [r for r in names.secret_refs(c) if not getattr(c.secrets, r.role)]


def render_secrets(c: SlurmCluster) -> list[dict[str, Any]]:
    """Fresh random Secrets for every credential slinkyml owns. Never log or render these."""
    out = []
    for ref in generated_refs(c):
        out.append({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": ref.name, "namespace": c.namespace,
                         "labels": names.labels(c, "credentials"),
                         "annotations": {"slinkyml.io/role": ref.role}},
            "type": "Opaque",
            "immutable": True,
            "data": {ref.key: base64.b64encode(_value(ref.role)).decode()},
        })
    return out


SCRIPT = DATA_DIR / "shell" / "cluster-secrets.sh"
_ARGS_MARK = "set -- # @CLUSTER_ARGS@ (the renderer puts this cluster's arguments here)"


def secrets_script(c: SlurmCluster) -> str:
    """``secrets.sh`` for a cluster: ``data/shell/cluster-secrets.sh`` with its arguments filled in,
    making with kubectl every Secret slinkyml owns that is missing and checking the user's exist.
    It names Secrets and sizes, never values, so it sits beside the rendered manifests."""
    generated = {r.name for r in generated_refs(c)}
    labels = ",".join(f"{k}={v}" for k, v in names.labels(c, "credentials").items())
    entries = []
    for ref in names.secret_refs(c):
        form = ("required" if ref.name not in generated
                else "text" if ref.role in ("db_password", "db_root_password") else "binary")
        entries.append(f"{ref.name}:{ref.key}:{SIZES[ref.role]}:{form}")
    args = " ".join(shlex.quote(a) for a in (c.namespace, labels, *entries))
    text = SCRIPT.read_text()
    if _ARGS_MARK not in text:
        raise AssertionError(f"{SCRIPT}: the arguments line is missing")
    return text.replace(_ARGS_MARK, f"set -- {args}")
