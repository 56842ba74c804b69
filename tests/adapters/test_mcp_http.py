"""MCP upstreams over streamable HTTP that answer too much: a JSON body, one event, or a POST's
stream of events past max_response_bytes fails its call with `result_too_large`, having read
no more than the bound, and the session goes on; the session-long GET stream is bounded per
event, not in all."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.config import parse_config
from bridge.runtime import Bridge
from tests.adapters.mcp_fixtures.oversize_http import GET_LOG_BYTES, build_app
from tests.servers import (
    clear_proxy_environment,
    forward_proxy,
    free_port,
    proxy_loopback_too,
    read_body,
    replaying,
    serve_asgi,
)

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1 << 20
BIG = 50 << 20
# seconds a call cut at its bound may take: well within its timeout (20 s), on a loaded machine too
CUT_WITHIN = 12


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def make_bridge(base: str, **settings: Any) -> Bridge:
    upstream = {
        "name": "big",
        "kind": "mcp",
        "url": f"{base}/mcp",
        "protocol": "legacy",
        "ping_interval": None,
        "max_response_bytes": LIMIT,
        "timeout": 20,
        **settings,
    }
    return Bridge(
        parse_config({"store": {"path": ":memory:"}, "upstreams": [upstream]}, source="test")
    )


@pytest.mark.parametrize("json_answers", [True, False], ids=["json", "sse"])
async def test_an_answer_past_max_response_bytes_fails_its_call_and_the_session_goes_on(
    json_answers: bool,
) -> None:
    app, server = build_app(json_answers)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        loop = asyncio.get_running_loop()
        for tool in ("big_json", "big_json_declared", "big_gzip", "big_event", "endless_events"):
            begun = loop.time()
            result = await bridge.invoker.invoke(f"big__{tool}", {"size": BIG})
            assert loop.time() - begun < CUT_WITHIN, tool
            assert (
                result.status == "too_large" and result.error.error_class == "result_too_large"
            ), (tool, result.error)
            assert f"answered more than max_response_bytes={LIMIT}" in result.error.message
            assert bridge.catalog.slot("big").health.state == "ready"
            echoed = await bridge.invoker.invoke("big__echo", {"text": f"after {tool}"})
            assert echoed.content[0]["text"] == f"after {tool}"  # the same session, right after
        # the server got out little more than the bound, for each (socket buffers hold the rest)
        assert all(sent < 20 * LIMIT for sent in server.sent.values()), server.sent
        assert server.sessions == 1  # never connected again

    # an answer within the bound is read whole, one larger than the SDK's own bound of one event
    # (1 MiB) too: an answer of 2 MiB with max_response_bytes 4 MiB
    async with serve_asgi(app, lifespan="off") as base:
        for limit, size in ((LIMIT, LIMIT - 1000), (4 * LIMIT, 2 * LIMIT)):
            async with make_bridge(base, max_response_bytes=limit) as bridge:
                within = await bridge.invoker.invoke("big__sized", {"size": size})
                assert within.status == "succeeded", within.error
                assert (
                    f"Result of {size} characters" in within.content[0]["text"]
                )  # stored whole, as large results are


@pytest.mark.parametrize(
    "resumed", [{"endless": True}, {"size": 300_000}], ids=["endless", "ends_again"]
)
async def test_a_resumed_answer_is_bounded_whole_like_the_post_stream_it_resumes(
    resumed: dict[str, Any],
) -> None:
    """A POST's event stream that ends without the answer, having given an event id, is resumed
    by the SDK with a GET naming it (Last-Event-ID), in the POST's own task. The resumed stream
    counts toward the same bound as the POST's: an endless one is cut at max_response_bytes, and
    one that ends again without the answer at every resumption (the SDK resumes it again and
    again) is cut once the resumptions sent that much in all."""
    app, server = build_app(json_answers=False)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        begun = asyncio.get_running_loop().time()
        result = await bridge.invoker.invoke("big__resumed", resumed)
        assert asyncio.get_running_loop().time() - begun < CUT_WITHIN
        assert result.status == "too_large" and result.error.error_class == "result_too_large", (
            result.error
        )
        assert f"answered more than max_response_bytes={LIMIT}" in result.error.message
        assert server.resumptions == (1 if "endless" in resumed else LIMIT // resumed["size"] + 1)
        await until(lambda: "resumed" in server.sent)  # the server sees the close a turn later
        assert server.sent["resumed"] < 20 * LIMIT, server.sent
        assert (await bridge.invoker.invoke("big__echo", {"text": "after"})).content[0][
            "text"
        ] == "after"
        assert bridge.catalog.slot("big").health.state == "ready" and server.sessions == 1


async def test_an_answer_whose_stream_the_server_keeps_ending_is_resumed_a_bounded_number_of_times() -> (
    None
):
    """A server that ends every resumed stream at once, without an event, asking for the next
    resumption at once (`retry: 0`): the SDK resumed it some 280 times a second, also after the
    call had timed out, until about 950 nested resumptions failed the whole session. The answer
    is resumed MAX_RESUMPTIONS times, then its call fails, and the session goes on."""
    from adapters.mcp.http import MAX_RESUMPTIONS

    app, server = build_app(json_answers=False)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        begun = asyncio.get_running_loop().time()
        result = await bridge.invoker.invoke("big__resumed", {"size": 0})
        assert asyncio.get_running_loop().time() - begun < CUT_WITHIN
        assert result.status == "failed" and result.error.error_class == "execution_failed", (
            result.error
        )
        assert result.error.message == (
            f"resumed: {base}/mcp ended the event stream of one answer {MAX_RESUMPTIONS} times "
            "without the answer; it is not resumed again"
        )
        assert server.resumptions == MAX_RESUMPTIONS + 1
        await asyncio.sleep(0.3)
        assert server.resumptions == MAX_RESUMPTIONS + 1  # not resumed after its call
        assert (await bridge.invoker.invoke("big__echo", {"text": "after"})).content[0][
            "text"
        ] == "after"
        assert bridge.catalog.slot("big").health.state == "ready" and server.sessions == 1


async def test_the_get_stream_of_server_messages_is_bounded_per_event_not_in_all() -> None:
    app, server = build_app(json_answers=False, get_log_bytes=GET_LOG_BYTES)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base):
        # GET_LOG_BYTES (3 MiB) of small log events past a 1 MiB bound, then the change notice
        assert GET_LOG_BYTES > 2 * LIMIT
        await until(lambda: server.listings >= 2)


async def test_a_session_closed_while_server_messages_arrive_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The SDK logged `Error parsing SSE message` with a traceback (an ERROR) for an event of
    the GET stream that arrived as the session closed, its reader gone: no parse failed."""
    # events of the GET stream still arriving as the session closes
    app, server = build_app(json_answers=False, get_log_bytes=GET_LOG_BYTES)
    async with serve_asgi(app, lifespan="off") as base:
        async with make_bridge(base):
            await until(lambda: server.gets >= 1)
    assert not [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("mcp.") and r.levelno >= logging.ERROR
    ]


