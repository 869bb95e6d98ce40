"""Fair-share: parse ``sshare -a -l -P``, recompute Fair Tree and classic fair-share offline.

Offline, to show slinkyml's numbers are Slurm's, explain a rank and answer what-ifs without the
cluster. The rules follow Slurm's assoc_mgr.c, fair_tree.c and priority_multifactor.c (22.05-25.11);
a ``fairshare=parent`` association is transparent: its children compete at its parent's level.
Usage decays as ``U0 * (1 - 0.693 / HL)^t``, Slurm's own constant (not exactly a half per HL).

The rules are computed on plain rows in ``sharetree.py`` (what ``slinkyml fairshare`` uses, without
pandas); this module gives them as DataFrames, with explanations, what-ifs and checks against sshare.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import pandas as pd

from slinkyml.accounting import sharetree
from slinkyml.accounting.sharetree import (  # noqa: F401 - fair-share's names, computed without pandas
    COMPARED,
    NO_VAL_LEVEL_FS,
    PARENT,
    SHARE_COLUMNS,
    TREE_COLUMNS,
    Node,
    _Levels,
    _require,
    decay_factor,
    decayed,
    find_user,
    parse_assoc_mgr_usage,
    parse_half_life,
    ranked_over,
    recovery_seconds,
    recovery_to_fair,
    walk,
)
from slinkyml.accounting.sharetree import _fmt as _fmt
from slinkyml.accounting.sharetree import _path as _path
from slinkyml.slurm import records
from slinkyml.slurm.records import SSHARE_FIELDS, sshare_args  # noqa: F401 - fair-share's names for them


def parse_sshare(text: str) -> pd.DataFrame:
    """``sshare -a -l -P`` (our field order, header optional) → one row per association."""
    return share_frame(records.parse_sshare(text))


def share_frame(rows: Iterable[records.Record]) -> pd.DataFrame:
    """Association records keyed by :data:`SSHARE_FIELDS` (from any backend) → one row each
    (:func:`sharetree.share_rows`)."""
    return pd.DataFrame(sharetree.share_rows(rows), columns=SHARE_COLUMNS)


def build_tree(assocs: pd.DataFrame, usage: dict[str, float] | None = None) -> Node:
    """Association rows (``parse_sshare`` layout) → tree of :class:`Node` (:func:`sharetree.build_tree`)."""
    return sharetree.build_tree(assocs.to_dict("records"), usage)


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=TREE_COLUMNS)
    frame["rank"] = frame["rank"].astype("Int64")
    return frame


def recompute(root: Node, algorithm: str = "fair_tree", damping: float = 1.0) -> pd.DataFrame:
    """The whole tree recomputed (:data:`TREE_COLUMNS`): ``fair_tree`` or ``classic``."""
    return _frame(sharetree.recompute(root, algorithm, damping))


def fair_tree(root: Node) -> pd.DataFrame:
    """Recompute Fair Tree for every association (see the module docstring for the rules)."""
    return _frame(sharetree.fair_tree(root))


def classic(root: Node, damping: float = 1.0) -> pd.DataFrame:
    """Recompute classic fair-share for every association (see the module docstring)."""
    return _frame(sharetree.classic(root, damping))


def compare(ours: pd.DataFrame, assocs: pd.DataFrame) -> pd.DataFrame:
    """:func:`recompute`'s rows with sshare's columns (``*_sshare``) and ``*_diff`` (ours minus
    sshare's; 0 where both are inf, NaN where either is missing)."""
    theirs = assocs[["key", *COMPARED, "norm_usage"]].rename(
        columns={c: f"{c}_sshare" for c in (*COMPARED, "norm_usage")})
    merged = ours.merge(theirs, on="key", how="left")
    for column in COMPARED:
        a, b = merged[column].astype(float), merged[f"{column}_sshare"].astype(float)
        both_inf = (a == b) & a.abs().eq(math.inf)
        merged[f"{column}_diff"] = (a - b).where(~both_inf, 0.0)
    return merged


def explain(root: Node, user: str, other: str, table: pd.DataFrame | None = None) -> str:
    """Why ``user`` ranks where it does against ``other`` (Fair Tree), in one sentence
    (:func:`sharetree.explain` over ``table``'s rows, or the tree's)."""
    return sharetree.explain(root, user, other, None if table is None else table.to_dict("records"))


def what_if(root: Node, *, shares: dict[str, float] | None = None,
            add_usage: dict[str, float] | None = None) -> pd.DataFrame:
    """Ranks before and after changing shares (key → RawShares) or adding raw usage
    (key → usage, added to the association and all its ancestors, as Slurm does)."""
    before = fair_tree(root)
    changed = copy.deepcopy(root)
    nodes = {n.key: n for n in walk(changed)}
    for key, value in (shares or {}).items():
        _require(nodes, key).shares = value
    for key, value in (add_usage or {}).items():
        node: Node | None = _require(nodes, key)
        while node is not None:
            node.usage += value
            node = node.parent
    after = fair_tree(changed)
    merged = before.merge(after, on="key", suffixes=("_before", "_after"))
    users = merged[merged["rank_before"].notna()]
    return users[["key", "level_fs_before", "level_fs_after", "rank_before", "rank_after",
                  "fairshare_before", "fairshare_after"]].sort_values("rank_after",
                                                                    ascending=False)


def classic_mismatches(assocs: pd.DataFrame, raw: dict[str, float] | None = None,
                       abs_tol: float = 1e-6) -> list[tuple]:
    """:func:`classic` vs sshare's columns: ``(key, column, ours, sshare)`` beyond tolerance.

    The tolerance carries sshare's printed rounding of raw usage through the formulas, to first order.
    """
    raw = raw or {}
    root = build_tree(assocs, raw)
    levels = _Levels(root)
    ours = classic(root).merge(assocs, on="key", suffixes=("", "_sshare")).set_index("key")
    total = root.usage
    d_root = 0.005 if root.key in raw else 0.5
    d_e: dict[str, float] = {root.key: 0.0}
    bad = []
    for node in walk(root):
        parent = node.fs_parent
        if parent is None:
            continue
        d_n = (0.005 if node.key in raw else 0.5) / total if total else 0.0
        d_n += (node.usage / total) * d_root / total if total else 0.0
        if parent is root:
            d_e[node.key] = d_n
        elif node.uses_parent:
            d_e[node.key] = d_e[parent.key]
        else:
            f = levels.share(node)
            d_e[node.key] = (1 - f) * d_n + f * d_e[parent.key]
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


def fair_tree_mismatches(assocs: pd.DataFrame, raw: dict[str, float] | None = None) -> list[tuple]:
    """:func:`fair_tree` vs sshare's columns: ``(key, column, ours, sshare)`` beyond tolerance.

    Ranks must agree to 1e-6; usage-derived columns within sshare's printed rounding of raw usage.
    """
    raw = raw or {}
    root = build_tree(assocs, raw)
    table = compare(fair_tree(root), assocs)
    printed = assocs.set_index("key")["raw_usage"]
    nodes = {n.key: n for n in walk(root)}
    bad = []
    for row in table.itertuples(index=False):
        node = nodes[row.key]
        d = 0.005 if row.key in raw else 0.5
        parent = node.fs_parent
        p = parent.usage if parent is not None else 0.0
        d_e = 1e-6 + ((d / p + row.effectv_usage * d / p) if p else 0.0)
        if abs(row.norm_shares_diff) > 1e-6:
            bad.append((row.key, "NormShares", row.norm_shares, row.norm_shares_sshare))
        if abs(row.effectv_usage_diff) > d_e:
            bad.append((row.key, "EffectvUsage", row.effectv_usage, row.effectv_usage_sshare))
        if node.is_user and abs(row.fairshare_diff) > 1e-6:
            bad.append((row.key, "FairShare", row.fairshare, row.fairshare_sshare))
        theirs, ours = row.level_fs_sshare, row.level_fs
        if math.isnan(theirs) != math.isnan(ours) or math.isinf(theirs) != math.isinf(ours):
            bad.append((row.key, "LevelFS", ours, theirs))
        elif math.isfinite(theirs):
            rel = (d / node.usage + d / p) if node.usage and p else 0.0
            if abs(row.level_fs_diff) > 1e-6 + abs(theirs) * rel:
                bad.append((row.key, "LevelFS", ours, theirs))
        if not printed[row.key] - d <= row.raw_usage < printed[row.key] + 1 + d:
            bad.append((row.key, "RawUsage", row.raw_usage, printed[row.key]))
    return bad
