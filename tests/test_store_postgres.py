"""The store on PostgreSQL (store.url), against a real server (tests/pgserver.py): what it keeps
round trips, replicas agree on names, migrations run once, and a database that goes away and
comes back loses nothing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from mcp.shared.exceptions import MCPError

from bridge.catalog import OFF_LOOP_TOOLS, Catalog
from bridge.config import ConfigError, parse_config
from bridge.masking import masked_url
from bridge.model import now_iso
from bridge.store import StoreError, StoreFull, StoreUnavailable
from bridge.store.migrations import MIGRATIONS
from bridge.store.postgres import PostgresStore
from tests.fakes import FakeUpstream, tool
from tests.pgserver import PostgresServer
from tests.serve.mcp_support import MODERN, http_client
from tests.serve.rest_env import config_with, serving
from tests.servers import until
from tests.test_store_credentials import exercise


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(postgres_url)
    try:
        yield opened
    finally:
        opened.close()


def _version(tool_id: str, version: int, signature: dict[str, Any]) -> tuple[Any, ...]:
    return (
        "ns",
        tool_id,
        version,
        f"d{version}",
        "initial" if version == 1 else "compatible",
        now_iso(),
        json.dumps(signature),
    )


def _log_row(n: int) -> tuple[Any, ...]:
    return (f"inv-{n}", "t1", "ns__tool", 1, "default", "ok", None, now_iso(), 1.5, "alice", "c1")


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


def _until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait for what the store's own recovery task does (it looks every second at most)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_what_the_store_keeps_round_trips(store: PostgresStore, postgres_url: str) -> None:
    store.add_version_rows([_version("t1", 1, {"a": 1}), _version("t1", 2, {"a": 2, "b": "é"})])
    assert store.latest_versions() == {"t1": (2, "d2")}
    record = store.get_version("ns", "t1", 2)
    assert record is not None and record.signature == {"a": 2, "b": "é"}
    assert [r.version for r in store.list_versions("ns", "t1")] == [2, 1]
    assert store.get_version("ns", "t1", 3) is None
    store.save_names([("ns", "t1", "ns__tool", "tool")])
    assert store.assigned_names() == {"t1": "ns__tool"}
    store.log_invocations([_log_row(1), _log_row(2)[:9]])  # a row without subject and client id
    logged = {row["invocation_id"]: row for row in store.recent_invocations()}
    assert logged["inv-1"]["subject"] == "alice" and logged["inv-2"]["subject"] is None
    assert logged["inv-1"]["duration_ms"] == 1.5
    store.put_result("blob-1", "inv-1", "application/json", b"\x00{big}", surface="default")
    assert store.get_result("blob-1") == ("application/json", b"\x00{big}", "default")
    assert store.get_result("blob-none") is None
    # a second replica reads what the first wrote
    other = PostgresStore(postgres_url)
    try:
        assert other.assigned_names() == {"t1": "ns__tool"}
        assert other.get_result("blob-1") == ("application/json", b"\x00{big}", "default")
        assert other.latest_versions() == {"t1": (2, "d2")}
    finally:
        other.close()
    assert store.waiting() == 0 and store.unwritable is None


def test_the_log_and_the_results_keep_about_the_latest(
    store: PostgresStore, postgres_url: str
) -> None:
    store.log_invocations([_log_row(n) for n in range(1300)], keep=1000)
    store.log_invocations([_log_row(1300)], keep=1000)
    assert _rows(postgres_url, "SELECT COUNT(*), MIN(invocation_id) FROM invocations")[0][0] == 1001
    for n in range(30):
        store.put_result(f"blob-{n}", "inv", "text/plain", b"x" * 100, keep=10)
    kept = _rows(postgres_url, "SELECT ref FROM results ORDER BY seq")
    assert len(kept) < 30 and kept[-1] == ("blob-29",)


def test_a_row_the_database_refuses_costs_the_batch_nothing(store: PostgresStore) -> None:
    store.log_invocations([_log_row(1), ("inv-nul", "t\x00", *_log_row(2)[2:]), _log_row(3)])
    assert {row["invocation_id"] for row in store.recent_invocations()} == {"inv-1", "inv-3"}
    assert store.waiting() == 0


def test_replicas_naming_the_same_tools_at_once_agree(postgres_url: str) -> None:
    """Each replica proposes names of its own (as catalogs whose histories differ would); the
    first to claim a tool's name gives it to every replica, and no name goes to two tools."""
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    try:
        tools = [f"t{n}" for n in range(200)]
        barrier = threading.Barrier(len(stores))

        def claim(index: int) -> dict[str, str]:
            barrier.wait()
            rows = [
                ("ns", t, f"ns__{t}" if (n + index) % 3 else f"ns__shared_{n // 2}", t)
                for n, t in enumerate(tools)
            ]
            got: dict[str, str] = {}
            for start in range(0, len(rows), 25):
                got.update(stores[index].claim_names(rows[start : start + 25]))
            return got

        with ThreadPoolExecutor(len(stores)) as pool:
            claimed = list(pool.map(claim, range(len(stores))))
        named = dict(_rows(postgres_url, "SELECT tool_id, name FROM tool_names"))
        assert len(set(named.values())) == len(named)  # no name given twice
        for got in claimed:
            assert got == {t: named[t] for t in got}  # what each replica was told is what holds
        assert set().union(*claimed) == set(named)
        assert all(s.assigned_names() == named for s in stores)
    finally:
        for s in stores:
            s.close()


