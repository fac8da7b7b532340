"""Events and notifications (issue 10): the in-app feed and per-user signed webhooks. See docs/telemetry.md."""
