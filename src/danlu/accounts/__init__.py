"""Users, API tokens and the first admin."""
