"""Host lists: our expansion against Slurm's grammar (fixed cases) and against the live
``scontrol show hostnames`` (hypothesis, many lists per scontrol call)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from slinkyml.dispatch import distributed
from slinkyml.slurm.hostlist import HostlistError, expand_hostlist

# (text, hosts on Slurm >= 23.11, hosts on 22.05); None = "Invalid hostlist"
CASES = [
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"], ...),
    ("gpu-a[08-10],login", ["gpu-a08", "gpu-a09", "gpu-a10", "login"], ...),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"], ...),
    # three groups: the last varies fastest, then the groups before it from the right inward
    ("a[1-2]b[3-4]c[5]", ["a1b3c5", "a2b3c5", "a1b4c5", "a2b4c5"], ...),
    ("n[8-10]", ["n8", "n9", "n10"], ...),  # the low bound's width pads
    ("n[08-10]", ["n08", "n09", "n10"], ...),
    ("n[001-2]", ["n001", "n002"], ...),
    ("n[5-]", ["n5"], ...),
    ("n[5a-7]", ["n05", "n06", "n07"], ...),  # strtoul stops at 'a'; width counts it
    ("n0099,n1", ["n0099", "n1"], ...),
    ("n1,n1", ["n1", "n1"], ...),  # duplicates kept, order kept
    ("  n1\tn2,,n3 ", ["n1", "n2", "n3"], ...),
    ("[1-2]", ["1", "2"], ...),
    ("n[1-9:2]", None, ...),  # no steps in Slurm
    ("n[3-1]", None, ...),
    ("n[]", None, ...),
    ("n[1,]", None, ...),
    ("n[1-x]", None, ...),
    ("n[0-65535]", [f"n{i}" for i in range(65536)], ...),
    ("n[0-65536]", None, ...),
    ("n[1-2]-ib", ["n1-ib", "n2-ib"], None),  # suffixes since 23.11
    ("n[1-2", None, ["n]"]),  # 22.05 appends a bracket
    ("n99999999999999999999", ["n18446744073709551615"], ...),  # strtoul saturates
]


@pytest.mark.parametrize("text,new,old", CASES, ids=[c[0][:20] for c in CASES])
def test_expansion_follows_slurms_grammar(text, new, old):
    old = new if old is ... else old
    for suffixes, want in ((True, new), (False, old)):
        if want is None:
            with pytest.raises(HostlistError):
                expand_hostlist(text, suffix_after_bracket=suffixes)
        else:
            assert expand_hostlist(text, suffix_after_bracket=suffixes) == want


def test_dispatch_head_node_with_two_bracket_groups():
    env = {"SLURM_JOB_NODELIST": "rack[1-2]-n[01-02]", "SLURM_JOB_ID": "7"}
    assert distributed.task_env(env)["MASTER_ADDR"] == "rack1-n01"


# -- live: scontrol show hostnames ------------------------------------------------------------
_PIECES = st.sampled_from(["n", "a", "b", "-", "0", "1", "2", "9", "01", "10", ",", "[", "]",
                           "-ib", "x", ":", "99"])
#: free text over the grammar's characters, and well-formed lists with 1-3 bracket groups
_RANGE = st.builds(lambda lo, span, pad: f"{lo:0{pad}d}" + (f"-{lo + span}" if span else ""),
                   st.integers(0, 120), st.integers(0, 12), st.integers(1, 3))
_GROUP = st.builds(lambda prefix, ranges: f"{prefix}[{','.join(ranges)}]",
                   st.sampled_from(["n", "rack", "gpu-a", "r", "-n", ""]),
                   st.lists(_RANGE, min_size=1, max_size=3))
_HOST = st.builds(lambda groups, tail: "".join(groups) + tail,
                  st.lists(_GROUP, min_size=0, max_size=3),
                  st.sampled_from(["", "", "7", "login", "-ib"]))
_LIST = st.one_of(
    st.lists(_PIECES, min_size=1, max_size=10).map("".join),
    st.lists(_HOST, min_size=1, max_size=3).map(",".join),
).filter(lambda t: t.strip(", ") != "")


def _scontrol_batch(slurm, texts: list[str]) -> list[list[str] | None]:
    """One scontrol process for many lists: a marker host between them splits stdout; lists
    scontrol calls invalid are named on stderr ("Invalid hostlist: TEXT")."""
    lines = []
    for i, text in enumerate(texts):
        lines += [f"show hostnames zzmark{i}", f"show hostnames {text}"]
    lines.append(f"show hostnames zzmark{len(texts)}")
    # readline echoes commands read from a pipe, redrawing lines wider than the terminal with
    # escapes: a dumb terminal that is wide enough echoes them whole
    result = slurm.run("scontrol", [], input="\n".join(lines) + "\n", check=False,
                       env={"TERM": "dumb", "COLUMNS": "100000"})
    invalid = {line.partition("Invalid hostlist: ")[2]
               for line in result.stderr.splitlines() if "Invalid hostlist: " in line}
    out: list[list[str] | None] = []
    current: list[str] | None = None
    for line in result.stdout.splitlines():
        if line.startswith("scontrol:"):  # scontrol echoes commands read from a pipe
            continue
        if line.startswith("zzmark"):
            if current is not None:
                out.append(current)
            current = []
        elif current is not None:
            current.append(line)
    assert len(out) == len(texts), result.stdout[-2000:]
    return [None if not hosts and text in invalid else hosts for text, hosts in zip(texts, out,
                                                                                     strict=True)]


def _ours(text: str, suffixes: bool) -> list[str] | None:
    try:
        return expand_hostlist(text, suffix_after_bracket=suffixes)
    except HostlistError:
        return None


@pytest.mark.slurm
@pytest.mark.slurm2605  # the 23.11+ grammar (suffixes) against a real 26.05 scontrol
# no shrinking: a batch of 40-80 lists shrinks for minutes; the failure names the list as it is
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck),
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(texts=st.lists(_LIST, min_size=40, max_size=80))
def test_expansion_equals_live_scontrol(slurm, texts):
    suffixes = slurm.version.at_least(23, 11)
    mine = [_ours(text, suffixes) for text in texts]
    small = [(t, m) for t, m in zip(texts, mine, strict=True) if m is None or len(m) <= 3000]
    theirs = _scontrol_batch(slurm, [t for t, _ in small])
    for (text, ours), slurms in zip(small, theirs, strict=True):
        assert ours == slurms, text


@pytest.mark.slurm
@pytest.mark.slurm2605
def test_fixed_cases_equal_live_scontrol(slurm):
    """The table above on the live Slurm, whitespace cases through argv (a pipe splits on it)."""
    suffixes = slurm.version.at_least(23, 11)
    texts = [text for text, *_ in CASES if " " not in text and "\t" not in text]
    for text, theirs in zip(texts, _scontrol_batch(slurm, texts), strict=True):
        assert _ours(text, suffixes) == theirs, text
    spaced = "  n1\tn2,,n3 "
    out = slurm.run("scontrol", ["show", "hostnames", spaced]).stdout.split()
    assert out == expand_hostlist(spaced) == ["n1", "n2", "n3"]
