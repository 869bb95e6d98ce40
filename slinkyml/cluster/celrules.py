"""The CRDs' CEL rules (``x-kubernetes-validations``) evaluated offline, with the Kubernetes CEL
libraries the rules we meet use.

The evaluator is common-expression-language (the Rust ``cel`` crate): it has the macros (``has``,
``all``, ``exists``, ``exists_one``, ``filter``, ``map``), ``matches``, ``size``, ``int()`` and takes
receiver-style Python functions, and it evaluates a rule in ~35 µs. cel-python (Lark, pure Python)
lacks the same Kubernetes functions and imports in 0.24 s. Kubernetes' own libraries (regex
``find``/``findAll``, the ``strings`` extension, ``isQuantity``) are added below in Python; a rule
calling anything else (``quantity()``, ``url()``, ``ip()``, ...) is reported as not checked offline,
never passed silently. Transition rules (``oldSelf``) do not run on create and are skipped.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from slinkyml.kube import quantity

#: why a rule's verdict is unknown offline
NOT_CHECKED = "not checked offline"


def _find(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _split(text: str, sep: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    return text.split(sep, limit - 1) if limit > 0 else text.split(sep)


def _substring(text: str, start: int, end: int | None = None) -> str:
    if start < 0 or start > len(text) or (end is not None and (end < start or end > len(text))):
        raise ValueError(f"substring({start}, {end}) out of range for a string of {len(text)}")
    return text[start:end]


def _index_of(text: str, sub: str, start: int = 0) -> int:
    return text.find(sub, start)


#: Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library, cel-go ext.Strings) in Python
K8S_FUNCTIONS = {
    "find": _find,
    "findAll": lambda text, pattern, limit=-1: [m.group(0) for m in re.finditer(pattern, text)][
        : None if limit < 0 else limit],
    "split": _split,
    "lowerAscii": lambda text: "".join(c.lower() if c.isascii() else c for c in text),
    "upperAscii": lambda text: "".join(c.upper() if c.isascii() else c for c in text),
    "join": lambda items, sep="": sep.join(items),
    "replace": lambda text, old, new, limit=-1: text.replace(old, new, limit),
    "indexOf": _index_of,
    "lastIndexOf": lambda text, sub: text.rfind(sub),
    "substring": _substring,
    "trim": lambda text: text.strip(),
    "isQuantity": lambda text: quantity(text) is not None,
}


@lru_cache(maxsize=1)
def _engine() -> Any:
    """The compiled module of common-expression-language, loaded on its own: the package's
    ``__init__`` imports its command-line tool (prompt_toolkit, 0.25 s) that we never use."""
    spec = importlib.util.find_spec("cel")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("common-expression-language is not installed", name="cel")
    folder = Path(list(spec.submodule_search_locations)[0])
    library = next(folder.glob("cel.*.so"), None) or next(folder.glob("cel*.pyd"))
    ext = importlib.util.spec_from_file_location("cel.cel", library)
    assert ext is not None and ext.loader is not None
    module = importlib.util.module_from_spec(ext)
    ext.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def _context() -> Any:
    context = _engine().Context()
    for name, function in K8S_FUNCTIONS.items():
        context.add_function(name, function)
    return context


@lru_cache(maxsize=1024)
def _program(rule: str) -> Any:
    return _engine().compile(rule)


@dataclass(frozen=True)
class Outcome:
    """A rule's verdict: ``ok`` True/False, or None with ``why`` when it was not evaluated."""

    ok: bool | None
    why: str = ""


def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def evaluate(rule: str, value: Any) -> Outcome:
    """One rule with ``self`` bound to ``value`` (a defaulted JSON value), as the API server does on
    create. An evaluation error (a missing key, ``int('x')``) fails the rule, as it does there."""
    try:
        program = _program(rule)
    except ValueError as exc:
        return Outcome(None, f"{NOT_CHECKED}: {rule} (does not parse here: {str(exc).splitlines()[0][:80]})")
    context = _context()
    context.update({"self": value})
    try:
        result = program.execute(context)
    except RuntimeError as exc:
        text = str(exc)
        if "Undefined variable or function" in text:
            return Outcome(None, f"{NOT_CHECKED}: {rule} ({text.split('.')[0]})")
        return Outcome(False, text.split(". Check")[0])
    except KeyError as exc:
        return Outcome(False, f"no such key: {exc.args[0] if exc.args else ''}")
    except (ValueError, TypeError, IndexError) as exc:
        return Outcome(False, f"evaluation error: {exc}")
    if not isinstance(result, bool):
        return Outcome(None, f"{NOT_CHECKED}: {rule} (returned {type(result).__name__}, not bool)")
    return Outcome(result)
