"""The PostgreSQL store's schema (bridge/store/postgres.py): its migrations, applied once
however many replicas start at once."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from bridge.store.credentials import POSTGRES_MIGRATION
from bridge.store.layout import StoreError

log = logging.getLogger("bridge.store")

__all__ = ["MIGRATIONS", "migrate"]

# The schema, one migration a step, applied in order at start under an advisory lock (so that
# replicas starting at once apply each once); `bridge_migrations` holds the steps applied. A
# tool's name is unique: whichever replica names a tool first, every replica reads that name back.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE versions (
        namespace TEXT NOT NULL, tool_id TEXT NOT NULL, version INTEGER NOT NULL,
        digest TEXT NOT NULL, compatibility TEXT NOT NULL, created_at TEXT NOT NULL,
        signature TEXT NOT NULL, PRIMARY KEY (namespace, tool_id, version))""",
        """CREATE TABLE tool_names (
        namespace TEXT NOT NULL, tool_id TEXT NOT NULL PRIMARY KEY,
        name TEXT NOT NULL UNIQUE, native_id TEXT NOT NULL)""",
        """CREATE TABLE invocations (
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, invocation_id TEXT PRIMARY KEY,
        tool_id TEXT, tool_name TEXT, version BIGINT, surface TEXT, status TEXT NOT NULL,
        error_class TEXT, created_at TEXT NOT NULL, duration_ms DOUBLE PRECISION,
        subject TEXT, client_id TEXT)""",
        "CREATE INDEX invocations_created_at ON invocations (created_at)",
        """CREATE TABLE results (
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, ref TEXT PRIMARY KEY,
        invocation_id TEXT NOT NULL, media_type TEXT NOT NULL, size BIGINT NOT NULL,
        payload BYTEA NOT NULL, created_at TEXT NOT NULL, surface TEXT)""",
    ),
    POSTGRES_MIGRATION,  # users' sealed upstream credentials, and OAuth flows under way
)
# the key of the advisory lock held while migrations are applied ("a2t-brdg" as a number)
MIGRATION_LOCK = 0x6132_742D_6272_6467


async def migrate(conn: psycopg.AsyncConnection[Any], name: str) -> None:
    """Apply the migrations the database lacks, in one transaction under an advisory lock: a
    replica starting meanwhile waits, then finds them applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS bridge_migrations ("
            "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
        )
        cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM bridge_migrations")
        row = await cur.fetchone()
        applied = int(row[0]) if row else 0
        if applied > len(MIGRATIONS):
            raise StoreError(
                f"{name}: the store was migrated by a newer bridge (migration {applied}; "
                f"this one knows up to {len(MIGRATIONS)}); fix: run that newer bridge, or set "
                "store.url to another database"
            )
        for version in range(applied + 1, len(MIGRATIONS) + 1):
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO bridge_migrations VALUES (%s, now())", (version,))
            log.info("store %s: migration %d applied", name, version)
