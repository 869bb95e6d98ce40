"""One loader for the YAML specs users write (job specs, cluster specs).

Every problem at once, each as ``FILE:LINE: field.path: message``, never a traceback. Structure
comes from the JSON Schemas under ``data/schemas/`` (checked by the subset of JSON Schema below).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml

from slinkyml import DATA_DIR
from slinkyml.errors import Problem, SpecError, did_you_mean

SCHEMA_DIR = DATA_DIR / "schemas"
#: spec kind -> schema file (``slinkyml schema KIND``).
SCHEMAS = {"job": "job.schema.json", "cluster": "cluster.schema.json"}
#: YAML nodes one spec may expand to (aliases can make a small file huge: "billion laughs").
MAX_NODES = 100_000
#: the largest spec file read (a real one is a few kB; 100,000 values fit in far less)
MAX_FILE_BYTES = 8 << 20
_T = TypeVar("_T")
#: libyaml's parser where PyYAML has it: ~5x faster on the packaged data files every render reads
#: (same documents: tests/test_specload.py); user specs keep the Python parser for line numbers.
_DATA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# ---------------------------------------------------------------- reading


def read_text(path: str | Path) -> str:
    """A spec file's text; a missing, unreadable or non-UTF-8 file is one :class:`SpecError` line
    worded the same for every command (``FILE: cannot read: No such file or directory``)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(problems=[Problem("", f"cannot read: {exc.strerror or exc}", str(p))]) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(problems=[Problem("", f"larger than {MAX_FILE_BYTES >> 20} MiB, the limit for a spec "
                                          "(refused unread)", str(p))])
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(problems=[Problem("", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file "
                                          "as UTF-8", str(p), line)]) from None


# ---------------------------------------------------------------- parsing


@dataclass
class Document:
    """A parsed YAML document and the line of every field path in it (``node_sets[1].zone``)."""

    data: Any
    source: str = ""
    lines: dict[str, int] = field(default_factory=dict)
    #: duplicate keys: reported together with what building the spec finds
    problems: list[Problem] = field(default_factory=list)

    def line_of(self, path: str) -> int | None:
        """The line of ``path``, else of the nearest enclosing field (a missing field's mapping)."""
        while path not in self.lines:
            if not path:
                return None
            parent = re.match(r"^(.*?)(\.[^.\[\]]*|\[\d+\])$", path)
            path = parent.group(1) if parent else ""
        return self.lines[path]

    def sub(self, key: str) -> Document:
        """The document under ``key`` (a spec wrapped as ``kind: ...``/``spec:``), lines kept."""
        prefix = f"{key}."
        lines = {path.removeprefix(prefix): line for path, line in self.lines.items() if path.startswith(prefix)}
        return Document(self.data[key], self.source, {"": self.lines.get(key, 1), **lines}, self.problems)

    def build(self, make: Callable[[Any], _T]) -> _T:
        """``make(data)``; its problems and the document's own, located in this file, in line order."""
        found = list(self.problems)
        try:
            result = make(self.data)
        except SpecError as exc:
            found += exc.located(self.source, self.line_of).problems
        if found:
            raise SpecError(problems=sorted(found, key=lambda p: p.line or 0))
        return result


def load_data(text: str) -> Any:
    """A YAML data file (packaged presets, instance types, CRDs; a user's override of one)."""
    return yaml.load(text, Loader=_DATA_LOADER)


def load_data_all(text: str) -> list[Any]:
    """Every document of a multi-document YAML data file (rendered manifests), with the same parser."""
    return list(yaml.load_all(text, Loader=_DATA_LOADER))


