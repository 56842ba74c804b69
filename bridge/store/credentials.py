"""Users' upstream credentials in the store (`auth: {type: user_oauth}`), for SQLite and
PostgreSQL alike: one sealed blob per (upstream, issuer, subject), and the OAuth flows under way
(a connect link, then the state of an authorization request), each taken once.

The store never sees a token: the identity layer seals what it keeps (bridge/identity/vault.py)."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.model import now_iso
from bridge.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import psycopg

__all__ = ["FlowRow", "PostgresCredentials", "SqliteCredentials"]

T = TypeVar("T")

# (upstream, issuer, subject, sealed) of a flow under way
FlowRow = tuple[str, str, str, bytes]

SQLITE_TABLES = (
    """CREATE TABLE IF NOT EXISTS user_credentials (
    upstream TEXT NOT NULL,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    sealed BLOB NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (upstream, issuer, subject)
)""",
    """CREATE TABLE IF NOT EXISTS oauth_flows (
    key TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    upstream TEXT NOT NULL,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    sealed BLOB NOT NULL,
    expires_at REAL NOT NULL
)""",
)

POSTGRES_MIGRATION = (
    """CREATE TABLE user_credentials (
    upstream TEXT NOT NULL, issuer TEXT NOT NULL, subject TEXT NOT NULL, sealed BYTEA NOT NULL,
    updated_at TEXT NOT NULL, PRIMARY KEY (upstream, issuer, subject))""",
    """CREATE TABLE oauth_flows (
    key TEXT PRIMARY KEY, purpose TEXT NOT NULL, upstream TEXT NOT NULL, issuer TEXT NOT NULL,
    subject TEXT NOT NULL, sealed BYTEA NOT NULL, expires_at DOUBLE PRECISION NOT NULL)""",
)

_PUT_CREDENTIAL = (
    "INSERT INTO user_credentials (upstream, issuer, subject, sealed, updated_at) "
    "VALUES ({0},{0},{0},{0},{0}) ON CONFLICT (upstream, issuer, subject) "
    "DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = EXCLUDED.updated_at"
)
_GET_CREDENTIAL = (
    "SELECT sealed FROM user_credentials WHERE upstream = {0} AND issuer = {0} AND subject = {0}"
)
_DROP_CREDENTIAL = (
    "DELETE FROM user_credentials WHERE upstream = {0} AND issuer = {0} AND subject = {0}"
)
_PUT_FLOW = (
    "INSERT INTO oauth_flows (key, purpose, upstream, issuer, subject, sealed, expires_at) "
    "VALUES ({0},{0},{0},{0},{0},{0},{0})"
)
_CLAIM_FLOW = _PUT_FLOW + " ON CONFLICT (key) DO NOTHING RETURNING key"
_EXPIRED_FLOWS = "DELETE FROM oauth_flows WHERE expires_at < {0}"
# A user's flows of one purpose beyond the newest FLOWS_PER_USER: each `credential_missing` makes
# a connect link, and a client calling again and again would otherwise keep adding rows.
_SURPLUS_FLOWS = (
    "DELETE FROM oauth_flows WHERE purpose = {0} AND upstream = {0} AND issuer = {0} "
    "AND subject = {0} AND key NOT IN (SELECT key FROM oauth_flows WHERE purpose = {0} "
    "AND upstream = {0} AND issuer = {0} AND subject = {0} ORDER BY expires_at DESC LIMIT {0})"
)
FLOWS_PER_USER = 16
_TAKE_FLOW = (
    "DELETE FROM oauth_flows WHERE key = {0} AND purpose = {0} AND expires_at >= {0} "
    "RETURNING upstream, issuer, subject, sealed"
)


class _Credentials:
    """The credential methods, over the one statement runner each store gives."""

    def _credentials_sql(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def get_credential(self, upstream: str, issuer: str, subject: str) -> bytes | None:
        rows = self._credentials_sql(_GET_CREDENTIAL, (upstream, issuer, subject))
        return bytes(rows[0][0]) if rows else None

    def put_credential(self, upstream: str, issuer: str, subject: str, sealed: bytes) -> None:
        self._credentials_sql(_PUT_CREDENTIAL, (upstream, issuer, subject, sealed, now_iso()))

    def drop_credential(self, upstream: str, issuer: str, subject: str) -> None:
        self._credentials_sql(_DROP_CREDENTIAL, (upstream, issuer, subject))

    def put_flow(self, key: str, purpose: str, row: FlowRow, expires_at: float) -> None:
        """Keep a flow under way until `expires_at` (time.time()); the expired ones go, and so
        do the user's flows of `purpose` past the newest FLOWS_PER_USER (the oldest first)."""
        self._credentials_sql(_EXPIRED_FLOWS, (time.time(),))
        self._credentials_sql(_PUT_FLOW, (key, purpose, *row, expires_at))
        user = (purpose, *row[:3])
        self._credentials_sql(_SURPLUS_FLOWS, (*user, *user, FLOWS_PER_USER))

    def claim_flow(self, key: str, purpose: str, row: FlowRow, expires_at: float) -> bool:
        """Keep a flow under `key` until `expires_at` unless one is kept there already (and not
        expired): whether this call kept it. Replicas sharing the store take turns with it."""
        self._credentials_sql(_EXPIRED_FLOWS, (time.time(),))
        return bool(self._credentials_sql(_CLAIM_FLOW, (key, purpose, *row, expires_at)))

    def take_flow(self, key: str, purpose: str) -> FlowRow | None:
        """The flow kept under `key` for `purpose`, removed: a second take finds none."""
        rows = self._credentials_sql(_TAKE_FLOW, (key, purpose, time.time()))
        return (rows[0][0], rows[0][1], rows[0][2], bytes(rows[0][3])) if rows else None


class SqliteCredentials(_Credentials):
    """The credential methods of the SQLite store (bridge/store/sqlite.py)."""

    path: str
    _db: sqlite3.Connection
    _lock: threading.Lock

    def _credentials_sql(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql.format("?"), args).fetchall()
            except sqlite3.Error as exc:
                raise StoreUnavailable(
                    f"store {self.path}: users' credentials cannot be read or written ({exc})",
                    retry_after=1.0,
                    error_code="store_unavailable",
                ) from None


class PostgresCredentials(_Credentials):
    """The credential methods of the PostgreSQL store (bridge/store/postgres.py)."""

    def _read(self, what: str, query: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        raise NotImplementedError  # the store's own

    def _credentials_sql(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cur = await conn.execute(sql.format("%s"), args)
            return await cur.fetchall() if cur.description else []

        return self._read("users' credentials", run)
