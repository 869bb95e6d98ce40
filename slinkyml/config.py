"""User settings and where the cluster is: the one reader of slinkyml's environment variables and
config files. Stdlib only (the CLI imports it at start-up).

First found wins: an explicit argument, the environment variable, the first config file
(``$SLINKYML_CONFIG``, ``~/.config/slinkyml/config.yaml``, ``/etc/slinkyml/config.yaml``), the default.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from slinkyml.errors import SlinkyError

CONFIG_FILES = ("~/.config/slinkyml/config.yaml", "/etc/slinkyml/config.yaml")
#: root's default state dir of the local dev cluster: the machine's shared cluster.
SHARED_STATE_ROOT = Path("/var/lib/slinkyml")
SHARED_STATE_DIR = SHARED_STATE_ROOT / "dev"
#: slurmrestd's address (config key ``restapi_url``): ``http(s)://host:port`` (JWT) or ``unix:/path``.
RESTAPI_URL_ENV = "SLINKYML_RESTAPI_URL"
#: Older names of it, still read (after the new one): the accounting backend's URL and socket path.
DEPRECATED_RESTAPI_ENV = {"SLURMRESTD_URL": "", "SLINKYML_SLURMRESTD_SOCKET": "unix:"}
DEFAULT_RESTAPI_URL = "http://127.0.0.1:6820"


#: submission backends, by the name ``--backend``/``$SLINKYML_BACKEND``/``backend:`` give them
SUBMIT_BACKENDS = ("sbatch", "restapi")


def submit_backend_name(explicit: str | None = None) -> str:
    """The submission backend: ``explicit`` (``--backend``), ``$SLINKYML_BACKEND``, ``backend:`` in the
    config file, else ``sbatch`` (here, not in ``jobs.submit``: ``--dry-run`` names it without importing that)."""
    name = explicit or os.environ.get("SLINKYML_BACKEND") or config_value("backend") or "sbatch"
    if name not in SUBMIT_BACKENDS:
        raise SlinkyError(f"unknown backend {name!r}: use one of {', '.join(SUBMIT_BACKENDS)}")
    return name


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


def slurm_retries() -> int:
    """How often a transient Slurm failure (slurmctld busy or restarting) is retried:
    ``$SLINKYML_SLURM_RETRIES`` (0 to 20), else 3."""
    text = os.environ.get("SLINKYML_SLURM_RETRIES", "").strip()
    if not text:
        return 3
    if not (text.isascii() and text.isdigit()) or int(text) > 20:
        raise SlinkyError(f"$SLINKYML_SLURM_RETRIES: {text[:20]!r} is not a number from 0 to 20")
    return int(text)


def dev_state_dir(env_var: str, name: str) -> Path:
    """Where a local cluster of the developer's keeps its state: ``$ENV_VAR``; for root
    ``/var/lib/slinkyml/NAME`` (root's home is private, other users need the munge socket); else
    ``$XDG_STATE_HOME/slinkyml/NAME`` (``~/.local/state``)."""
    env = os.environ.get(env_var)
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return SHARED_STATE_ROOT / name
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "slinkyml" / name


def default_state_dir() -> Path:
    """The local Slurm cluster's state (``$SLINKYML_STATE_DIR``; for root ``/var/lib/slinkyml/dev``)."""
    return dev_state_dir("SLINKYML_STATE_DIR", "dev")


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a command talks to: its slurm.conf (``None``: Slurm's own default,
    ``/etc/slurm/slurm.conf``) and slurmrestd's address, and where the choice came from."""

    slurm_conf: str | None
    restapi_url: str | None
    source: str

    def describe(self) -> str:
        """One line for ``--dry-run``: which cluster, and why that one."""
        conf = self.slurm_conf or "/etc/slurm/slurm.conf (Slurm's default)"
        rest = self.restapi_url or "unknown"
        return f"slurm.conf {conf}, slurmrestd {rest} (from {self.source})"

    def require_restapi_url(self) -> str:
        """slurmrestd's address, or a one-line refusal: never a guess at some other cluster's."""
        if self.restapi_url:
            return self.restapi_url
        raise SlinkyError(f"slurmrestd's address is unknown for slurm.conf {self.slurm_conf or '/etc/slurm/slurm.conf'} "
                          f"(from {self.source}): give --restapi-url, ${RESTAPI_URL_ENV} or restapi_url in "
                          "the config file")


def dev_state_dir_of(conf: str | os.PathLike[str] | None = None, restapi_url: str | None = None) -> Path | None:
    """The local dev cluster's state dir that ``conf`` (a slurm.conf, links followed) or ``restapi_url``
    (its unix socket or JWT port) belongs to; ``None`` when it is no dev cluster's."""
    if conf is not None:
        try:
            state = Path(conf).resolve().parent.parent
        except (OSError, RuntimeError, ValueError):
            return None
        return state if (state / "cluster.json").is_file() else None
    if restapi_url and restapi_url.startswith("unix:"):
        try:
            state = Path(restapi_url[len("unix:"):]).resolve().parent.parent
        except (OSError, RuntimeError, ValueError):
            return None
        return state if (state / "cluster.json").is_file() else None
    return None


def _dev_restapi_url(state: Path) -> str | None:
    """A dev cluster's slurmrestd: its unix socket (local auth) if up, else its saved JWT port."""
    sock = state / "run" / "slurmrestd.sock"
    if sock.exists():
        return f"unix:{sock}"
    try:
        port = json.loads((state / "cluster.json").read_text()).get("slurmrestd_port")
    except (OSError, ValueError, AttributeError):
        return None
    return f"http://127.0.0.1:{port}" if isinstance(port, int) else None


def _serves(state: Path, url: str) -> bool:
    """Whether ``url`` (already checked) is a slurmrestd of the dev cluster in ``state``: its JWT port on
    loopback (it listens nowhere else); a unix socket outside its state dir is not."""
    from urllib.parse import urlsplit  # lazy: as in check_restapi_url

    if url.startswith("unix:"):
        return False  # a socket outside its state dir (url_state would be set otherwise)
    parts = urlsplit(url)
    try:
        port = json.loads((state / "cluster.json").read_text()).get("slurmrestd_port")
    except (OSError, ValueError, AttributeError):
        return True  # nothing saved to compare with
    return parts.hostname in ("127.0.0.1", "localhost", "::1") and parts.port == port


def _env_restapi_url() -> tuple[str | None, str]:
    found = os.environ.get(RESTAPI_URL_ENV)
    if found:
        return found, f"${RESTAPI_URL_ENV}"
    for env, prefix in DEPRECATED_RESTAPI_ENV.items():
        if os.environ.get(env):
            return prefix + os.environ[env], f"${env}"
    return None, ""


def cluster_target(*, slurm_conf: str | os.PathLike[str] | None = None,
                   restapi_url: str | None = None) -> ClusterTarget:
    """The one rule for which cluster every command and backend talks to.

    The first level that names a cluster wins, whole: explicit arguments (``--restapi-url``), then the
    environment (``$SLURM_CONF``, which ``slinkyml dev env`` exports, and ``$SLINKYML_RESTAPI_URL``),
    else ``$SLINKYML_STATE_DIR``'s dev cluster), then the config file (``slurm_conf``, ``restapi_url``),
    then the default (``/etc/slurm/slurm.conf``, else the default dev cluster's). Within that level, the half not given is derived
    from the half given when it is a dev cluster's (its slurm.conf ↔ its slurmrestd), never taken from a
    lower level (that would be another cluster's); both given and belonging to two different dev
    clusters is refused.
    """
    if restapi_url is not None and not str(restapi_url).strip():
        raise SlinkyError("--restapi-url: empty; give http(s)://host:port or unix:/path")
    if slurm_conf is not None and not str(slurm_conf).strip():
        raise SlinkyError("--slurm-conf: empty; give the path of a slurm.conf")
    env_url, env_url_source = _env_restapi_url()
    levels = [
        (slurm_conf, restapi_url, "--slurm-conf", "--restapi-url"),
        (os.environ.get("SLURM_CONF") or None, env_url, "$SLURM_CONF", env_url_source),
    ]
    for conf, url, conf_source, url_source in levels:
        if conf or url:
            return _resolve(str(conf) if conf else None, url, conf_source, url_source)
    if os.environ.get("SLINKYML_STATE_DIR"):
        return _dev_target(default_state_dir(), "$SLINKYML_STATE_DIR")
    conf, url = config_value("slurm_conf"), config_value("restapi_url")
    if conf or url:
        return _resolve(conf, url, "slurm_conf in the config file", "restapi_url in the config file")
    if Path("/etc/slurm/slurm.conf").exists():
        state = dev_state_dir_of("/etc/slurm/slurm.conf")
        return ClusterTarget(None, _dev_restapi_url(state) if state else None, "the default, /etc/slurm/slurm.conf")
    return _dev_target(default_state_dir(), "the default", conf_must_exist=True)


def _dev_target(state: Path, source: str, *, conf_must_exist: bool = False) -> ClusterTarget:
    """A dev cluster's slurm.conf and slurmrestd (where they will be if it is not up yet)."""
    url = _dev_restapi_url(state)
    if url is None:  # no cluster there yet: where its slurmrestd will listen
        base = os.environ.get("SLINKYML_DEV_PORT_BASE", "").strip()
        url = f"http://127.0.0.1:{int(base) + 3}" if base.isdigit() else DEFAULT_RESTAPI_URL
    conf = state / "etc" / "slurm.conf"
    return ClusterTarget(str(conf) if conf.exists() or not conf_must_exist else None, url,
                         f"{source}, the dev cluster in {state}")


def check_restapi_url(url: str, source: str = "--restapi-url") -> None:
    """``http(s)://HOST[:PORT][/]`` (a port 1..65535, an IPv6 host in brackets) or ``unix:/PATH``; anything
    else is one line naming where it came from (a malformed URL raised ValueError deep in http.client)."""
    from urllib.parse import urlsplit  # lazy: only when a URL is given (urllib.parse costs start-up ~3 ms)

    shown = url if len(url) <= 80 else url[:80] + "…"
    if url.startswith("unix:"):
        if not url[len("unix:"):].startswith("/"):
            raise SlinkyError(f"{source}: {shown!r}: a unix socket is unix:/absolute/path")
        return
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SlinkyError(f"{source}: {shown!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SlinkyError(f"{source}: {shown!r}: give http(s)://host:port or unix:/path")
    if port == 0 or (parts.path not in ("", "/")) or parts.query or parts.fragment or parts.username:
        raise SlinkyError(f"{source}: {shown!r}: give only http(s)://host:port (a port 1 to 65535, no path)")


def _resolve(conf: str | None, url: str | None, conf_source: str, url_source: str) -> ClusterTarget:
    """One level's choice, the missing half derived from the given one (see :func:`cluster_target`)."""
    if url:
        check_restapi_url(url, url_source)
    conf_state = dev_state_dir_of(conf) if conf else None
    url_state = dev_state_dir_of(restapi_url=url) if url else None
    if conf and url:
        if conf_state and url_state and conf_state != url_state:
            raise SlinkyError(f"{conf_source} is the dev cluster in {conf_state} but {url_source} is the one in "
                              f"{url_state}: name one cluster")
        if conf_state and not url_state and not _serves(conf_state, url):
            raise SlinkyError(f"{conf_source} is the dev cluster in {conf_state}, whose slurmrestd is "
                              f"{_dev_restapi_url(conf_state)}, but {url_source} is {url}: name one cluster")
        return ClusterTarget(conf, url, f"{conf_source} and {url_source}")
    if conf:
        return ClusterTarget(conf, _dev_restapi_url(conf_state) if conf_state else None, conf_source)
    if url_state:
        derived = url_state / "etc" / "slurm.conf"
        return ClusterTarget(str(derived) if derived.exists() else None, url, url_source)
    return ClusterTarget(None, url, url_source)


def slurm_conf() -> str | None:
    """The slurm.conf to use when none is given (:func:`cluster_target`'s; ``None``: Slurm's own
    default finds it)."""
    return cluster_target().slurm_conf


def restapi_target(explicit: str | None = None, *, slurm_conf: str | None = None) -> str:
    """Where slurmrestd is: ``explicit`` (``--restapi-url``, which wins whole), else for the cluster
    :func:`cluster_target` selects, or for ``slurm_conf`` when a caller's :class:`Slurm` was given
    another cluster's; refused in one line when that cluster's slurmrestd is unknown."""
    target = cluster_target(restapi_url=explicit)
    if explicit is None and slurm_conf is not None and slurm_conf != target.slurm_conf:
        target = cluster_target(slurm_conf=slurm_conf)
    return target.require_restapi_url()
