"""The thin submit layer: server-side apply, diff and NodeSet status with the ``kubernetes`` client.

Secret values are created here (if missing) and never printed, logged, or returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slinkyml.cluster.diff import FIELD_MANAGER, diff_object, object_label
from slinkyml.cluster.secrets import render_secrets
from slinkyml.cluster.spec import SlurmCluster
from slinkyml.errors import SlinkyError
from slinkyml.kube import mapping


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A configured ``kubernetes.client.ApiClient`` (kubeconfig, else in-cluster)."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    import yaml  # lazy: only with the kubernetes client, which reads the kubeconfig with it
    from kubernetes import client, config

    try:
        if kubeconfig or context:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        try:
            return config.new_client_from_config()
        except config.ConfigException:
            config.load_incluster_config()
            return client.ApiClient()
    except (config.ConfigException, OSError, UnicodeDecodeError) as exc:
        raise SlinkyError(f"cannot load Kubernetes configuration: {' '.join(str(exc).split())}") from None
    except (TypeError, KeyError, ValueError, AttributeError, yaml.YAMLError) as exc:  # not YAML, or not this shape
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "the kubeconfig"
        raise SlinkyError(f"{where}: not a kubeconfig (a mapping with clusters, contexts and users): "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}") from None


def dynamic_client(api: Any) -> Any:
    """A discovery-backed dynamic client, to reuse across many :func:`judge` calls."""
    return _dynamic(api)


def _dynamic(api: Any) -> Any:
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.dynamic import DynamicClient

    try:
        return DynamicClient(api)
    except Exception as exc:  # connection refused, TLS... -> one line for the user
        raise SlinkyError(f"cannot reach the Kubernetes API server: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message", body))[:300]
        except (ValueError, AttributeError):
            return " ".join(str(body).split())[:300]
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _resource(dyn: Any, obj: dict[str, Any]) -> Any:
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        return None


@dataclass(frozen=True)
class Verdict:
    """What the API server (and its admission webhooks) said to one server-side apply."""

    accepted: bool
    message: str = ""
    #: (field, reason) of each cause the server listed (status.details.causes)
    causes: tuple[tuple[str, str], ...] = ()


def judge(api: Any, obj: dict[str, Any], *, dry_run: bool = True, dynamic: Any = None) -> Verdict | None:
    """Server-side apply one object with strict field validation (an unknown or duplicate field is
    an error, not a pruned warning) and return the server's verdict; None when the API server does
    not serve its kind. ``dynamic``: a client from :func:`dynamic_client` to reuse (discovery)."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException

    res = _resource(dynamic or _dynamic(api), obj)
    if res is None:
        return None
    meta = mapping(obj.get("metadata"))
    path = res.path(name=str(meta.get("name")), namespace=meta.get("namespace") if res.namespaced else None)
    query = [("fieldManager", FIELD_MANAGER), ("force", True), ("fieldValidation", "Strict")]
    if dry_run:
        query.append(("dryRun", "All"))
    try:
        api.call_api(path, "PATCH", query_params=query, body=obj, auth_settings=["BearerToken"],
                     header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
                     _preload_content=False, _return_http_data_only=True)
    except ApiException as exc:
        try:
            status = json.loads(exc.body or "{}")
        except ValueError:
            status = {}
        causes = tuple((str(c.get("field", "")), str(c.get("message", "")))
                       for c in (status.get("details") or {}).get("causes") or [])
        return Verdict(False, str(status.get("message") or _reason(exc)), causes)
    return Verdict(True)