def test_replicas_starting_at_once_migrate_once(postgres_url: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: PostgresStore(postgres_url), range(4)))
    for s in stores:
        s.close()
    assert _rows(postgres_url, "SELECT version FROM bridge_migrations") == [
        (n,) for n in range(1, len(MIGRATIONS) + 1)
    ]


def test_a_database_migrated_by_a_newer_bridge_is_refused(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO bridge_migrations VALUES (%s, now())", (len(MIGRATIONS) + 1,))
    with pytest.raises(
        StoreError, match=r"migrated by a newer bridge .*fix: run that newer bridge"
    ):
        PostgresStore(postgres_url)


def test_a_bad_url_or_a_database_away_names_the_store_not_the_password(
    postgres_server: PostgresServer,
) -> None:
    for url, said in (
        ("mysql://u:secret-pw@127.0.0.1/db", "its scheme is 'mysql', not postgresql"),
        ("postgresql://u:secret-pw@127.0.0.1:5432", "names no database"),
        ("postgresql://u:secret-pw@127.0.0.1:port/db", "is no URL"),
    ):
        with pytest.raises(ConfigError) as refused:
            parse_config({"store": {"url": url}})
        assert f"store.url: {said}" in str(refused.value)
        assert "fix: write postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in str(refused.value)
        assert "secret-pw" not in str(refused.value)
    wrong = postgres_server.url().replace(postgres_server.password, "not-the-password")
    with pytest.raises(StoreError) as away:
        PostgresStore(wrong)
    assert "not-the-password" not in str(away.value)
    assert masked_url(wrong) in str(away.value) and ":***@127.0.0.1:" in str(away.value)
    assert "fix: start that database" in str(away.value)


def test_a_database_away_loses_nothing_and_is_written_once_back(
    postgres_server: PostgresServer, store: PostgresStore, postgres_url: str
) -> None:
    store.log_invocations([_log_row(n) for n in range(10)])
    store.put_result("blob-before", "inv-0", "text/plain", b"kept")
    postgres_server.stop()
    try:
        store.log_invocations([_log_row(n) for n in range(10, 20)])  # answered at once, kept
        assert store.unwritable is not None and "database away" in store.unwritable
        assert store.unwritable_since is not None
        store.add_version_rows([_version("t9", 1, {"x": 1})])
        assert store.get_version("ns", "t9", 1) is not None  # read from memory meanwhile
        store.log_invocations([_log_row(n) for n in range(20, 30)])
        assert store.waiting() == 21
        with pytest.raises(
            StoreUnavailable, match=r"store postgresql://bridge:\*\*\*@.*database away"
        ):
            store.get_result("blob-before")
        with pytest.raises(StoreFull):  # the caller gets its result inline
            store.put_result("blob-during", "inv-11", "text/plain", b"inline")
        assert postgres_server.password not in store.unwritable
    finally:
        postgres_server.start()
    _until(lambda: store.unwritable is None)
    assert store.waiting() == 0
    ids = [row[0] for row in _rows(postgres_url, "SELECT invocation_id FROM invocations")]
    assert sorted(ids) == sorted(f"inv-{n}" for n in range(30))  # each once
    assert store.get_result("blob-before") == ("text/plain", b"kept", None)
    assert _rows(postgres_url, "SELECT version FROM versions WHERE tool_id = 't9'") == [(1,)]


def test_the_catalogs_of_replicas_give_each_tool_one_name_and_id(postgres_url: str) -> None:
    """Two replicas each list, at once, one of two tools whose names collide (each would give
    its own the clean name), then both list both: every replica, a later one too, gives every
    tool the same name and id."""
    stores = [PostgresStore(postgres_url) for _ in range(3)]
    catalogs = [Catalog(s) for s in stores]
    for catalog in catalogs:
        catalog.add_upstream(FakeUpstream(name="api", tools=[]))
    first = [tool("get pet", native_id="a"), tool("get/pet", native_id="b")]
    both = [*first, tool("get_pet", native_id="c")]
    try:
        barrier = threading.Barrier(2)

        def lists(index: int, tools: list[Any]) -> None:
            barrier.wait()
            catalogs[index].apply_tools("api", tools)

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lists, (0, 1), ([first[0]], [first[1]])))
            list(pool.map(lists, (0, 1), (both, both)))
        catalogs[2].apply_tools("api", both)
        named = [{d.tool_id: d.name for d in c.declarations()} for c in catalogs]
        assert named[0] == named[1] == named[2]
        assert len(set(named[0].values())) == 3
        assert dict(_rows(postgres_url, "SELECT tool_id, name FROM tool_names")) == named[0]
    finally:
        for s in stores:
            s.close()


