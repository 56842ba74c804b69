"""Synthesized versions: digests, history in the store, compatibility classes."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from bridge.catalog import Catalog
from bridge.store import LAYOUT, Store, StoreError
from bridge.store.layout import layout_of
from bridge.versions import classify_change
from tests.fakes import FakeUpstream, tool


async def test_new_signature_makes_version_2_compatible(tmp_path):
    store = Store(tmp_path / "v.db")
    up = FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}}, required=["a"])])
    catalog = Catalog(store)
    catalog.add_upstream(up)
    await catalog.start()
    assert catalog.resolve("v__t").version == 1
    catalog.apply_tools(
        "v", [tool("t", props={"a": {"type": "string"}, "b": {"type": "integer"}}, required=["a"])]
    )
    decl = catalog.resolve("v__t")
    assert decl.version == 2
    history = catalog.versions.history(decl)
    assert [h.version for h in history] == [2, 1]
    assert history[0].compatibility == "compatible"
    assert history[1].compatibility == "initial"
    assert history[1].signature["input_schema"]["properties"] == {"a": {"type": "string"}}
    await catalog.close()
    # survives a restart: same digest means no new version
    catalog2 = Catalog(Store(tmp_path / "v.db"))
    catalog2.add_upstream(
        FakeUpstream(
            name="v",
            tools=[
                tool("t", props={"a": {"type": "string"}, "b": {"type": "integer"}}, required=["a"])
            ],
        )
    )
    await catalog2.start()
    assert catalog2.resolve("v__t").version == 2
    await catalog2.close()


async def test_breaking_changes_classified():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}})]))
    await catalog.start()
    catalog.apply_tools(
        "v", [tool("t", props={"a": {"type": "string"}, "b": {"type": "string"}}, required=["b"])]
    )
    decl = catalog.resolve("v__t")
    assert decl.version == 2
    assert catalog.versions.history(decl)[0].compatibility == "breaking"
    assert catalog.versions.breaking_since(decl, 1) == 2
    await catalog.close()


def test_classify_rules():
    base = {
        "input_schema": {"properties": {"a": {"type": "string"}}, "required": ["a"]},
        "output_schema": {"properties": {"x": {"type": "string"}}},
    }
    more_out = {
        **base,
        "output_schema": {"properties": {"x": {"type": "string"}, "y": {"type": "string"}}},
    }
    assert classify_change(base, more_out) == "compatible"
    type_change = {
        **base,
        "input_schema": {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
    }
    assert classify_change(base, type_change) == "breaking"
    removed_out = {**base, "output_schema": {"properties": {}}}
    assert classify_change(base, removed_out) == "breaking"
    removed_in = {**base, "input_schema": {"properties": {}, "required": []}}
    assert classify_change(base, removed_in) == "breaking"


def test_a_change_inside_the_schemas_properties_refer_to_is_breaking():
    """A property written `{$ref: "#/$defs/Address"}` is the same text whatever Address holds:
    a change of Address (a field retyped or gone) is a change of the property."""

    def sig(address: dict, **root: object) -> dict:
        return {
            "input_schema": {
                "type": "object",
                "properties": {"to": {"$ref": "#/$defs/Address"}},
                "required": ["to"],
                "$defs": {"Address": address},
                **root,
            },
            "output_schema": {
                "type": "object",
                "properties": {"sent": {"$ref": "#/$defs/Receipt"}},
                "$defs": {"Receipt": {"type": "object", "properties": {"id": {"type": "string"}}}},
            },
        }

    address = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
    }
    base = sig(address)
    retyped = sig({**address, "properties": {**address["properties"], "zip": {"type": "integer"}}})
    assert classify_change(base, retyped) == "breaking"
    gone = sig(address)
    gone["input_schema"]["$defs"] = {}
    assert classify_change(base, gone) == "breaking"
    receipt_changed = sig(address)
    receipt_changed["output_schema"]["$defs"]["Receipt"] = {"type": "object", "properties": {}}
    assert classify_change(base, receipt_changed) == "breaking"
    assert (
        classify_change(base, sig(address, anyOf=[{"required": ["to"]}])) == "breaking"
    )  # a root constraint added
    # a schema added beside them, or a new description, serves the old callers as before
    added = sig(address, description="Send a parcel.")
    added["input_schema"]["$defs"]["Parcel"] = {"type": "object"}
    assert classify_change(base, added) == "compatible"
    assert classify_change(base, sig(address)) == "compatible"


# The first layout of the store (layout 0): keys that start with the tool id.
LAYOUT_0 = """
CREATE TABLE versions (tool_id TEXT NOT NULL, version INTEGER NOT NULL, digest TEXT NOT NULL, compatibility TEXT NOT NULL,
                       created_at TEXT NOT NULL, signature TEXT NOT NULL, PRIMARY KEY (tool_id, version));
