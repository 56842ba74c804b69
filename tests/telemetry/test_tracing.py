"""Traces: an OTLP/HTTP receiver on loopback (decoding the protobuf with opentelemetry-proto)
gets the spans of a call through two bridges to an OpenAPI server as one trace: bridge B (its
REST request, pipeline and MCP client call) federates bridge A's MCP endpoint (its MCP
request, pipeline and HTTP client call), and the OpenAPI server sees A's span as the parent in
its `traceparent` header. A caller's `params._meta.traceparent` is followed over MCP; without
tracing, or when the sampler drops the trace, the caller's own trace context is passed on
unchanged and no span is made."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.app import build_app, close_app
from bridge.telemetry import CallOrigin, Telemetry
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.servers import serve_asgi
from tests.telemetry.otlp_receiver import Receiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
UNSAMPLED = f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"
SERVER, CLIENT, INTERNAL = 2, 3, 1  # the protobuf's SpanKind values


OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "things", "version": "1"},
    "paths": {
        "/things/{id}": {
            "get": {
                "operationId": "getThing",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {
                        "description": "a thing",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    },
}


class ThingsApi:
    """The OpenAPI server at the end of the chain: it keeps the trace headers it is sent."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["path"] == "/openapi.json":
            body = json.dumps(OPENAPI).encode()
        else:
            self.seen.append(
                {k: v for k, v in headers.items() if k in ("traceparent", "tracestate")}
            )
            body = json.dumps({"id": scope["path"].rsplit("/", 1)[1]}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def bridge_served(config: dict[str, Any]) -> AsyncIterator[tuple[Bridge, str]]:
    bridge = Bridge(parse_config({"store": {"path": ":memory:"}, **config}))
    await bridge.start()
    app = build_app(bridge)
    try:
        async with serve_asgi(app) as base:
            yield bridge, base
    finally:
        await close_app(app)
        await bridge.close()  # exports the spans still waiting


def traced(receiver: str, service: str) -> dict[str, Any]:
    return {"otlp_endpoint": receiver, "service_name": service}


@contextlib.asynccontextmanager
async def two_bridges(receiver: Receiver, api: ThingsApi) -> AsyncIterator[str]:
    """Bridge B (its REST endpoint's URL given) federating bridge A's MCP endpoint, which
    calls the OpenAPI server `api`; both export their spans to `receiver`."""
    async with serve_asgi(receiver) as otlp, serve_asgi(api, lifespan="off") as api_url:
        config_a = {
            "upstreams": [
                {
                    "name": "api",
                    "kind": "openapi",
                    "spec": f"{api_url}/openapi.json",
                    "base_url": api_url,
                }
            ],
            "telemetry": traced(otlp, "bridge-a"),
        }
        async with bridge_served(config_a) as (_, a_url):
            config_b = {
                "upstreams": [{"name": "a", "kind": "mcp", "url": f"{a_url}/mcp"}],
                "telemetry": traced(otlp, "bridge-b"),
            }
            async with bridge_served(config_b) as (_, b_url):
                yield b_url


async def test_a_call_through_two_bridges_to_an_openapi_server_is_one_trace():
    receiver, api = Receiver(), ThingsApi()
    async with two_bridges(receiver, api) as b_url, aiohttp.ClientSession() as http:
        body = {"tool": "a__api__getThing", "arguments": {"id": "42"}}
        async with http.post(
            f"{b_url}/invoke", json=body, headers={"traceparent": TRACEPARENT}
        ) as response:
            assert response.status == 200, await response.text()
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    called = [s for s in receiver.spans if s.name not in ("tools/list", "GET /openapi.json")]
    assert called and {s.trace_id for s in called} == {CALLER_TRACE}  # one trace, the caller's

    b_request = receiver.one("bridge-b", "POST /invoke")
    b_call = receiver.one("bridge-b", "execute_tool a__api__getThing")
    b_client = receiver.one("bridge-b", "tools/call api__getThing")
    a_request = receiver.one("bridge-a", "tools/call api__getThing")
    a_call = receiver.one("bridge-a", "execute_tool api__getThing")
    a_client = receiver.one("bridge-a", "execute_tool getThing")
    chain = [b_request, b_call, b_client, a_request, a_call, a_client]
    assert [s.kind for s in chain] == [SERVER, INTERNAL, CLIENT, SERVER, INTERNAL, CLIENT]
    assert [s.parent_id for s in chain] == [CALLER_SPAN, *(s.span_id for s in chain[:-1])]
    # a bridge makes three spans for the call: its request's, the pipeline's, the upstream's
    for service, mine in (("bridge-b", chain[:3]), ("bridge-a", chain[3:])):
        assert sorted(s.span_id for s in called if s.service == service) == sorted(
            s.span_id for s in mine
        )
    # the OpenAPI server was told A's span of its call as the parent
    assert api.seen == [{"traceparent": f"00-{CALLER_TRACE}-{a_client.span_id}-01"}]

    assert (
        b_request.attributes["http.request.method"] == "POST"
        and b_request.attributes["http.route"] == "/invoke"
    )
    assert b_request.attributes["http.response.status_code"] == 200
    for span, tool in ((b_call, "a__api__getThing"), (a_call, "api__getThing")):
        assert (
            span.attributes["gen_ai.operation.name"] == "execute_tool"
            and span.attributes["gen_ai.tool.name"] == tool
        )
        assert (
            span.attributes["gen_ai.tool.call.id"].startswith("inv")
            and span.attributes["bridge.tool.version"] == 1
        )
    assert (
        b_client.attributes["mcp.method.name"] == "tools/call"
        and b_client.attributes["bridge.upstream.kind"] == "mcp"
    )
    assert {
        k: a_request.attributes[k]
        for k in (
            "mcp.method.name",
            "gen_ai.operation.name",
            "gen_ai.tool.name",
            "network.transport",
        )
    } == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "api__getThing",
        "network.transport": "tcp",
    }
    assert (
        "jsonrpc.request.id" in a_request.attributes
        and "mcp.protocol.version" in a_request.attributes
    )
    assert a_client.attributes["bridge.upstream.kind"] == "openapi" and not any(
        s.error for s in chain
    )


