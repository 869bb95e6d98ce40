"""The layer order ARCHITECTURE.md states is the order of the imports: no package of slinkyml imports
one that its table puts below it; and job state names are spelled in slurm/states.py only."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "slinkyml"
#: ARCHITECTURE.md's rows, bottom up; a top-level module of slinkyml (errors, specload, config...) is "base".
LAYERS = ["base", "slurm", "plan", "train", "cluster", "jobs", "dispatch", "accounting", "dev", "demo", "cli"]
#: the product: what a user's job, notebook, report or cluster needs; ``dev/`` (the local clusters a
#: developer runs) sits above it, so only ``demo/`` and ``cli/`` may start it
PRODUCT = LAYERS[:LAYERS.index("dev")]
#: ``dev/``'s rooms, bottom up: the local Slurm cluster, the images (built from its Slurm roots), the local
#: Kubernetes cluster (its node runs those images), the Docker cluster (its containers run them too);
#: ``dev/__init__.py`` (``from slinkyml.dev import LocalCluster``) re-exports the Slurm room's names and sits
#: above all four
DEV_ROOMS = ["slurm", "images", "kubernetes", "docker"]


def _layer(parts: tuple[str, ...]) -> str:
    if parts[0] in ("__main__", "__main__.py"):
        return "cli"  # `python -m slinkyml` is the command line
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else "base"


def _room(parts: tuple[str, ...]) -> str:
    """A module's room within ``dev/`` ("" outside dev/, and for dev/'s own front)."""
    return parts[1] if _layer(parts) == "dev" and parts[1] in DEV_ROOMS else ""


def _rank(parts: tuple[str, ...]) -> tuple[int, int]:
    """Where a module (path parts below slinkyml/) sits: its layer, then within ``dev/`` its room."""
    room = _room(parts)
    return LAYERS.index(_layer(parts)), DEV_ROOMS.index(room) if room else len(DEV_ROOMS)


def _name(parts: tuple[str, ...]) -> str:
    return f"dev/{_room(parts)}" if _room(parts) else _layer(parts)


def _imported(path: Path, tree: ast.AST) -> set[tuple[str, ...]]:
    """The slinkyml modules a file imports, as path parts below slinkyml/ (lazy imports included)."""
    here = path.relative_to(PACKAGE).parts[:-1]
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {tuple(a.name.split("."))[1:] for a in node.names if a.name.startswith("slinkyml.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
            elif node.module and node.module.split(".")[0] == "slinkyml":
                base = ()
            else:
                continue
            module = tuple((node.module or "").split(".")) if node.module else ()
            module = module[1:] if not node.level else module
            found |= {base + module + (a.name,) for a in node.names}
    return {parts for parts in found if parts}


def _upward(path: Path, source: str) -> list[str]:
    """What the file at ``path`` (below slinkyml/) imports from a layer (or dev/ room) above its own, one
    line each."""
    own = path.relative_to(PACKAGE).parts
    found = []
    for parts in sorted(_imported(path, ast.parse(source))):
        if _rank(parts) > _rank(own):
            found.append(f"{path.relative_to(PACKAGE.parent)} ({_name(own)}) imports slinkyml.{'.'.join(parts)} "
                         f"({_name(parts)})")
    return found


def test_no_layer_imports_upward() -> None:
    upward = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _upward(path, path.read_text())]
    assert not upward, "\n".join(upward)


def test_no_product_layer_imports_the_dev_tools() -> None:
    """``sbatch check`` (``jobs/shapecheck.py``) runs its throw-away slurmctld from ``slurm/``, not
    from the local cluster's ``dev/``; the same for every product layer, lazy imports included."""
    assert PRODUCT == ["base", "slurm", "plan", "train", "cluster", "jobs", "dispatch", "accounting"]
    product = [path for path in sorted(PACKAGE.rglob("*.py")) if _layer(path.relative_to(PACKAGE).parts) in PRODUCT]
    assert len(product) > 100  # the walk sees the package
    into_dev = [line for path in product for line in _upward(path, path.read_text()) if "slinkyml.dev" in line]
    assert not into_dev, "\n".join(into_dev)


