"""The local Slurm cluster as Docker containers (``slinkyml dev up --docker``), through testcontainers."""
