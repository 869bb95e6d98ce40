"""One loader for the YAML specs users write (job specs, cluster specs).

Every problem at once, each as ``FILE:LINE: field.path: message``, never a traceback. Structure
comes from the JSON Schemas under ``data/schemas/``, checked by real JSON Schema implementations
(fastjsonschema says whether a spec is valid; jsonschema lists every problem of one that is not).
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import math
import os
import re
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

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


@cache
def _yaml() -> ModuleType:
    """PyYAML, imported when a YAML text is parsed (lazy: its import is ~16 ms of a ~60 ms submission, and a
    spec seen before, a packaged data file or ``slinkyml run``'s flags need no parser: see :func:`load`)."""
    import yaml

    return yaml


def yaml_error() -> type[Exception]:
    """``yaml.YAMLError`` (PyYAML imported only now: its parse of a file failed, so it is loaded)."""
    return _yaml().YAMLError  # type: ignore[no-any-return]


def _data_loader() -> Any:
    """libyaml's parser where PyYAML has it: ~5x faster on the packaged data files every render reads
    (same documents: tests/test_specload.py); user specs keep the Python parser for line numbers."""
    yaml = _yaml()
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    return _yaml().load(text, Loader=_data_loader())


def load_data_file(path: str | Path) -> Any:
    """:func:`load_data` of a file, through a cache of its parse (marshal, under :func:`cache_dir`) keyed by
    the file's path, mtime and size: the packaged presets and instance types are read by every render, and
    unmarshalling them costs a fraction of parsing YAML (and of importing PyYAML). Data marshal cannot hold
    (a YAML date) is parsed every time."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    cached = cache_dir() / f"data-{path.stem[:40]}-{zlib.crc32(repr(key).encode()):08x}.marshal"
    try:
        got_key, data = marshal.loads(cached.read_bytes())
        if tuple(got_key) == key:
            return data
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = load_data(path.read_text())
    try:
        write_cache(cached, marshal.dumps((key, data)))
    except ValueError:  # a value marshal cannot hold
        pass
    return data


def load_data_all(text: str) -> list[Any]:
    """Every document of a multi-document YAML data file (rendered manifests), with the same parser;
    a duplicate key is a :class:`yaml.constructor.ConstructorError` with its line (the API server's
    strict decoding refuses one; PyYAML would keep the last silently)."""
    return list(_yaml().load_all(text, Loader=_unique_key_loader()))


@cache
def _unique_key_loader() -> Any:
    yaml = _yaml()

    class UniqueKeyLoader(_data_loader()):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = self.construct_object(key_node)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r} (also on line {seen[key]})", key_node.start_mark)
                    seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def join(path: str, key: Any) -> str:
    """``a.b`` / ``a[0]``: the field paths every spec error uses."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def parse_yaml(text: str, source: str = "") -> Document:
    """One YAML document; duplicate keys and syntax errors are :class:`SpecError` s with lines."""
    yaml = _yaml()
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
    line: int | None
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
        yaml = _yaml()
        self.scalar, self.sequence, self.mapping = yaml.ScalarNode, yaml.SequenceNode, yaml.MappingNode
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
        if isinstance(node, self.sequence):
            return [self.build(item, join(path, i)) for i, item in enumerate(node.value)]
        if not isinstance(node, self.mapping):
            return self.loader.construct_object(node, deep=True)
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, self.scalar):
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
            if not isinstance(key_node, self.scalar):
                self.problems.append(Problem(path, "keys must be plain names, not lists or mappings",
                                             self.source, key_node.start_mark.line + 1))
                continue
            key = self.loader.construct_object(key_node)
            child = join(path, key)
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, child)
        return out


def load(source: str | Path, *, text: str | None = None) -> Document:
    """Read (unless ``text`` is given) and parse a spec file. The parse of a file is kept (marshal, under
    :func:`cache_dir`, one entry per path) with its exact text, and reused while the text is the same: a
    job submitted again skips PyYAML (its import and its pure-Python parser are ~25 ms of a submission)."""
    text = read_text(source) if text is None else text
    source = str(source)
    cached = cache_dir() / f"spec-{zlib.crc32(os.path.abspath(source).encode()):08x}.marshal"
    try:
        got_text, data, lines = marshal.loads(cached.read_bytes())
        if got_text == text:
            return Document(data, source, lines)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    document = parse_yaml(text, source)
    if not document.problems:  # a file with problems is refused every time, with its lines: parse it again
        try:
            write_cache(cached, marshal.dumps((text, document.data, document.lines)))
        except ValueError:  # a value marshal cannot hold (a YAML date): parsed every time
            pass
    return document


# ---------------------------------------------------------------- checking against the schema


