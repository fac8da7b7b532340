"""Getting inside a rental: exec and shell sessions (docs/access.md). Who may open a session, the
wire protocol, each session's life (started inside the rental's sandbox by its backend, ended with
the rental, a dropped connection, a lost right or a revoked token) and the activity it shows."""
