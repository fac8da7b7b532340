"""Telemetry: what running instances use (GPU, CPU, memory), stored with bounded retention, and
the policies that act on it (idle auto-stop, maximum duration). See docs/telemetry.md."""
