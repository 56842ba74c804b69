"""The PostgreSQL store's schema (bridge/store_postgres.py): its migrations, applied once
however many replicas start at once, and what a `store.url` must be."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bridge.masking import MASK
from bridge.store import StoreError

log = logging.getLogger("bridge.store")

__all__ = ["MIGRATIONS", "masked_url", "migrate", "store_url_problem"]

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
)
# the key of the advisory lock held while migrations are applied ("a2t-brdg" as a number)
MIGRATION_LOCK = 0x6132_742D_6272_6467


def masked_url(url: str) -> str:
    """`url` with its password replaced by MASK, for logs and health."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    netloc = f"{user}:{MASK}@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def store_url_problem(url: str) -> str | None:
    """What is wrong with a `store.url`, or None: a postgresql:// URL with a host and a database."""
    try:
        parts = urlsplit(url)
        if parts.port == 0:  # a port that is no number raises ValueError here
            return "its port is 0"
    except ValueError as exc:
        return f"it is no URL ({exc})"
    if parts.scheme not in ("postgresql", "postgres"):
        return f"its scheme is {parts.scheme or 'missing'!r}, not postgresql"
    if not parts.hostname:
        return "it names no host"
    if not parts.path.strip("/"):
        return "it names no database (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        return f"psycopg cannot read it ({exc})"
    return None


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
