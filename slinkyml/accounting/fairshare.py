"""Fair-share: parse ``sshare -a -l -P``, recompute Fair Tree and classic fair-share offline.

Why offline: to explain a rank ("below bob because physics has LevelFS 0.4 vs bio 1.7 at their
first common ancestor") and to answer what-ifs (more shares, more usage) without touching the
cluster. The formulas follow https://slurm.schedmd.com/fair_tree.html and
https://slurm.schedmd.com/classic_fair_share.html:

* Fair Tree: at every level, ``S = shares / Σ sibling shares`` and ``U = usage / parent usage``;
  ``LevelFS = S / U`` (``inf`` without usage, 0 without shares). Siblings are visited by
  descending LevelFS, depth first; users get rank ``N, N-1, ...`` (ties share a rank, tied
  accounts have their children merged) and ``FairShare = rank / N``.
* Classic (``PriorityFlags=NO_FAIR_TREE``): ``NormShares`` is the product of the level shares down
  the tree, ``NormUsage = usage / root usage`` and ``FairShare = 2^(-EffectvUsage / NormShares)``.

Usage decays as ``U(t) = U0 * 2^(-t / PriorityDecayHalfLife)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

#: the sshare fields we ask for (``-o``), in order.
SSHARE_FIELDS = ("Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage",
                 "EffectvUsage", "FairShare", "LevelFS")
PARENT = -1  # RawShares "parent": the association uses its parent's shares


def sshare_args() -> list[str]:
    return ["--all", "--long", "--parsable2", "--format=" + ",".join(SSHARE_FIELDS)]


def _float(text: str) -> float:
    text = (text or "").strip()
    if not text:
        return math.nan
    if text.lower() in ("inf", "infinity"):
        return math.inf
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_sshare(text: str) -> pd.DataFrame:
    """``sshare -a -l -P`` (our field order, header optional) → one row per association.

    The tree comes from the leading spaces of ``Account`` (one per level); a user row's parent
    is its account, an account's parent the nearest shallower account above it.
    """
    rows = []
    stack: list[str] = []  # account keys by depth
    for line in text.splitlines():
        if not line.strip() or line.startswith("Account|") or line.startswith("-"):
            continue
        parts = line.split("|")
        if len(parts) < len(SSHARE_FIELDS):
            continue
        account_raw, user = parts[0], parts[1].strip()
        depth = len(account_raw) - len(account_raw.lstrip(" "))
        account = account_raw.strip()
        shares_text = parts[2].strip()
        shares = PARENT if shares_text == "parent" else (int(shares_text) if shares_text else math.nan)
        if user:
            key, parent = f"{account}/{user}", (stack[depth - 1] if depth - 1 < len(stack) else account)
        else:
            key = account
            del stack[depth:]
            parent = stack[depth - 1] if depth > 0 and depth - 1 < len(stack) else None
            stack.append(key)
        rows.append(dict(key=key, account=account, user=user or None, depth=depth, parent=parent,
                         is_user=bool(user), raw_shares=shares, norm_shares=_float(parts[3]),
                         raw_usage=_float(parts[4]), norm_usage=_float(parts[5]),
                         effectv_usage=_float(parts[6]), fairshare=_float(parts[7]),
                         level_fs=_float(parts[8])))
    return pd.DataFrame(rows, columns=["key", "account", "user", "depth", "parent", "is_user",
                                       "raw_shares", "norm_shares", "raw_usage", "norm_usage",
                                       "effectv_usage", "fairshare", "level_fs"])


_ASSOC_RE = re.compile(r"^ClusterName=\S* Account=(\S+) UserName=(\S*) ")
_USAGE_RE = re.compile(r"UsageRaw/Norm/Efctv=([0-9.eE+-]+|inf)/")


def parse_assoc_mgr_usage(text: str) -> dict[str, float]:
    """``scontrol show assoc_mgr flags=assoc`` → {key: raw usage}. Two decimals, where sshare
    prints whole numbers: the most precise raw usage Slurm 22.05 shows."""
    usage: dict[str, float] = {}
    key = None
    for line in text.splitlines():
        match = _ASSOC_RE.match(line.strip())
        if match:
            account, user = match.groups()
            user = user.split("(", 1)[0]
            key = f"{account}/{user}" if user else account
            continue
        match = _USAGE_RE.search(line)
        if match and key is not None:
            usage[key] = float(match.group(1))
            key = None
    return usage


# -- the tree -------------------------------------------------------------------------------
@dataclass
class Node:
    key: str
    account: str
    user: str | None
    shares: float  # PARENT for "parent"
    usage: float
    children: list[Node]
    parent: Node | None = None

    @property
    def is_user(self) -> bool:
        return self.user is not None


def build_tree(assocs: pd.DataFrame, usage: dict[str, float] | None = None) -> Node:
    """Association rows (``parse_sshare`` layout) → tree of :class:`Node`; ``usage`` overrides
    ``raw_usage`` per key (e.g. from :func:`parse_assoc_mgr_usage`)."""
    nodes: dict[str, Node] = {}
    root = None
    for row in assocs.itertuples(index=False):
        raw = usage.get(row.key, row.raw_usage) if usage else row.raw_usage
        shares = row.raw_shares if not (isinstance(row.raw_shares, float)
                                        and math.isnan(row.raw_shares)) else 1
        user = row.user if isinstance(row.user, str) and row.user else None
        nodes[row.key] = Node(row.key, row.account, user, shares,
                              0.0 if math.isnan(raw) else float(raw), [])
    for row in assocs.itertuples(index=False):
        node = nodes[row.key]
        if not isinstance(row.parent, str) or row.parent not in nodes:
            if root is None and not row.is_user:
                root = node
            continue
        node.parent = nodes[row.parent]
        nodes[row.parent].children.append(node)
    if root is None:
        raise ValueError("sshare output has no root association")
    return root


def walk(node: Node):
    yield node
    for child in node.children:
        yield from walk(child)


def _level_shares(node: Node) -> float:
    """S: the node's shares over the sum of its siblings' (itself included)."""
    if node.parent is None:
        return 1.0
    total = sum(c.shares for c in node.parent.children if c.shares != PARENT)
    if node.shares == PARENT:
        return _level_shares(node.parent)
    return node.shares / total if total else 0.0


# -- Fair Tree ------------------------------------------------------------------------------
def fair_tree(root: Node) -> pd.DataFrame:
    """Recompute Fair Tree: per association S (NormShares), U (EffectvUsage), LevelFS; per user
    rank and FairShare. Returns one row per association keyed like sshare."""
    rows: dict[str, dict] = {}
    for node in walk(root):
        if node.parent is None:
            continue
        S = _level_shares(node)
        parent = node.parent
        if node.shares == PARENT and parent.parent is not None:
            U = parent.usage / parent.parent.usage if parent.parent.usage else 0.0
        else:
            U = node.usage / parent.usage if parent.usage else 0.0
        level_fs = 0.0 if S == 0 else (math.inf if U == 0 else S / U)
        rows[node.key] = dict(key=node.key, norm_shares=S, effectv_usage=U, level_fs=level_fs,
                              rank=math.nan, fairshare=math.nan)
    users = [n for n in walk(root) if n.is_user]
    counter = [len(users)]

    def visit(siblings: list[Node]) -> None:
        siblings = sorted(siblings, key=lambda n: -rows[n.key]["level_fs"])
        i = 0
        while i < len(siblings):
            j = i
            fs = rows[siblings[i].key]["level_fs"]
            while j < len(siblings) and rows[siblings[j].key]["level_fs"] == fs:
                j += 1
            group = siblings[i:j]
            top = counter[0]
            merged = [c for n in group if not n.is_user for c in _lift(n.children)]
            if merged:
                visit(merged)
            tied_users = [n for n in group if n.is_user]
            for n in tied_users:
                rows[n.key]["rank"] = top
                rows[n.key]["fairshare"] = top / len(users) if users else math.nan
            counter[0] -= len(tied_users)
            i = j

    visit(_lift(root.children))
    return pd.DataFrame(list(rows.values()))


def _lift(children: list[Node]) -> list[Node]:
    return list(children)


# -- classic --------------------------------------------------------------------------------
def classic(root: Node, damping: float = 1.0) -> pd.DataFrame:
    """Recompute classic fair-share: NormShares, NormUsage, EffectvUsage and FairShare."""
    rows = []
    total = root.usage
    efctvs: dict[str, float] = {root.key: 1.0}
    for node in walk(root):  # parents before children
        if node.parent is None:
            continue
        norm_shares = _norm_shares(node)
        norm_usage = node.usage / total if total else 0.0
        if node.shares == PARENT:  # uses its account's values
            efctv = efctvs[node.parent.key]
        elif node.parent is root:
            efctv = norm_usage
        else:
            # Slurm's classic (non depth-oblivious) effective usage, checked against 22.05's
            # sshare (tests/data/accounting/sshare_classic_2205.txt): pulled toward the
            # parent's by the association's share of its level
            efctv = norm_usage + (efctvs[node.parent.key] - norm_usage) * _level_shares(node)
        efctvs[node.key] = efctv
        fairshare = 0.0 if norm_shares == 0 else 2.0 ** (-(efctv / norm_shares) / damping)
        rows.append(dict(key=node.key, norm_shares=norm_shares, norm_usage=norm_usage,
                         effectv_usage=efctv, fairshare=fairshare))
    return pd.DataFrame(rows)


def _norm_shares(node: Node) -> float:
    value = 1.0
    while node.parent is not None:
        if node.shares != PARENT:
            value *= _level_shares(node)
        node = node.parent
    return value


# -- explanations and what-ifs ----------------------------------------------------------------
def _path(node: Node) -> list[Node]:
    path = []
    while node is not None:
        path.append(node)
        node = node.parent
    return path[::-1]


def find_user(root: Node, user: str, account: str | None = None) -> Node:
    from slinkyml.errors import SlinkyError

    for node in walk(root):
        if node.user == user and (account is None or node.account == account):
            return node
    raise SlinkyError(f"--user: no association for user {user!r}"
                      + (f" in account {account!r}" if account else ""))


def explain(root: Node, user: str, other: str, table: pd.DataFrame | None = None) -> str:
    """Why ``user`` ranks where it does against ``other`` (Fair Tree), in one sentence."""
    table = fair_tree(root) if table is None else table
    info = table.set_index("key")
    a, b = find_user(root, user), find_user(root, other)
    pa, pb = _path(a), _path(b)
    k = 0
    while k < min(len(pa), len(pb)) and pa[k] is pb[k]:
        k += 1
    na, nb = pa[k], pb[k]
    ra, rb = info.at[a.key, "rank"], info.at[b.key, "rank"]
    relation = "above" if ra > rb else ("tied with" if ra == rb else "below")
    fa, fb = info.at[na.key, "level_fs"], info.at[nb.key, "level_fs"]
    common = pa[k - 1].key
    what = lambda n: f"user {n.user}" if n.is_user else f"account {n.account}"  # noqa: E731
    return (f"{user} (FairShare {info.at[a.key, 'fairshare']:.6f}) is {relation} {other} "
            f"(FairShare {info.at[b.key, 'fairshare']:.6f}) because {what(na)} has LevelFS "
            f"{_fmt(fa)} vs {what(nb)} {_fmt(fb)} at their first common ancestor {common}")


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.6g}"


def what_if(root: Node, *, shares: dict[str, float] | None = None,
            add_usage: dict[str, float] | None = None) -> pd.DataFrame:
    """Ranks before and after changing shares (key → RawShares) or adding raw usage
    (key → usage, added to the association and all its ancestors, as Slurm does)."""
    import copy

    before = fair_tree(root)
    changed = copy.deepcopy(root)
    nodes = {n.key: n for n in walk(changed)}
    for key, value in (shares or {}).items():
        _require(nodes, key).shares = value
    for key, value in (add_usage or {}).items():
        node = _require(nodes, key)
        while node is not None:
            node.usage += value
            node = node.parent
    after = fair_tree(changed)
    merged = before.merge(after, on="key", suffixes=("_before", "_after"))
    users = merged[merged["rank_before"].notna()]
    return users[["key", "level_fs_before", "level_fs_after", "rank_before", "rank_after",
                  "fairshare_before", "fairshare_after"]].sort_values("rank_after",
                                                                    ascending=False)


def _require(nodes: dict[str, Node], key: str) -> Node:
    from slinkyml.errors import SlinkyError

    if key not in nodes:
        raise SlinkyError(f"no association {key!r} (use ACCOUNT or ACCOUNT/USER)")
    return nodes[key]


def decayed(usage: float, seconds: float, half_life_s: float) -> float:
    """U(t) = U0 * 2^(-t/HL)."""
    return usage * 2.0 ** (-seconds / half_life_s) if half_life_s > 0 else usage


def recovery_seconds(usage: float, target: float, half_life_s: float) -> float:
    """Seconds until ``usage`` decays to ``target`` with no new usage: HL * log2(U0/target)."""
    if usage <= target:
        return 0.0
    if target <= 0 or half_life_s <= 0:
        return math.inf
    return half_life_s * math.log2(usage / target)


def recovery_to_fair(root: Node, key: str, half_life_s: float) -> float:
    """Seconds until the association's LevelFS reaches 1 (usage = its share of the parent's),
    assuming its siblings' usage stays where it is (they keep using what decays)."""
    nodes = {n.key: n for n in walk(root)}
    node = _require(nodes, key)
    if node.parent is None:
        return 0.0
    others = node.parent.usage - node.usage
    S = _level_shares(node)
    if S >= 1:
        return 0.0
    target = S * others / (1 - S)  # u / (u + others) = S
    return recovery_seconds(node.usage, target, half_life_s)


