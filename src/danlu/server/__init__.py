"""The control plane process: bootstrap, the background control loop, the HTTP server."""
