"""Persistence behind one interface: tool versions, the names given, the invocation log and
persisted large results. SQLite keeps them in a file (`sqlite`, the embedded default);
PostgreSQL in one database that replicas share (`postgres`, with `store.url`)."""

from __future__ import annotations

from typing import Any, Protocol

from bridge.model import VersionRecord
from bridge.store.credentials import FlowRow
from bridge.store.errors import StoreError, StoreFull, StoreUnavailable
from bridge.store.layout import LAYOUT
from bridge.store.sqlite import PENDING_LOG_ROWS, SIGNATURE_PACKED_CHARS, WAL_KEPT_BYTES, Store

__all__ = [
    "LAYOUT",
    "PENDING_LOG_ROWS",
    "SIGNATURE_PACKED_CHARS",
    "WAL_KEPT_BYTES",
    "FlowRow",
    "Store",
    "StoreError",
    "StoreFull",
    "StoreInterface",
    "StoreUnavailable",
    "open_store",
]


class StoreInterface(Protocol):
    """What the catalog, the version registry and the invocation pipeline ask of a store. Calls
    are synchronous and thread-safe. Writes that cannot be made now (a full disk, a database
    away) wait in memory, counted by `waiting`, with `unwritable` saying why and
    `unwritable_since` since when; `put_result` then raises StoreFull, and a read that needs
    what cannot be reached raises StoreUnavailable."""

    path: str  # what messages name: the file, or the database's URL with its password masked
    shared: bool  # several bridges write it: tools' names are given by it (`claim_names`)
    unwritable: str | None
    unwritable_since: str | None

    def close(self) -> None: ...
    def waiting(self) -> int: ...
    def latest_versions(self) -> dict[str, tuple[int, str]]: ...
    def add_version_rows(self, rows: list[tuple[str, str, int, str, str, str, str]]) -> None: ...
    def get_version(self, namespace: str, tool_id: str, version: int) -> VersionRecord | None: ...
    def list_versions(self, namespace: str, tool_id: str) -> list[VersionRecord]: ...
    def assigned_names(self) -> dict[str, str]: ...
    def save_names(self, rows: list[tuple[str, str, str, str]]) -> None: ...
    def claim_names(self, rows: list[tuple[str, str, str, str]]) -> dict[str, str]: ...
    def log_invocations(self, rows: list[tuple[Any, ...]], keep: int | None = None) -> None: ...
    def recent_invocations(self, limit: int = 50) -> list[dict[str, Any]]: ...
    def put_result(
        self,
        ref: str,
        invocation_id: str,
        media_type: str,
        payload: bytes,
        surface: str | None = None,
        keep: int | None = None,
        keep_bytes: int | None = None,
    ) -> None: ...
    def get_result(self, ref: str) -> tuple[str, bytes, str | None] | None: ...
    # users' sealed upstream credentials and OAuth flows under way (bridge/store/credentials.py)
    def get_credential(self, upstream: str, issuer: str, subject: str) -> bytes | None: ...
    def put_credential(self, upstream: str, issuer: str, subject: str, sealed: bytes) -> None: ...
    def drop_credential(self, upstream: str, issuer: str, subject: str) -> None: ...
    def put_flow(self, key: str, purpose: str, row: FlowRow, expires_at: float) -> None: ...
    def claim_flow(self, key: str, purpose: str, row: FlowRow, expires_at: float) -> bool: ...
    def take_flow(self, key: str, purpose: str) -> FlowRow | None: ...


def open_store(path: str, url: str | None = None) -> StoreInterface:
    """The store in PostgreSQL at `url` when given (psycopg is imported only then), else in the
    SQLite file at `path`."""
    if url is None:
        return Store(path)
    from bridge.store.postgres import PostgresStore

    return PostgresStore(url)
