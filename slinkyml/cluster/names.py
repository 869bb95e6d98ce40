"""Object names and Secret references derived from a spec, in one place, so render, helm, apply and
the secret generator cannot leave a dangling reference."""

from __future__ import annotations

from dataclasses import dataclass

from slinkyml.cluster.spec import SlurmCluster, SlurmNodeSet

MANAGED_BY = "slinkyml"
LABEL_CLUSTER = "slinkyml.io/cluster"
LABEL_NODESET = "slinkyml.io/nodeset"
WORKER_TAINT = "slinkyml.io/slurm-worker"


@dataclass(frozen=True)
class SecretRef:
    role: str  # slurm_key | jwt_key | db_password | db_root_password
    name: str
    key: str

    def ref(self) -> dict[str, str]:
        return {"name": self.name, "key": self.key}


#: role -> (default name suffix, default key, what it is)
SECRET_ROLES = {
    "slurm_key": ("slurm-key", "slurm.key", "auth/slurm shared key (slurmctld, slurmd, slurmdbd, login)"),
    "jwt_key": ("jwt-key", "jwt_hs256.key", "auth/jwt HS256 signing key (slurmrestd, Token)"),
    "db_password": ("mariadb-password", "password", "password of the accounting database user"),
    "db_root_password": ("mariadb-root", "password", "MariaDB root password (mariadb-operator)"),
}


def secret_ref(cluster: SlurmCluster, role: str) -> SecretRef:
    """The Secret a role's credential lives in: the user's ``name[:key]`` or the default."""
    suffix, default_key, _ = SECRET_ROLES[role]
    given = getattr(cluster.secrets, role)
    if given:
        name, _, key = given.partition(":")
        return SecretRef(role, name, key or default_key)
    return SecretRef(role, f"{cluster.name}-{suffix}", default_key)


def secret_refs(cluster: SlurmCluster) -> list[SecretRef]:
    """Every credential Secret the rendered objects reference (accounting ones only if used)."""
    roles = ["slurm_key", "jwt_key"]
    if cluster.accounting.enabled:
        roles.append("db_password")
        if cluster.accounting.mariadb:
            roles.append("db_root_password")
    return [secret_ref(cluster, r) for r in roles]


def controller(c: SlurmCluster) -> str:
    return c.name


def accounting(c: SlurmCluster) -> str:
    return c.name


def restapi(c: SlurmCluster) -> str:
    return c.name


def loginset(c: SlurmCluster) -> str:
    return f"{c.name}-login"


def nodeset(c: SlurmCluster, ns: SlurmNodeSet) -> str:
    return f"{c.name}-{ns.name}"


def nodepool(c: SlurmCluster, ns: SlurmNodeSet) -> str:
    return f"{c.name}-{ns.name}"


def mariadb(c: SlurmCluster) -> str:
    return f"{c.name}-mariadb"


def slurm_config(c: SlurmCluster) -> str:
    return f"{c.name}-slurm-config"


def sssd_conf(c: SlurmCluster) -> str:
    return f"{c.name}-sssd-conf"


def fsx_storage_class(c: SlurmCluster) -> str:
    return c.storage.storage_class_name or f"{c.name}-fsx-lustre"


def fsx_pvc(c: SlurmCluster) -> str:
    return f"{c.name}-fsx"


def token_secret(c: SlurmCluster) -> str:
    return f"{c.name}-token-{c.rest_api.token_user}"


def labels(c: SlurmCluster, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": c.name,
        "app.kubernetes.io/component": component,
        LABEL_CLUSTER: c.name,
    }
