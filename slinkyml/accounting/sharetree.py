"""Fair-share in plain Python: parse ``sshare -a -l -P``, recompute Fair Tree and classic fair-share offline.

Offline, to show slinkyml's numbers are Slurm's, explain a rank and answer what-ifs without the
cluster. The rules follow Slurm's assoc_mgr.c, fair_tree.c and priority_multifactor.c (22.05-25.11);
a ``fairshare=parent`` association is transparent: its children compete at its parent's level.
Usage decays as ``U0 * (1 - 0.693 / HL)^t``, Slurm's own constant (not exactly a half per HL).

Plain rows (dicts), no pandas: ``slinkyml fairshare`` reads a few dozen associations, and importing
pandas would cost it 0.4-0.9 s of a 0.5 s command; ``fairshare.py`` wraps these rows in DataFrames for
the dashboard and the library API.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slinkyml.accounting.tres import parse_duration
from slinkyml.errors import SlinkyError
from slinkyml.slurm import records
from slinkyml.slurm.runner import Slurm

PARENT = -1  # RawShares "parent": the association uses its parent's shares
SHARE_COLUMNS = ["key", "account", "user", "depth", "parent", "is_user", "raw_shares", "norm_shares",
                 "raw_usage", "norm_usage", "effectv_usage", "fairshare", "level_fs"]


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



def share_rows(rows: Iterable[records.Record]) -> list[dict[str, Any]]:
    """Association records keyed by :data:`SSHARE_FIELDS` (from any backend) → one row each.

    The tree comes from the leading spaces of ``Account`` (one per level); a user row's parent
    is its account, an account's parent the nearest shallower account above it.
    """
    out: list[dict[str, Any]] = []
    stack: list[str] = []  # account keys by depth
    parent: str | None
    for row in rows:
        account_raw, user = row["Account"], row["User"].strip()
        depth = len(account_raw) - len(account_raw.lstrip(" "))
        account = account_raw.strip()
        shares_text = row["RawShares"].strip()
        shares = PARENT if shares_text == "parent" else (int(shares_text) if shares_text else math.nan)
        if user:
            key, parent = f"{account}/{user}", (stack[depth - 1] if depth - 1 < len(stack) else account)
        else:
            key = account
            del stack[depth:]
            parent = stack[depth - 1] if depth > 0 and depth - 1 < len(stack) else None
            stack.append(key)
        out.append(dict(key=key, account=account, user=user or None, depth=depth, parent=parent,
                        is_user=bool(user), raw_shares=shares, norm_shares=_float(row["NormShares"]),
                        raw_usage=_float(row["RawUsage"]), norm_usage=_float(row["NormUsage"]),
                        effectv_usage=_float(row["EffectvUsage"]), fairshare=_float(row["FairShare"]),
                        level_fs=_float(row["LevelFS"])))
    return out


def parse_assoc_mgr_usage(text: str) -> dict[str, float]:
    """``scontrol show assoc_mgr flags=assoc`` → {key: raw usage}. Two decimals, where sshare
    prints whole numbers: the most precise raw usage Slurm 22.05 shows."""
    usage: dict[str, float] = {}
    for record in records.split_scontrol(text):
        account, raw = record.get("Account"), record.get("UsageRaw/Norm/Efctv")
        if account is None or "ClusterName" not in record or raw is None:
            continue
        user = record.get("UserName", "").split("(", 1)[0]
        usage[f"{account}/{user}" if user else account] = _float(raw.split("/", 1)[0])
    return usage


# -- the tree -------------------------------------------------------------------------------
#: Slurm's NO_VAL as a level_fs: what a ``parent`` account gets, so it sorts among siblings
#: as Slurm sorts it (above every finite LevelFS below 4294967294)
NO_VAL_LEVEL_FS = 4294967294.0


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

    @property
    def uses_parent(self) -> bool:
        return self.shares == PARENT

    @property
    def fs_parent(self) -> Node | None:
        """The nearest ancestor whose shares are not ``parent`` (Slurm's ``fs_assoc_ptr``)."""
        node = self.parent
        while node is not None and node.uses_parent and node.parent is not None:
            node = node.parent
        return node


def build_tree(assocs: Iterable[Mapping[str, Any]], usage: dict[str, float] | None = None) -> Node:
    """Association rows (:func:`share_rows`' dicts) → tree of :class:`Node` (direct parents, in
    sshare's order); ``usage`` overrides ``raw_usage`` per key (e.g. from
    :func:`parse_assoc_mgr_usage`)."""
    nodes: dict[str, Node] = {}
    root = None
    rows = list(assocs)
    for row in rows:
        raw = usage.get(row["key"], row["raw_usage"]) if usage else row["raw_usage"]
        shares = row["raw_shares"] if not (isinstance(row["raw_shares"], float)
                                           and math.isnan(row["raw_shares"])) else 1
        user = row["user"] if isinstance(row["user"], str) and row["user"] else None
        nodes[row["key"]] = Node(row["key"], row["account"], user, shares,
                                 0.0 if math.isnan(raw) else float(raw), [])
    for row in rows:
        node = nodes[row["key"]]
        parent = row["parent"]
        if not isinstance(parent, str) or parent not in nodes:
            if root is None and not row["is_user"]:
                root = node
            continue
        node.parent = nodes[parent]
        nodes[parent].children.append(node)
    if root is None:
        raise ValueError("sshare output has no root association")
    return root



def walk(node: Node):
    yield node
    for child in node.children:
        yield from walk(child)


class _Levels:
    """Fair-share children and level shares of a tree (what assoc_mgr derives on load)."""

    def __init__(self, root: Node):
        self.nodes = list(walk(root))
        self.children: dict[str, list[Node]] = {n.key: [] for n in self.nodes}
        for node in self.nodes:
            parent = node.fs_parent
            if parent is not None:
                self.children[parent.key].append(node)
        self.sums = {key: sum(c.shares for c in kids if not c.uses_parent)
                     for key, kids in self.children.items()}

    def level_shares(self, node: Node) -> float:
        """Σ shares of the node's fair-share siblings (itself included); 0 for the root."""
        parent = node.fs_parent
        return self.sums[parent.key] if parent is not None else 0.0

    def share(self, node: Node) -> float:
        """shares / level_shares of one association (0 when the level has no shares)."""
        total = self.level_shares(node)
        return node.shares / total if total else 0.0


def _level_shares(node: Node) -> float:
    """S of one association at its level (its fair-share parent's for ``parent`` ones)."""
    root = node
    while root.parent is not None:
        root = root.parent
    levels = _Levels(root)
    source = node.fs_parent if node.uses_parent and node.fs_parent is not None else node
    return levels.share(source) if source.parent is not None else 1.0


#: columns of :func:`fair_tree` / :func:`classic` (one row per association, sshare's order)
TREE_COLUMNS = ["key", "account", "user", "is_user", "depth", "parent", "fs_parent",
                "raw_shares", "raw_usage", "level_shares", "norm_shares", "norm_usage",
                "effectv_usage", "level_fs", "fairshare", "rank"]


def tree_rows(levels: _Levels, values: dict[str, dict]) -> list[dict[str, Any]]:
    """One row (:data:`TREE_COLUMNS`) per association, in sshare's order; ``rank`` None where unranked."""
    depth: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for node in levels.nodes:
        depth[node.key] = 0 if node.parent is None else depth[node.parent.key] + 1
        fs_parent = node.fs_parent
        rows.append(dict(key=node.key, account=node.account, user=node.user,
                         is_user=node.is_user, depth=depth[node.key],
                         parent=node.parent.key if node.parent else None,
                         fs_parent=fs_parent.key if fs_parent else None,
                         raw_shares=node.shares if node.parent is not None else math.nan,
                         raw_usage=node.usage,
                         level_shares=levels.level_shares(node), **values[node.key]))
    for row in rows:
        row["rank"] = None if isinstance(row["rank"], float) and math.isnan(row["rank"]) else row["rank"]
    return rows



def recompute(root: Node, algorithm: str = "fair_tree", damping: float = 1.0) -> list[dict[str, Any]]:
    """The whole tree recomputed (:data:`TREE_COLUMNS`): ``fair_tree`` or ``classic``."""
    if algorithm == "fair_tree":
        return fair_tree(root)
    if algorithm == "classic":
        return classic(root, damping)
    raise ValueError(f"algorithm must be fair_tree or classic, not {algorithm!r}")


# -- Fair Tree ------------------------------------------------------------------------------
def fair_tree(root: Node) -> list[dict[str, Any]]:
    """Recompute Fair Tree for every association (see the module docstring for the rules)."""
    levels = _Levels(root)
    total = root.usage
    values: dict[str, dict] = {}
    order: dict[str, float] = {}  # the LevelFS Slurm sorts by (sshare prints none for "parent")
    for node in levels.nodes:
        parent = node.fs_parent
        norm_usage = min(node.usage / total, 1.0) if total else 0.0
        if parent is None:  # the root: Slurm leaves it out of the calculation
            values[node.key] = dict(norm_shares=0.0, norm_usage=1.0 if total else 0.0,
                                    effectv_usage=1.0, level_fs=math.nan, fairshare=math.nan,
                                    rank=math.nan)
            continue
        source = parent if node.uses_parent else node
        shares = levels.share(source) if source.parent is not None else 0.0
        efctv = node.usage / parent.usage if parent.usage else 0.0
        if node.uses_parent:
            order[node.key] = math.inf if node.is_user else NO_VAL_LEVEL_FS
        elif shares == 0:
            order[node.key] = 0.0
        else:
            order[node.key] = math.inf if efctv == 0 else shares / efctv
        values[node.key] = dict(norm_shares=shares, norm_usage=norm_usage, effectv_usage=efctv,
                                level_fs=math.nan if node.uses_parent else order[node.key],
                                fairshare=math.nan, rank=math.nan)
    users = sum(1 for n in levels.nodes if n.is_user)
    counter = {"rank": users, "next": users}

    def visit(siblings: list[Node], account_tied: bool) -> None:
        # stable sort: descending LevelFS, users before accounts on equal LevelFS
        ordered = sorted(siblings, key=lambda n: (-order[n.key], not n.is_user))
        previous = NO_VAL_LEVEL_FS
        i = 0
        while i < len(ordered):
            node = ordered[i]
            level_fs = order[node.key]
            tied = True if (i == 0 and account_tied) else previous == level_fs
            if node.is_user:
                if not tied:
                    counter["rank"] = counter["next"]
                values[node.key]["rank"] = counter["rank"]
                values[node.key]["fairshare"] = counter["rank"] / users
                counter["next"] -= 1
            else:
                merged = _tied_accounts(ordered, i, order)
                visit([c for n in ordered[i:i + merged + 1] for c in levels.children[n.key]],
                      tied)
                i += merged
            previous = level_fs
            i += 1

    visit(levels.children[root.key], False)
    return tree_rows(levels, values)


def _tied_accounts(ordered: list[Node], begin: int, order: dict[str, float]) -> int:
    """Slurm's ``_count_tied_accounts``, as written: it stops at the first *account* after
    ``begin``, and users sort before accounts on equal LevelFS, so it finds none in practice."""
    count = 0
    level_fs = order[ordered[begin].key]
    for node in ordered[begin + 1:]:
        if not node.is_user or order[node.key] != level_fs:
            break
        count += 1
    return count


# -- classic --------------------------------------------------------------------------------
def classic(root: Node, damping: float = 1.0) -> list[dict[str, Any]]:
    """Recompute classic fair-share for every association (see the module docstring)."""
    levels = _Levels(root)
    total = root.usage
    norm_shares: dict[str, float] = {}
    efctv: dict[str, float] = {}
    values: dict[str, dict] = {}
    for node in levels.nodes:  # parents before children
        parent = node.fs_parent
        norm_usage = min(node.usage / total, 1.0) if total else 0.0
        if node.uses_parent and parent is not None:
            norm_shares[node.key] = norm_shares[parent.key]
        else:
            value, step = 1.0, node
            while step.parent is not None:
                if not step.uses_parent:
                    value = value * levels.share(step) if levels.level_shares(step) else 0.0
                step = step.parent
            norm_shares[node.key] = value
        if parent is None:
            efctv[node.key] = 1.0
        elif parent is root:
            efctv[node.key] = norm_usage
        elif node.uses_parent:
            efctv[node.key] = efctv[parent.key]
        elif not levels.level_shares(node):
            efctv[node.key] = efctv[parent.key]
        else:
            efctv[node.key] = norm_usage + (efctv[parent.key] - norm_usage) * levels.share(node)
        shares = norm_shares[node.key]
        fairshare = 2.0 ** (-(efctv[node.key] / shares) / damping) if shares > 0 else 0.0
        values[node.key] = dict(norm_shares=shares, norm_usage=norm_usage,
                                effectv_usage=efctv[node.key], level_fs=math.nan,
                                fairshare=fairshare, rank=math.nan)
    return tree_rows(levels, values)


#: the columns :func:`compare` puts side by side: recomputed, sshare's, difference
COMPARED = ("norm_shares", "effectv_usage", "level_fs", "fairshare")


def compare(ours: list[dict[str, Any]], assocs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`recompute`'s rows with sshare's columns (``*_sshare``) and ``*_diff`` (ours minus
    sshare's; 0 where both are inf, NaN where either is missing)."""
    theirs = {row["key"]: row for row in assocs}
    merged = []
    for row in ours:
        other = theirs.get(row["key"])
        out = dict(row)
        for column in (*COMPARED, "norm_usage"):
            out[f"{column}_sshare"] = math.nan if other is None else float(other[column])
        for column in COMPARED:
            a, b = float(out[column]), out[f"{column}_sshare"]
            out[f"{column}_diff"] = 0.0 if a == b and abs(a) == math.inf else a - b
        merged.append(out)
    return merged


def ranked_over(fairshare: Iterable[float], users: int) -> int | None:
    """Whether sshare's Fair Tree FairShare column (rank / the number of user associations ranked, six
    decimals) is over ``users`` associations: None when it is, else the smallest count it is over.

    slurmctld stores each association's FairShare at its priority calculation (every
    PriorityCalcPeriod) and orders jobs by it until the next; an association added or deleted since
    then is in sshare's tree at once but not in those ranks. Recomputing gives the next
    calculation's values; sshare's are what the scheduler uses now."""
    values = [v for v in fairshare if isinstance(v, float) and math.isfinite(v) and v > 0]

    def fits(count: int) -> bool:
        return all(abs(v * count - round(v * count)) <= count * 5.1e-7 + 1e-9 for v in values)

    if not values or users <= 0 or fits(users):
        return None
    return next((n for n in range(1, 4 * users + 1000) if fits(n)), None)


# -- explanations and what-ifs ----------------------------------------------------------------
def _path(node: Node) -> list[Node]:
    path = []
    at: Node | None = node
    while at is not None:
        path.append(at)
        at = at.parent
    return path[::-1]


def find_user(root: Node, user: str, account: str | None = None) -> Node:
    for node in walk(root):
        if node.user == user and (account is None or node.account == account):
            return node
    raise SlinkyError(f"--user: no association for user {user!r}"
                      + (f" in account {account!r}" if account else ""))



def explain(root: Node, user: str, other: str, rows: list[dict[str, Any]] | None = None) -> str:
    """Why ``user`` ranks where it does against ``other`` (Fair Tree), in one sentence; ``rows``:
    :func:`fair_tree`'s of this tree, when already computed."""
    info = {row["key"]: row for row in (fair_tree(root) if rows is None else rows)}
    a, b = find_user(root, user), find_user(root, other)
    pa, pb = _path(a), _path(b)
    k = 0
    while k < min(len(pa), len(pb)) and pa[k] is pb[k]:
        k += 1
    na, nb = pa[k], pb[k]
    ra, rb = info[a.key]["rank"], info[b.key]["rank"]
    relation = "above" if ra > rb else ("tied with" if ra == rb else "below")
    fa, fb = info[na.key]["level_fs"], info[nb.key]["level_fs"]
    common = pa[k - 1].key
    what = lambda n: f"user {n.user}" if n.is_user else f"account {n.account}"  # noqa: E731
    return (f"{user} (FairShare {info[a.key]['fairshare']:.6f}) is {relation} {other} "
            f"(FairShare {info[b.key]['fairshare']:.6f}) because {what(na)} has LevelFS "
            f"{_fmt(fa)} vs {what(nb)} {_fmt(fb)} at their first common ancestor {common}")


def next_above(rows: list[dict[str, Any]], key: str) -> str | None:
    """The user ranked next above ``key`` (the smallest rank greater than its; the first in sshare's order
    where several share it), None for the top one."""
    mine = next(row["rank"] for row in rows if row["key"] == key)
    above = sorted((row for row in rows if row["rank"] is not None and row["rank"] > mine), key=lambda r: r["rank"])
    return above[0]["key"].split("/", 1)[1] if above else None


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.6g}"



def _require(nodes: dict[str, Node], key: str) -> Node:
    if key not in nodes:
        raise SlinkyError(f"no association {key!r} (use ACCOUNT or ACCOUNT/USER)")
    return nodes[key]


def decay_factor(half_life_s: float) -> float:
    """Slurm's per-second decay (priority_multifactor.c): ``1 - 0.693 / half-life``."""
    return 1.0 - 0.693 / half_life_s


def decayed(usage: float, seconds: float, half_life_s: float) -> float:
    """Raw usage after ``seconds`` without new usage: U0 * (1 - 0.693/HL)^t."""
    return usage * decay_factor(half_life_s) ** seconds if half_life_s > 0 else usage


def recovery_seconds(usage: float, target: float, half_life_s: float) -> float:
    """Seconds until ``usage`` decays to ``target`` with no new usage (Slurm's decay)."""
    if usage <= target:
        return 0.0
    if target <= 0 or half_life_s <= 0:
        return math.inf
    return math.log(target / usage) / math.log(decay_factor(half_life_s))


def recovery_to_fair(root: Node, key: str, half_life_s: float) -> float:
    """Seconds until the association's LevelFS reaches 1 (usage = its share of the parent's),
    assuming its siblings' usage stays where it is (they keep using what decays)."""
    nodes = {n.key: n for n in walk(root)}
    node = _require(nodes, key)
    parent = node.fs_parent
    if parent is None:
        return 0.0
    others = parent.usage - node.usage
    S = _level_shares(node)
    if S >= 1:
        return 0.0
    target = S * others / (1 - S)  # u / (u + others) = S
    return recovery_seconds(node.usage, target, half_life_s)


def parse_half_life(text: str) -> float:
    """``PriorityDecayHalfLife`` as printed by ``scontrol show config`` (``7-00:00:00``) → s."""
    return parse_duration(text.strip())



def snapshot(slurm: Slurm, attempts: int = 5) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """sshare's rows plus the finer raw usage of ``scontrol show assoc_mgr``, from one priority
    calculation (sshare read before and after must agree)."""
    for _ in range(attempts):
        before = slurm.run("sshare", records.sshare_args()).stdout
        mgr = slurm.run("scontrol", ["show", "assoc_mgr", "flags=assoc"]).stdout
        after = slurm.run("sshare", records.sshare_args()).stdout
        if before == after:
            break
        time.sleep(1)
    return share_rows(records.parse_sshare(after)), parse_assoc_mgr_usage(mgr)


@dataclass
class Report:
    """The association tree recomputed beside sshare's columns (:func:`compare`'s rows) and what the
    report says about them."""

    rows: list[dict[str, Any]]
    tree: Node
    algorithm: str
    slurm_algorithm: str
    users: int
    sshare_ranked_over: int | None
    calc_period: str


def report(assocs: list[dict[str, Any]], usage: dict[str, float], config: dict[str, str],
           algorithm: str | None = None) -> Report:
    """Recompute the tree (Fair Tree or classic; default: slurmctld's PriorityFlags) and compare it with
    sshare's rows (``fairshare_report``'s rows, without pandas)."""
    slurm_algorithm = "classic" if "NO_FAIR_TREE" in config.get("PriorityFlags", "") else "fair_tree"
    algorithm = algorithm or slurm_algorithm
    try:
        damping = float(config.get("FairShareDampeningFactor", "1") or 1)
    except ValueError:
        damping = 1.0
    root = build_tree(assocs, usage)
    rows = compare(recompute(root, algorithm, damping), assocs)
    users = sum(1 for node in walk(root) if node.is_user)
    # Fair Tree's FairShare is rank / users ranked: ranks over another count are slurmctld's last
    # calculation, made before an association was added or deleted (what it schedules by until the next)
    then = ranked_over([row["fairshare"] for row in assocs], users) if slurm_algorithm == "fair_tree" else None
    return Report(rows, root, algorithm, slurm_algorithm, users, then, config.get("PriorityCalcPeriod", ""))