def test_an_import_of_dev_from_a_product_layer_is_reported() -> None:
    """The check sees every spelling of such an import (the one ``shapecheck.py`` had, a lazy one, a
    relative one), and none from the layers above the dev tools."""
    spellings = ["from slinkyml.dev.slurm import roots\n",
                 "from slinkyml.dev.slurm.throwaway import ThrowawaySlurmctld\n",
                 "def check():\n    import slinkyml.dev.slurm.cluster\n",
                 "from ..dev.slurm import roots\n",
                 "from slinkyml.dev import LocalCluster\n",
                 "from slinkyml.dev.kubernetes.kube import KubeControlPlane\n"]
    for source in spellings:
        for where in ("jobs/shapecheck.py", "slurm/throwaway.py", "config.py", "accounting/store.py"):
            found = _upward(PACKAGE / where, source)
            assert len(found) == 1 and "slinkyml.dev" in found[0], (where, source, found)
    assert not _upward(PACKAGE / "cli" / "dev.py", spellings[0])
    assert not _upward(PACKAGE / "demo" / "__init__.py", spellings[1])


def test_the_dev_rooms_import_only_downward() -> None:
    """Within ``dev/``: the Docker room may use the images and the Slurm room (its accounts and settings), the
    Kubernetes room the images and the Slurm room (its node's network helpers), the images the Slurm room
    (a release's root); the Slurm room neither, and no room the
    package front (``from slinkyml.dev import LocalCluster``), which re-exports the Slurm room."""
    slurm, images, kubernetes, docker = (PACKAGE / "dev" / room / "x.py" for room in DEV_ROOMS)
    down = {docker: ["from slinkyml.dev.images import slurm_images\n",
                     "from slinkyml.dev.slurm.config import DEFAULT_ACCOUNTS\n"],
            kubernetes: ["from slinkyml.dev.images.images import Entry\n",
                         "from slinkyml.dev.slurm.network import _ip\n", "from ..slurm import network\n"],
            images: ["from slinkyml.dev.slurm import roots\n", "from .images import Entry\n"],
            slurm: ["from slinkyml.dev.slurm.config import DevClusterSpec\n", "from . import ownership\n"],
            PACKAGE / "dev" / "__init__.py": ["from slinkyml.dev.slurm.cluster import LocalCluster\n"]}
    up = {slurm: ["from slinkyml.dev.images import slurm_images\n", "from ..kubernetes.kube import Ports\n",
                  "from slinkyml.dev import LocalCluster\n"],
          images: ["from slinkyml.dev.kubernetes.kubenode import NodeSettings\n",
                   "from slinkyml.dev import LocalCluster\n"],
          kubernetes: ["from slinkyml.dev import DevClusterSpec\n", "from slinkyml.demo import kubernetes\n",
                       "from slinkyml.dev.docker.cluster import DockerCluster\n"]}
    assert all(not _upward(where, source) for where, sources in down.items() for source in sources)
    for where, sources in up.items():
        for source in sources:
            assert len(_upward(where, source)) == 1, (where, source)
    assert {path.relative_to(PACKAGE / "dev").parts[0] for path in (PACKAGE / "dev").rglob("*.py")} == \
        {*DEV_ROOMS, "__init__.py"}  # every dev module is in one of the rooms