@cache
def schema(kind: str) -> dict[str, Any]:
    """The published JSON Schema of a spec kind (``job``, ``cluster``)."""
    return json.loads(_schema_bytes(kind))


@cache
def _schema_bytes(kind: str) -> bytes:
    return (SCHEMA_DIR / SCHEMAS[kind]).read_bytes()


def check(data: Any, kind: str, path: str = "", *, definition: str | None = None) -> list[Problem]:
    """Every problem of ``data`` against the ``kind`` schema (or one of its ``$defs``)."""
    node = {"$ref": f"#/$defs/{definition}"} if definition else {}
    return _problems(data, kind, definition or "", node, path)


def check_or_raise(data: Any, kind: str, path: str = "", *, definition: str | None = None) -> None:
    problems = check(data, kind, path, definition=definition)
    if problems:
        raise SpecError(problems=problems)


def check_fields(obj: Any, kind: str, *, definition: str | None = None, path: str = "") -> None:
    """Check a spec dataclass's own fields against its schema, every problem at once (nested spec
    objects check themselves when they are built): the Python API gets the loader's checks."""
    props = (schema(kind)["$defs"][definition] if definition else schema(kind))["properties"]
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)
              if not dataclasses.is_dataclass(getattr(obj, f.name))}
    node = {"type": "object", "properties": {name: props[name] for name in values}}
    out = _problems(values, kind, f"fields:{definition or ''}:{','.join(values)}", node, path)
    if out:
        raise SpecError(problems=out)


# JSON Schema by two well-kept libraries: fastjsonschema's generated code says "valid" (the common case,
# ~10x faster than a walk); when it does not, jsonschema lists every problem, each worded for the user.

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
#: the keywords the schemas may use: validation keywords jsonschema applies and this module words,
#: and annotations (tests/test_specload.py fails on any other: a keyword nothing would honour);
#: ``x-cli``: the ``slinkyml run`` flag of a job parameter (slinkyml/jobs/params.py)
WORDED = frozenset({"type", "enum", "const", "minLength", "maxLength", "pattern", "minimum", "maximum",
                    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems",
                    "items", "prefixItems", "contains", "required", "properties", "patternProperties",
                    "additionalProperties", "propertyNames", "minProperties", "maxProperties",
                    "dependentRequired", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$defs"})
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples",
                         "deprecated", "readOnly", "writeOnly", "x-error", "x-cli"})
#: which problem of one value is reported when it has several (one line per field, the most basic first)
_PRECEDENCE = ("type", "enum", "const", "nul", "minLength", "maxLength", "pattern")


def type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _TYPES[name](value):
            return _NAMES[name]
    return type(value).__name__


def shown(value: Any) -> str:
    """A value as a message quotes it: repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _problems(data: Any, kind: str, key: str, node: dict[str, Any], path: str) -> list[Problem]:
    node_text = json.dumps(node, sort_keys=True)
    if _plain(data):
        try:
            _fast(kind, key, node_text)(data)
            return []
        except _Invalid:
            pass
    return _explain(data, _validator(kind, node_text), path)


def _plain(value: Any) -> bool:
    """Data the generated code judges as the spec does: dicts with string keys, lists, strings
    without NUL, finite numbers (anything else goes straight to :func:`_explain`)."""
    if isinstance(value, str):
        return "\0" not in value
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int))


def _full_schema(kind: str, node_text: str) -> dict[str, Any]:
    """``node`` with the kind's ``$defs`` (for ``$ref``), patterns as JSON Schema means them."""
    root = schema(kind)
    node = json.loads(node_text)
    return _json_patterns({**root, **node} if not node else {**node, "$defs": root["$defs"]})