RSS_SCRIPT = """
import asyncio, json, resource, sys
sys.path.insert(0, sys.argv[1])
from bridge.config import parse_config
from bridge.runtime import Bridge
from tests.adapters.mcp_fixtures.oversize_http import build_app
from tests.servers import serve_asgi

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

async def main():
    app, _ = build_app(json_answers=sys.argv[2] == "json")
    async with serve_asgi(app, lifespan="off") as base:
        upstream = {"name": "big", "kind": "mcp", "url": base + "/mcp", "protocol": "legacy", "ping_interval": None,
                    "max_response_bytes": 1 << 20, "timeout": 20}
        async with Bridge(parse_config({"store": {"path": ":memory:"}, "upstreams": [upstream]}, source="t")) as bridge:
            for _ in range(3):
                await bridge.invoker.invoke("big__echo", {"text": "warm"})
            before = peak()
            classes = []
            for tool in ("big_json", "big_gzip", "big_event"):
                result = await bridge.invoker.invoke("big__" + tool, {"size": 50 << 20})
                classes.append(result.error.error_class if result.error else result.status)
            print(json.dumps({"before": before, "after": peak(), "classes": classes}))

asyncio.run(main())
"""


@pytest.mark.parametrize("answers", ["json", "sse"])
def test_an_oversize_answer_does_not_grow_the_bridges_memory_by_its_size(answers: str) -> None:
    """Three answers of 50 MiB each (a JSON body, a gzip one, one event) past a 1 MiB bound, in a
    process of its own: its peak resident memory grows by a few MiB, not by 50."""
    done = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(ROOT), answers],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["classes"] == ["result_too_large"] * 3
    assert seen["after"] - seen["before"] < 16 << 20, seen


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_the_sdks_server_answering_too_much_in_either_era(
    protocol: str, json_response: bool
) -> None:
    """The mcp SDK's own server, over both eras: an echo of 300 KB past a 100 KB bound fails
    with result_too_large, and the session serves the next call."""
    from tests.adapters.mcp_fixtures.server import build_server

    server, _ = build_server()
    async with serve_asgi(server.streamable_http_app(json_response=json_response)) as base:
        async with make_bridge(base, protocol=protocol, max_response_bytes=100_000) as bridge:
            refused = await bridge.invoker.invoke("big__echo", {"text": "x" * 300_000})
            assert refused.error is not None and refused.error.error_class == "result_too_large", (
                refused.error
            )
            assert "answered more than max_response_bytes=100000" in refused.error.message
            assert (await bridge.invoker.invoke("big__echo", {"text": "fine"})).content[0][
                "text"
            ] == "fine"
            assert (
                await bridge.invoker.invoke("big__echo", {"text": "y" * 90_000})
            ).status == "succeeded"
            assert bridge.catalog.slot("big").health.state == "ready"