def ensure_secrets(cluster: SlurmCluster, api: Any, log: Callable[[str], None] = print) -> list[str]:
    """Create each credential Secret slinkyml owns that does not exist yet; never overwrite.
    Returns the names created; values never leave this function except towards the API server."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException


    core = client.CoreV1Api(api)
    created = []
    for secret in render_secrets(cluster):
        name = secret["metadata"]["name"]
        try:
            core.read_namespaced_secret(name, cluster.namespace)
            log(f"secret {cluster.namespace}/{name}: exists, kept")
            continue
        except ApiException as exc:
            if exc.status != 404:
                raise SlinkyError(f"secret {cluster.namespace}/{name}: {_reason(exc)}") from None
        try:
            core.create_namespaced_secret(cluster.namespace, secret)
        except ApiException as exc:
            if exc.status == 409:  # created concurrently: keep theirs
                continue
            raise SlinkyError(f"secret {cluster.namespace}/{name}: {_reason(exc)}") from None
        created.append(name)
        log(f"secret {cluster.namespace}/{name}: created (random value, not shown)")
    return created


def apply_objects(objs: list[dict[str, Any]], api: Any, *, skip_missing_kinds: bool = False,
                  dry_run: bool = False, log: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Server-side apply, in order. Kinds whose CRD is not installed fail, or are skipped.

    A dry run stores nothing, so an object that needs one created earlier in the same apply (its
    Namespace; a ConfigMap the operator's webhook looks up) cannot be checked: the server answers
    '"NAME" not found' for it. Such objects are listed as ``unchecked`` instead of failing the run."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException

    dyn = _dynamic(api)
    result: dict[str, list[str]] = {"applied": [], "skipped": [], "unchecked": []}
    missing = sorted({f"{o['apiVersion']} {o['kind']}" for o in objs if _resource(dyn, o) is None})
    if missing and not skip_missing_kinds:
        raise SlinkyError(f"the API server does not serve: {', '.join(missing)} (install the Slinky/Karpenter/"
                          "mariadb-operator CRDs first, or pass --skip-missing-kinds)")
    would_create: list[tuple[str, str]] = []  # (name, "Kind name") of what this dry run would create
    for obj in objs:
        meta = obj["metadata"]
        what = f"{obj['kind']} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta['name']}"
        res = _resource(dyn, obj)
        if res is None:
            result["skipped"].append(what)
            log(f"{what}: skipped ({obj['apiVersion']} not served)")
            continue
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
        if dry_run:
            kwargs["dry_run"] = "All"
            absent = _absent(dyn, res, obj)
        try:
            dyn.server_side_apply(res, body=obj, name=meta["name"], namespace=meta.get("namespace"), **kwargs)
        except ApiException as exc:
            reason = _reason(exc)
            needs = [label for name, label in would_create if f'"{name}" not found' in reason] if dry_run else []
            if not needs:
                raise SlinkyError(f"{what}: apply failed: {reason}") from None
            result["unchecked"].append(what)
            log(f"{what}: not checked (dry run: it needs {needs[0]}, which this apply would create first)")
            continue
        if dry_run and absent:
            would_create.append((meta["name"], f"{obj['kind']} {meta['name']}"))
        result["applied"].append(what)
        log(f"{what}: {'would apply (dry run)' if dry_run else 'applied'}")
    return result


def _absent(dyn: Any, res: Any, obj: dict[str, Any]) -> bool:
    """The object is not on the server yet."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException

    try:
        dyn.get(res, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise SlinkyError(f"{object_label(obj)}: {_reason(exc)}") from None
    return False


def dropped_by_server(objs: list[dict[str, Any]], api: Any) -> str:
    """What the API server would not keep of ``objs``: a server-side dry-run apply of each (schema
    pruning, defaulting, CEL rules and admission webhooks all run; nothing is stored), and the diff of
    what was sent against what came back. '' when every field we set would be stored as sent."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException

    dyn = _dynamic(api)
    out = []
    for obj in objs:
        label = object_label(obj)
        res = _resource(dyn, obj)
        if res is None:
            out.append(f"? {label}: {obj['apiVersion']} not served by this API server\n")
            continue
        try:
            stored = dyn.server_side_apply(res, body=obj, name=obj["metadata"]["name"],
                                           namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
                                           force_conflicts=True, dry_run="All").to_dict()
        except ApiException as exc:
            raise SlinkyError(f"{label}: dry-run apply failed: {_reason(exc)}") from None
        out.append(diff_object(obj, stored, manager=FIELD_MANAGER))
    return "".join(out)


def diff_objects(objs: list[dict[str, Any]], api: Any) -> str:
    """Unified diff, per object, of what the cluster has against ``objs`` ('' if none).

    A missing object shows in full as created; a kind the server does not serve as one ``?`` line.
    """
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException


    dyn = _dynamic(api)
    out = []
    for obj in objs:
        meta = obj["metadata"]
        label = object_label(obj)
        res = _resource(dyn, obj)
        if res is None:
            out.append(f"? {label}: {obj['apiVersion']} not served by this API server\n")
            continue
        try:
            live = dyn.get(res, name=meta["name"], namespace=meta.get("namespace")).to_dict()
        except ApiException as exc:
            if exc.status != 404:
                raise SlinkyError(f"{label}: {_reason(exc)}") from None
            live = None
        out.append(diff_object(obj, live, manager=FIELD_MANAGER))
    return "".join(out)


def nodeset_status(api: Any, namespace: str, cluster: str | None = None) -> list[dict[str, Any]]:
    """One row per NodeSet: replicas and the Slurm node states the operator reports."""
    # lazy: the kubernetes client is the optional [k8s] extra (apply, diff, status only)
    from kubernetes.client.exceptions import ApiException

    dyn = _dynamic(api)
    res = _resource(dyn, {"apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet"})
    if res is None:
        raise SlinkyError("the API server does not serve slinky.slurm.net/v1beta1 NodeSet (is the operator installed?)")
    selector = f"slinkyml.io/cluster={cluster}" if cluster else None
    try:
        items = dyn.get(res, namespace=namespace, label_selector=selector).to_dict().get("items", [])
    except ApiException as exc:
        raise SlinkyError(f"listing NodeSets in {namespace}: {_reason(exc)}") from None
    rows = []
    for item in sorted(items, key=lambda i: i["metadata"]["name"]):
        st = item.get("status") or {}
        rows.append({
            "name": item["metadata"]["name"],
            "desired": (item.get("spec") or {}).get("replicas"),
            "replicas": st.get("replicas", 0),
            "ready": st.get("readyReplicas", 0),
            "idle": st.get("slurmIdle", 0),
            "allocated": st.get("slurmAllocated", 0),
            "down": st.get("slurmDown", 0),
            "drain": st.get("slurmDrain", 0),
        })
    return rows