def _json_patterns(node: Any) -> Any:
    """``$`` is the end of the text in JSON Schema; Python's also matches before a final newline
    (``name: "x\\n"`` would pass): a pattern ending in ``$`` ends in ``\\Z`` for both libraries."""
    if isinstance(node, dict):
        return {k: (v[:-1] + "\\Z" if k == "pattern" and isinstance(v, str) and v.endswith("$")
                    and not v.endswith("\\$") else _json_patterns(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_json_patterns(v) for v in node]
    return node


class _Invalid(ValueError):
    """What fastjsonschema's generated code raises (its own exception classes, without importing it)."""

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)


#: bump when the post-processing of generated code below changes (cached code is keyed by it)
_GENERATED_VERSION = 4
#: the generated module's table of patterns: compiled when first searched, not all when it loads
_REGEX_BLOCK = re.compile(r"^REGEX_PATTERNS = \{\n.*?^\}", re.M | re.S)
_GENERATED_IMPORT = "from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException\n"
#: the generated code's clause that lets 2.0 pass as an integer (JSON Schema's reading); a spec's integer
#: is an int, as jsonschema checks it here with :data:`_TYPES`
_FLOAT_AS_INTEGER = re.compile(r" and not \(isinstance\((\w+), float\) and \1\.is_integer\(\)\)")


class _NoDecimal:
    """Stands in for ``decimal.Decimal`` in generated code that only tests ``isinstance`` with it (see :func:`_fast`)."""


class _LazyPattern:
    """A pattern compiled on its first search (a spec uses a few of a schema's dozens)."""

    __slots__ = ("_compiled", "_source")

    def __init__(self, source: str) -> None:
        self._source = source
        self._compiled: re.Pattern[str] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        if self._compiled is None:
            self._compiled = re.compile(self._source)
        return self._compiled.search(text)


@cache
def _fast(kind: str, key: str, node_text: str) -> Callable[[Any], Any]:
    """fastjsonschema's validator, its generated code cached on disk (generating it costs ~25 ms per
    schema; loading the cached code ~0.3 ms, without importing the library)."""
    name = "".join(c if c.isascii() and c.isalnum() else "-" for c in f"{kind}-{key}")[:60]
    tag = zlib.crc32(f"{_GENERATED_VERSION}{node_text}".encode(), zlib.crc32(_schema_bytes(kind)))
    cached = cache_dir() / f"schema-{name}-{tag:08x}-{sys.implementation.cache_tag}.marshal"
    try:
        code = marshal.loads(cached.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        import fastjsonschema  # lazy: only when the cache misses (its import and code generation)

        # use_default=False: a check never writes the schema's defaults into the user's data
        source = fastjsonschema.compile_to_code(_full_schema(kind, node_text), use_default=False)
        source = _FLOAT_AS_INTEGER.sub("", source.replace(_GENERATED_IMPORT, ""))
        source = _REGEX_BLOCK.sub(lambda m: m.group(0).replace("re.compile(", "_LazyPattern("), source)
        if "Decimal(" not in source:  # no multipleOf, which computes with it: decimal costs ~8 ms to import.
            # Left are number checks, isinstance(v, (int, float, Decimal)): data reaches this code only when
            # _plain(), i.e. holds no Decimal, so a class nothing is an instance of judges it the same
            source = source.replace("from decimal import Decimal\n", "")
        code = compile(source, f"<schema {name}>", "exec")
        write_cache(cached, marshal.dumps(code))
    namespace: dict[str, Any] = {"JsonSchemaValueException": _Invalid, "JsonSchemaValuesException": _Invalid,
                                 "_LazyPattern": _LazyPattern, "Decimal": _NoDecimal}
    exec(code, namespace)  # noqa: S102 - fastjsonschema's code for our own packaged schema
    return namespace["validate"]


def cache_dir() -> Path:
    """Where generated schema code is kept: ``$XDG_CACHE_HOME/slinkyml`` (``~/.cache/slinkyml``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slinkyml"


def write_cache(path: Path, data: bytes) -> None:
    """Atomically, and never an error: a read-only home only costs the next process the generation."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass


@cache
def _validator(kind: str, node_text: str) -> Any:
    import jsonschema  # lazy: only invalid specs need every problem listed (its import costs ~50 ms)

    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {name: _type_check(test) for name, test in _TYPES.items()})
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)
    return cls(_full_schema(kind, node_text))