async def test_the_server_is_reached_through_the_environment_proxy_unless_no_proxy_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY and NO_PROXY count as for any httpx client, for the POSTs and the GET stream."""
    clear_proxy_environment(monkeypatch)
    app, _ = build_app(json_answers=True)
    async with serve_asgi(app, lifespan="off") as base, forward_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with make_bridge(base) as bridge:
            assert (await bridge.invoker.invoke("big__echo", {"text": "loopback"})).content[0][
                "text"
            ] == "loopback"
        assert seen == []  # a loopback host is reached directly, whatever the proxies
        proxy_loopback_too(monkeypatch)
        async with make_bridge(base) as bridge:
            assert (await bridge.invoker.invoke("big__echo", {"text": "via proxy"})).content[0][
                "text"
            ] == "via proxy"
            await until(lambda: f"GET {base}/mcp" in seen)
        assert f"POST {base}/mcp" in seen
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        seen.clear()
        async with make_bridge(base) as bridge:
            assert (await bridge.invoker.invoke("big__echo", {"text": "direct"})).content[0][
                "text"
            ] == "direct"
        assert seen == []


async def test_a_server_on_another_loopback_address_is_reached_directly_whatever_the_proxies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx's mounts name hosts, not 127.0.0.0/8: the upstream's own loopback host is named too."""
    clear_proxy_environment(monkeypatch)
    app, _ = build_app(json_answers=True)
    async with (
        serve_asgi(app, lifespan="off", host="127.0.0.2") as base,
        forward_proxy() as (proxy, seen),
    ):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        async with make_bridge(base) as bridge:
            assert (await bridge.invoker.invoke("big__echo", {"text": "direct"})).content[0][
                "text"
            ] == "direct"
        assert seen == []


