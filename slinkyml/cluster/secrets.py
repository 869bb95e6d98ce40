"""Credential Secrets: generated at random, kept out of rendered manifests.

``cluster apply`` creates missing ones (never overwrites or prints), ``render --secrets-out`` writes
them to a separate 0600 file; Secrets named in the spec are the user's and never generated.
"""

from __future__ import annotations

import base64
import secrets as _random
from typing import Any

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
