"""Compute backends: one protocol (``base.Backend``) with an opaque run handle; ``local`` runs each
rental in a bubblewrap sandbox on this host. Slurm and Kubernetes backends follow on the same seam."""
