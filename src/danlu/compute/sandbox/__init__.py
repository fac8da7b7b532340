"""The sandbox of the local backend: bubblewrap arguments, cgroups, network policy, start-up probe."""
