"""``slinkyml cluster render|validate|apply|diff|status``: Slinky cluster resources on EKS."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser(
        "cluster",
        description="Describe a training cluster once (cluster.yaml) and get the Slinky slurm-operator, "
        "Karpenter, FSx for Lustre and MariaDB objects for EKS; validate them offline; apply them.")
    sub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    render = sub.add_parser("render", help="render a cluster spec to Kubernetes objects")
    render.add_argument("spec", help="cluster spec YAML (see manifests/*/cluster.yaml)")
    render.add_argument("-o", "--output", help="write rendered/, helm/ and aws/ under this folder "
                        "(default: print all objects to stdout)")
    render.add_argument("--helm", action="store_true", help="print Helm values for the slurm chart instead")
    render.add_argument("--secrets-out", metavar="FILE",
                        help="also write freshly generated credential Secrets to FILE (mode 0600; never "
                        "commit it; an existing FILE is refused unless --force). Without it, `apply` creates "
                        "missing Secrets in the cluster")
    render.add_argument("--force", action="store_true", help="replace an existing --secrets-out FILE")
    render.set_defaults(handler=_render)

    validate = sub.add_parser("validate", help="validate a spec or rendered objects offline")
    validate.add_argument("path", help="cluster spec, rendered YAML file, or folder of YAML files")
    validate.add_argument("--operator-version", help="validate against an older operator's CRDs "
                          "(e.g. 0.4.1; needs shared/slinky-crds/legacy or $SLINKYML_CRD_DIR)")
    validate.add_argument("--kubernetes-version", default=None,
                          help="Kubernetes schema version for core kinds (default 1.32)")
    validate.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    validate.set_defaults(handler=_validate)

    def kube(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
        p.add_argument("--context", help="kubeconfig context")

    apply = sub.add_parser("apply", help="server-side apply a cluster spec (creates missing Secrets)")
    apply.add_argument("spec")
    kube(apply)
    apply.add_argument("--dry-run", action="store_true", help="server-side dry run; change nothing")
    apply.add_argument("--skip-missing-kinds", action="store_true",
                       help="skip objects whose CRD is not installed (e.g. no Karpenter)")
    apply.add_argument("--no-secrets", action="store_true", help="do not create missing credential Secrets")
    apply.set_defaults(handler=_apply)

    diff = sub.add_parser(
        "diff", help="show what apply would change, or what changed since an earlier render",
        description="Unified diff per object of the fields the spec sets: against the live cluster, or "
        "with --against against previously rendered YAML (no API server needed). Secret values are never "
        "shown. Exit status: 0 no differences, 1 differences, 2 error.")
    diff.add_argument("spec")
    kube(diff)
    diff.add_argument("--against", metavar="DIR|FILE",
                      help="compare with previously rendered YAML instead of the cluster: a file, a folder "
                      "of YAML files, or a `render -o` folder such as manifests/<name> (its rendered/)")
    diff.set_defaults(handler=_diff)

    status = sub.add_parser("status", help="NodeSet replicas and Slurm node states")
    status.add_argument("spec", nargs="?", help="cluster spec (for its namespace and name)")
    status.add_argument("-n", "--namespace", help="namespace (default: the spec's, else slurm)")
    kube(status)
    status.set_defaults(handler=_status)

    imp = sub.add_parser(
        "import-instance-types", help="make every EC2 type of your region known (from describe-instance-types)",
        description="Turn `aws ec2 describe-instance-types --region REGION --output json` into instance-type "
        "presets (vCPUs, memory, GPUs/Neuron devices, EFA, ENIs, architecture), merged with Karpenter's "
        "generated bandwidth and on-demand price tables (karpenter-provider-aws v1.14.1). Point "
        "SLINKYML_INSTANCE_TYPES at the file written; it overrides the packaged presets per type.")
    imp.add_argument("answer", help="the saved JSON answer of aws ec2 describe-instance-types")
    imp.add_argument("-o", "--output", required=True, help="presets YAML to write")
    imp.add_argument("--force", action="store_true", help="replace an existing output file")
    imp.set_defaults(handler=_import_instance_types)


def _render(args: argparse.Namespace) -> int:
    from slinkyml.cluster import dump_yaml, load_spec, write_output
    from slinkyml.cluster.render import render

    cluster = load_spec(args.spec)
    rendered = render(cluster)
    if args.secrets_out:
        _write_secrets(cluster, Path(args.secrets_out), force=args.force)
    if args.helm:
        sys.stdout.write(dump_yaml(rendered.helm_values))
    elif args.output:
        written = write_output(rendered, args.output)
        print(f"wrote {len(written)} files under {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(dump_yaml(rendered.objects))
    return 0


def _import_instance_types(args: argparse.Namespace) -> int:
    import yaml

    from slinkyml.errors import SlinkyError
    from slinkyml.instance_import import import_describe_instance_types, karpenter_tables
    from slinkyml.instances import load_instance_types

    presets = import_describe_instance_types(Path(args.answer))
    out = Path(args.output)
    if out.exists() and not args.force:
        raise SlinkyError(f"-o {out}: exists (replace it with --force)")
    header = (f"# Written by `slinkyml cluster import-instance-types {Path(args.answer).name}`: EC2's answer merged "
              f"with {karpenter_tables()['source']}.\n# Use: export SLINKYML_INSTANCE_TYPES={out.resolve()}\n")
    out.write_text(header + yaml.safe_dump({"instance_types": presets}, sort_keys=True, width=120))
    load_instance_types(out)  # what was written loads as presets (a bad entry fails here, not at render)
    print(f"wrote {len(presets)} instance types to {out}", file=sys.stderr)
    return 0


def _write_secrets(cluster: object, path: Path, *, force: bool) -> None:
    """Generated credentials into ``path``: atomically, mode 0600, never onto an existing file unless
    ``--force`` (see :mod:`slinkyml.secretfile`)."""
    from slinkyml.cluster import dump_yaml
    from slinkyml.cluster.secrets import render_secrets
    from slinkyml.secretfile import write_secret

    text = dump_yaml(render_secrets(cluster))  # type: ignore[arg-type]
    header = "# Credentials generated by slinkyml. Do NOT commit; seal or encrypt before storing.\n"
    write_secret(path, (header + text).encode(), mode=0o600, force=force)
    print(f"wrote credential Secrets to {path} (mode 0600, checked)", file=sys.stderr)


def _validate(args: argparse.Namespace) -> int:
    from slinkyml.cluster import load_spec
    from slinkyml.cluster.addons import device_plugins, merge_plugin_values
    from slinkyml.cluster.install import install_steps
    from slinkyml.cluster.render import render
    from slinkyml.cluster.runtime_checks import chart_values_issues, fit_table, format_fit_table
    from slinkyml.cluster.spec import from_dict
    from slinkyml.cluster.validate import (
        DEFAULT_KUBERNETES_VERSION,
        load_documents,
        validate_objects,
    )
    from slinkyml.errors import SlinkyError, SpecError

    objs: list = []
    plugin_values: dict[str, list] = {}  # plugin -> every values document given for it
    chart_issues: list = []
    documents = load_documents(args.path)
    if not documents:
        raise SlinkyError(f"{args.path}: nothing to validate (no YAML documents in it)")
    for source, doc in documents:
        if isinstance(doc, dict) and "kind" not in doc and "node_sets" in doc:  # a slinkyml spec
            try:
                if sum(s == source for s, _ in documents) == 1:  # its own file: errors with lines
                    rendered = render(load_spec(source))
                else:
                    rendered = render(from_dict(doc))
            except SpecError as exc:
                raise exc.located(source) from None
            objs += rendered.objects
            for plugin, values in rendered.plugin_values.items():
                plugin_values.setdefault(plugin, []).append(values)
        elif isinstance(doc, dict) and "apiVersion" not in doc and "kind" not in doc:
            plugin = Path(source).stem
            if Path(source).parent.name == "device-plugins" and plugin in device_plugins():
                plugin_values.setdefault(plugin, []).append(doc)  # its tolerations count at run time
            elif "nodesets" in doc and "controller" in doc:  # the slurm chart's values
                chart_issues += chart_values_issues(source, doc)
            elif not args.quiet:
                print(f"note: {source}: skipped a document that is not a Kubernetes object (Helm values?)")
        else:
            objs.append(doc)
    objs, dupes = _dedupe(objs)
    notes: list[str] = []
    issues = dupes + chart_issues + validate_objects(
        objs, operator_version=args.operator_version, kube_version=args.kubernetes_version
        or DEFAULT_KUBERNETES_VERSION, notes=notes,
        plugin_values={name: merge_plugin_values(name, docs) for name, docs in plugin_values.items()})
    for issue in issues:
        print(f"error: {issue}")
    rows = fit_table([o for o in objs if isinstance(o, dict)])
    if rows and not args.quiet:
        print("slurmd requests vs Karpenter's modelled allocatable (per node):")
        print(format_fit_table(rows))
    merged = {name: merge_plugin_values(name, docs) for name, docs in plugin_values.items()}
    if not args.quiet:
        for note in notes:
            print(f"note: {note}")
        for step in install_steps([o for o in objs if isinstance(o, dict)], merged)[:-1]:
            print(f"needs: {step.what}: {step.why}")
    print(f"{len(objs)} objects, {len(issues)} error(s)")
    return 1 if issues else 0


def _dedupe(objs: list) -> tuple[list, list]:
    """A folder holding both cluster.yaml and its render yields each object twice: keep one if
    identical, report it if not (a stale render)."""
    from slinkyml.cluster.validate import Issue, describe

    seen: dict = {}
    out, issues = [], []
    for o in objs:
        meta = o.get("metadata") if isinstance(o, dict) and isinstance(o.get("metadata"), dict) else None
        key = (o.get("apiVersion"), o.get("kind"), meta.get("namespace"), meta.get("name")) if meta else None
        if key is None or not all(isinstance(k, (str, type(None))) for k in key):
            out.append(o)
            continue
        if key in seen:
            if seen[key] != o:
                issues.append(Issue(describe(o), "", "defined more than once with different content "
                                    "(is the render stale? run `slinkyml cluster render -o`)"))
            continue
        seen[key] = o
        out.append(o)
    return out, issues


def _load_and_render(spec: str) -> tuple[Any, Any]:
    from slinkyml.cluster import load_spec
    from slinkyml.cluster.render import render

    cluster = load_spec(spec)
    return cluster, render(cluster)


def _apply(args: argparse.Namespace) -> int:
    from slinkyml.cluster.apply import api_client, apply_objects, ensure_secrets
    from slinkyml.cluster.validate import validate_objects

    cluster, rendered = _load_and_render(args.spec)
    issues = validate_objects(rendered.objects, plugin_values=rendered.plugin_values)
    if issues:  # a validation failure (exit 1), shown as `cluster validate` shows it
        for issue in issues:
            print(f"slinkyml: error: {issue}", file=sys.stderr)
        print(f"slinkyml: error: refusing to apply: {len(issues)} validation error(s)", file=sys.stderr)
        return 1
    api = api_client(args.kubeconfig, args.context)
    objs = rendered.objects  # type: ignore[attr-defined]
    if args.dry_run:  # nothing is stored, so no Secrets either; one pass over every object
        result = apply_objects(objs, api, skip_missing_kinds=args.skip_missing_kinds, dry_run=True)
        unchecked = (f", {len(result['unchecked'])} not checked (they need objects this apply creates first)"
                     if result["unchecked"] else "")
        print(f"{len(result['applied'])} would apply, {len(result['skipped'])} skipped{unchecked}")
        return 0
    # the Namespace must exist before Secrets go into it
    apply_objects(objs[:1], api, skip_missing_kinds=args.skip_missing_kinds, dry_run=args.dry_run)
    if not args.no_secrets and not args.dry_run:
        ensure_secrets(cluster, api)
    result = apply_objects(objs[1:], api, skip_missing_kinds=args.skip_missing_kinds, dry_run=args.dry_run)
    print(f"{len(result['applied']) + 1} applied, {len(result['skipped'])} skipped")
    return 0


def _diff(args: argparse.Namespace) -> int:
    """Like diff(1) and kubectl diff: prints nothing and exits 0 when there is no difference."""
    _, rendered = _load_and_render(args.spec)
    objs = rendered.objects  # type: ignore[attr-defined]
    if args.against is not None:
        from slinkyml.cluster.diff import diff_manifests, load_manifests
        from slinkyml.errors import SlinkyError

        try:
            previous = load_manifests(args.against)
        except SlinkyError as exc:
            raise SlinkyError(f"--against {exc.one_line()}") from None
        result = diff_manifests(previous, objs)
        sys.stdout.write(result.text)
        if result.text:
            print(f"{result.summary()} (against {args.against})", file=sys.stderr)
        return 1 if result.text else 0
    from slinkyml.cluster.apply import api_client, diff_objects

    text = diff_objects(objs, api_client(args.kubeconfig, args.context))
    sys.stdout.write(text)
    return 1 if text else 0


def _status(args: argparse.Namespace) -> int:
    from slinkyml.cluster.apply import api_client, nodeset_status

    namespace, name = args.namespace, None
    if args.spec:
        from slinkyml.cluster import load_spec

        cluster = load_spec(args.spec)
        namespace, name = namespace or cluster.namespace, cluster.name
    rows = nodeset_status(api_client(args.kubeconfig, args.context), namespace or "slurm", name)
    cols = ("name", "desired", "replicas", "ready", "idle", "allocated", "down", "drain")
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) if rows else len(c) for c in cols]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))
    if not rows:
        print(f"(no NodeSets in namespace {namespace or 'slurm'})")
    return 0
