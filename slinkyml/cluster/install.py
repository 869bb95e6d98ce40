"""What must be installed, in order, before a set of rendered objects can run, read from the
objects themselves (so a hand-written folder gets the same list) and ``data/cluster_addons.yaml``.

``render`` writes it as ``INSTALL.md``; ``cluster validate`` prints it as notes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from slinkyml import DATA_DIR
from slinkyml.cluster import addons
from slinkyml.cluster.issues import describe
from slinkyml.cluster.karpenter import ANNOTATION_QUEUE
from slinkyml.cluster.spec import DEFAULT_SLURM_VERSION, SLURM_IMAGE_TAGS
from slinkyml.kube import dig

#: the Controller's annotation naming the slurm-operator release its objects were rendered for
ANNOTATION_OPERATOR = "slinkyml.io/slurm-operator"

#: where an object claims a volume: kind -> (storage class path, size path)
_CLAIMS = {
    "Controller": (("spec", "persistence", "storageClassName"), ("spec", "persistence", "enabled")),
    "MariaDB": (("spec", "storage", "storageClassName"), ("spec", "storage", "size")),
    "PersistentVolumeClaim": (("spec", "storageClassName"), ("spec", "resources")),
}


#: the generic install script; ``render`` writes it as ``install.sh`` with the cluster's steps filled in
SCRIPT = DATA_DIR / "shell" / "cluster-install.sh"
_STEPS_MARK = "set -- # @INSTALL_STEPS@ (the renderer puts this cluster's steps here)"

#: what ``install.sh`` does with each kind of step against ``slinkyml dev kube`` (TARGET=dev-kube): every
#: step that needs no AWS runs; the others are skipped with this reason, and what the plane serves instead
DEV_KUBE = {
    "cert-manager": "not built here: dev kube signs the operator webhook's serving certificate with its own CA "
                    "and registers it with that caBundle (the chart's certManager.enabled=false alternative)",
    "operator-crds": "served by dev kube (the vendored CRDs, applied by `dev kube up`; ROUTE=helm: the chart "
                     "from the operator's Go module takes them over)",
    "operator": "dev kube runs the operator's manager and webhook, built from its Go module (kube/build.sh); "
                "ROUTE=helm also installs the chart with certManager.enabled=false and its webhook off (no node "
                "runs the chart's pods; the plane's webhook judges)",
    "karpenter-aws": "AWS only (CloudFormation, IAM, EKS access entries, EC2 tags)",
    "karpenter": "needs AWS (the controller launches EC2 instances and reads the interruption queue); dev kube "
                 "serves its NodePool and EC2NodeClass CRDs from the karpenter-provider-aws module, so the "
                 "objects are stored, no node is launched",
    "storageclass": "the EBS CSI driver is AWS only (EBS volumes) and skipped; the StorageClass is applied",
    "mariadb-operator": "not built here; dev kube serves its MariaDB CRD from the mariadb-operator module, so "
                        "the MariaDB object is stored, not run",
    "fsx": "AWS only (FSx for Lustre)",
    "device-plugin": "needs nodes with the device (GPU, Neuron or EFA instances on AWS)",
    "images": "needs a registry the nodes pull from; dev kube has none: its live pod tests build the worker and "
              "login images here from the Debian sid root with the same training stack and name them through "
              "images.registry",
    "secrets": "runs as on EKS",
    "objects": "runs as on EKS",
}
#: the kinds of step ``install.sh`` skips on ``dev kube`` (the others run, or check what the plane serves)
SKIPPED_ON_DEV_KUBE = {"cert-manager", "karpenter-aws", "karpenter", "mariadb-operator", "fsx", "device-plugin",
                       "images"}
#: where a pod's image of this repository's (``<registry>/slinkyml/<name>:<tag>``) is named: kind -> container field
_PROJECT_IMAGE_FIELDS = {"NodeSet": "slurmd", "LoginSet": "login"}
#: the placeholder ``install.sh`` fills from ``$SLINKYML_SOURCE`` (the build context: containers/ and the package)
SOURCE_PLACEHOLDER = "<a slinkyml source checkout>"


@dataclass(frozen=True)
class Step:
    """One install step: what, why (which objects need it) and the command INSTALL.md shows; ``kind``
    (a ``DEV_KUBE`` key, ``=ARG`` for the storage class or namespace) and ``run`` (the command
    ``install.sh`` runs on EKS where it differs from the one shown) drive ``install.sh``."""

    what: str
    why: str
    command: str
    kind: str = ""
    run: str | None = None


def _claims(objs: list[dict[str, Any]], provided: set[str]) -> dict[str | None, list[str]]:
    """Storage class (None: the default) -> the objects whose volume it must provision; classes
    the objects themselves define (FSx) are left out."""
    out: dict[str | None, list[str]] = {}
    for o in objs:
        paths = _CLAIMS.get(str(o.get("kind")))
        if paths is None or not dig(o, *paths[1]):
            continue
        cls = dig(o, *paths[0])
        if cls not in provided:
            out.setdefault(cls if isinstance(cls, str) else None, []).append(describe(o))
    return out


def install_steps(objs: list[dict[str, Any]], plugin_values: dict[str, Any] | None = None) -> list[Step]:
    """The install sequence for ``objs`` (a render, or a folder of manifests)."""
    data = addons.addons()
    kinds = {str(o.get("kind")) for o in objs}
    apis = {str(o.get("apiVersion")) for o in objs}
    named = {dig(o, "metadata", "annotations", ANNOTATION_OPERATOR) for o in objs} - {None}
    so = addons.operator_release(str(named.pop()) if len(named) == 1 else None)
    steps = []
    if any(a.startswith("slinky.slurm.net/") for a in apis):
        steps += [
            Step("cert-manager", data["cert_manager"]["note"], data["cert_manager"]["install"], "cert-manager"),
            Step(f"slurm-operator-crds {so['charts']['slurm-operator-crds']}", "the slinky.slurm.net CRDs (the "
                 "operator chart installs none: crds.enabled is false)", so["crds_install"], "operator-crds"),
            Step(f"slurm-operator {addons.chart_name(so)}", f"reconciles the Slinky objects; {so['note']}; "
                 f"Slurm {so['minimum_slurm_version']} or later", so["install"], "operator"),
        ]
    if "NodePool" in kinds:
        k = data["karpenter"]
        classes = [o for o in objs if o.get("kind") == "EC2NodeClass"]
        names = {"cluster": _first([dig(t, "tags", "karpenter.sh/discovery") for o in classes
                                    for t in dig(o, "spec", "subnetSelectorTerms") or []], "EKS cluster name"),
                 "queue": _first([dig(o, "metadata", "annotations", ANNOTATION_QUEUE) for o in classes],
                                 "interruption queue"),
                 "role": _first([dig(o, "spec", "role") for o in classes], "node role")}
        steps.append(Step("Karpenter's AWS prerequisites (AWS only)", k["prerequisites_note"].format(**names),
                          k["prerequisites"].format(**names), "karpenter-aws"))
        steps.append(Step(f"Karpenter {k['version']}", "launches the NodePools' nodes", k["install"].format(**names),
                          "karpenter"))
    provided = {dig(o, "metadata", "name") for o in objs if o.get("kind") == "StorageClass"}
    for cls, users in _claims(objs, provided).items():
        ebs = data["ebs_csi_driver"]
        target = f"a StorageClass '{cls}'" if cls else "a default StorageClass"
        steps.append(Step(f"{target} (aws-ebs-csi-driver, provisioner {ebs['provisioner']})",
                          f"volumes of {', '.join(users)}; {ebs['note']}",
                          f"{ebs['install']}; then kubectl apply a StorageClass "
                          f"{'named ' + cls if cls else 'annotated storageclass.kubernetes.io/is-default-class'}"
                          " (provisioner ebs.csi.aws.com, parameters.type gp3, volumeBindingMode WaitForFirstConsumer)",
                          f"storageclass={cls or ''}", ebs["install"]))
    if "MariaDB" in kinds:
        m = data["mariadb_operator"]
        steps.append(Step(f"mariadb-operator ({m['version']})", m["note"], m["install"], "mariadb-operator"))
    if any(o.get("kind") == "StorageClass" and o.get("provisioner") == "fsx.csi.aws.com" for o in objs):
        f = data["fsx_csi_driver"]
        steps.append(Step(f"aws-fsx-csi-driver ({f['version']})", "provisions the FSx for Lustre StorageClass's volume",
                          f["install"], "fsx"))
    for name in sorted(plugin_values or {}):
        p = addons.device_plugins()[name]
        steps.append(Step(f"{p['chart']} ({p['version']})", f"advertises {p['resource']} on the NodePools' nodes",
                          p["install"], "device-plugin"))
    images = project_images(objs)
    if images:
        steps.append(Step("the training images", f"{', '.join(images)}, which the pods run: Slinky's images with "
                          "Python, PyTorch, DeepSpeed and slinkyml (containers/README.md), built from a slinkyml "
                          "checkout and pushed where every node can pull them (docker login to the registry first)",
                          " && ".join(_build_and_push(image, name, objs) for image, name in images.items()),
                          "images"))
    refs = secret_names(objs)
    if refs:
        steps.append(Step("the credential Secrets", f"{', '.join(refs)}, which the objects reference; secrets.sh "
                          "makes each missing one with kubectl from a random file written 0600 in a private "
                          "folder, never printed (`slinkyml cluster apply` makes them itself)", "sh secrets.sh",
                          "secrets"))
    chart = (f"oci://ghcr.io/slinkyproject/charts/slurm --version {so['charts']['slurm']}" if so["published"]
             else "./slurm-operator/helm/slurm")
    namespace = next((str(dig(o, "metadata", "namespace")) for o in objs if str(o.get("apiVersion")).startswith(
        "slinky.slurm.net/")), "slurm")
    steps.append(Step("the cluster's objects", "after the CRDs and webhooks above are serving and the Secrets exist",
                      "kubectl apply --server-side -f rendered/ (or slinkyml cluster apply cluster.yaml; Helm "
                      "route: apply the files of rendered/ the chart does not make (all but the Controller, NodeSets, LoginSet, "
                      "RestApi, Accounting, their ConfigMap and sssd.conf Secret), then helm install slurm "
                      f"{chart} --namespace {namespace} -f helm/values.yaml)", f"objects={namespace}", chart))
    return steps


def project_images(objs: list[dict[str, Any]]) -> dict[str, str]:
    """The images of this repository's (``…/slinkyml/<name>:<tag>``, containers/<name>) the pods name, in
    first-use order: image -> name."""
    known = addons.addons()["project_images"]
    found: dict[str, str] = {}
    for o in objs:
        field = _PROJECT_IMAGE_FIELDS.get(str(o.get("kind")))
        image = dig(o, "spec", field, "image") if field else None
        name = addons.project_image_name(image) if isinstance(image, str) else None
        if isinstance(image, str) and name is not None and name in known:
            found.setdefault(image, name)
    return found


def _build_and_push(image: str, name: str, objs: list[dict[str, Any]]) -> str:
    """The commands that build containers/<name> on the Slinky image of the objects' Slurm version and push it."""
    slurmctld = next((str(dig(o, "spec", "slurmctld", "image")) for o in objs if o.get("kind") == "Controller"), "")
    slinky_tag = slurmctld.rpartition(":")[2] or SLURM_IMAGE_TAGS[DEFAULT_SLURM_VERSION]
    base = addons.addons()["project_image_builds"][name].format(version=slinky_tag.split("-", 1)[0],
                                                                slinky_tag=slinky_tag)
    return (f"docker build -f {shlex.quote(SOURCE_PLACEHOLDER)}/containers/{name}/Dockerfile --build-arg SLURM_TAG={base} "
            f"-t {image} {shlex.quote(SOURCE_PLACEHOLDER)} && docker push {image}")


