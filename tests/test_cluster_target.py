"""The one rule for which cluster a command talks to (``config.cluster_target``), offline: two
dev-cluster state dirs laid out as ``slinkyml dev up`` leaves them (cluster.json, etc/slurm.conf,
run/slurmrestd.sock). The same rule against two live clusters: tests/test_cluster_target_live.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slinkyml import config
from slinkyml.errors import SlinkyError
from slinkyml.slurm.rest import RestClient

ENV = ("SLURM_CONF", "SLINKYML_RESTAPI_URL", "SLURMRESTD_URL", "SLINKYML_SLURMRESTD_SOCKET",
       "SLINKYML_STATE_DIR", "SLINKYML_DEV_PORT_BASE")


def _state(root: Path, name: str, port: int, *, socket: bool = True) -> Path:
    state = root / name
    (state / "etc").mkdir(parents=True)
    (state / "run").mkdir()
    (state / "cluster.json").write_text(json.dumps({"slurmrestd_port": port}))
    (state / "etc" / "slurm.conf").write_text(f"ClusterName={name}\n")
    if socket:
        (state / "run" / "slurmrestd.sock").touch()
    return state


@pytest.fixture
def clusters(tmp_path, monkeypatch):
    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLINKYML_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("HOME", str(tmp_path))
    return _state(tmp_path, "a", 9320), _state(tmp_path, "b", 9420, socket=False)


def test_slurm_conf_selects_the_restapi_of_its_cluster(clusters, monkeypatch):
    """The reported bug: `eval "$(slinkyml dev env --state-dir B)"` then the restapi backend went to A."""
    a, b = clusters
    monkeypatch.setenv("SLURM_CONF", str(b / "etc" / "slurm.conf"))
    target = config.cluster_target()
    assert (target.slurm_conf, target.restapi_url) == (str(b / "etc" / "slurm.conf"), "http://127.0.0.1:9420")
    assert "$SLURM_CONF" in target.describe()
    monkeypatch.setenv("SLURM_CONF", str(a / "etc" / "slurm.conf"))
    assert config.restapi_target() == f"unix:{a / 'run' / 'slurmrestd.sock'}"
    assert config.slurm_conf() == str(a / "etc" / "slurm.conf")


def test_an_empty_restapi_url_is_refused_not_read_as_unset(clusters, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(clusters[1] / "etc" / "slurm.conf"))
    for empty in ("", "  "):
        with pytest.raises(SlinkyError, match="--restapi-url: empty"):
            config.restapi_target(empty)


def test_an_explicit_url_wins_whole_level(clusters, monkeypatch):
    """--restapi-url names cluster A: its slurm.conf comes with it, not $SLURM_CONF's B."""
    a, b = clusters
    monkeypatch.setenv("SLURM_CONF", str(b / "etc" / "slurm.conf"))
    target = config.cluster_target(restapi_url=f"unix:{a / 'run' / 'slurmrestd.sock'}")
    assert target.slurm_conf == str(a / "etc" / "slurm.conf")
    assert "--restapi-url" in target.source


def test_two_clusters_named_at_one_level_are_refused(clusters, monkeypatch):
    a, b = clusters
    monkeypatch.setenv("SLURM_CONF", str(b / "etc" / "slurm.conf"))
    monkeypatch.setenv("SLINKYML_RESTAPI_URL", f"unix:{a / 'run' / 'slurmrestd.sock'}")
    with pytest.raises(SlinkyError, match="name one cluster"):
        config.cluster_target()


def test_a_tcp_url_of_another_cluster_is_refused_beside_a_dev_conf(clusters, monkeypatch):
    """A URL left in the environment (the default cluster's JWT port) beside `dev env`'s $SLURM_CONF."""
    a, b = clusters
    monkeypatch.setenv("SLURM_CONF", str(b / "etc" / "slurm.conf"))
    monkeypatch.setenv("SLINKYML_RESTAPI_URL", "http://127.0.0.1:6820")
    with pytest.raises(SlinkyError, match="whose slurmrestd is http://127.0.0.1:9420, but \\$SLINKYML_RESTAPI_URL"):
        config.cluster_target()
    monkeypatch.setenv("SLINKYML_RESTAPI_URL", "http://localhost:9420")
    assert config.restapi_target() == "http://localhost:9420"


def test_a_conf_of_no_dev_cluster_has_no_guessed_restapi(clusters, tmp_path, monkeypatch):
    """A real cluster's slurm.conf and no URL anywhere: refused, not the dev cluster's slurmrestd."""
    conf = tmp_path / "prod.conf"
    conf.write_text("ClusterName=prod\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("SLINKYML_STATE_DIR", str(clusters[0]))  # a lower level: not consulted
    with pytest.raises(SlinkyError, match="slurmrestd's address is unknown for slurm.conf .*prod.conf"):
        config.restapi_target()
    monkeypatch.setenv("SLINKYML_RESTAPI_URL", "https://prod:6820")
    assert config.restapi_target() == "https://prod:6820"


def test_state_dir_and_config_file_levels(clusters, tmp_path, monkeypatch):
    a, b = clusters
    monkeypatch.setenv("SLINKYML_STATE_DIR", str(b))
    assert config.cluster_target().slurm_conf == str(b / "etc" / "slurm.conf")
    monkeypatch.delenv("SLINKYML_STATE_DIR")
    (tmp_path / "config.yaml").write_text(f"slurm_conf: {a / 'etc' / 'slurm.conf'}\n")
    target = config.cluster_target()
    assert (target.restapi_url, target.source) == (f"unix:{a / 'run' / 'slurmrestd.sock'}",
                                                   "slurm_conf in the config file")


def test_a_slurm_given_another_cluster_takes_its_restapi(clusters, monkeypatch):
    """Slurm(conf=B) in code, $SLURM_CONF naming A: the restapi client follows the Slurm it was given."""
    a, b = clusters
    monkeypatch.setenv("SLURM_CONF", str(a / "etc" / "slurm.conf"))
    client = RestClient.from_config(slurm_conf=str(b / "etc" / "slurm.conf"))
    assert client.url == "http://127.0.0.1:9420"
    assert RestClient.from_config(slurm_conf=str(a / "etc" / "slurm.conf")).url == \
        f"unix:{a / 'run' / 'slurmrestd.sock'}"


def test_an_explicit_url_wins_over_the_slurm_it_comes_with(clusters, monkeypatch):
    """`--restapi-url` beside a Slurm built from the environment (another cluster): the flag wins whole,
    and a job sent there gets that cluster's slurm.conf as $SLURM_CONF."""
    from slinkyml.jobs.restapi import RestApiBackend
    from slinkyml.slurm.version import SlurmVersion

    a, b = clusters

    class _Slurm:
        version = SlurmVersion(22, 5, 8)
        conf = str(b / "etc" / "slurm.conf")

    url = f"unix:{a / 'run' / 'slurmrestd.sock'}"
    assert RestClient.from_config(url, slurm_conf=_Slurm.conf).url == url
    backend = RestApiBackend.from_config(slurm=_Slurm(), url=url)
    assert (backend.client.url, backend.slurm_conf) == (url, str(a / "etc" / "slurm.conf"))
    assert RestApiBackend.from_config(slurm=_Slurm(), url="http://prod:6820").slurm_conf == _Slurm.conf