def _type_check(test: Callable[[Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda _checker, value: test(value)


def _explain(data: Any, validator: Any, path: str) -> list[Problem]:
    """jsonschema's errors as the loader's problems: ``field.path: message``, one per field."""
    best: dict[str, tuple[int, Problem]] = {}
    extra: list[Problem] = []
    _nul_strings(data, path, best)
    for error in validator.iter_errors(data):
        at = path
        for part in error.absolute_path:
            at = join(at, part)
        if "propertyNames" in error.absolute_schema_path:  # a key failed: the problem is the key's
            at = join(at, error.instance)
            if not isinstance(error.instance, str):
                best[at] = (0, Problem(at, f"field names must be strings, got {type_name(error.instance)} "
                                           f"{shown(error.instance)}"))
                continue
        for problem in _worded(error, at):
            rank = _PRECEDENCE.index(error.validator) if error.validator in _PRECEDENCE else len(_PRECEDENCE)
            if error.validator in _PRECEDENCE:
                if problem.path not in best or rank < best[problem.path][0]:
                    best[problem.path] = (rank, problem)
            else:
                extra.append(problem)
    blocked = {p for p, (rank, _) in best.items() if rank <= 1}  # a wrong type or value: nothing more there
    out = [problem for _, problem in best.values()]
    out += [p for p in extra if not any(p.path == b or p.path.startswith((b + ".", b + "[")) for b in blocked)]
    seen: set[tuple[str, str]] = set()
    unique = []
    for problem in sorted(out, key=lambda p: _order(data, path, p.path)):
        if (problem.path, problem.message) not in seen:
            seen.add((problem.path, problem.message))
            unique.append(problem)
    return unique


def _nul_strings(value: Any, path: str, best: dict[str, tuple[int, Problem]]) -> None:
    if isinstance(value, str) and "\0" in value:
        best[path] = (_PRECEDENCE.index("nul"), Problem(path, "must not contain NUL characters"))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _nul_strings(item, join(path, key), best)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _nul_strings(item, join(path, i), best)


def _order(data: Any, path: str, target: str) -> tuple[int, ...]:
    """Problems in the data's own order (a field's place in its mapping, an item's index)."""
    rank: list[int] = []
    node, at = data, path
    while at != target:
        step = None
        if isinstance(node, Mapping):
            for i, key in enumerate(node):
                if target == join(at, key) or target.startswith((join(at, key) + ".", join(at, key) + "[")):
                    step, at, node = i, join(at, key), node[key]
                    break
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                if target == join(at, i) or target.startswith((join(at, i) + ".", join(at, i) + "[")):
                    step, at, node = i, join(at, i), item
                    break
        if step is None:
            rank.append(-1)  # a missing field: before the present ones of its mapping
            break
        rank.append(step)
    return tuple(rank)


def _worded(error: Any, at: str) -> list[Problem]:
    keyword, node, value = error.validator, error.schema, error.instance
    message = node.get("x-error") if isinstance(node, Mapping) else None
    if keyword == "type":
        kinds = [node["type"]] if isinstance(node["type"], str) else node["type"]
        names = [_NAMES[k] for k in kinds if k != "null"] or ["null"]
        want = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        return [Problem(at, f"expected {want}, got {type_name(value)}" + ("" if value is None else f" {shown(value)}"))]
    if keyword == "enum":
        choices = [str(c) for c in node["enum"]]
        if any(type(value) is type(c) and value == c for c in node["enum"]):
            return []  # 1 == True: jsonschema's equality, not the spec's
        hint = did_you_mean(str(value), choices, f" (one of {', '.join(choices)})")
        return [Problem(at, f"unknown {shown(value)}{hint}")]
    if keyword == "minLength":
        return [Problem(at, "must not be empty" if node["minLength"] == 1
                        else f"must be at least {node['minLength']} characters")]
    if keyword == "maxLength":
        return [Problem(at, f"must be at most {node['maxLength']} characters, got {len(value)}")]
    if keyword == "pattern":
        return [Problem(at, message.format(value=shown(value)) if message
                        else f"{shown(value)} does not match {node['pattern'].removesuffix(chr(92) + 'Z')}")]
    if keyword in ("minimum", "maximum"):
        low, high = node.get("minimum"), node.get("maximum")
        rng = f"between {low} and {high}" if low is not None and high is not None else \
            f"at least {low}" if low is not None else f"at most {high}"
        return [Problem(at, f"must be {rng}, got {shown(value)}")]
    if keyword == "minItems":
        return [Problem(at, message or f"needs at least {node['minItems']} item(s)")]
    if keyword == "const":
        return [Problem(at, f"must be {shown(node['const'])}, got {shown(value)}")]
    if keyword == "uniqueItems":
        twice = next((item for i, item in enumerate(value) if item in list(value)[:i]), None)
        return [Problem(at, f"items must be unique, got {shown(twice)} twice")]
    if keyword in ("maxProperties", "minProperties", "maxItems"):
        limit, what = node[keyword], "fields" if keyword.endswith("Properties") else "items"
        return [Problem(at, f"{'at most' if keyword.startswith('max') else 'at least'} {limit} {what}, got {len(value)}")]
    if keyword == "oneOf":
        failed = {branch.relative_schema_path[0] for branch in error.context}  # each form's own errors
        matched = len(node["oneOf"]) - len(failed)
        return [Problem(at, f"must match exactly one of its {len(node['oneOf'])} forms, matched {matched}")]
    if keyword == "required":
        return [Problem(join(at, key), "required field missing") for key in node["required"] if key not in value]
    if keyword == "additionalProperties":
        known = node.get("properties", {})
        patterns = node.get("patternProperties", {})
        out = []
        for key in value:
            if not isinstance(key, str):
                out.append(Problem(join(at, key), f"field names must be strings, got {type_name(key)} {shown(key)}"))
            elif key not in known and not any(re.search(p, key) for p in patterns):
                listed = ", ".join(known)
                out.append(Problem(join(at, key), f"unknown field{did_you_mean(key, known, f' (known: {listed})')}"))
        return out
    return [Problem(at, error.message)]
