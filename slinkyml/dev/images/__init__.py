"""Container images without a registry: OCI layout archives of named files (``images``) and the Slurm
images built from a release's root (``slurm_images``), which the local Kubernetes node imports."""