def join(path: str, key: Any) -> str:
    """``a.b`` / ``a[0]``: the field paths every spec error uses."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def parse_yaml(text: str, source: str = "") -> Document:
    """One YAML document; duplicate keys and syntax errors are :class:`SpecError` s with lines."""
    try:
        loader = yaml.SafeLoader(text)  # checks every character first
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    builder = _Builder(loader, source)
    try:
        node = loader.get_single_node()
        data = builder.build(node, "") if node is not None else None
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:
        raise SpecError(problems=[Problem("", "not a spec: nested too deeply", source)]) from None
    except _TooLarge:
        data = None  # the builder's problem says why
    finally:
        loader.dispose()
    if data is None and builder.problems:  # too large: nothing to build
        raise SpecError(problems=builder.problems)
    return Document(data, source, builder.lines, builder.problems)


def _yaml_error(exc: Exception, text: str, source: str) -> SpecError:
    mark = getattr(exc, "problem_mark", None)
    if mark is None and hasattr(exc, "position"):  # ReaderError: a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        character = getattr(exc, "character", None)
        reason = f"character #x{character:04x} is not allowed" if isinstance(character, int) else "bad character"
    else:
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or "parse error"
    return SpecError(problems=[Problem("", f"not valid YAML: {reason}", source, line)])


class _TooLarge(Exception):
    pass


class _Builder:
    """Plain data from YAML nodes, recording each field's line and refusing duplicate keys
    (PyYAML keeps the last one silently: ``count: 2`` then ``count: 0`` would mean 0)."""

    def __init__(self, loader: Any, source: str):
        self.loader = loader
        self.source = source
        self.lines: dict[str, int] = {}
        self.problems: list[Problem] = []
        self.nodes = 0

    def build(self, node: Any, path: str) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.problems = [Problem("", f"not a spec: expands to more than {MAX_NODES} values (aliases?)",
                                     self.source)]
            raise _TooLarge
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, join(path, i)) for i, item in enumerate(node.value)]
        if not isinstance(node, yaml.MappingNode):
            return self.loader.construct_object(node, deep=True)
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.loader.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                self.problems.append(Problem(join(path, key), f"duplicate key (also on line {first[key]}); "
                                             "YAML would keep only the last one", self.source, line))
            first.setdefault(key, line)
        self.loader.flatten_mapping(node)  # `<<: *base` merges; explicit keys override merged ones
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(Problem(path, "keys must be plain names, not lists or mappings",
                                             self.source, key_node.start_mark.line + 1))
                continue
            key = self.loader.construct_object(key_node)
            child = join(path, key)
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, child)
        return out


def load(source: str | Path, *, text: str | None = None) -> Document:
    """Read (unless ``text`` is given) and parse a spec file."""
    return parse_yaml(read_text(source) if text is None else text, str(source))


# ---------------------------------------------------------------- checking against the schema


@cache
def schema(kind: str) -> dict[str, Any]:
    """The published JSON Schema of a spec kind (``job``, ``cluster``)."""
    return json.loads((SCHEMA_DIR / SCHEMAS[kind]).read_text())


def check(data: Any, kind: str, path: str = "", *, definition: str | None = None) -> list[Problem]:
    """Every problem of ``data`` against the ``kind`` schema (or one of its ``$defs``)."""
    root = schema(kind)
    node = root["$defs"][definition] if definition else root
    out: list[Problem] = []
    _check(data, node, path, root, out)
    return out


def check_or_raise(data: Any, kind: str, path: str = "", *, definition: str | None = None) -> None:
    problems = check(data, kind, path, definition=definition)
    if problems:
        raise SpecError(problems=problems)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, (list, tuple)),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    # JSON has no NaN or infinity: YAML's .nan/.inf are not numbers a spec can hold
    "number": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_NAMES = {"object": "mapping", "array": "list", "string": "string", "integer": "integer",
          "number": "number", "boolean": "boolean", "null": "null"}


def type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _TYPES[name](value):
            return _NAMES[name]
    return type(value).__name__


def shown(value: Any) -> str:
    """A value as a message quotes it: repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(value: Any, node: Mapping[str, Any], path: str, root: Mapping[str, Any], out: list[Problem]) -> None:
    if "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    kinds = node.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_TYPES[k](value) for k in kinds):
            names = [_NAMES[k] for k in kinds if k != "null"] or ["null"]
            want = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
            got = type_name(value)
            out.append(Problem(path, f"expected {want}, got {got}" + ("" if value is None else f" {shown(value)}")))
            return
    message = node.get("x-error")
    if "enum" in node and not any(type(value) is type(c) and value == c for c in node["enum"]):
        choices = [str(c) for c in node["enum"]]
        hint = did_you_mean(str(value), choices, f" (one of {', '.join(choices)})")
        out.append(Problem(path, f"unknown {shown(value)}{hint}"))
        return
    if isinstance(value, str):
        if "\0" in value:
            out.append(Problem(path, "must not contain NUL characters"))
            return
        if len(value) < node.get("minLength", 0):
            out.append(Problem(path, "must not be empty" if node["minLength"] == 1
                               else f"must be at least {node['minLength']} characters"))
        elif "maxLength" in node and len(value) > node["maxLength"]:
            out.append(Problem(path, f"must be at most {node['maxLength']} characters, got {len(value)}"))
        elif "pattern" in node and not _pattern(node["pattern"]).search(value):
            out.append(Problem(path, message.format(value=shown(value)) if message
                               else f"{shown(value)} does not match {node['pattern']}"))
    elif _TYPES["number"](value):
        low, high = node.get("minimum"), node.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            rng = f"between {low} and {high}" if low is not None and high is not None else \
                f"at least {low}" if low is not None else f"at most {high}"
            out.append(Problem(path, f"must be {rng}, got {shown(value)}"))
    elif _TYPES["array"](value):
        if len(value) < node.get("minItems", 0):
            out.append(Problem(path, message or f"needs at least {node['minItems']} item(s)"))
        if "items" in node:
            for i, item in enumerate(value):
                _check(item, node["items"], join(path, i), root, out)
    elif _TYPES["object"](value):
        _check_object(value, node, path, root, out)


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    """A schema pattern as JSON Schema means it: ``$`` is the end of the text (in Python it also
    matches before a final newline, which would let ``name: "x\\n"`` through)."""
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern)


def _check_object(value: Mapping[Any, Any], node: Mapping[str, Any], path: str, root: Mapping[str, Any],
                  out: list[Problem]) -> None:
    props = node.get("properties", {})
    for key in node.get("required", ()):
        if key not in value:
            out.append(Problem(join(path, key), "required field missing"))
    extra = node.get("additionalProperties", True)
    for key, item in value.items():
        child = join(path, key)
        if not isinstance(key, str):
            out.append(Problem(child, f"field names must be strings, got {type_name(key)} {shown(key)}"))
        elif key in props:
            _check(item, props[key], child, root, out)
        elif extra is False:
            hint = did_you_mean(key, props, f" (known: {', '.join(props)})")
            out.append(Problem(child, f"unknown field{hint}"))
        else:
            names = node.get("propertyNames")
            before = len(out)
            if names is not None:
                _check(key, names, child, root, out)
            if isinstance(extra, Mapping) and len(out) == before:
                _check(item, extra, child, root, out)


def check_fields(obj: Any, kind: str, *, definition: str | None = None, path: str = "") -> None:
    """Check a spec dataclass's own fields against its schema, every problem at once (nested spec
    objects check themselves when they are built): the Python API gets the loader's checks."""
    root = schema(kind)
    props = (root["$defs"][definition] if definition else root)["properties"]
    out: list[Problem] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not dataclasses.is_dataclass(value):
            _check(value, props[f.name], join(path, f.name), root, out)
    if out:
        raise SpecError(problems=out)
