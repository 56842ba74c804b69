"""The store on PostgreSQL (`store.url`), for several replicas of the bridge writing one database:
the same interface as the SQLite store (versions, names, the invocation log, persisted large
results), through psycopg 3's asyncio connections and pool, run on a thread of its own.

Callers are synchronous (the catalog and the invocation pipeline call the store from the event
loop and from worker threads), so each call is handed to the store's loop and waited for. A
database that is away is not waited for: versions, names and log rows wait in memory (as they
do for a full disk in the SQLite store) and are written once it answers again, which a task of
the store's loop looks for; reads that need it raise StoreUnavailable, naming the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import psycopg_pool

from bridge.masking import MASK, masked_url
from bridge.model import VersionRecord, now_iso
from bridge.store.credentials import PostgresCredentials
from bridge.store.errors import StoreError, StoreUnavailable
from bridge.store.migrations import migrate
from bridge.store.sqlite import PENDING_LOG_ROWS

log = logging.getLogger("bridge.store")

__all__ = ["PostgresStore"]

T = TypeVar("T")

_LOG_COLUMNS = (
    "invocation_id, tool_id, tool_name, version, surface, status, error_class, created_at, "
    "duration_ms, subject, client_id"
)


def _unnest(table: str, types: str) -> str:
    arrays = ", ".join(f"%s::{kind}[]" for kind in types.split())
    return f"INSERT INTO {table} SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING"


# A batch of rows goes as one statement of arrays, a column each: parsed and planned once, where
# executemany runs a statement per row (64 log rows: 7.8 ms against 10.6 ms on a loaded machine)
# and a statement of many VALUES spent longer in psycopg than in the database.
_INSERTS = {
    "versions": _unnest("versions", "text text integer text text text text"),
    "names": _unnest("tool_names", "text text text text"),
    "log": _unnest(
        f"invocations ({_LOG_COLUMNS})",
        "text text text bigint text text text text float8 text text",
    ),
}
# seconds: to connect; for one call of the store (a write of a batch, a read)
CONNECT_TIMEOUT = 5.0
CALL_TIMEOUT = 15.0
# seconds between two looks at a database that is away, growing from the first to the last
RECOVERY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0)
# what a database that is away (stopped, restarting, unreachable) raises: not the row's fault
_AWAY = (psycopg.OperationalError, psycopg.InterfaceError, OSError, TimeoutError)
# what a row the database cannot store raises (a NUL in a text, a number past 64 bits)
_UNSTORABLE = (psycopg.DataError, OverflowError, ValueError, TypeError)


class PostgresStore(PostgresCredentials):
    """The store in one PostgreSQL database, shared by every replica that names it. Opening it
    connects and applies the migrations this bridge knows; a database away at start, or one a
    newer bridge migrated, raises StoreError."""

    # the names of tools are given in the database, where every replica reads them (`claim_names`)
    shared = True

    def __init__(self, url: str, *, pool_size: int = 4) -> None:
        """`url`: postgresql://USER:PASSWORD@HOST:PORT/DATABASE (the config checks its form)."""
        self.path = masked_url(url)  # what every message names, the password masked
        self._url = url
        self._password = urlsplit(url).password
        # while the database is away: why, and since when (health); what waits to be written
        self.unwritable: str | None = None
        self.unwritable_since: str | None = None
        self._pending_versions: dict[tuple[str, str, int], tuple[Any, ...]] = {}
        self._pending_names: dict[str, tuple[str, str, str, str]] = {}
        self._pending_log: list[tuple[Any, ...]] = []
        self._dropped_log = 0
        self._lock = threading.Lock()  # guards the pending rows
        self._logged_since_prune = 0
        self._results_since_prune = 0  # results, and their bytes, persisted since the last prune
        self._result_bytes_since_prune = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="bridge-store-postgres", daemon=True
        )
        self._thread.start()
        self._writing: asyncio.Lock | None = None
        self._recovering: asyncio.Task[None] | None = None
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=CONNECT_TIMEOUT,
            kwargs={"connect_timeout": int(CONNECT_TIMEOUT), "autocommit": True},
            name="bridge-store",
        )
        try:
            self._call(self._open(), CALL_TIMEOUT * 2)
        except BaseException as exc:
            self._stop_loop()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(
                f"{self.path}: cannot be opened as the bridge's store "
                f"({self._said(exc)}); fix: start that database, or set store.url to "
                "one this bridge can reach with that user and password"
            ) from None

    # ---------------------------------------------------------------- the loop

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        """Run `coro` on the store's loop and wait for it (from any other thread)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def _said(self, exc: BaseException) -> str:
        text = str(exc).strip() or type(exc).__name__
        return text.replace(self._password, MASK) if self._password else text

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A connection of its own, outside the pool: refused at once by a database that is away
        or a wrong password, where the pool would wait its whole timeout for one."""
        return await psycopg.AsyncConnection.connect(
            self._url, connect_timeout=int(CONNECT_TIMEOUT), autocommit=True
        )

    async def _open(self) -> None:
        self._writing = asyncio.Lock()
        async with await self._connect() as conn:
            await migrate(conn, self.path)
        await self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)

    def _stop_loop(self) -> None:
        async def shut() -> None:
            await self._pool.close()

        try:
            self._call(shut(), CONNECT_TIMEOUT)
        except Exception as exc:  # a pool that never opened, or a database away
            log.debug("store %s: pool closed with %s", self.path, exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONNECT_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()

    def close(self) -> None:
        """Write what waits, then let the database go; what it cannot take now is lost (said)."""
        if self.unwritable is None:
            self._write_pending()
        if self.waiting():
            log.warning(
                "store %s: closed with %d versions, %d names and %d invocation log rows "
                "its database did not take (away since %s); they are lost",
                self.path,
                len(self._pending_versions),
                len(self._pending_names),
                len(self._pending_log),
                self.unwritable_since,
            )
        if self._recovering is not None:
            self._loop.call_soon_threadsafe(self._recovering.cancel)
        self._stop_loop()

    # ---------------------------------------------------------------- a database away

    def waiting(self) -> int:
        """Rows (versions, names, invocation log rows) kept in memory while the database is away."""
        return len(self._pending_versions) + len(self._pending_names) + len(self._pending_log)

    def _away(self, exc: BaseException) -> None:
        """The database did not answer: said once until it does, and looked for from now on."""
        with self._lock:
            if self.unwritable is not None:
                return
            self.unwritable, self.unwritable_since = f"database away: {self._said(exc)}", now_iso()
        log.warning(
            "store %s: its database is away (%s); calls are still answered, a result over "
            "invoke.inline_result_limit whole instead of stored, and versions, names and "
            "log rows are kept in memory until it answers again",
            self.path,
            self._said(exc),
        )
        self._loop.call_soon_threadsafe(self._look_for_database)

    def _look_for_database(self) -> None:
        if self._recovering is None or self._recovering.done():
            self._recovering = self._loop.create_task(self._recover())

    async def _recover(self) -> None:
        """Connect again and again (each delay of RECOVERY_DELAYS, then the last) until the
        database answers; then write what waits, and the store is whole again."""
        attempt = 0
        while True:
            await asyncio.sleep(RECOVERY_DELAYS[min(attempt, len(RECOVERY_DELAYS) - 1)])
            attempt += 1
            try:
                probe = await psycopg.AsyncConnection.connect(
                    self._url, connect_timeout=int(CONNECT_TIMEOUT)
                )
                await probe.close()
                await self._pool.check()  # connections broken by the outage are replaced
                while True:  # rows that came while the others were written are written too
                    await self._flush()
                    with self._lock:
                        if not self.waiting():
                            since, dropped = self.unwritable_since, self._dropped_log
                            self.unwritable = self.unwritable_since = None
                            self._dropped_log = 0
                            break
            except _AWAY as exc:
                log.debug("store %s: still away (%s)", self.path, self._said(exc))
                continue
            except Exception:
                log.exception("store %s: writing what waited failed", self.path)
                continue
            break
        log.warning(
            "store %s: its database answers again (away since %s)%s",
            self.path,
            since,
            f"; {dropped} invocation log rows past the {PENDING_LOG_ROWS:,} kept in memory "
            "were dropped"
            if dropped
            else "",
        )

    def _unavailable(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"store {self.path}: {what} cannot be read: its {self.unwritable} "
            f"(since {self.unwritable_since}); retry once it is back",
            retry_after=1.0,
            error_code="store_unavailable",
        )

    def _read(self, what: str, query: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """The answer of `query` on a pooled connection; StoreUnavailable while the database is
        away (at once, once it is known to be)."""
        if self.unwritable is not None:
            raise self._unavailable(what)
        try:
            return self._call(self._on_connection(query))
        except _AWAY as exc:
            self._away(exc)
            raise self._unavailable(what) from None

    async def _on_connection(
        self, query: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        """`query` on a pooled connection. A connection the database dropped while it sat in the
        pool (a restart) fails once: the database is then asked directly whether it is there
        (the pool would wait its whole timeout for a connection it cannot make), and the query
        is tried again on a sound connection if it is."""
        try:
            async with self._pool.connection() as conn:
                return await query(conn)
        except _AWAY:
            await (await self._connect()).close()
            await self._pool.check()
        async with self._pool.connection() as conn:
            return await query(conn)

    # ---------------------------------------------------------------- writes

    def _write_pending(self) -> None:
        """Write what waits now, when the database is there; else it waits for the recovery."""
        if self.unwritable is not None or not self.waiting():
            return
        try:
            self._call(self._flush())
        except _AWAY as exc:
            self._away(exc)

    async def _flush(self) -> None:
        """Write the versions, names and log rows waiting (versions and names in one transaction,
        log rows in another); those written leave memory (a row put back meanwhile, newer,
        stays)."""
        assert self._writing is not None
        async with self._writing:
            with self._lock:
                versions, names = dict(self._pending_versions), dict(self._pending_names)
                rows, self._pending_log = self._pending_log, []
            if not (versions or names or rows):
                return
            try:
                written = await self._on_connection(
                    lambda conn: self._insert(conn, versions, names, rows)
                )
            except BaseException:
                with self._lock:  # the rows go back in front of those logged meanwhile
                    self._pending_log[:0] = rows
                    if len(self._pending_log) > PENDING_LOG_ROWS:
                        self._dropped_log += len(self._pending_log) - PENDING_LOG_ROWS
                        del self._pending_log[:-PENDING_LOG_ROWS]
                raise
            with self._lock:
                for key, row in versions.items():
                    if self._pending_versions.get(key) is row:
                        del self._pending_versions[key]
                for tool_id, name in names.items():
                    if self._pending_names.get(tool_id) is name:
                        del self._pending_names[tool_id]
                self._logged_since_prune += written

    async def _insert(
        self,
        conn: psycopg.AsyncConnection[Any],
        versions: dict[Any, Any],
        names: dict[Any, Any],
        rows: list[tuple[Any, ...]],
    ) -> int:
        """Insert the rows (each kept where one is already: ON CONFLICT DO NOTHING, so a batch
        written again after an outage adds nothing twice); the log rows written."""
        if versions or names:
            async with conn.transaction():
                await _insert_rows(conn, "versions", list(versions.values()))
                await _insert_rows(conn, "names", list(names.values()))
        if not rows:
            return 0
        try:
            async with conn.transaction():
                await _insert_rows(conn, "log", rows)
            return len(rows)
        except _UNSTORABLE:  # one row the database refuses must not cost the others
            written = 0
            for row in rows:
                try:
                    async with conn.transaction():
                        await _insert_rows(conn, "log", [row])
                    written += 1
                except _UNSTORABLE as exc:
                    log.warning(
                        "invocation log: row %r cannot be stored (%s); dropped", row[0], exc
                    )
            return written

    def add_version_rows(self, rows: list[tuple[str, str, int, str, str, str, str]]) -> None:
        """Write versions as rows of (namespace, tool_id, version, digest, compatibility,
        created_at, signature JSON). A version another replica wrote first is kept."""
        if not rows:
            return
        with self._lock:
            self._pending_versions.update(((row[0], row[1], row[2]), tuple(row)) for row in rows)
        self._write_pending()

    def save_names(self, rows: list[tuple[str, str, str, str]]) -> None:
        """rows of (namespace, tool_id, name, native_id); a tool named before keeps its name."""
        if not rows:
            return
        with self._lock:
            self._pending_names.update((row[1], row) for row in rows)
        self._write_pending()

    def claim_names(self, rows: list[tuple[str, str, str, str]]) -> dict[str, str]:
        """Give each tool of `rows` (namespace, tool_id, name, native_id) its name unless it has
        one, or the name is another tool's; returns the name each tool holds now (a tool whose
        name was another's is missing: it needs another name). While the database is away the
        names wait in memory and are taken as given."""
        if not rows:
            return {}
        self.save_names(rows)
        if self.unwritable is not None:
            return {row[1]: row[2] for row in rows}
        ids = [row[1] for row in rows]

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, str]]:
            cur = await conn.execute(
                "SELECT tool_id, name FROM tool_names WHERE tool_id = ANY(%s)", (ids,)
            )
            return await cur.fetchall()

        try:
            return dict(self._read("the names of tools", read))
        except StoreUnavailable:
            return {row[1]: row[2] for row in rows}

    def log_invocations(self, rows: list[tuple[Any, ...]], keep: int | None = None) -> None:
        """rows of (invocation_id, tool_id, tool_name, version, surface, status, error_class,
        created_at, duration_ms[, subject, client_id]); arguments and results are never logged.
        With `keep`, the log holds about that many of the latest rows (of every replica)."""
        if not rows:
            return
        rows = [row if len(row) == 11 else (*row, None, None) for row in rows]
        with self._lock:
            self._pending_log.extend(rows)
            if len(self._pending_log) > PENDING_LOG_ROWS:
                self._dropped_log += len(self._pending_log) - PENDING_LOG_ROWS
                del self._pending_log[:-PENDING_LOG_ROWS]
        self._write_pending()
        if (
            keep is not None
            and self.unwritable is None
            and self._logged_since_prune > max(keep // 10, 100)
        ):
            self._logged_since_prune = 0
            self._prune("invocations", keep)

    def _prune(self, table: str, keep: int, keep_bytes: int | None = None) -> None:
        """Drop the oldest rows of `table` past the latest `keep` (by insertion order; with
        several replicas, about that many), and for results past `keep_bytes` of payloads."""

        async def prune(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(
                f"DELETE FROM {table} WHERE seq <= (SELECT MAX(seq) FROM {table}) - %s",
                (keep,),
            )
            if keep_bytes is not None:
                await conn.execute(
                    "DELETE FROM results WHERE seq <= (SELECT seq FROM (SELECT seq, SUM(size) OVER "
                    "(ORDER BY seq DESC) AS newer FROM results) n WHERE newer > %s AND seq < "
                    "(SELECT MAX(seq) FROM results) ORDER BY seq DESC LIMIT 1)",
                    (keep_bytes,),
                )

        with contextlib.suppress(StoreUnavailable):  # tried again with the next rows
            self._read(f"the oldest rows of {table}", prune)

    # ---------------------------------------------------------------- reads

    def latest_versions(self) -> dict[str, tuple[int, str]]:
        """tool_id -> (latest version, its digest)."""

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, int, str]]:
            cur = await conn.execute(
                "SELECT DISTINCT ON (tool_id) tool_id, version, digest FROM versions "
                "ORDER BY tool_id, version DESC"
            )
            return await cur.fetchall()

        latest = {
            tool_id: (version, digest) for tool_id, version, digest in self._read("versions", read)
        }
        with self._lock:
            for _, tool_id, version, digest, *_rest in self._pending_versions.values():
                if tool_id not in latest or version > latest[tool_id][0]:
                    latest[tool_id] = (version, digest)
        return latest

    def get_version(self, namespace: str, tool_id: str, version: int) -> VersionRecord | None:
        with self._lock:
            pending = self._pending_versions.get((namespace, tool_id, version))
        if pending:
            return _version_record(pending[1:])

        async def read(conn: psycopg.AsyncConnection[Any]) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                "SELECT tool_id, version, digest, compatibility, created_at, signature FROM versions "
                "WHERE namespace = %s AND tool_id = %s AND version = %s",
                (namespace, tool_id, version),
            )
            return await cur.fetchone()

        row = self._read("a version of a tool", read)
        return _version_record(row) if row else None

    def list_versions(self, namespace: str, tool_id: str) -> list[VersionRecord]:
        """All versions of a tool, newest first."""

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cur = await conn.execute(
                "SELECT tool_id, version, digest, compatibility, created_at, signature FROM versions "
                "WHERE namespace = %s AND tool_id = %s ORDER BY version DESC",
                (namespace, tool_id),
            )
            return await cur.fetchall()

        rows = self._read("the versions of a tool", read)
        with self._lock:
            pending = [
                row[1:]
                for key, row in self._pending_versions.items()
                if key[:2] == (namespace, tool_id)
            ]
        if pending:
            rows = sorted(
                {row[1]: row for row in (*rows, *pending)}.values(),
                key=lambda row: row[1],
                reverse=True,
            )
        return [_version_record(row) for row in rows]

    def assigned_names(self) -> dict[str, str]:
        """tool_id -> exposed name given earlier, by any replica."""

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, str]]:
            cur = await conn.execute("SELECT tool_id, name FROM tool_names")
            return await cur.fetchall()

        names = dict(self._read("the names of tools", read))
        with self._lock:
            names.update((row[1], row[2]) for row in self._pending_names.values())
        return names

    def recent_invocations(self, limit: int = 50) -> list[dict[str, Any]]:
        async def read(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
            cur = await conn.execute(
                f"SELECT {_LOG_COLUMNS} FROM invocations "
                "ORDER BY created_at DESC, seq DESC LIMIT %s",
                (limit,),
            )
            names = [c.name for c in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]

        return self._read("the invocation log", read)

    # ---------------------------------------------------------------- persisted results

    def put_result(
        self,
        ref: str,
        invocation_id: str,
        media_type: str,
        payload: bytes,
        surface: str | None = None,
        keep: int | None = None,
        keep_bytes: int | None = None,
    ) -> None:
        """Persist a result, made by a call through `surface`, readable through any replica;
        `keep` and `keep_bytes` as in the SQLite store. A database away raises
        StoreUnavailable (a StoreFull: the caller gets the result whole)."""
        self._write_pending()

        async def write(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(
                "INSERT INTO results (ref, invocation_id, media_type, size, payload, created_at, surface) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (ref) DO UPDATE SET payload = EXCLUDED.payload, "
                "size = EXCLUDED.size, media_type = EXCLUDED.media_type",
                (ref, invocation_id, media_type, len(payload), payload, now_iso(), surface),
            )

        try:
            self._read("a result", write)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"store {self.path}: the result cannot be stored: its {self.unwritable}"
            ) from exc
        self._results_since_prune += 1
        self._result_bytes_since_prune += len(payload)
        # pruned once a tenth more than `keep` (or `keep_bytes`) came in since the last prune
        if (keep is not None and self._results_since_prune > max(keep // 10, 10)) or (
            keep_bytes is not None and self._result_bytes_since_prune > keep_bytes // 10
        ):
            self._results_since_prune = self._result_bytes_since_prune = 0
            self._prune("results", keep if keep is not None else 2**62, keep_bytes)

    def get_result(self, ref: str) -> tuple[str, bytes, str | None] | None:
        """(media type, payload, the surface whose call made it) of a persisted result, or None;
        StoreUnavailable while the database is away."""

        async def read(conn: psycopg.AsyncConnection[Any]) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                "SELECT media_type, payload, surface FROM results WHERE ref = %s", (ref,)
            )
            return await cur.fetchone()

        row = self._read("a persisted result", read)
        return (row[0], bytes(row[1]), row[2]) if row else None


async def _insert_rows(conn: psycopg.AsyncConnection[Any], table: str, rows: list[Any]) -> None:
    """Insert `rows` into `table` (a key of _INSERTS); a row whose key is taken is left as it
    is (ON CONFLICT DO NOTHING)."""
    if rows:
        await conn.execute(_INSERTS[table], [list(column) for column in zip(*rows, strict=True)])


def _version_record(row: tuple[Any, ...]) -> VersionRecord:
    tool_id, version, digest, compatibility, created_at, signature = row
    return VersionRecord(
        tool_id=tool_id,
        version=version,
        digest=digest,
        compatibility=compatibility,
        created_at=created_at,
        signature=json.loads(signature),
    )
