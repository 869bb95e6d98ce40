#!/usr/bin/env python3
"""Generate kube/controlplane/go.mod's replace block from k8s.io/kubernetes' own go.mod.

Why: k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and
replaces them with ./staging/src/k8s.io/X, which a consumer cannot use. Each of those modules is also
published on its own as k8s.io/X v0.MINOR.PATCH for Kubernetes v1.MINOR.PATCH, so a consumer replaces
every one of them with that version. The list changes between releases (1.36 added k8s.io/streaming
and k8s.io/cri-streaming), so it is read from the release's go.mod, never hand-copied.

Usage: gen_replace.py [MODULE_DIR]   (default: kube/controlplane beside this file). Reads the
k8s.io/kubernetes version that MODULE_DIR/go.mod requires, downloads that release's go.mod with
`go mod download -json` (the ordinary go client, through the module proxy), and rewrites the replace
directives of MODULE_DIR/go.mod with `go mod edit`. Stdlib only: it runs before any venv exists.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

KUBERNETES = "k8s.io/kubernetes"
STAGING_PREFIX = "./staging/src/"


def go_json(*args: str, cwd: Path) -> dict:
    """One `go ... -json` call's output as a dict; exits with go's own message when it fails."""
    done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"gen_replace: go {' '.join(args)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def staging_version(kubernetes_version: str) -> str:
    """v1.36.3 -> v0.36.3 (pre-release suffixes carried over: v1.36.0-rc.1 -> v0.36.0-rc.1)."""
    m = re.fullmatch(r"v1\.(\d+\.\d+(?:-[0-9A-Za-z.-]+)?)", kubernetes_version)
    if not m:
        sys.exit(f"gen_replace: {KUBERNETES} {kubernetes_version}: not a v1.MINOR.PATCH version")
    return f"v0.{m.group(1)}"


def staging_modules(upstream_gomod: dict) -> list[str]:
    """The module paths that upstream's go.mod replaces with a directory under ./staging/src/."""
    return sorted(r["Old"]["Path"] for r in upstream_gomod.get("Replace") or []
                  if r["New"]["Path"].startswith(STAGING_PREFIX))


def main(argv: list[str]) -> int:
    module_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "controlplane"
    ours = go_json("mod", "edit", "-json", cwd=module_dir)
    wanted = [r["Version"] for r in ours.get("Require") or [] if r["Path"] == KUBERNETES]
    if not wanted:
        sys.exit(f"gen_replace: {module_dir}/go.mod does not require {KUBERNETES}")
    version = wanted[0]
    info = go_json("mod", "download", "-json", f"{KUBERNETES}@{version}", cwd=module_dir)
    upstream = go_json("mod", "edit", "-json", info["GoMod"], cwd=module_dir)
    modules = staging_modules(upstream)
    if not modules:
        sys.exit(f"gen_replace: {KUBERNETES}@{version}'s go.mod replaces no staging module")
    target = staging_version(version)
    edits = [f"-dropreplace={r['Old']['Path']}" for r in ours.get("Replace") or []]
    edits += [f"-replace={m}={m}@{target}" for m in modules]
    subprocess.run(["go", "mod", "edit", *edits], cwd=module_dir, check=True)
    print(f"gen_replace: {len(modules)} staging modules of {KUBERNETES}@{version} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
