"""``slinkyml schema job|cluster``: the JSON Schema of a spec, for editors and CI linters."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "schema",
        description="Print the JSON Schema (draft 2020-12) that slinkyml checks job specs (sbatch) or "
        "cluster specs (cluster) against, e.g. for an editor's YAML language server. The same files ship "
        "in the package under slinkyml/data/schemas/.")
    p.add_argument("kind", choices=("job", "cluster"))
    p.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from slinkyml.specload import SCHEMA_DIR, SCHEMAS

    sys.stdout.write((SCHEMA_DIR / SCHEMAS[args.kind]).read_text())
    return 0
