"""Slurm host lists (``rack[1-2]-n[01-02],login``) expanded exactly as ``scontrol show hostnames``.

Follows src/common/hostlist.c: bracket groups multiply out, the low bound's width sets padding,
no steps, at most 65,536 hosts. ``suffix_after_bracket`` selects Slurm ≥ 23.11's suffix rule.
"""

from __future__ import annotations

#: separators between hosts outside brackets (hostlist_create's ``"\t, "``)
SEPARATORS = "\t, "
#: most hosts one range (``lo-hi``) or the product of a prefix's ranges may name
MAX_RANGE = 64 * 1024
_ULONG_MAX = 2**64 - 1
_C_SPACE = " \t\n\v\f\r"


class HostlistError(ValueError):
    """The text is not a valid Slurm host list (``scontrol`` prints ``Invalid hostlist``)."""


def expand_hostlist(text: str, *, suffix_after_bracket: bool = True) -> list[str]:
    """Host names of ``text`` in Slurm's order, duplicates kept (as ``scontrol show hostnames``).

    ``suffix_after_bracket``: Slurm ≥ 23.11 semantics (default); False for 22.05's. Raises
    :class:`HostlistError` where Slurm reports an invalid host list.
    """
    hosts: list[str] = []
    for token in _tokens(text or ""):
        open_at = token.rfind("[")
        if open_at < 0:
            hosts.append(_single_host(token))
            continue
        prefix, rest = token[:open_at], token[open_at + 1:]
        close_at = rest.find("]")
        if close_at < 0:
            if suffix_after_bracket:
                raise HostlistError(f"{token!r}: '[' without ']'")
            # 22.05 appends the "]" to the text before the bracket (or keeps the text after it)
            hosts.append(_single_host(prefix + "]" if prefix else rest))
            continue
        after = rest[close_at + 1:]
        suffix = None
        if after and not after.startswith(","):
            if not suffix_after_bracket:
                raise HostlistError(f"{token!r}: text after ']' (Slurm 22.05 has no suffixes)")
            suffix = after
        ranges = _range_list(rest[:close_at], token)
        _push_with_prefix(hosts, prefix, suffix, ranges, token, top=True)
    return hosts


def _tokens(text: str):
    """Split on separators outside brackets (Slurm's ``_next_tok``, bracket quirks included)."""
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in SEPARATORS:
            i += 1
        if i >= n:
            return
        start = parse = i
        while True:
            while i < n and text[i] not in SEPARATORS:
                i += 1
            extended = False
            while True:
                opening = text.find("[", parse)
                if opening < 0 or opening > i:
                    break
                closing = text.find("]", parse)
                if closing < 0 or closing < opening:
                    break
                if closing < i:
                    parse = closing + 1
                    continue
                i, extended = closing, True
                break
            if not extended:
                break
        yield text[start:i]
        while i < n and text[i] in SEPARATORS:
            i += 1


def _strtoul(text: str) -> tuple[int, int]:
    """C ``strtoul(text, &end, 10)`` → (value, characters consumed; 0 when nothing converted)."""
    i = 0
    while i < len(text) and text[i] in _C_SPACE:
        i += 1
    negative = False
    if i < len(text) and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    digits_at = i
    while i < len(text) and text[i].isascii() and text[i].isdigit():
        i += 1
    if i == digits_at:
        return 0, 0
    value = int(text[digits_at:i])
    if value > _ULONG_MAX:
        return _ULONG_MAX, i
    return ((-value) % 2**64 if negative else value), i


def _range_list(text: str, token: str) -> list[tuple[int, int, int]]:
    """``1-3,07`` → [(lo, hi, width), ...]; any bad range makes the whole list invalid."""
    return [_single_range(part, token) for part in text.split(",")]


def _single_range(text: str, token: str) -> tuple[int, int, int]:
    bad = HostlistError(f"{token!r}: invalid range {text!r}")
    if "x" in text:
        raise bad
    low_text, dash, high_text = text.partition("-")
    if dash and high_text.startswith("-"):
        raise bad
    low, used = _strtoul(low_text)
    if used == 0:
        raise bad
    if dash and high_text:
        high, used_high = _strtoul(high_text)
        if used_high == 0 or used_high != len(high_text):
            raise bad
    else:  # no high bound (``5`` or ``5-``): the low one must be all number
        high = low
        if used != len(low_text):
            raise bad
    if low > high:
        raise bad
    if high - low + 1 > MAX_RANGE:
        raise HostlistError(f"{token!r}: more than {MAX_RANGE} hosts in range {text!r}")
    return low, high, len(low_text)


def _push_with_prefix(hosts: list[str], prefix: str, suffix: str | None,
                      ranges: list[tuple[int, int, int]], token: str, top: bool) -> bool:
    """Expand the prefix's own last bracket group (recursively), then the ranges. Like Slurm, an
    error in a group found while recursing drops those hosts without failing the list."""
    opening = prefix.rfind("[")
    closing = prefix.rfind("]") if opening >= 0 else -1
    if opening < 0 or closing < opening:
        for low, high, width in ranges:
            hosts.extend(f"{prefix}{number:0{width}d}{suffix or ''}"
                         for number in range(low, high + 1))
        return True
    before, inner, after = prefix[:opening], prefix[opening + 1:closing], prefix[closing + 1:]
    try:
        outer = _range_list(inner, token)
    except HostlistError:
        if top:
            raise
        return False
    count = 0
    for low, high, width in outer:
        count += high - low + 1
        if count > MAX_RANGE:
            if top:
                raise HostlistError(f"{token!r}: more than {MAX_RANGE} prefixes")
            return False
        for number in range(low, high + 1):
            _push_with_prefix(hosts, f"{before}{number:0{width}d}{after}", suffix, ranges, token,
                              top=False)
    return True


def _single_host(name: str) -> str:
    """A name without brackets: trailing digits keep their width (past 2^64 they print as
    ULONG_MAX, zero-padded to the same width, as Slurm's strtoul does)."""
    end = len(name)
    while end > 0 and name[end - 1].isascii() and name[end - 1].isdigit():
        end -= 1
    digits = name[end:]
    if not digits or int(digits) <= _ULONG_MAX:
        return name
    return f"{name[:end]}{_ULONG_MAX:0{len(digits)}d}"
