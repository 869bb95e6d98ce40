"""``slinkyml demo``: the main job — the product end to end on the local cluster."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo",
                              description="Renders and validates the example Slinky cluster, brings up the "
                              "local Slurm cluster, runs a 2-node srun, plans a 200B model, trains a tiny GPT "
                              "on 2 nodes with sbatch+torchrun, dispatches a Python all-reduce through "
                              "submitit, and prints accounting reports.")
    p.add_argument("--nodes", type=int, default=4, help="local compute nodes (default 4)")
    p.add_argument("--workdir", help="where job files go (default: a new directory under /tmp)")
    p.add_argument("--kubernetes", action="store_true",
                   help="the Kubernetes half instead (make demo-kube): builds the Kubernetes parts from Go modules, "
                   "brings up the control plane with a kubelet node, applies manifests/cpu-small and shows what "
                   "the real slurm-operator makes of it")
    p.add_argument("--docker", action="store_true",
                   help="on the Docker cluster (`dev up --docker`, docs/docker-cluster.md) instead of the netns one")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from slinkyml.errors import SlinkyError

    try:
        if args.kubernetes:
            from slinkyml.demo.kubernetes import main as kube_main

            return kube_main()
        from slinkyml.demo import main
    except ImportError as exc:  # a part of the product missing from this install
        raise SlinkyError(f"demo step unavailable: {exc}") from None
    return main(args.nodes, args.workdir, docker=args.docker)
