"""The Docker cluster offline: its spec, the files rendered from it, the images archive ``docker load``
reads, the client command's environment and the CLI's choices (the live half: test_docker_cluster_live.py)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from slinkyml.dev.docker.config import (
    MARKER,
    DockerClusterSpec,
    options_from_env,
    render_client_env,
    render_identity,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from slinkyml.dev.images.images import Entry, ImageSpec, write_oci_archive
from slinkyml.dev.slurm.config import CRED_EXPIRE_S
from slinkyml.errors import SpecError
from slinkyml.slurm.conf import parse_line

REPO = Path(__file__).resolve().parent.parent


def _spec(tmp_path: Path, **options) -> DockerClusterSpec:
    return DockerClusterSpec(state_dir=tmp_path, shares=(str(tmp_path),), **options)


def test_addresses_are_fixed_and_distinct(tmp_path):
    spec = _spec(tmp_path, nodes=3, subnet="10.234.7.0/24")
    hosts = spec.hosts
    assert hosts["slurmctld"] == "10.234.7.6" and hosts["d1"] == "10.234.7.11" and hosts["d3"] == "10.234.7.13"
    assert len(set(hosts.values())) == len(hosts) == 6 + 3


def test_slurm_conf_names_every_node_at_its_address_and_no_host_path(tmp_path):
    spec = _spec(tmp_path, nodes=2, cpus_per_node=3, memory_mb_per_node=2048)
    text = render_slurm_conf(spec)
    nodes = [parse_line(line) for line in text.splitlines() if line.startswith("NodeName=")]
    assert [(n.text().split()[0].split("=")[1], n.param("NodeAddr"), n.param("CPUs"), n.param("RealMemory")) for n in nodes] == \
        [("d1", spec.address("d1"), "3", "2048"), ("d2", spec.address("d2"), "3", "2048")]
    assert "SlurmctldHost=slurmctld\n" in text and "AccountingStorageHost=slurmdbd\n" in text
    assert "AuthType=auth/munge\n" in text and f"cred_expire={CRED_EXPIRE_S}" in text
    assert str(tmp_path) not in text  # the containers' paths, never the state dir's


def test_slurmdbd_conf_holds_the_password_and_the_database_host():
    text = render_slurmdbd_conf("s3cret")
    assert "StoragePass=s3cret\n" in text and "StorageHost=mariadb\n" in text and "DbdHost=slurmdbd\n" in text


@pytest.mark.parametrize(("env", "field", "message"), [
    ({"SLINKYML_DOCKER_SUBNET": "10.0.0.0/30"}, "SLINKYML_DOCKER_SUBNET", "too small"),
    ({"SLINKYML_DOCKER_SUBNET": "nope"}, "SLINKYML_DOCKER_SUBNET", "not an IPv4 network"),
    ({"SLINKYML_DOCKER_BRIDGE": "a-bridge-name-too-long"}, "SLINKYML_DOCKER_BRIDGE", "interface name"),
    ({"SLINKYML_DOCKER_NAME": "Bad Name"}, "SLINKYML_DOCKER_NAME", "lowercase"),
    ({"SLINKYML_DOCKER_RESTD_PORT": "80"}, "SLINKYML_DOCKER_RESTD_PORT", "1024-65535"),
    ({"SLINKYML_DOCKER_SHARES": "relative/folder"}, "SLINKYML_DOCKER_SHARES", "absolute"),
])
def test_bad_settings_name_their_variable(tmp_path, env, field, message):
    with pytest.raises(SpecError) as err:
        DockerClusterSpec(state_dir=tmp_path, **options_from_env(env))
    assert err.value.path == field and message in str(err.value)


def test_settings_from_the_environment(tmp_path):
    options = options_from_env({"SLINKYML_DOCKER_NAME": "x1", "SLINKYML_DOCKER_RESTD_PORT": "16999",
                                "SLINKYML_DOCKER_SHARES": f"{tmp_path}:/tmp"})
    spec = DockerClusterSpec(state_dir=tmp_path, **options)
    assert (spec.container("login"), spec.network, spec.munge_volume) == ("x1-login", "x1", "x1-munge")
    assert spec.restd_url == "http://127.0.0.1:16999"
    assert str(tmp_path.resolve()) in spec.shares


def test_identity_and_client_env_round_trip(tmp_path):
    spec = _spec(tmp_path, nodes=2, name="k9")
    identity = json.loads(render_identity(spec, "unix:///x/docker.sock", True))
    assert identity["nodes"] == 2 and identity["name"] == "k9" and identity["engine_started"] is True
    assert DockerClusterSpec(state_dir=tmp_path, **{k: (tuple(v) if k == "shares" else v) for k, v in identity.items()
                                                    if k in DockerClusterSpec.__dataclass_fields__}) == spec
    assert render_client_env(spec, "unix:///x/docker.sock") == \
        f"LOGIN=k9-login\nDOCKER_HOST=unix:///x/docker.sock\nSHARED_FOLDERS={':'.join(spec.shares)}\n"


def test_the_archive_is_one_for_ctr_and_docker_load(tmp_path):
    """``docker=True`` adds Docker's manifest.json naming the same blobs as the OCI index: two names of one
    image are one entry with both tags."""
    one = ImageSpec("local/a:1", (Entry("etc/x", data=b"x"),))
    two = ImageSpec("other/a:2", one.entries)
    plain = write_oci_archive([one], tmp_path / "plain.tar")
    both = write_oci_archive([one, two], tmp_path / "both.tar", docker=True)
    assert plain["local/a:1"] == both["local/a:1"] == both["other/a:2"]
    with tarfile.open(tmp_path / "plain.tar") as tar:
        assert "manifest.json" not in tar.getnames()
    with tarfile.open(tmp_path / "both.tar") as tar:
        names = set(tar.getnames())
        manifest = json.load(io.BytesIO(tar.extractfile("manifest.json").read()))  # type: ignore[union-attr]
    assert [entry["RepoTags"] for entry in manifest] == [["local/a:1", "other/a:2"]]
    assert {manifest[0]["Config"], *manifest[0]["Layers"]} <= names


def test_the_client_command_passes_the_environment_less_the_hosts_own(tmp_path):
    """slurm-client.sh with a ``docker`` that prints its arguments: the caller's variables by name, SLURM_CONF,
    LD_* and DOCKER_* left out, PATH without the state dir's bin/, the folder kept when shared."""
    bin_dir = tmp_path / "bin"
    fake = tmp_path / "fake"
    for d in (bin_dir, fake, tmp_path / "work"):
        d.mkdir()
    (fake / "docker").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (fake / "docker").chmod(0o755)
    client = bin_dir / "slurm-client.sh"
    client.write_bytes((REPO / "slinkyml" / "data" / "docker" / "slurm-client.sh").read_bytes())
    client.chmod(0o755)
    (bin_dir / "sbatch").symlink_to("slurm-client.sh")
    (bin_dir / "docker-cluster.env").write_text(f"LOGIN=k9-login\nDOCKER_HOST=unix:///d.sock\n"
                                                f"SHARED_FOLDERS={tmp_path / 'work'}\n")
    env = {"PATH": f"{bin_dir}:{fake}:/usr/bin:/bin", "SLURM_CONF": "/x/slurm.conf", "LD_PRELOAD": "x.so",
           "SBATCH_PARTITION": "debug", "PYTHONPATH": "/src"}
    out = subprocess.run([str(bin_dir / "sbatch"), "--wrap", "true"], capture_output=True, text=True, env=env,
                         cwd=tmp_path / "work", check=True).stdout.splitlines()
    assert out[:2] == ["exec", "-i"] and out[-4:] == ["k9-login", "sbatch", "--wrap", "true"]
    assert out[out.index("-w") + 1] == str(tmp_path / "work")
    passed = [out[i + 1] for i, a in enumerate(out) if a == "-e"]
    assert {"SBATCH_PARTITION", "PYTHONPATH", f"PATH={fake}:/usr/bin:/bin"} <= set(passed)
    assert not {"SLURM_CONF", "LD_PRELOAD"} & set(passed)
    elsewhere = subprocess.run([str(bin_dir / "sbatch")], capture_output=True, text=True, env=env, cwd=tmp_path,
                               check=True).stdout.splitlines()
    assert elsewhere[elsewhere.index("-w") + 1] == "/tmp"  # not shared: the login container's /tmp
    # a slurm.conf of the caller's in a shared folder is read in the container as on the host; the cluster's
    # own (etc/ beside bin/) and one the containers cannot see are not passed
    (tmp_path / "etc").mkdir()
    for conf in (tmp_path / "work" / "other.conf", tmp_path / "etc" / "slurm.conf", tmp_path / "unshared.conf"):
        conf.write_text("ClusterName=x\n")
    for conf, wanted in ((tmp_path / "work" / "other.conf", [f"SLURM_CONF={tmp_path / 'work' / 'other.conf'}"]),
                         (tmp_path / "etc" / "slurm.conf", []), (tmp_path / "unshared.conf", [])):
        out = subprocess.run([str(bin_dir / "sbatch")], capture_output=True, text=True, check=True,
                             env={**env, "SLURM_CONF": str(conf)}, cwd=tmp_path / "work").stdout.splitlines()
        assert [a for i, a in enumerate(out) if out[i - 1] == "-e" and a.startswith("SLURM_CONF")] == wanted, conf