def parse_half_life(text: str) -> float:
    """``PriorityDecayHalfLife`` as printed by ``scontrol show config`` (``7-00:00:00``) → s."""
    from slinkyml.accounting.tres import parse_duration

    return parse_duration(text.strip())


def classic_mismatches(assocs: pd.DataFrame, raw: dict[str, float] | None = None,
                       abs_tol: float = 1e-6) -> list[tuple]:
    """:func:`classic` vs sshare's own columns: ``(key, column, ours, sshare)`` beyond tolerance.

    NormShares comes from integer shares, so it must agree to ``abs_tol`` (sshare prints six
    decimals). EffectvUsage and FairShare are recomputed from *printed* raw usage, known only to
    ±d (0.005 where ``raw`` has assoc_mgr's two decimals, 0.5 for sshare's whole numbers); the
    bound is that rounding carried through the formulas, to first order:
    N = U/U_root moves by (d_U + N·d_root)/U_root; E = (1-f)·N + f·E_parent (f: level share)
    by (1-f)·dN + f·dE_parent; FairShare = 2^(-E/S) by FairShare·ln2·dE/S.
    """
    raw = raw or {}
    root = build_tree(assocs, raw)
    ours = classic(root).merge(assocs, on="key", suffixes=("", "_sshare")).set_index("key")
    total = root.usage
    d_root = 0.005 if root.key in raw else 0.5
    d_e: dict[str, float] = {root.key: 0.0}
    bad = []
    for node in walk(root):
        if node.parent is None:
            continue
        d_n = (0.005 if node.key in raw else 0.5) / total if total else 0.0
        d_n += (node.usage / total) * d_root / total if total else 0.0
        if node.shares == PARENT:
            d_e[node.key] = d_e[node.parent.key]
        elif node.parent is root:
            d_e[node.key] = d_n
        else:
            f = _level_shares(node)
            d_e[node.key] = (1 - f) * d_n + f * d_e[node.parent.key]
        row = ours.loc[node.key]
        if abs(row.norm_shares - row.norm_shares_sshare) > abs_tol:
            bad.append((node.key, "NormShares", row.norm_shares, row.norm_shares_sshare))
        if abs(row.effectv_usage - row.effectv_usage_sshare) > abs_tol + d_e[node.key]:
            bad.append((node.key, "EffectvUsage", row.effectv_usage, row.effectv_usage_sshare))
        if node.user and row.norm_shares > 0:
            d_fs = row.fairshare * math.log(2) * d_e[node.key] / row.norm_shares
            if abs(row.fairshare - row.fairshare_sshare) > abs_tol + d_fs:
                bad.append((node.key, "FairShare", row.fairshare, row.fairshare_sshare))
    return bad