async def test_a_callers_unsampled_trace_is_passed_on_as_it_came_and_makes_no_span():
    receiver, api = Receiver(), ThingsApi()
    async with two_bridges(receiver, api) as b_url, aiohttp.ClientSession() as http:
        headers = {"traceparent": UNSAMPLED, "tracestate": "vendor=1"}
        body = {"tool": "a__api__getThing", "arguments": {"id": "7"}}
        async with http.post(f"{b_url}/invoke", json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
    # B passed the caller's context on to A over MCP, and A on to the OpenAPI server
    assert api.seen == [{"traceparent": UNSAMPLED, "tracestate": "vendor=1"}]
    assert not [s for s in receiver.spans if s.trace_id == CALLER_TRACE]


async def test_an_mcp_callers_meta_traceparent_is_followed_and_a_tool_error_marked():
    receiver = Receiver()
    async with serve_asgi(receiver) as otlp:
        config = {"upstreams": [], "telemetry": traced(otlp, "bridge")}
        async with bridge_served(config) as (_, url), http_client(url, HANDSHAKE) as client:
            result = await client.session.call_tool(
                "nope__missing", {}, meta={"traceparent": TRACEPARENT}
            )
            assert result.is_error
    request = receiver.one("bridge", "tools/call nope__missing")
    assert (request.trace_id, request.parent_id, request.kind) == (
        CALLER_TRACE,
        CALLER_SPAN,
        SERVER,
    )
    assert request.error and request.attributes["error.type"] == "tool_error"
    assert request.attributes["mcp.session.id"]  # a handshake-era session
    call = receiver.one("bridge", "execute_tool nope__missing")
    assert (
        call.parent_id == request.span_id
        and call.error
        and call.attributes["error.type"] == "unknown_tool"
    )


async def test_without_tracing_the_callers_trace_context_is_passed_on_as_it_came():
    api = ThingsApi()
    async with serve_asgi(api, lifespan="off") as api_url:
        config = {
            "upstreams": [
                {
                    "name": "api",
                    "kind": "openapi",
                    "spec": f"{api_url}/openapi.json",
                    "base_url": api_url,
                }
            ]
        }
        async with bridge_served(config) as (bridge, url), aiohttp.ClientSession() as http:
            assert bridge.telemetry.tracing is None
            headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
            async with http.post(
                f"{url}/invoke",
                json={"tool": "api__getThing", "arguments": {"id": "1"}},
                headers=headers,
            ) as response:
                assert response.status == 200
            headers = {"traceparent": "00-not-a-traceparent"}
            async with http.post(
                f"{url}/invoke",
                json={"tool": "api__getThing", "arguments": {"id": "2"}},
                headers=headers,
            ) as response:
                assert response.status == 200
    assert api.seen == [{"traceparent": TRACEPARENT, "tracestate": "vendor=1"}, {}]


async def test_a_trace_the_sampler_drops_exports_nothing_and_says_so_to_the_upstream():
    receiver, api = Receiver(), ThingsApi()
    async with serve_asgi(receiver) as otlp, serve_asgi(api, lifespan="off") as api_url:
        config = {
            "upstreams": [
                {
                    "name": "api",
                    "kind": "openapi",
                    "spec": f"{api_url}/openapi.json",
                    "base_url": api_url,
                }
            ],
            "telemetry": {**traced(otlp, "bridge"), "sample_ratio": 0},
        }
        async with bridge_served(config) as (_, url), aiohttp.ClientSession() as http:
            async with http.post(
                f"{url}/invoke", json={"tool": "api__getThing", "arguments": {"id": "1"}}
            ) as response:
                assert response.status == 200
            # a caller's sampled trace is followed whatever the ratio
            async with http.post(
                f"{url}/invoke",
                json={"tool": "api__getThing", "arguments": {"id": "2"}},
                headers={"traceparent": TRACEPARENT},
            ) as response:
                assert response.status == 200
    dropped, followed = (seen["traceparent"] for seen in api.seen)
    assert int(dropped[-2:], 16) & 1 == 0 and dropped[3:35] != CALLER_TRACE  # flags: not sampled
    assert followed.startswith(f"00-{CALLER_TRACE}-") and int(followed[-2:], 16) & 1 == 1
    assert {s.trace_id for s in receiver.spans if s.name != "tools/list"} == {CALLER_TRACE}
    assert receiver.one("bridge", "POST /invoke").parent_id == CALLER_SPAN


class Discard:
    """A span exporter that keeps nothing."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def test_a_json_log_record_made_inside_a_span_carries_its_ids():
    import logging

    from bridge.telemetry.logs import JsonFormatter
    from bridge.telemetry.tracing import Tracing

    tracing = Tracing(sample_ratio=1.0, exporter=Discard())
    try:
        record = logging.getLogger("bridge.test").makeRecord(
            "bridge.test", logging.WARNING, __file__, 1, "inside", (), None
        )
        outside = json.loads(JsonFormatter().format(record))
        span = tracing.server_span("GET /x", {}, TRACEPARENT)
        with tracing.active(span):
            inside = json.loads(JsonFormatter().format(record))
        ids = span.get_span_context()
        with tracing.unsampled((UNSAMPLED, None)):  # a dropped trace: the ids passed on
            dropped = json.loads(JsonFormatter().format(record))
    finally:
        tracing.close()
    assert "trace_id" not in outside
    assert inside["trace_id"] == CALLER_TRACE and inside["span_id"] == f"{ids.span_id:016x}"
    assert dropped["trace_id"] == CALLER_TRACE and dropped["span_id"] == CALLER_SPAN


def test_the_configured_sampler_decides_once_on_a_callers_trace(monkeypatch):
    from bridge.telemetry.tracing import Tracing

    follows = Tracing(sample_ratio=1.0, exporter=Discard())
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")  # keeps what a caller dropped
    ignores = Tracing(exporter=Discard())
    try:
        assert follows.dropped(UNSAMPLED, "vendor=1") == (UNSAMPLED, "vendor=1")
        assert follows.dropped(TRACEPARENT, None) is None
        assert ignores.dropped(UNSAMPLED, None) is None
        # a call no frontend request carries decides in the pipeline, and passes on the same
        telemetry = Telemetry(tracing=follows)
        call = telemetry.call_begun("x", CallOrigin("cli", traceparent=UNSAMPLED))
        with telemetry.upstream_call(call, "up", "openapi", "x") as passed:
            assert passed == (UNSAMPLED, None) and call is not None and call.span is None
    finally:
        follows.close()
        ignores.close()


def test_a_new_trace_a_ratio_keeps_is_begun_with_the_trace_id_it_was_kept_for():
    from bridge.telemetry.tracing import Tracing

    tracing = Tracing(sample_ratio=0.5, exporter=Discard())
    telemetry = Telemetry(tracing=tracing)
    try:
        kept = []
        for _ in range(200):
            if tracing.dropped(None, None) is None:  # a frontend's request
                kept.append(tracing.server_span("GET /x", {}))
            call = telemetry.call_begun("x", None)  # a call no frontend request carries
            assert call is not None
            if call.passed is None:
                tracing.call_ended(call, "x", {}, None)
                kept.append(call.span)
        # the ratio's test holds on the trace ids the spans got: the low 64 bits under half
        ids = [span.get_span_context().trace_id for span in kept if span is not None]
        assert 100 < len(ids) < 300 and all(i & ((1 << 64) - 1) < 1 << 63 for i in ids)
    finally:
        tracing.close()


async def test_a_kept_call_no_frontend_carries_records_its_pipeline_upstream_and_stage_spans():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from bridge.telemetry.tracing import Tracing
    from tests.fakes import FakeUpstream

    config = {"store": {"path": ":memory:"}, "invoke": {"inline_result_limit": 256}}
    bridge = Bridge(parse_config(config), extra_upstreams=[FakeUpstream(name="fake")])
    await bridge.start()
    exporter = InMemorySpanExporter()
    bridge.invoker.telemetry = telemetry = Telemetry(
        tracing=Tracing(sample_ratio=0.0, exporter=exporter)  # a caller's sampled flag decides
    )
    try:
        origin = CallOrigin("cli", traceparent=TRACEPARENT)
        result = await bridge.invoker.invoke(
            "fake__echo", {"text": "x" * 600}, surface="default", origin=origin
        )
        assert not result.is_error
        await telemetry.aclose()
    finally:
        await bridge.close()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"execute_tool fake__echo", "execute_tool echo", "persist"}
    call, upstream, persist = (
        spans[name] for name in ("execute_tool fake__echo", "execute_tool echo", "persist")
    )
    assert {f"{s.context.trace_id:032x}" for s in spans.values()} == {CALLER_TRACE}
    assert call.parent is not None and f"{call.parent.span_id:016x}" == CALLER_SPAN
    assert upstream.parent == persist.parent == call.context
    assert call.start_time <= upstream.start_time and upstream.end_time <= call.end_time
    assert call.attributes["gen_ai.tool.name"] == "fake__echo"
    assert call.attributes["bridge.tool.version"] == 1


def test_a_span_is_handed_to_the_exporter_once_as_it_was_when_it_ended():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from bridge.telemetry.tracing import Tracing, failed

    exporter = InMemorySpanExporter()
    tracing = Tracing(sample_ratio=1.0, exporter=exporter)
    try:
        span = tracing.server_span("GET /x", {"url.path": "/x"}, TRACEPARENT)
        span.set_attributes({"http.response.status_code": 200, "odd": object()})
        failed(span, "500")
        span.update_name("GET /{x}")
        span.end()
        assert not span.is_recording()
        span.set_attribute("late", 1)
        span.update_name("late")
        span.end()
    finally:
        tracing.close()
    [ended] = exporter.get_finished_spans()
    assert ended.name == "GET /{x}" and f"{ended.context.trace_id:032x}" == CALLER_TRACE
    assert ended.parent is not None and ended.parent.is_remote
    assert dict(ended.attributes) == {
        "url.path": "/x",
        "http.response.status_code": 200,
        "error.type": "500",
    }
    assert ended.status.status_code is StatusCode.ERROR and ended.start_time <= ended.end_time
