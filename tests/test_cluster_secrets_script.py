"""``secrets.sh``: the kubectl route's credential Secrets (slurm key, JWT key, database passwords).

Offline: every Secret the rendered objects reference is made or checked by it, it is shellcheck
clean and INSTALL.md runs it before the objects. Live (``dev kube``'s API server, kubectl from PATH):
it makes the missing Secrets at their sizes, keeps existing ones, prints no value and refuses to go
on without a Secret the spec names as the user's.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slinkyml.cluster import EXAMPLES_DIR, load_spec
from slinkyml.cluster.install import secret_names
from slinkyml.cluster.render import render
from slinkyml.cluster.secrets import SCRIPT, SIZES, secrets_script
from slinkyml.cluster.spec import Secrets

EXAMPLES = ["cpu-small", "h100-efa", "trn1"]
SHELLCHECK = shutil.which("shellcheck")
KUBECTL = shutil.which("kubectl")


@pytest.mark.parametrize("name", EXAMPLES)
def test_script_covers_every_referenced_secret_and_runs_before_the_objects(name: str) -> None:
    spec = load_spec(EXAMPLES_DIR / name / "cluster.yaml")
    out = render(spec)
    script = out.files["secrets.sh"]
    refs = secret_names(out.objects)
    assert refs and all(f" {ref}:" in script for ref in refs), refs
    install = out.files["INSTALL.md"]
    assert install.index("sh secrets.sh") < install.index("kubectl apply --server-side -f rendered/")
    assert not any(o["kind"] == "ConfigMap" and any(ref in str(o) for ref in refs) for o in out.objects)
    mine = replace(spec, secrets=Secrets(jwt_key="team-jwt:key"))
    assert " team-jwt:key:64:required" in secrets_script(mine)


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("name", EXAMPLES)
def test_script_is_shellcheck_clean(name: str, tmp_path: Path) -> None:
    rendered = tmp_path / "secrets.sh"
    rendered.write_text(render(load_spec(EXAMPLES_DIR / name / "cluster.yaml")).files["secrets.sh"])
    for path in (SCRIPT, rendered):
        done = subprocess.run([str(SHELLCHECK), "-s", "sh", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH (the route the script serves is kubectl's)")
def test_script_makes_missing_secrets_keeps_existing_and_prints_no_value(kube_plane: Any, tmp_path: Path) -> None:
    api: Any = kube_plane.api()
    core = client.CoreV1Api(api)
    tag = secrets.token_hex(3)
    example = load_spec(EXAMPLES_DIR / "h100-efa" / "cluster.yaml")
    cluster = replace(example, name=f"s{tag}", namespace=f"slinkyml-secrets-{tag}")
    script = tmp_path / "secrets.sh"
    script.write_text(secrets_script(cluster))
    env = {**os.environ, "KUBECONFIG": str(kube_plane.kubeconfig)}
    try:
        first = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)
        assert first.returncode == 0, first.stderr
        made = {s.metadata.name: s for s in core.list_namespaced_secret(cluster.namespace).items}
        sizes = {f"s{tag}-slurm-key": ("slurm.key", SIZES["slurm_key"]), f"s{tag}-jwt-key": ("jwt_hs256.key", 64)}
        for name, (key, size) in sizes.items():
            value = base64.b64decode(made[name].data[key])
            assert len(value) == size, name
            assert made[name].metadata.labels["slinkyml.io/cluster"] == cluster.name
            assert made[name].data[key] not in first.stdout + first.stderr
        for name in (f"s{tag}-mariadb-password", f"s{tag}-mariadb-root"):
            password = base64.b64decode(made[name].data["password"]).decode()
            assert len(password) >= 40 and password.isalnum(), name  # printable, from 32 random bytes
            assert password not in first.stdout + first.stderr
        assert first.stdout.count("created") == 4
        again = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)
        assert again.returncode == 0 and again.stdout.count("exists: kept") == 4, again.stdout
        kept = {s.metadata.name: s.data for s in core.list_namespaced_secret(cluster.namespace).items}
        assert all(kept[name] == made[name].data for name in made)
        # a Secret the spec names as the user's is checked, never made
        users = replace(cluster, secrets=Secrets(jwt_key=f"team-{tag}:key"))
        script.write_text(secrets_script(users))
        missing = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120, check=False)
        assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
        assert f"team-{tag}" in missing.stderr and "does not exist" in missing.stderr
        with pytest.raises(ApiException):
            core.read_namespaced_secret(f"team-{tag}", cluster.namespace)
    finally:
        try:
            core.delete_namespace(cluster.namespace)
        except ApiException:
            pass
