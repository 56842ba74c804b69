"""Persistence: the embedded SQLite store of tool versions, assigned names, the invocation log and
persisted large results. Calls are short and synchronous; bulk work is run off the event loop by
the callers (`anyio.to_thread`)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import Any

from bridge.model import VersionRecord, now_iso
from bridge.store.credentials import SqliteCredentials
from bridge.store.errors import StoreError, StoreFull
from bridge.store.layout import (
    DISK_FIX,
    LAYOUT,
    disk_refused,
    lay_out,
    not_a_store,
    roll_back,
)

log = logging.getLogger("bridge.store")

__all__ = ["LAYOUT", "SIGNATURE_PACKED_CHARS", "WAL_KEPT_BYTES", "Store", "StoreError", "StoreFull"]

# Parameters one statement may bind, on every SQLite (3.32 and later allow 32,766).
_MAX_VARIABLES = 999
# what SQLite's binding raises for a value it cannot store (an integer past 64 bits, a string no
# UTF-8 encoder takes); the other rows of a batch are then written one by one
_UNSTORABLE = (sqlite3.InterfaceError, sqlite3.DataError, OverflowError, TypeError, ValueError)

# Invocation log rows kept in memory while the disk refuses them (about 6 MB); past this, the
# oldest are dropped, and counted in the line that says writes succeed again.
PENDING_LOG_ROWS = 10_000

_VERSIONS_INSERT = "INSERT OR REPLACE INTO versions VALUES (?,?,?,?,?,?,?)"
_NAMES_INSERT = "INSERT OR REPLACE INTO tool_names VALUES (?,?,?,?)"
_LOG_COLUMNS = 11
_LOG_INSERT = "INSERT OR REPLACE INTO invocations VALUES (?,?,?,?,?,?,?,?,?,?,?)"

# Characters of a signature's JSON past which the store keeps it compressed: an OpenAPI
# document's schemas repeat themselves (Microsoft Graph beta's 22,361 signatures: 217 MB of text)
SIGNATURE_PACKED_CHARS = 2048


# The size the write-ahead log is cut back to once checkpointed (four times what SQLite's automatic
# checkpoint keeps it at). SQLite keeps the file as large as it ever grew; with SQLite built to
# overwrite what is deleted (Debian's and others' `SECURE_DELETE`), dropping the oldest tenth of the
# persisted results writes all of them again as zeros in one transaction, and the log then stayed
# that large for good (250 MB after 1,100 results of 230 KB; 64 MB results could make it 64 GB).
WAL_KEPT_BYTES = 16 * 1024 * 1024

# Free pages a store file keeps after a prune, for the next writes (4 MB of 4 KB pages); the rest
# go back to the file system.
GIVE_BACK_KEPT_PAGES = 1024


def _packed(signature: str) -> str | bytes:
    """A signature's JSON as the store keeps it: compressed when long (level 1: the fastest,
    and schemas that repeat themselves shrink about tenfold at it)."""
    if len(signature) <= SIGNATURE_PACKED_CHARS:
        return signature
    return zlib.compress(signature.encode(), 1)


class Store(SqliteCredentials):
    """One SQLite file (or `:memory:`), created on first use, safe across threads."""

    # one process names its tools itself; a store that replicas share gives the names
    shared = False

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        fix = "fix: set store.path to a new file (it is created) or to a store this bridge wrote"
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a folder that cannot be made or written
            raise StoreError(
                f"{self.path}: its folder cannot be made ({exc.strerror or exc}); {fix}"
            ) from None
        self._lock = threading.Lock()
        self._logged: int | None = (
            None  # rows in the invocation log, counted once then kept up to date
        )
        self._results: int | None = None  # persisted results, likewise
        self._result_bytes = 0  # their payloads' bytes, once counted
        # While the disk refuses writes (full): why, and since when (for health); the versions,
        # names and log rows not yet written wait here, and go with the next write that succeeds
        self.unwritable: str | None = None
        self.unwritable_since: str | None = None
        self._pending_versions: dict[tuple[str, str, int], tuple[Any, ...]] = {}
        self._pending_names: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        self._pending_log: list[tuple[Any, ...]] = []
        self._dropped_log = 0
        self._said_refused = self._said_written = (
            False  # each said once at WARNING, its repeats at INFO
        )
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            why = not_a_store(
                self._db
            )  # before anything is written: another application's file stays as it is
            if why:
                self._db.close()
                raise StoreError(f"{self.path}: is no bridge store: {why}; {fix}")
            if not self._db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
                # a new file gives back the pages of what is pruned (`_give_back`); SQLite takes
                # this only before the first table, and before the file is put in WAL mode
                self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
        except (
            sqlite3.DatabaseError
        ) as exc:  # not an SQLite file, or one this process may not write
            if disk_refused(exc):
                self._db.close()
                raise StoreFull(
                    f"{self.path}: cannot be written ({exc}: its disk is full, or past this process's file size limit); "
                    f"{DISK_FIX}"
                ) from exc
            raise StoreError(
                f"{self.path}: cannot be opened as the bridge's store ({exc}); {fix}"
            ) from None
        lay_out(self._db, self.path)

    def close(self) -> None:
        with self._lock:
            if not self._write_pending():
                log.warning(
                    "store %s: closed with %d versions, %d names and %d invocation log rows its disk refused; they are lost",
                    self.path,
                    len(self._pending_versions),
                    len(self._pending_names),
                    len(self._pending_log),
                )
            self._db.close()

    # a disk that refuses writes -------------------------------------------------------------

    def waiting(self) -> int:
        """Rows (versions, names, invocation log rows) kept in memory while the disk refuses
        them."""
        return len(self._pending_versions) + len(self._pending_names) + len(self._pending_log)

    def _refused(self, exc: sqlite3.Error) -> None:
        """A write the disk refused: said once until a write succeeds again, and at WARNING the first
        time only: a nearly full disk takes a log row and refuses the next large result, and so on
        (lock held)."""
        if self.unwritable is not None:
            return
        self.unwritable, self.unwritable_since = str(exc), now_iso()
        level, self._said_refused = logging.INFO if self._said_refused else logging.WARNING, True
        log.log(
            level,
            "store %s: cannot be written (%s: its disk is full, or past this process's file size limit); calls are still "
            "answered, a result over invoke.inline_result_limit whole instead of stored, and the versions, names and log "
            "rows are kept in memory until a write succeeds; %s",
            self.path,
            exc,
            DISK_FIX,
        )

    def _wrote(self) -> None:
        """A write succeeded: said once after writes were refused (lock held)."""
        if (
            self.unwritable is None
            or self._pending_versions
            or self._pending_names
            or self._pending_log
        ):
            return
        level, self._said_written = logging.INFO if self._said_written else logging.WARNING, True
        log.log(
            level,
            "store %s: written again (refused since %s)%s",
            self.path,
            self.unwritable_since,
            f"; {self._dropped_log} invocation log rows past the {PENDING_LOG_ROWS:,} kept in memory were dropped"
            if self._dropped_log
            else "",
        )
        self.unwritable = self.unwritable_since = None
        self._dropped_log = 0

    def _write_waiting(self, sql: str, waiting: dict[Any, Any]) -> None:
        """Write the rows of `waiting` (lock held) and empty it; a disk that refuses them leaves
        them waiting, any other failure drops them (they would fail again)."""
        if not waiting:
            return
        try:
            self._write_rows(sql, list(waiting.values()))
        except Exception as exc:
            if not disk_refused(exc):
                waiting.clear()
            raise
        waiting.clear()

    def _write_pending(self) -> bool:
        """Write the versions, names and log rows waiting in memory (lock held); False when the
        disk refused them, which wait for the next write. Rows are written with INSERT OR REPLACE
        on their keys: a batch written in part before the disk refused it is written again whole."""
        try:
            self._write_waiting(_VERSIONS_INSERT, self._pending_versions)
            self._write_waiting(_NAMES_INSERT, self._pending_names)
            if self._pending_log:
                rows = self._pending_log
                try:
                    self._write_rows(_LOG_INSERT, rows)
                except _UNSTORABLE:
                    # one unstorable row must not cost the batch its other rows: write them one by one
                    rows = self._write_each(_LOG_INSERT, rows)
                self._pending_log = []
                if self._logged is not None:
                    self._logged += len(rows)
        except sqlite3.OperationalError as exc:
            if not disk_refused(exc):
                raise
            self._refused(exc)
            return False
        self._wrote()
        return True

    # versions -------------------------------------------------------------------------------

    def latest_versions(self) -> dict[str, tuple[int, str]]:
        """tool_id -> (latest version, its digest)."""
        with self._lock:
            # SQLite takes a bare column (digest) from the row whose MAX was chosen
            rows = self._db.execute(
                "SELECT tool_id, MAX(version), digest FROM versions GROUP BY namespace, tool_id"
            ).fetchall()
            rows += [(row[1], row[2], row[3]) for row in self._pending_versions.values()]
        latest: dict[str, tuple[int, str]] = {}
        for tool_id, version, digest in rows:
            known = latest.get(
                tool_id
            )  # twice only for a version moved from layout 0 without its namespace
            if known is None or version > known[0]:
                latest[tool_id] = (version, digest)
        return latest

    def add_version_rows(self, rows: list[tuple[str, str, int, str, str, str, str]]) -> None:
        """Write versions as rows of (namespace, tool_id, version, digest, compatibility,
        created_at, signature JSON), in one transaction."""
        if not rows:
            return
        with self._lock:
            # the rows wait in memory, read by get_version and list_versions, until the disk takes them
            self._pending_versions.update(
                ((row[0], row[1], row[2]), (*row[:6], _packed(row[6]))) for row in rows
            )
            self._write_pending()

    def get_version(self, namespace: str, tool_id: str, version: int) -> VersionRecord | None:
        with self._lock:
            pending = self._pending_versions.get((namespace, tool_id, version))
            row = (
                pending[1:]
                if pending
                else self._db.execute(
                    "SELECT tool_id, version, digest, compatibility, created_at, signature FROM versions "
                    "WHERE namespace = ? AND tool_id = ? AND version = ?",
                    (namespace, tool_id, version),
                ).fetchone()
            )
        return self._version_row(row) if row else None

    def list_versions(self, namespace: str, tool_id: str) -> list[VersionRecord]:
        """All versions of a tool, newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT tool_id, version, digest, compatibility, created_at, signature FROM versions "
                "WHERE namespace = ? AND tool_id = ? ORDER BY version DESC",
                (namespace, tool_id),
            ).fetchall()
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
        return [self._version_row(r) for r in rows]

    @staticmethod
    def _version_row(row: tuple[Any, ...]) -> VersionRecord:
        tool_id, version, digest, compatibility, created_at, signature = row
        return VersionRecord(
            tool_id=tool_id,
            version=version,
            digest=digest,
            compatibility=compatibility,
            created_at=created_at,
            signature=json.loads(
                zlib.decompress(signature) if isinstance(signature, bytes) else signature
            ),
        )

    # assigned names -------------------------------------------------------------------------

    def assigned_names(self) -> dict[str, str]:
        """tool_id -> exposed name given earlier, so a name, once given, stays with its tool."""
        with self._lock:
            names = dict(self._db.execute("SELECT tool_id, name FROM tool_names").fetchall())
            names.update((row[1], row[2]) for row in self._pending_names.values())
            return names

    def save_names(self, rows: list[tuple[str, str, str, str]]) -> None:
        """rows of (namespace, tool_id, name, native_id)."""
        if not rows:
            return
        with self._lock:
            self._pending_names.update(((row[0], row[1]), row) for row in rows)
            self._write_pending()

    def claim_names(self, rows: list[tuple[str, str, str, str]]) -> dict[str, str]:
        """The names of `rows` (namespace, tool_id, name, native_id), saved: one process names
        its tools itself, so each holds the name given."""
        self.save_names(rows)
        return {row[1]: row[2] for row in rows}

    # invocation log ---------------------------------------------------------------------------

    def log_invocations(self, rows: list[tuple[Any, ...]], keep: int | None = None) -> None:
        """rows of (invocation_id, tool_id, tool_name, version, surface, status, error_class,
        created_at, duration_ms[, subject, client_id]): a row without the caller's subject and
        client id has neither. Arguments and results are never logged. With `keep`, the log
        holds about that many of the latest rows: once it has grown a tenth past it, the oldest
        go (by insertion order, a range of rowids)."""
        if not rows:
            return
        rows = [row if len(row) == _LOG_COLUMNS else (*row, None, None) for row in rows]
        with self._lock:
            self._pending_log.extend(rows)
            if len(self._pending_log) > PENDING_LOG_ROWS:
                self._dropped_log += len(self._pending_log) - PENDING_LOG_ROWS
                del self._pending_log[:-PENDING_LOG_ROWS]
            if not self._write_pending() or keep is None:
                return
            if self._logged is None:
                self._logged = self._db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0]
            if self._logged > keep + max(keep // 10, 100):
                try:
                    self._db.execute(
                        "DELETE FROM invocations WHERE rowid <= (SELECT MAX(rowid) FROM invocations) - ?",
                        (keep,),
                    )
                    self._logged = self._db.execute("SELECT COUNT(*) FROM invocations").fetchone()[
                        0
                    ]
                    self._give_back()
                except (
                    sqlite3.OperationalError
                ) as exc:  # the prune is tried again with the next rows
                    if not disk_refused(exc):
                        raise
                    self._refused(exc)

    def _write_rows(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        """`statement` (an INSERT ending in one `VALUES (?,...)`) for every row in one
        transaction: one commit, not one per row (the connection is in autocommit mode, where
        each row would pay its own locks and WAL writes). The rows go many to a statement (and
        rows that fit one statement need no BEGIN and COMMIT around it): SQLite
        lets go of the GIL for each statement it runs, and taking it back waits, each time, for
        whichever other thread holds it (the search index's writer, the semantic stage's
        embedding), which made a statement per row 20 times slower while they worked."""
        width = len(rows[0])
        per = max(1, _MAX_VARIABLES // width)
        one = "(" + ",".join("?" * width) + ")"
        head = statement[: statement.rindex("(")]

        def insert(chunk: list[tuple[Any, ...]]) -> None:
            self._db.execute(
                head + ",".join([one] * len(chunk)), [value for row in chunk for value in row]
            )

        # called with the lock held
        if len(rows) <= per:  # one statement is a transaction of its own
            insert(rows)
            return
        self._db.execute("BEGIN")
        try:
            for start in range(0, len(rows), per):
                insert(rows[start : start + per])
            self._db.execute("COMMIT")
        except BaseException:
            roll_back(self._db, self.path)
            raise

    def _write_each(self, statement: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The rows that could be written, each on its own; the others are logged and dropped
        (lock held)."""
        written = []
        for row in rows:
            try:
                self._write_rows(statement, [row])
            except _UNSTORABLE as exc:
                log.warning("invocation log: row %r cannot be stored (%s); dropped", row[0], exc)
            else:
                written.append(row)
        return written

    def recent_invocations(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                "SELECT * FROM invocations ORDER BY created_at DESC LIMIT ?", (limit,)
            )
            names = [c[0] for c in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    # persisted results ------------------------------------------------------------------------

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
        """Persist a result, made by a call through `surface`. With `keep`, about that many of the
        latest results are kept: once there are a tenth more, the oldest go. With `keep_bytes`,
        the latest results whose payloads add up to about that many bytes: once they pass it by a
        tenth, the oldest go until they are within it (the newest result is always kept). A
        disk that refuses the result raises StoreFull, said once (`_refused`)."""
        with self._lock:
            self._write_pending()
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO results (ref, invocation_id, media_type, size, payload, created_at, surface) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (ref, invocation_id, media_type, len(payload), payload, now_iso(), surface),
                )
            except sqlite3.OperationalError as exc:
                if not disk_refused(exc):
                    raise
                self._refused(exc)
                raise StoreFull(
                    f"{self.path}: the result cannot be stored ({exc}); {DISK_FIX}"
                ) from exc
            self._wrote()
            if keep is None and keep_bytes is None:
                return
            try:
                self._prune_results(len(payload), keep, keep_bytes)
            except (
                sqlite3.OperationalError
            ) as exc:  # the result is stored; the prune is tried again with the next
                if not disk_refused(exc):
                    raise
                self._results = None  # counted again then
                self._refused(exc)

    def _prune_results(self, added: int, keep: int | None, keep_bytes: int | None) -> None:
        """Drop the oldest results past `keep` and `keep_bytes` (lock held)."""
        if self._results is None:
            self._results, self._result_bytes = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM results"
            ).fetchone()
        else:
            self._results += 1
            self._result_bytes += added
        over_count = keep is not None and self._results > keep + max(keep // 10, 10)
        over_bytes = keep_bytes is not None and self._result_bytes > keep_bytes + keep_bytes // 10
        if over_count:
            self._db.execute(
                "DELETE FROM results WHERE rowid <= (SELECT MAX(rowid) FROM results) - ?", (keep,)
            )
        if over_bytes:  # the oldest whose newer results (and they) pass keep_bytes
            self._db.execute(
                "DELETE FROM results WHERE rowid <= (SELECT rowid FROM (SELECT rowid, SUM(size) OVER (ORDER BY rowid DESC) "
                "AS newer FROM results) WHERE newer > ? AND rowid < (SELECT MAX(rowid) FROM results) ORDER BY rowid DESC LIMIT 1)",
                (keep_bytes,),
            )
        if over_count or over_bytes:
            self._results, self._result_bytes = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM results"
            ).fetchone()
            self._give_back()

    def _give_back(self) -> None:
        """After a prune, the file's free pages beyond GIVE_BACK_KEPT_PAGES go back to the file
        system (the file shrinks at the next checkpoint): a burst of large results otherwise
        left the file at its largest for good. Only in files made with incremental auto-vacuum
        (every store made since); in older ones SQLite reuses the pages, and the file keeps its
        size. Called with the lock held."""
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        if (
            free > GIVE_BACK_KEPT_PAGES
            and self._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        ):
            # through sqlite3_exec: stepped by `execute`, the pragma frees one page
            self._db.executescript(f"PRAGMA incremental_vacuum({free - GIVE_BACK_KEPT_PAGES})")

    def get_result(self, ref: str) -> tuple[str, bytes, str | None] | None:
        """(media type, payload, the surface whose call made it) of a persisted result, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT media_type, payload, surface FROM results WHERE ref = ?", (ref,)
            ).fetchone()
        return (row[0], bytes(row[1]), row[2]) if row else None
