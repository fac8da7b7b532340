"""The declarative base (with the schema's naming convention), settings and leases."""

from __future__ import annotations

from sqlalchemy import BigInteger, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Setting(Base):
    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


CONTROL_LOOP_LEASE = "control-loop"  # the lease of the control loop's work (danlu.server.loop)


class LeaseRow(Base):
    """Background work held by one server at a time (danlu.server.lease)."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    token: Mapped[str] = mapped_column(String(64))
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)
