"""A job's parameters, declared once: each field of the spec classes in ``jobs/spec.py`` is a
``param(...)`` that carries its JSON Schema keywords and the ``slinkyml run`` flag that sets it.

The published schema (``data/schemas/job.schema.json``: the loader checks specs against it,
``slinkyml schema job`` prints it, ``slinkyml run`` reads its flags from its ``x-cli`` entries) is
generated from those fields: ``make schema`` (``python -m slinkyml.jobs.params``), and
``tests/test_job_parameters.py`` fails when the file and the classes differ. Adding a parameter is
one field in ``jobs/spec.py`` plus its Slurm mapping in ``jobs/request.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

from slinkyml.specload import SCHEMA_DIR, SCHEMAS

#: JSON Schema's name of each Python type a field's hint may name
_JSON_TYPES: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string",
                               type(None): "null"}
#: how one value of a repeatable or split flag is read (``Flag.each``)
EACH = ("append", "key=value", "comma-list")


@dataclasses.dataclass(frozen=True)
class Flag:
    """How ``slinkyml run`` sets a parameter. ``default``: when the flag is not given its value is the
    parameter's default (so ``--save-spec`` writes it out); ``each``: how a value is read when it is not
    one plain word: ``append`` (repeatable, a list), ``key=value`` (repeatable, a mapping) or
    ``comma-list`` (one word split at commas)."""

    options: tuple[str, ...]
    help: str | None = None
    metavar: str | None = None
    default: bool = False
    each: str | None = None

    def __post_init__(self) -> None:
        assert self.options and all(o.startswith("-") for o in self.options), self.options
        assert self.each in (None, *EACH), self.each

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"options": list(self.options)}
        out |= {key: value for key, value in (("help", self.help), ("metavar", self.metavar),
                                              ("each", self.each)) if value is not None}
        return out | ({"default": True} if self.default else {})


def flag(*options: str, help: str | None = None, metavar: str | None = None, default: bool = False,
         each: str | None = None) -> Flag:
    """A ``slinkyml run`` flag for a :func:`param` (``flag("-N", "--nodes", help="nodes (1)")``)."""
    return Flag(tuple(options), help, metavar, default, each)


def param(default: Any = dataclasses.MISSING, description: str | None = None, *,
          factory: Any = dataclasses.MISSING, required: bool = False, accepts: Sequence[str] | None = None,
          error: str | None = None, cli: Flag | None = None, **keywords: Any) -> Any:
    """A spec class's field and what the published schema says of it. ``accepts``: the JSON types a spec
    may give (default: those of the field's type hint); ``keywords``: JSON Schema keywords (``minimum=``,
    ``pattern=``...); ``error``: the loader's message for a value they refuse (``x-error``); ``cli``: the
    ``slinkyml run`` flag. A plain default (a number, a string, a boolean) is the schema's default too.
    ``required``: a field the spec must give that the class checks itself (it defaults to None)."""
    metadata = {"param": {"description": description, "types": tuple(accepts) if accepts else None, "error": error,
                          "cli": cli, "required": required, "keywords": keywords}}
    if required:
        return dataclasses.field(default=None, metadata=metadata)
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def schema(cls: type, *, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of spec class ``cls``: its fields' params, and one ``$defs`` entry
    per field whose type is a spec class of its own (named by the field)."""
    defs: dict[str, Any] = {}
    node = _object(cls, ["object"], None, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "description": description,
            **node, "$defs": defs}


def _object(cls: type, json_types: list[str], description: str | None, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    required = [f.name for f in fields if _param(f)["required"]
                or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)]
    node: dict[str, Any] = {"type": _one(json_types), "additionalProperties": False}
    node |= {"required": required} if required else {}
    node |= {"description": description} if description else {}
    properties = {}
    for f in fields:
        meta = _param(f)
        nested = [t for t in _members(hints[f.name]) if isinstance(t, type) and dataclasses.is_dataclass(t)]
        if nested:
            defs[f.name] = _object(nested[0], list(meta["types"] or _json_types(hints[f.name])), meta["description"],
                                   defs)
            properties[f.name] = {"$ref": f"#/$defs/{f.name}"}
        else:
            properties[f.name] = _property(f, hints[f.name], meta)
    node["properties"] = properties
    return node


def _property(f: dataclasses.Field[Any], hint: Any, meta: dict[str, Any]) -> dict[str, Any]:
    prop: dict[str, Any] = {"type": _one(list(meta["types"] or _json_types(hint))), **meta["keywords"]}
    if isinstance(f.default, (bool, int, str)):
        prop["default"] = f.default
    prop |= {"description": meta["description"]} if meta["description"] else {}
    prop |= {"x-error": meta["error"]} if meta["error"] else {}
    prop |= {"x-cli": meta["cli"].schema()} if meta["cli"] else {}
    return prop


def _param(f: dataclasses.Field[Any]) -> dict[str, Any]:
    meta = f.metadata.get("param")
    if meta is None:
        raise TypeError(f"{f.name}: a spec field is declared with param(...) (slinkyml/jobs/params.py)")
    return meta


def _members(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


def _json_types(hint: Any) -> list[str]:
    try:
        return [_JSON_TYPES[t] if not dataclasses.is_dataclass(t) else "object" for t in _members(hint)]
    except KeyError:
        raise TypeError(f"{hint}: give the JSON types a spec may give (param(accepts=...))") from None


def _one(json_types: list[str]) -> str | list[str]:
    return json_types[0] if len(json_types) == 1 else json_types


def text(generated: dict[str, Any]) -> str:
    """The schema file's text: what ``make schema`` writes."""
    return json.dumps(generated, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """``python -m slinkyml.jobs.params [--check]``: write the job schema, or (``--check``) say whether the
    file is the one the spec classes give."""
    from slinkyml.jobs.spec import job_schema  # here, not at the top: jobs/spec.py imports this module

    path = SCHEMA_DIR / SCHEMAS["job"]
    wanted = text(job_schema())
    if argv == ["--check"]:
        if path.read_text() != wanted:
            print(f"{path}: not what slinkyml/jobs/spec.py declares; run `make schema`", file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
