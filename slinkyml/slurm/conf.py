"""One slurm.conf builder: records first (settings, nodes, node sets, partitions, GRES), text last.

Every slurm.conf slinkyml writes is built here, so callers select records instead of re-parsing text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: slurm.conf keys that open a record (several Key=value pairs on one line, named by the first).
RECORD_KEYS = frozenset(k.lower() for k in ("NodeName", "PartitionName", "NodeSet", "DownNodes",
                                             "FrontendName", "SwitchName"))


@dataclass(frozen=True)
class Line:
    """One slurm.conf line: a setting (``key=value``), a record (``key=value`` + ``params``), a
    comment (``key`` empty, ``value`` the text) or a line given verbatim (``raw``)."""

    key: str
    value: str
    params: tuple[tuple[str, str], ...] = ()
    options: str = ""  # free text after the params (a user's ``MaxTime=... OverSubscribe=...``)
    raw: str | None = None

    @property
    def is_comment(self) -> bool:
        return not self.key

    @property
    def is_record(self) -> bool:
        return self.key.lower() in RECORD_KEYS

    def param(self, key: str) -> str | None:
        """A parameter of the record (case-insensitive, as Slurm reads it), from params or options."""
        for k, v in (*self.params, *pairs(self.options)):
            if k.lower() == key.lower():
                return v
        return None

    def text(self) -> str:
        if self.raw is not None:
            return self.raw
        if self.is_comment:
            return f"# {self.value}" if self.value else "#"
        out = f"{self.key}={self.value}" + "".join(f" {k}={v}" for k, v in self.params)
        return f"{out} {self.options}" if self.options else out


def pairs(text: str) -> list[tuple[str, str]]:
    """``Key=value Key2=value2`` → its pairs in order (words without ``=`` are not settings)."""
    out = []
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep:
            out.append((key, value))
    return out


def parse_line(text: str) -> Line:
    """A user's line as a record/setting/comment, keeping the text verbatim."""
    stripped = text.strip()
    body = stripped.split("#", 1)[0].strip()
    if not body:
        return Line("", stripped.lstrip("#").strip(), raw=text)
    key, sep, rest = body.partition("=")
    key = key.strip()
    if not sep or not key or any(ch.isspace() for ch in key):
        return Line("", body, raw=text)  # not Key=value: kept as given, never interpreted
    if key.lower() in RECORD_KEYS:
        words = rest.split()
        return Line(key, words[0] if words else "", tuple(pairs(" ".join(words[1:]))), raw=text)
    return Line(key, rest.strip(), raw=text)


@dataclass(frozen=True)
class SlurmConf:
    """Built slurm.conf lines, in order. Select records, then render text once."""

    lines: tuple[Line, ...]

    def settings(self) -> dict[str, str]:
        """Non-record ``key=value`` lines (the last one wins, as in Slurm)."""
        return {ln.key: ln.value for ln in self.lines if ln.key and not ln.is_record}

    def records(self, key: str) -> list[Line]:
        return [ln for ln in self.lines if ln.key.lower() == key.lower()]

    def partitions(self) -> list[Line]:
        return self.records("PartitionName")

    def select(self, keep: Callable[[Line], bool]) -> SlurmConf:
        return SlurmConf(tuple(ln for ln in self.lines if keep(ln)))

    def text(self) -> str:
        return "".join(ln.text() + "\n" for ln in self.lines)


@dataclass
class SlurmConfBuilder:
    """Add settings and records in order; :meth:`build` freezes them."""

    _lines: list[Line] = field(default_factory=list)

    def comment(self, text: str) -> SlurmConfBuilder:
        self._lines.append(Line("", text))
        return self

    def set(self, key: str, value: object) -> SlurmConfBuilder:
        self._lines.append(Line(key, str(value)))
        return self

    def set_all(self, settings: Iterable[tuple[str, object]]) -> SlurmConfBuilder:
        for key, value in settings:
            self.set(key, value)
        return self

    def record(self, key: str, name: str, params: Iterable[tuple[str, object]] = (),
               options: str = "") -> SlurmConfBuilder:
        self._lines.append(Line(key, name, tuple((k, str(v)) for k, v in params), options.strip()))
        return self

    def node(self, names: str, params: Iterable[tuple[str, object]] = ()) -> SlurmConfBuilder:
        return self.record("NodeName", names, params)

    def nodeset(self, name: str, params: Iterable[tuple[str, object]] = ()) -> SlurmConfBuilder:
        return self.record("NodeSet", name, params)

    def partition(self, name: str, params: Iterable[tuple[str, object]] = (), options: str = "") -> SlurmConfBuilder:
        return self.record("PartitionName", name, params, options)

    def extra(self, text: str) -> SlurmConfBuilder:
        """A user's lines, each kept verbatim but known as a record or setting."""
        for raw in text.splitlines():
            self._lines.append(parse_line(raw))
        return self

    def add(self, lines: Iterable[Line]) -> SlurmConfBuilder:
        self._lines.extend(lines)
        return self

    def build(self) -> SlurmConf:
        return SlurmConf(tuple(self._lines))