def test_the_layers_are_those_of_architecture_md() -> None:
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| ") and "`" in line]
    named = [name for layer, _ in rows if layer.strip() for name in layer.replace(",", " ").split()]
    assert [layer for layer in named if layer in LAYERS or layer == "Slurm"] == \
        ["base", "Slurm", "plan", "train", "cluster", "jobs", "dispatch", "accounting", "dev", "demo", "cli"]
    rooms = [room for _, where in rows for room in re.findall(r"`dev/(\w+)/`", where)]
    assert rooms == DEV_ROOMS


#: string constants equal to a job state's name that are not a job state: (file, name) → why
_NOT_JOB_STATES = {
    ("dev/slurm/config.py", "UNKNOWN"): "a node's State= in slurm.conf",
    ("dev/docker/config.py", "UNKNOWN"): "a node's State= in slurm.conf",
    ("train/loop.py", "FAILED"): "a word of the trainer's check line",
    ("demo/training.py", "FAILED"): "a word of the demo's check line",
    ("cli/jobs.py", "SUBMITTED"): "the submission time's column header of `jobs list`",
}

#: texts that name job states in words, not as a value read or passed to Slurm: (file, text) → why
_STATE_WORDS_IN_TEXT = {
    ("cli/jobs.py", "e.g. RUNNING,PENDING or FAILED"): "`jobs list --state`'s help, an example",
    ("cli/jobs.py", "is listed UNKNOWN"): "`jobs list`'s description",
    ("jobs/diagnose.py", "CANCELLED AT"): "slurmstepd's '*** JOB 12 ON n1 CANCELLED AT ...' line, read as written",
}


def test_job_state_names_are_spelled_only_in_slurm_states() -> None:
    from slinkyml.slurm import states

    names = set(states.TERMINAL | states.UNFINISHED) | {v for k, v in vars(states.State).items() if k.isupper()}
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        if where == "slurm/states.py":
            continue
        tree = ast.parse(path.read_text())
        not_compared = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        not_compared |= {id(value) for node in ast.walk(tree) if isinstance(node, ast.Assign)  # names in __all__
                       and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                       for value in ast.walk(node.value)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value in names and id(node) not in not_compared
                    and (where, node.value) not in _NOT_JOB_STATES):
                spelled.append(f"slinkyml/{where}:{node.lineno}: {node.value!r} (use slurm.states.State)")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in not_compared
                  and node.value not in names):
                words = set(re.findall(r"[A-Z][A-Z_]+", node.value)) & names
                if words and not any(where == w and text in node.value for (w, text) in _STATE_WORDS_IN_TEXT):
                    spelled.append(f"slinkyml/{where}:{node.lineno}: {sorted(words)} in {node.value[:60]!r} "
                                   "(an f-string of slurm.states.State)")
    assert not spelled, "\n".join(spelled)


#: upper-case words of the batch script's shell that are not job states: signals, variables it sets
_SHELL_WORDS_NOT_STATES = {"TERM", "SIGTERM", "EXIT", "SIG__SIG__"}


def test_job_state_names_in_the_batch_scripts_shell_are_those_of_slurm_states() -> None:
    """decide.sh and the run_*.sh parts compare squeue's state words in bash, where no import can check
    them: every upper-case word of their code (comments aside) is a state name of slurm/states.py, a
    signal, or a variable (``$NAME``, ``SLINKYML_*``); a misspelt state there would never match."""
    from slinkyml.slurm import states

    names = states.TERMINAL | states.UNFINISHED
    unknown = []
    for path in sorted((PACKAGE / "data" / "shell").glob("*.sh")):
        if not (path.name == "decide.sh" or path.name.startswith("run_")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split(" # ", 1)[0] if not line.lstrip().startswith("#") else ""
            for word in re.findall(r"(?<![$A-Za-z_{])[A-Z][A-Z_]{3,}\b", code):
                if word not in names and word not in _SHELL_WORDS_NOT_STATES and not word.startswith("SLINKYML_"):
                    unknown.append(f"{path.name}:{number}: {word}")
    assert not unknown, unknown


def test_a_misspelt_state_in_run_causes_is_refused_when_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from slinkyml.slurm import causes

    table = json.loads(causes.TABLE_FILE.read_text())
    table["rules"][0]["when"]["slurm"] = "^(COMPLETING|CANCELED)"
    bad = tmp_path / "run_causes.json"
    bad.write_text(json.dumps(table))
    monkeypatch.setattr(causes, "TABLE_FILE", bad)
    causes.table.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"rule 1 \(cancelled\): slurm: 'CANCELED' is not a job state name"):
            causes.table()
    finally:
        causes.table.cache_clear()
