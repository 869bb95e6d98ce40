"""User settings and where the cluster is: the one reader of slinkyml's environment variables and
config files. Stdlib only (the CLI imports it at start-up).

First found wins: an explicit argument, the environment variable, the first config file
(``$SLINKYML_CONFIG``, ``~/.config/slinkyml/config.yaml``, ``/etc/slinkyml/config.yaml``), the default.
"""

from __future__ import annotations

import os
from pathlib import Path

from slinkyml.errors import SlinkyError

CONFIG_FILES = ("~/.config/slinkyml/config.yaml", "/etc/slinkyml/config.yaml")
#: root's default state dir of the local dev cluster: the machine's shared cluster.
SHARED_STATE_DIR = Path("/var/lib/slinkyml/dev")
#: slurmrestd's address (config key ``restapi_url``): ``http(s)://host:port`` (JWT) or ``unix:/path``.
RESTAPI_URL_ENV = "SLINKYML_RESTAPI_URL"
#: Older names of it, still read (after the new one): the accounting backend's URL and socket path.
DEPRECATED_RESTAPI_ENV = {"SLURMRESTD_URL": "", "SLINKYML_SLURMRESTD_SOCKET": "unix:"}
DEFAULT_RESTAPI_URL = "http://127.0.0.1:6820"


def config_value(key: str) -> str | None:
    """A key from the first slinkyml config file that exists."""
    paths = [os.environ["SLINKYML_CONFIG"]] if os.environ.get("SLINKYML_CONFIG") else []
    paths += [os.path.expanduser(p) for p in CONFIG_FILES]
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        import yaml  # lazy: only when a config file exists (yaml costs `sbatch submit` ~20 ms)

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SlinkyError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
        if isinstance(data, dict) and data.get(key) is not None:
            return str(data[key])
    return None


def default_state_dir() -> Path:
    """The local dev cluster's state: ``$SLINKYML_STATE_DIR``; for root ``/var/lib/slinkyml/dev``
    (root's home is private, other users need the munge socket); else ``~/.local/state/slinkyml/dev``.
    """
    env = os.environ.get("SLINKYML_STATE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return SHARED_STATE_DIR
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "slinkyml" / "dev"


def slurm_conf() -> str | None:
    """The slurm.conf to use when none is given: $SLURM_CONF, the system one (None: Slurm's own
    default finds it), else the dev cluster's if it exists."""
    env = os.environ.get("SLURM_CONF")
    if env:
        return env
    if Path("/etc/slurm/slurm.conf").exists():
        return None
    candidate = default_state_dir() / "etc" / "slurm.conf"
    return str(candidate) if candidate.exists() else None


def restapi_target(explicit: str | None = None) -> str:
    """Where slurmrestd is: ``explicit`` (``--restapi-url``), ``$SLINKYML_RESTAPI_URL`` (or a
    deprecated name), ``restapi_url`` in the config file; else the dev cluster's unix socket if it
    exists, else its JWT port (``$SLINKYML_DEV_PORT_BASE`` + 3, default 6820)."""
    found = explicit or os.environ.get(RESTAPI_URL_ENV)
    for env, prefix in DEPRECATED_RESTAPI_ENV.items():
        if not found and os.environ.get(env):
            found = prefix + os.environ[env]
    found = found or config_value("restapi_url")
    if found:
        return found
    sock = default_state_dir() / "run" / "slurmrestd.sock"
    if sock.exists():
        return f"unix:{sock}"
    base = os.environ.get("SLINKYML_DEV_PORT_BASE", "").strip()
    return f"http://127.0.0.1:{int(base) + 3}" if base.isdigit() else DEFAULT_RESTAPI_URL