def test_down_keeps_slurmctlds_state_and_the_database_in_the_state_dir(tmp_path):
    """The kept folders: slurmctld's StateSaveLocation as slurm.conf names it, MariaDB's data folder where
    the mariadb image's entrypoint has it (a path that differed would keep an empty folder)."""
    spec = _spec(tmp_path)
    folder, inside = spec.kept("slurmctld")
    assert folder == tmp_path / "data" / "slurmctld"
    assert f"StateSaveLocation={inside}\n" in render_slurm_conf(spec)
    folder, inside = spec.kept("mariadb")
    entrypoint = (REPO / "slinkyml" / "data" / "images" / "mariadb-entrypoint.sh").read_text()
    assert folder == tmp_path / "data" / "mariadb" and f"datadir={inside} " in entrypoint
    assert spec.kept("slurmd") is None


def test_the_cli_refuses_netns_options_with_docker(cli, tmp_path):
    code, _out, err = cli("dev", "up", "--docker", "--state-dir", str(tmp_path), "--bridge", "x0",
                          "--emulated-nodes", "8")
    assert code != 0
    assert err.strip().splitlines() == ["slinkyml: error: --docker: --bridge, --emulated-nodes not taken (the Docker "
                                        "cluster runs Slurm 26.05 from the pods' images; its network, bridge and "
                                        "port: $SLINKYML_DOCKER_SUBNET, _BRIDGE, _RESTD_PORT)"]


def test_a_docker_state_dir_is_found_without_the_flag(cli, tmp_path):
    (tmp_path / MARKER).write_text(render_identity(_spec(tmp_path, name="k9"), "unix:///nowhere.sock", False))
    code, out, _err = cli("dev", "env", "--state-dir", str(tmp_path))
    assert code == 0
    assert out == f"export SLURM_CONF={tmp_path}/etc/slurm.conf\nexport PATH={tmp_path}/bin:\"$PATH\"\n"
    code, out, _err = cli("dev", "node", "readdress", "d1", "--state-dir", str(tmp_path))
    assert code != 0
