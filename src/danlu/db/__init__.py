"""Persistence: SQLAlchemy models, engine/session set-up, Alembic migrations. SQLite and PostgreSQL."""
