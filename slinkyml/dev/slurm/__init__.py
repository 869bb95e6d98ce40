"""The local multi-node Slurm cluster: its spec and config files, network namespaces, ownership of shared
machine state, and the Debian roots of other Slurm releases. The lowest of dev/'s three rooms."""
