"""User-facing errors.

Every error a user can cause derives from :class:`SlinkyError`; the CLI prints it as one line per
problem (``slinkyml: error: <message>``) and exits with its class's ``exit_code``, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

#: Exit statuses of every command (docs/specs-and-errors.md, "Exit codes"): 0 ok; 1 the job, check or validation failed;
#: 2 bad usage or input (argparse's own code, a bad spec, a missing extra); 3 Slurm could not be reached.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class SlinkyError(Exception):
    """An error whose message is meant for the user, on one line."""

    #: what the CLI exits with; subclasses say otherwise (Slurm unreachable: 3, a failed check: 1)
    exit_code = EXIT_USAGE

    def one_line(self) -> str:
        return " ".join(str(self).split()) or type(self).__name__

    def lines(self) -> list[str]:
        """What the CLI prints, one line each (a spec error may hold several problems)."""
        return [self.one_line()]


def did_you_mean(word: str, choices: Iterable[str], otherwise: str = "") -> str:
    """`` — did you mean 'X'?`` naming the closest of ``choices``, else ``otherwise``."""
    import difflib  # lazy: only error messages need it, and every command imports this module

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" — did you mean '{close[0]}'?" if close else otherwise


def printable(text: str) -> str:
    """Escape newlines and control characters from user data so a message stays on one line."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


class Problem:
    """One mistake in a spec: ``FILE:LINE: field.path: message`` (each part only when known). A plain
    class: every command imports this module, and a dataclass or NamedTuple costs it 1-8 ms."""

    __slots__ = ("path", "message", "source", "line")

    def __init__(self, path: str, message: str, source: str = "", line: int | None = None) -> None:
        self.path, self.message, self.source, self.line = path, message, source, line

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.source and self.line else self.source
        # a key made of or holding blanks is quoted, or ` : unknown field` would not say which
        path = repr(self.path) if any(ch.isspace() for ch in self.path) else self.path
        return ": ".join(printable(part) for part in (where, path, self.message) if part)


class SpecError(SlinkyError):
    """Bad input in a spec; ``path`` names the (first) field (``node_sets[1].instance_type``) and
    ``problems`` holds every problem found, so a user fixes them all in one go."""

    def __init__(self, path: str = "", reason: str = "", *, problems: Sequence[Problem] = ()):
        self.problems = list(problems) or [Problem(path, reason)]
        self.path = self.problems[0].path
        self.reason = self.problems[0].message
        super().__init__("\n".join(map(str, self.problems)))

    def lines(self) -> list[str]:
        """One line per problem (control characters are escaped by :func:`printable`)."""
        return [str(problem) for problem in self.problems]

    def one_line(self) -> str:
        return "; ".join(self.lines())

    def located(self, source: str, line_of: Callable[[str], int | None] | None = None) -> SpecError:
        """The same problems, naming the file (and the line of each field when ``line_of`` knows it)."""
        return SpecError(problems=[
            p if p.source else Problem(p.path, p.message, source, line_of(p.path) if line_of else p.line)
            for p in self.problems])