async def test_replicas_taking_large_listings_at_once_agree_on_names(postgres_url: str) -> None:
    """Listings of OFF_LOOP_TOOLS tools or more claim their names off the event loop, then
    adopt the store's: two replicas each take one half of colliding tools at once, then both
    take all of them, and give each the same name."""
    count = OFF_LOOP_TOOLS + 50
    halves = (
        [tool(f"get pet {n}", native_id=f"a{n}") for n in range(count)],
        [tool(f"get/pet {n}", native_id=f"b{n}") for n in range(count)],
    )
    stores = [PostgresStore(postgres_url) for _ in range(2)]
    catalogs = [Catalog(s) for s in stores]
    try:
        for catalog in catalogs:
            catalog.add_upstream(FakeUpstream(name="api", tools=[]))
        await asyncio.gather(
            *(c.take_tools("api", half) for c, half in zip(catalogs, halves, strict=True))
        )
        every = [*halves[0], *halves[1]]
        await asyncio.gather(*(c.take_tools("api", every) for c in catalogs))
        named = [{d.tool_id: d.name for d in c.declarations()} for c in catalogs]
        assert named[0] == named[1] and len(set(named[0].values())) == 2 * count
        assert dict(_rows(postgres_url, "SELECT tool_id, name FROM tool_names")) == named[0]
        assert all(c.resolve(name).tool_id == i for c in catalogs for i, name in named[0].items())
    finally:
        for s in stores:
            s.close()


