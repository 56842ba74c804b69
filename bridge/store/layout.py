"""The embedded store's SQLite file: its tables, the layouts it had and the move of an older one to
this one, and the errors of opening and writing it."""

from __future__ import annotations

import logging
import sqlite3

from bridge.store.credentials import SQLITE_TABLES
from bridge.store.errors import StoreError, StoreFull

log = logging.getLogger("bridge.store")

__all__ = [
    "DISK_FIX",
    "LAYOUT",
    "StoreError",
    "StoreFull",
    "disk_refused",
    "lay_out",
    "layout_of",
    "not_a_store",
    "roll_back",
]

DISK_FIX = "fix: free space on its disk, or set store.path to a file on a disk with space"

# SQLite's primary result codes of a write the disk refused: SQLITE_FULL (no space left on it) and
# SQLITE_IOERR (a write that failed: one past the process's file size limit is SQLITE_IOERR_WRITE)
_DISK_REFUSED = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)


# The layout of the file, kept in SQLite's `user_version`. Layout 1 puts the namespace first in the
# keys of versions and names: one upstream's rows are neighbours in their B-trees, so a listing
# writes a few pages, where keys that start with the tool id (a hash) put every row on a page of
# its own (a million versions of 1.2 KB, 64 to a listing: 88 s of writing instead of 16 s).
# Layout 0, the first, is moved to layout 1 when the file is opened. Layout 2 keeps with each
# persisted result the surface whose call made it (`results.surface`); a result stored before has
# none, and any surface may read it, as before. Layout 3 keeps a signature longer than
# SIGNATURE_PACKED_CHARS compressed (zlib, as a blob); the text ones written before are read as
# they are. Layout 4 keeps with each invocation log row the caller's subject and client id
# (`invocations.subject`, `client_id`); rows logged before have none. Layout 5 adds users'
# sealed upstream credentials and the OAuth flows under way (bridge/store/credentials.py).
LAYOUT = 5


_TABLES = (
    """CREATE TABLE IF NOT EXISTS versions (
    namespace TEXT NOT NULL,
    tool_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    digest TEXT NOT NULL,
    compatibility TEXT NOT NULL,
    created_at TEXT NOT NULL,
    signature TEXT NOT NULL,
    PRIMARY KEY (namespace, tool_id, version)
)""",
    """CREATE TABLE IF NOT EXISTS tool_names (
    namespace TEXT NOT NULL,
    tool_id TEXT NOT NULL,
    name TEXT NOT NULL,
    native_id TEXT NOT NULL,
    PRIMARY KEY (namespace, tool_id)
)""",
    """CREATE TABLE IF NOT EXISTS invocations (
    invocation_id TEXT PRIMARY KEY,
    tool_id TEXT,
    tool_name TEXT,
    version INTEGER,
    surface TEXT,
    status TEXT NOT NULL,
    error_class TEXT,
    created_at TEXT NOT NULL,
    duration_ms REAL,
    subject TEXT,
    client_id TEXT
)""",
    """CREATE TABLE IF NOT EXISTS results (
    ref TEXT PRIMARY KEY,
    invocation_id TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    payload BLOB NOT NULL,
    created_at TEXT NOT NULL,
    surface TEXT
)""",
)


# Layout 0 to 1: the rows are copied with their namespace first. A version whose tool has no
# name row (a crash between the two writes of a listing) gets the namespace "": it still counts
# as its tool's latest version, and the tool's next version is classified without it.
_FROM_LAYOUT_0 = (
    "ALTER TABLE versions RENAME TO versions_layout0",
    "ALTER TABLE tool_names RENAME TO tool_names_layout0",
    *_TABLES[:2],
    "INSERT INTO tool_names SELECT namespace, tool_id, name, native_id FROM tool_names_layout0",
    "INSERT INTO versions SELECT COALESCE(n.namespace, ''), v.tool_id, v.version, v.digest, v.compatibility, "
    "v.created_at, v.signature FROM versions_layout0 v LEFT JOIN tool_names_layout0 n ON n.tool_id = v.tool_id",
    "DROP TABLE versions_layout0",
    "DROP TABLE tool_names_layout0",
)


_KNOWN_TABLES = (
    "versions",
    "tool_names",
    "invocations",
    "results",
    "user_credentials",
    "oauth_flows",
)


def disk_refused(exc: BaseException) -> bool:
    """Whether an SQLite error is a write the disk refused (full, or past the file size limit)."""
    return (
        isinstance(exc, sqlite3.OperationalError)
        and (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF in _DISK_REFUSED
    )


def not_a_store(db: sqlite3.Connection) -> str | None:
    """Why the file is no bridge store of any layout (another application's database, or half
    of a store), or None: an empty file, or a store."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    foreign = sorted(t for t in tables - {*_KNOWN_TABLES} if not t.startswith("sqlite_"))
    if foreign:
        return f"it holds tables no bridge store has ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''})"
    keyed = tables & {"versions", "tool_names"}
    if len(keyed) == 1:
        return f"it holds the table {keyed.pop()} without the other a store keeps beside it"
    return None


def lay_out(db: sqlite3.Connection, path: str) -> None:
    """Create the tables of a new file, or move an older layout to this one: in one
    transaction, which a second process opening the file meanwhile waits for."""
    if layout_of(db) == LAYOUT:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        layout = layout_of(db)  # again, under the lock: another process may have just done it
        if layout > LAYOUT:
            raise StoreError(
                f"{path}: the store was written by a newer bridge (layout {layout}; this one reads "
                f"layouts up to {LAYOUT}); fix: run that newer bridge, or set store.path to another file"
            )
        tables = {
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        steps = _FROM_LAYOUT_0 if layout == 0 and "versions" in tables else ()
        for statement in (*steps, *_TABLES, *SQLITE_TABLES):
            db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(results)")}
        if "surface" not in columns:  # layouts 0 and 1
            db.execute("ALTER TABLE results ADD COLUMN surface TEXT")
        logged = {row[1] for row in db.execute("PRAGMA table_info(invocations)")}
        for column in ("subject", "client_id"):  # layouts 0 to 3
            if column not in logged:
                db.execute(f"ALTER TABLE invocations ADD COLUMN {column} TEXT")
        db.execute(f"PRAGMA user_version = {LAYOUT}")
        db.execute("COMMIT")
    except BaseException as exc:
        roll_back(db, path)
        db.close()
        if disk_refused(exc):
            raise StoreFull(
                f"{path}: cannot be written ({exc}: its disk is full, or past this process's file size limit); "
                f"{DISK_FIX}"
            ) from exc
        raise
    if steps:
        log.info("store %s: moved to layout %d", path, LAYOUT)


def roll_back(db: sqlite3.Connection, path: str) -> None:
    """End the transaction a statement failed in. SQLite has already rolled back one that a
    full disk or an I/O error broke, and a ROLLBACK then raised "cannot rollback - no
    transaction is active" in place of the error itself."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the error that ended the transaction is the one to raise
            log.debug("store %s: rollback failed (%s)", path, exc)


def layout_of(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]
