"""Compute: GPU discovery, the instance lifecycle, and the local process executor."""