def test_a_tool_that_changes_while_the_database_is_away_gets_its_version(
    postgres_server: PostgresServer, store: PostgresStore, postgres_url: str
) -> None:
    """Its last version's signature cannot be read to compare: the new one counts as breaking,
    and the listing is taken (a listing that failed took the upstream's tools away)."""
    catalog = Catalog(store)
    catalog.add_upstream(FakeUpstream(name="api", tools=[]))
    catalog.apply_tools("api", [tool("echo")])
    postgres_server.stop()
    try:
        catalog.apply_tools("api", [tool("echo", props={"other": {"type": "string"}})])
        decl = catalog.resolve("api__echo")
        assert decl is not None and decl.version == 2 and decl.loading_state == "loaded"
    finally:
        postgres_server.start()
    _until(lambda: store.unwritable is None)
    assert _rows(postgres_url, "SELECT version, compatibility FROM versions ORDER BY version") == [
        (1, "initial"),
        (2, "breaking"),
    ]


async def test_calls_go_on_while_the_database_is_away_and_nothing_is_lost(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """PostgreSQL stopped during a stream of calls, then started again: every call is answered,
    /healthz says the store is degraded and why, a stored result's read names the store, and
    once the database is back every call's log row is in it, without a restart."""
    config = config_with(
        store={"url": postgres_url}, search={"persist": False}, invoke={"inline_result_limit": 256}
    )
    async with serving(FakeUpstream(name="svc", tools=[tool("echo")]), config=config) as served:
        status, big, _ = await served.post(
            "/invoke", {"tool": "svc__echo", "arguments": {"text": "x" * 500}}
        )
        assert status == 200, big
        ref = big["persisted"]["persisted_ref"]["ref"]
        calls = 1
        stopping = asyncio.create_task(asyncio.to_thread(postgres_server.stop))
        while not stopping.done() or calls < 40:
            status, body, _ = await served.post(
                "/invoke", {"tool": "svc__echo", "arguments": {"text": f"t{calls}"}}
            )
            assert status == 200 and body["status"] == "succeeded", body
            calls += 1
        await stopping
        await until(lambda: served.bridge.store.unwritable is not None)
        status, health, _ = await served.get("/healthz")
        assert status == 200 and health["status"] == "degraded", health
        assert health["store"]["writable"] is False and "database away" in health["store"]["reason"]
        assert postgres_server.password not in json.dumps(health)
        status, refused, _ = await served.get(f"/results/{ref}")
        assert status == 503 and refused["error"]["error_class"] == "dependency_unavailable", (
            refused
        )
        assert "postgresql://bridge:***@127.0.0.1" in refused["error"]["message"]
        status, refused, answer = await served.get(f"/tools/{served.tool_id('svc__echo')}/versions")
        assert status == 503 and refused["error"]["error_class"] == "dependency_unavailable"
        assert "store postgresql://bridge:***@" in refused["error"]["message"]
        assert answer.headers["Retry-After"] == "1"
        async with http_client(served.base, MODERN) as mcp:  # MCP's read of the result: an error
            with pytest.raises(MCPError, match=r"store postgresql://bridge:\*\*\*@") as caught:
                await mcp.read(f"bridge://results/{ref}")
            assert caught.value.error.data["error_class"] == "dependency_unavailable"
        status, whole, _ = await served.post(
            "/invoke", {"tool": "svc__echo", "arguments": {"text": "y" * 500}}
        )
        assert status == 200 and whole["content"][0]["text"] == "y" * 500  # answered inline
        calls += 1
        await asyncio.to_thread(postgres_server.start)
        await until(lambda: served.bridge.store.unwritable is None, timeout=20)
        status, health, _ = await served.get("/healthz")
        assert health == {"status": "ok"}
        status, payload, _ = await served.get(f"/results/{ref}")
        assert status == 200 and "x" * 500 in json.dumps(payload)
        await until(
            lambda: _rows(postgres_url, "SELECT COUNT(*) FROM invocations")[0][0] == calls,
            timeout=20,
        )
    assert (
        len({row[0] for row in _rows(postgres_url, "SELECT invocation_id FROM invocations")})
        == calls
    )


def test_users_credentials_and_flows_are_kept(store: PostgresStore) -> None:
    exercise(store)
