"""The local multi-node Slurm cluster used by the demo, notebooks and tests."""

from slinkyml.config import default_state_dir
from slinkyml.dev.slurm.cluster import ClusterStartError, LocalCluster, detect_gpus, detect_version
from slinkyml.dev.slurm.config import DevClusterSpec

__all__ = ["ClusterStartError", "DevClusterSpec", "LocalCluster", "default_state_dir", "detect_gpus",
           "detect_version"]
