"""Users' sealed upstream credentials and the OAuth flows under way in the store: one blob per
(upstream, issuer, subject), replaced and dropped; a flow taken once, and not after it expires;
a user's flows of one purpose capped at the newest few; a claimed flow refused a second claim.
A store file of layout 4 gets the tables. (PostgreSQL's, through its migration 2, are checked
with the same steps in tests/test_store_postgres.py, where its server already runs.)"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from bridge.store import LAYOUT, Store
from bridge.store.credentials import FLOWS_PER_USER
from bridge.store.layout import layout_of


def exercise(store: Any) -> None:
    assert store.get_credential("vendor", "https://idp", "alice") is None
    store.put_credential("vendor", "https://idp", "alice", b"\x01sealed-1")
    store.put_credential("vendor", "https://idp", "alice", b"\x01sealed-2")
    store.put_credential("vendor", "https://other-idp", "alice", b"\x01other")
    assert store.get_credential("vendor", "https://idp", "alice") == b"\x01sealed-2"
    assert store.get_credential("vendor", "https://idp", "bob") is None
    store.drop_credential("vendor", "https://idp", "alice")
    assert store.get_credential("vendor", "https://idp", "alice") is None
    assert store.get_credential("vendor", "https://other-idp", "alice") == b"\x01other"
    row = ("vendor", "https://idp", "alice", b"\x01verifier")
    store.put_flow("k1", "state", row, time.time() + 60)
    store.put_flow("k2", "state", row, time.time() - 1)  # expired already
    assert store.take_flow("k1", "connect") is None  # another purpose
    assert store.take_flow("k1", "state") == row
    assert store.take_flow("k1", "state") is None  # taken once
    assert store.take_flow("k2", "state") is None
    # A user's connect links are capped at the newest FLOWS_PER_USER; others' are not touched.
    store.put_flow("bob", "connect", ("vendor", "https://idp", "bob", b""), time.time() + 60)
    for n in range(FLOWS_PER_USER + 3):
        store.put_flow(f"c{n}", "connect", row, time.time() + 60 + n)
    kept = [n for n in range(FLOWS_PER_USER + 3) if store.take_flow(f"c{n}", "connect")]
    assert kept == list(range(3, FLOWS_PER_USER + 3))
    assert store.take_flow("bob", "connect") is not None
    # A claim holds its key until taken or expired; a second claim meanwhile is refused.
    assert store.claim_flow("lease", "refresh", row, time.time() + 60)
    assert not store.claim_flow("lease", "refresh", row, time.time() + 60)
    assert store.take_flow("lease", "refresh") == row
    assert store.claim_flow("lease", "refresh", row, time.time() - 1)  # expired at once
    assert store.claim_flow("lease", "refresh", row, time.time() + 60)


def test_the_sqlite_store_keeps_credentials_and_flows(tmp_path: Path) -> None:
    path = tmp_path / "bridge.db"
    store = Store(path)
    try:
        exercise(store)
    finally:
        store.close()


def test_a_layout_4_file_gets_the_credential_tables(tmp_path: Path) -> None:
    path = tmp_path / "bridge.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE user_credentials")
        db.execute("DROP TABLE oauth_flows")
        db.execute("PRAGMA user_version = 4")
    store = Store(path)
    try:
        assert layout_of(store._db) == LAYOUT == 5
        exercise(store)
    finally:
        store.close()
