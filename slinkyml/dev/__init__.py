"""The local multi-node Slurm cluster used by the demo, notebooks and tests."""

from slinkyml.dev.cluster import ClusterStartError, LocalCluster, detect_gpus, detect_version
from slinkyml.dev.config import DevClusterSpec
from slinkyml.dev.paths import default_state_dir

__all__ = ["ClusterStartError", "DevClusterSpec", "LocalCluster", "default_state_dir", "detect_gpus",
           "detect_version"]
