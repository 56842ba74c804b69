"""The span export child: the spans a bridge ends reach the OTLP receiver on loopback through
it, every one of them when the bridge stops at once (an enum's attribute as its value; a message
the child cannot read is logged through the bridge and skipped), and a child that dies costs its
spans (counted, said once) but no call."""

from __future__ import annotations

import asyncio
import enum
import logging

from opentelemetry.trace import Status, StatusCode

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.telemetry import Telemetry
from bridge.telemetry.tracing import Tracing
from tests.fakes import FakeUpstream
from tests.servers import serve_asgi
from tests.telemetry.otlp_receiver import Receiver

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Kind(enum.StrEnum):
    ODD = "odd"


async def test_every_span_ended_reaches_the_collector_through_the_child_when_the_bridge_stops(
    caplog,
):
    receiver = Receiver()
    async with serve_asgi(receiver) as otlp:
        tracing = Tracing(otlp, "bridge-x", 1.0)
        assert tracing.child is not None
        # an enum's value goes as its base type's (the child reads built-in types only) ...
        tracing.server_span("odd", {"bridge.kind": Kind.ODD, "bridge.x": object()}).end()
        await asyncio.to_thread(tracing.provider.force_flush)
        # ... and a message the child cannot read costs that message alone
        assert tracing.child._send([Kind.ODD])
        parent = tracing.server_span("GET /x", {"url.path": "/x"}, TRACEPARENT, "vendor=1")
        for i in range(700):  # more than a batch; stopped at once, nothing is left behind
            span = tracing.server_span(f"span {i}", {"bridge.index": i, "bridge.even": i % 2 == 0})
            if i == 0:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
        parent.end()
        await asyncio.to_thread(tracing.close)
        assert tracing.child.process.poll() == 0  # the child stopped with the bridge
    # the child's warning is a record of the bridge's, in the bridge's log format
    dropped = [r for r in caplog.records if "a batch of spans is dropped" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].name == "bridge.telemetry", caplog.text
    assert dropped[0].levelno == logging.WARNING
    assert len(receiver.spans) == 702 and {s.service for s in receiver.spans} == {"bridge-x"}
    got = {s.name: s for s in receiver.spans}
    assert got["odd"].attributes == {"bridge.kind": "odd"}
    assert got["span 7"].attributes == {"bridge.index": 7, "bridge.even": False}
    assert got["span 0"].error and not got["span 1"].error
    request = got["GET /x"]
    assert (request.trace_id, request.parent_id) == (TRACEPARENT[3:35], TRACEPARENT[36:52])
    assert request.kind == 2 and request.attributes == {"url.path": "/x"}


async def test_a_child_that_died_loses_its_spans_says_so_once_and_breaks_no_call(caplog):
    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}), extra_upstreams=[FakeUpstream(name="fake")]
    )
    await bridge.start()
    # a collector that is never reached: the child is gone before it exports anything
    tracing = Tracing("http://127.0.0.1:9", "bridge", 1.0)
    assert tracing.child is not None
    bridge.invoker.telemetry = telemetry = Telemetry(tracing=tracing)
    tracing.child.process.kill()
    tracing.child.process.wait()
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.telemetry"):
            for _ in range(2):
                result = await bridge.invoker.invoke("fake__echo", {"text": "x"}, surface="default")
                assert not result.is_error and result.status == "succeeded"
                await asyncio.to_thread(tracing.provider.force_flush)
        warned = [r for r in caplog.records if "span export child stopped" in r.getMessage()]
        assert len(warned) == 1
        assert tracing.child.lost == 4  # two calls of two spans each
        body, _ = telemetry.metrics.render()
        assert b"bridge_trace_spans_lost 4.0" in body
    finally:
        await telemetry.aclose()
        await bridge.close()