def test_the_servers_own_loopback_host_is_mounted_direct_in_any_of_its_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`localhost.` (a fully qualified `localhost`) is loopback too; a name under another domain is not."""
    from adapters.http.proxy import loopback_mounts

    clear_proxy_environment(monkeypatch)
    assert loopback_mounts("http://127.0.0.2:8/mcp") == {}  # no proxy to skip
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert "all://localhost." in loopback_mounts("https://localhost.:8/mcp")
    assert "all://127.0.0.2" in loopback_mounts("http://127.0.0.2:8/mcp")
    assert set(loopback_mounts("https://localhost.example/mcp")) == {
        "all://localhost",
        "all://127.0.0.1",
        "all://[::1]",
    }


@pytest.fixture
def quick_get_retries(monkeypatch: pytest.MonkeyPatch) -> float:
    """The mcp SDK waits a second before it opens a GET stream again (the server can say
    otherwise, with an event's `retry`, which these servers do not send); 50 ms here. The
    delay, in seconds."""
    from mcp.client import streamable_http

    monkeypatch.setattr(streamable_http, "DEFAULT_RECONNECTION_DELAY_MS", 50)
    return 0.05


@pytest.mark.parametrize("failure", ["oversize", "cut", "502"])
async def test_a_get_stream_the_sdk_gives_up_on_is_noticed_and_the_session_replaced(
    failure: str, caplog: pytest.LogCaptureFixture, quick_get_retries: float
) -> None:
    """The SDK stops re-opening the GET stream of server messages after two failures in a row
    (an event past max_response_bytes, a connection cut): the bridge connects a new session,
    whose stream brings the server's change notices again."""
    app, server = build_app(get_failures=2, get_failure=failure)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        await until(
            lambda: server.sessions == 2 and server.listings >= 3
        )  # listed again, then the notice on the new stream
        await until(lambda: bridge.catalog.slot("big").health.state == "ready")
        assert (await bridge.invoker.invoke("big__echo", {"text": "after"})).content[0][
            "text"
        ] == "after"
        assert server.gets == 3
    said = [r.getMessage() for r in caplog.records if "connecting a new session" in r.getMessage()]
    assert (
        len(said) == 1
        and "(GET) failed 2 times in a row" in said[0]
        and "no longer re-opened" in said[0]
    ), said


async def test_sessions_whose_streams_keep_failing_are_replaced_after_growing_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapters.mcp import http_session

    monkeypatch.setattr(http_session, "_RENEW_RETRY", (0.5, 300.0))
    app, server = build_app(get_failures=4, get_failure="cut")
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        await until(lambda: server.gets == 4)
        listings, begun = server.listings, asyncio.get_running_loop().time()
        await until(
            lambda: server.listings > listings
        )  # the second give-up: re-listed at once, replaced after the pause
        assert server.sessions == 2
        await until(lambda: server.sessions == 3)
        assert asyncio.get_running_loop().time() - begun >= 0.4
        await until(lambda: bridge.catalog.slot("big").health.state == "ready")


@pytest.mark.parametrize("status", ["405", "403"])
async def test_a_server_that_offers_no_get_stream_keeps_its_session(
    status: str, quick_get_retries: float
) -> None:
    app, server = build_app(get_failures=100, get_failure=status)
    async with serve_asgi(app, lifespan="off") as base, make_bridge(base) as bridge:
        await until(lambda: server.gets == 2)
        # the SDK has given up (it would have tried again after its delay); nothing follows
        await asyncio.sleep(10 * quick_get_retries)
        assert server.sessions == 1 and server.gets == 2
        assert bridge.catalog.slot("big").health.state == "ready"


async def test_a_server_certificate_that_fails_its_check_is_a_setup_problem_at_start_and_in_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate no known CA signed fails every attempt alike: the start says so, with the
    fix, as the upstream's reason (not an unreachable server), and a call of a session whose
    server took such a certificate fails with recoverability `setup`, not `retry_later`."""
    pytest.importorskip("cryptography.x509")
    from adapters.mcp import upstream as mcp_adapter
    from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem

    ca = _issue("test CA", None, ca=True)
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    for name, issuer in (
        ("server.pem", ca),
        ("stranger.pem", None),
    ):  # the stranger's is self-signed
        cert, key = _issue("127.0.0.1", issuer, ip="127.0.0.1")
        (tmp_path / name).write_bytes(_pem(cert) + _key_pem(key))
    # the system's CAs, as the sessions see them, with the test CA added
    trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    monkeypatch.setattr(mcp_adapter, "system_cas", lambda: trusted)
    app, server = build_app(json_answers=True, get_failures=100, get_failure="405")
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    first = serve_asgi(app, port=port, lifespan="off", ssl_certfile=str(tmp_path / "server.pem"))
    await first.__aenter__()
    try:
        async with make_bridge(base, retry_initial=30) as bridge:
            assert (await bridge.invoker.invoke("big__echo", {"text": "trusted"})).content[0][
                "text"
            ] == "trusted"
            await first.__aexit__(None, None, None)
            first = serve_asgi(
                app, port=port, lifespan="off", ssl_certfile=str(tmp_path / "stranger.pem")
            )
            await first.__aenter__()
            begun = asyncio.get_running_loop().time()
            failed = await bridge.invoker.invoke("big__echo", {"text": "stranger"})
            assert asyncio.get_running_loop().time() - begun < 1
            assert (
                failed.error is not None and failed.error.error_class == "dependency_unavailable"
            ), failed.error
            assert failed.error.recoverability == "setup" and failed.error.retry_after is None
            said = f"{base}/mcp: the certificate of 127.0.0.1:{port} cannot be verified (self-signed certificate): give the CA that signed it as `ca_file`"
            assert (
                said in failed.error.message and "verify_tls" not in failed.error.message
            )  # an MCP upstream has no such key
            slot = bridge.catalog.slot("big")
            await until(
                lambda: slot.health.next_retry_in is not None
            )  # lost, and a reconnect failed the same way
            assert slot.health.state == "unavailable" and said in (slot.health.reason or ""), (
                slot.health
            )
            # its tools answer so while it is down: an operator must act, waiting will not help
            down = await bridge.invoker.invoke("big__echo", {"text": "meanwhile"})
            assert (
                down.error is not None
                and down.error.recoverability == "setup"
                and down.error.retry_after is None
            ), down.error
            assert said in down.error.message
        async with make_bridge(base, retry_initial=30) as bridge:
            slot = bridge.catalog.slot("big")
            await until(lambda: slot.health.state == "failed")
            assert (slot.health.reason or "").startswith(
                said
            ) and "unreachable" not in slot.health.reason
        assert server.calls == ["echo"]
    finally:
        await first.__aexit__(None, None, None)


async def test_calls_reuse_one_connection_when_each_answer_comes_as_an_event_stream() -> None:
    """The SDK's server answers each POST with an event stream it ends right after the answer:
    the calls go over kept-alive connections, not a new one each (the answer's stream is read to
    its end, and its connection given back, when that end arrives: calls made back to back in
    one process, each before the last one's end is read, take turns on two)."""
    from tests.adapters.mcp_fixtures.server import build_server

    server, _ = build_server()
    app = server.streamable_http_app()
    calls_from: list[tuple[str, int]] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await read_body(receive)
            if b'"tools/call"' in body:
                calls_from.append(scope["client"])
            receive = replaying(body, receive)
        await app(scope, receive, send)

    async with serve_asgi(recording) as base:
        async with make_bridge(base) as bridge:
            for n in range(5):
                result = await bridge.invoker.invoke("big__echo", {"text": f"call {n}"})
                assert result.content[0]["text"] == f"call {n}", result
    assert len(calls_from) == 5
    assert len(set(calls_from)) <= 2, calls_from
