"""``slinkyml import``: a Kubeflow PyTorchJob/MPIJob/TrainJob or Volcano Job → a slinkyml job spec."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "import",
        description="Read a Kubeflow PyTorchJob (kubeflow.org/v1), MPIJob (kubeflow.org/v2beta1, v1), TrainJob "
        "(trainer.kubeflow.org/v1alpha1) or Volcano Job (batch.volcano.sh/v1alpha1) and print the equivalent "
        "slinkyml job spec (YAML) for `slinkyml sbatch render|submit`. Each pod becomes a node. Fields with no "
        "Slurm equivalent are listed on stderr, one line each (errors with --strict). Exit 0: imported; 1: the "
        "manifest cannot be imported; 2: bad arguments.")
    p.add_argument("manifest", metavar="FILE", help="the manifest (YAML or JSON; one job, or pick with --name)")
    p.add_argument("-o", "--output", metavar="JOB.yaml", help="write the spec here instead of stdout")
    p.add_argument("--name", help="the job to import when FILE holds several")
    p.add_argument("--claim-path", action="append", default=[], metavar="CLAIM=PATH",
                   help="mount PersistentVolumeClaim CLAIM from PATH on the cluster (repeatable)")
    p.add_argument("--shared-root", default="/fsx", metavar="DIR",
                   help="claims without --claim-path are mounted from DIR/CLAIM (default /fsx)")
    p.add_argument("--queue-map", action="append", default=[], metavar="QUEUE=[partition:|account:|qos:]NAME",
                   help="a Kubeflow/Volcano queue's Slurm partition, account or qos (repeatable)")
    p.add_argument("--time", metavar="TIME", help="time limit when the manifest sets no activeDeadlineSeconds")
    p.add_argument("--no-container", action="store_true",
                   help="run on the nodes' own software instead of the manifest's image (no pyxis)")
    p.add_argument("--strict", action="store_true", help="fields that cannot be mapped are errors")
    p.set_defaults(handler=_import)


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    from slinkyml.errors import SlinkyError

    out = {}
    for value in values:
        key, sep, target = value.partition("=")
        if not sep or not key or not target:
            raise SlinkyError(f"{flag} {value!r}: expected NAME=VALUE")
        out[key] = target
    return out


def _import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from slinkyml.errors import SlinkyError
    from slinkyml.jobs.importer import ImportOptions, import_manifest

    options = ImportOptions(claim_paths=_pairs(args.claim_path, "--claim-path"), shared_root=args.shared_root,
                            queue_map=_pairs(args.queue_map, "--queue-map"), default_time=args.time,
                            strict=args.strict, container=not args.no_container)
    result = import_manifest(Path(args.manifest), options, name=args.name)
    for note in result.notes:
        print(f"slinkyml: note: {note}", file=sys.stderr)
    for warning in result.warnings:
        print(f"slinkyml: warning: {args.manifest}: {warning} (not mapped)", file=sys.stderr)
    text = result.to_yaml()
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise SlinkyError(f"{args.output}: cannot write: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