CREATE TABLE tool_names (tool_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, name TEXT NOT NULL, native_id TEXT NOT NULL);
CREATE TABLE invocations (invocation_id TEXT PRIMARY KEY, tool_id TEXT, tool_name TEXT, version INTEGER, surface TEXT,
                          status TEXT NOT NULL, error_class TEXT, created_at TEXT NOT NULL, duration_ms REAL);
CREATE TABLE results (ref TEXT PRIMARY KEY, invocation_id TEXT NOT NULL, media_type TEXT NOT NULL, size INTEGER NOT NULL,
                      payload BLOB NOT NULL, created_at TEXT NOT NULL);
"""


async def test_a_store_of_the_first_layout_keeps_its_versions_names_and_log(tmp_path):
    two = [tool("t", props={"a": {"type": "string"}, "b": {"type": "integer"}}, required=["a"])]
    catalog = Catalog(Store(tmp_path / "new.db"))
    catalog.add_upstream(
        FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}}, required=["a"])])
    )
    await catalog.start()
    catalog.apply_tools("v", two)
    tool_id = catalog.resolve("v__t").tool_id
    await catalog.close()
    new = sqlite3.connect(tmp_path / "new.db")
    old = sqlite3.connect(tmp_path / "old.db")
    old.executescript(LAYOUT_0)
    old.executemany(
        "INSERT INTO versions VALUES (?,?,?,?,?,?)",
        new.execute(
            "SELECT tool_id, version, digest, compatibility, created_at, signature FROM versions"
        ),
    )
    old.execute(
        "INSERT INTO versions VALUES ('lost-id', 3, 'sha256:x', 'compatible', '2026-01-01T00:00:00Z', '{}')"
    )  # no name row
    old.execute("INSERT INTO tool_names VALUES (?, 'v', 'v__kept_name', 't')", (tool_id,))
    old.execute(
        "INSERT INTO invocations VALUES ('inv_1', ?, 'v__kept_name', 2, 'default', 'ok', NULL, '2026-01-01T00:00:00Z', 1.5)",
        (tool_id,),
    )
    old.execute(
        "INSERT INTO results VALUES ('blob_old', 'inv_1', 'application/json', 2, X'7B7D', '2026-01-01T00:00:00Z')"
    )
    old.commit()
    old.close()
    new.close()

    store = Store(tmp_path / "old.db")
    assert store.latest_versions()["lost-id"] == (3, "sha256:x")
    catalog = Catalog(store)
    catalog.add_upstream(FakeUpstream(name="v", tools=two))
    await catalog.start()
    decl = catalog.resolve("v__kept_name")  # the name it was given, not v__t
    assert (
        decl is not None and decl.tool_id == tool_id and decl.version == 2
    )  # the same signature: no version 3
    history = catalog.versions.history(decl)
    assert [(h.version, h.compatibility) for h in history] == [(2, "compatible"), (1, "initial")]
    assert history[1].signature["input_schema"]["properties"] == {"a": {"type": "string"}}
    assert [r["invocation_id"] for r in store.recent_invocations()] == ["inv_1"]
    # a result stored before surfaces were kept with results: any surface reads it
    assert store.get_result("blob_old") == ("application/json", b"{}", None)
    await catalog.close()
    moved = sqlite3.connect(tmp_path / "old.db")
    assert moved.execute("PRAGMA user_version").fetchone()[0] == LAYOUT
    assert {r[0] for r in moved.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} == {
        "versions",
        "tool_names",
        "invocations",
        "results",
        "user_credentials",
        "oauth_flows",
    }
    moved.close()


def test_a_store_this_bridge_cannot_read_names_its_file_and_the_fix(tmp_path):
    newer = tmp_path / "newer.db"
    Store(newer).close()
    db = sqlite3.connect(newer)
    db.execute(f"PRAGMA user_version = {LAYOUT + 1}")
    db.close()
    with pytest.raises(
        StoreError,
        match=rf"^{re.escape(str(newer))}: the store was written by a newer bridge .*fix: ",
    ):
        Store(newer)
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database, a note left here\n" * 100)
    with pytest.raises(
        StoreError,
        match=rf"^{re.escape(str(garbage))}: cannot be opened as the bridge's store .*fix: ",
    ):
        Store(garbage)
    assert garbage.read_text().startswith("not a database")  # left as it was


def test_another_applications_database_is_refused_and_left_as_it_was(tmp_path):
    foreign = tmp_path / "app.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE users (id INTEGER, email TEXT)")
    db.execute("INSERT INTO users VALUES (1, 'a@example.invalid')")
    db.commit()
    db.close()
    half = tmp_path / "half.db"
    db = sqlite3.connect(half)
    db.execute("CREATE TABLE versions (x)")
    db.close()
    for path, said in (
        (foreign, "it holds tables no bridge store has (users)"),
        (half, "it holds the table versions without"),
    ):
        before = path.read_bytes()
        with pytest.raises(
            StoreError,
            match=rf"^{re.escape(str(path))}: is no bridge store: {re.escape(said)}.*fix: ",
        ):
            Store(path)
        assert path.read_bytes() == before  # no table, layout or journal mode written
    with pytest.raises(StoreError, match=r"its folder cannot be made .*fix: "):
        Store(foreign / "inside" / "bridge.db")  # a file where the folder would be


async def test_a_long_signature_is_kept_compressed_and_read_back_whole(tmp_path):
    # Microsoft Graph beta's 22,361 signatures wrote 628 MB of text into the store (234 MB once
    # its schemas were bounded)
    from bridge.store import SIGNATURE_PACKED_CHARS

    props = {
        f"field_{i}": {"type": "string", "description": f"The field number {i} of the record."}
        for i in range(200)
    }
    big = tool("big", props=props)
    catalog = Catalog(Store(tmp_path / "v.db"))
    catalog.add_upstream(FakeUpstream(name="v", tools=[big, tool("small")]))
    await catalog.start()
    try:
        history = catalog.versions.history(catalog.resolve("v__big"))
        assert history[0].signature["input_schema"]["properties"] == props
        assert (
            catalog.versions.history(catalog.resolve("v__small"))[0].signature["native_name"]
            == "small"
        )
    finally:
        await catalog.close()
    with sqlite3.connect(tmp_path / "v.db") as db:
        kept = dict(
            db.execute(
                "SELECT n.name, typeof(v.signature) || ':' || length(v.signature) FROM versions v "
                "JOIN tool_names n ON n.tool_id = v.tool_id"
            )
        )
    kind, size = kept["v__big"].split(":")
    assert kind == "blob" and int(size) < SIGNATURE_PACKED_CHARS  # about 14 KB of text
    assert kept["v__small"].startswith("text:")


def test_a_store_of_layout_2_reads_its_signatures_written_as_text(tmp_path):
    path = tmp_path / "v.db"
    Store(path).close()
    long = json.dumps(
        {
            "input_schema": {"properties": {f"p{i}": {"type": "string"} for i in range(300)}},
            "native_name": "t",
        }
    )
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO versions VALUES ('v', 'id-1', 1, 'sha256:x', 'initial', '2026-01-01T00:00:00Z', ?)",
            (long,),
        )
        db.execute("PRAGMA user_version = 2")
    store = Store(path)
    try:
        assert store.get_version("v", "id-1", 1).signature == json.loads(long)
        assert layout_of(store._db) == LAYOUT
    finally:
        store.close()


def test_a_store_of_layout_3_keeps_its_log_and_logs_callers_from_then_on(tmp_path):
    path = tmp_path / "v.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE invocations")
        db.execute(
            "CREATE TABLE invocations (invocation_id TEXT PRIMARY KEY, tool_id TEXT, tool_name TEXT, version INTEGER, "
            "surface TEXT, status TEXT NOT NULL, error_class TEXT, created_at TEXT NOT NULL, duration_ms REAL)"
        )
        db.execute(
            "INSERT INTO invocations VALUES ('inv-old', 't', 'n', 1, 'default', 'succeeded', NULL, '2026-01-01', 1.0)"
        )
        db.execute("PRAGMA user_version = 3")
    store = Store(path)
    try:
        store.log_invocations(
            [
                (
                    "inv-new",
                    "t",
                    "n",
                    1,
                    "default",
                    "succeeded",
                    None,
                    "2026-01-02",
                    1.0,
                    "alice",
                    "app",
                )
            ]
        )
        rows = {
            r["invocation_id"]: (r["subject"], r["client_id"]) for r in store.recent_invocations()
        }
        assert rows == {"inv-old": (None, None), "inv-new": ("alice", "app")}
        assert layout_of(store._db) == LAYOUT
    finally:
        store.close()