#: where Slinky and MariaDB objects name a credential Secret
_SECRET_REFS = (("spec", "slurmKeyRef"), ("spec", "jwtKeyRef"), ("spec", "storageConfig", "passwordKeyRef"),
                ("spec", "passwordSecretKeyRef"), ("spec", "rootPasswordSecretKeyRef"))


def secret_names(objs: list[dict[str, Any]]) -> list[str]:
    """The credential Secrets the objects reference, in first-reference order."""
    found: dict[str, None] = {}
    for o in objs:
        for path in _SECRET_REFS:
            name = dig(o, *path, "name")
            if isinstance(name, str) and name:
                found[name] = None
    return list(found)


def _first(values: list[Any], what: str) -> str:
    """The first non-empty string of ``values``, or ``<what>`` for the user to fill in."""
    return next((v for v in values if isinstance(v, str) and v), f"<{what}>")


def install_markdown(name: str, steps: list[Step]) -> str:
    lines = [f"# Installing cluster {name}", "",
             "Generated by `slinkyml cluster render` from cluster.yaml; do not edit by hand. In this order, or "
             "all of them with `install.sh` beside this file: `TARGET=eks sh install.sh` runs each command below "
             "in the current kubectl context (the Karpenter prerequisites take `SUBNET_IDS` and "
             "`NODE_SECURITY_GROUP`; `ROUTE=helm` installs the `slurm` chart instead of applying rendered/; "
             "`FROM=N` starts at step N), `TARGET=dev-kube sh install.sh` runs them against `slinkyml dev "
             "kube` (`eval $(slinkyml dev kube env)`), skipping the steps marked *dev kube: skipped* with the "
             "reason given.", ""]
    for i, s in enumerate(steps, 1):
        kind = s.kind.partition("=")[0]
        note = DEV_KUBE.get(kind, "")
        skipped = kind in SKIPPED_ON_DEV_KUBE
        lines += [f"{i}. **{s.what}**: {s.why}.", "", "   ```", f"   {s.command}", "   ```", ""]
        if note and kind not in ("secrets", "objects"):
            lines += [f"   *dev kube: {'skipped, ' if skipped else ''}{note}.*", ""]
    return "\n".join(lines)



def install_script(steps: list[Step]) -> str:
    """``install.sh`` for a render: ``data/shell/cluster-install.sh`` with the steps INSTALL.md lists
    (kind, title, command, the dev-kube note), so the script and INSTALL.md come from one list."""
    args = []
    for s in steps:
        args += [s.kind, s.what, s.command if s.run is None else s.run, DEV_KUBE[s.kind.partition("=")[0]]]
    text = SCRIPT.read_text()
    if _STEPS_MARK not in text:
        raise AssertionError(f"{SCRIPT}: the steps line is missing")
    # SC2016: the commands are data, expanded only when the script runs them with sh -c
    return text.replace(_STEPS_MARK, "# shellcheck disable=SC2016\nset -- "
                        + " \\\n    ".join(shlex.quote(a) for a in args))
