"""The audit stream as OTLP logs: an OTLP/HTTP receiver on loopback (decoding the protobuf with
opentelemetry-proto) gets one log record per call, with the audit file's keys as attributes, its
trace id, and no argument value or token; a collector that refuses the records loses them with
one warning and a count, and the calls go on."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from bridge.config import ConfigError, parse_config
from bridge.telemetry.audit import FIELDS
from bridge.telemetry.audit_otlp import OtlpAudit, logs_endpoint
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.serve.rest_env import TOKEN_ALL, config_with, narrow_surfaces, serving
from tests.servers import read_body, serve_asgi
from tests.telemetry.test_metrics import scrape, value

SECRET = "an-argument-value-never-audited"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class LogReceiver:
    """An OTLP/HTTP log receiver: POST /v1/logs, protobuf; `status` is what it answers."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.records: list[dict[str, Any]] = []
        self.requests: list[tuple[str, bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        self.requests.append((scope["path"], body))
        if self.status == 200 and scope["path"] == "/v1/logs":
            request = ExportLogsServiceRequest()
            request.ParseFromString(body)
            for resource_logs in request.resource_logs:
                resource = {a.key: _value(a.value) for a in resource_logs.resource.attributes}
                for scope_logs in resource_logs.scope_logs:
                    for item in scope_logs.log_records:
                        self.records.append(
                            {
                                "service": resource["service.name"],
                                "event": item.event_name,
                                "body": item.body.string_value,
                                "trace_id": item.trace_id.hex(),
                                "time": item.time_unix_nano,
                                **{a.key: _value(a.value) for a in item.attributes},
                            }
                        )
        answer = ExportLogsServiceResponse().SerializeToString()
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def test_the_logs_endpoint_comes_from_the_config_else_the_environment(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert logs_endpoint(None) is None
    with pytest.raises(ConfigError) as caught:
        parse_config({"audit": {"otlp": True}})
    assert "audit.otlp: is true, and no OTLP collector is named" in str(caught.value)
    assert logs_endpoint("http://127.0.0.1:4318/") == "http://127.0.0.1:4318/v1/logs"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert logs_endpoint(None) == "http://collector:4318/v1/logs"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:9000/ingest")
    assert logs_endpoint(None) == "http://logs:9000/ingest"


async def test_each_call_is_one_otlp_log_record_without_arguments_or_tokens():
    receiver = LogReceiver()
    async with serve_asgi(receiver) as collector:
        config = narrow_surfaces()
        config["server"]["tokens"][0]["name"] = "ci-robot"
        config = config_with(
            **config,
            audit={"otlp": True, "otlp_endpoint": collector},
            telemetry={"service_name": "bridge-under-test"},
        )
        echo = FakeUpstream(name="docs", tools=[tool("echo")])
        async with serving(echo, config=config) as served:
            call = {"tool": "docs__echo", "arguments": {"text": SECRET}}
            status, _, _ = await served.post(
                "/invoke", call, token=TOKEN_ALL, headers={"traceparent": TRACEPARENT}
            )
            assert status == 200
            bad = {"tool": "docs__echo", "arguments": {"text": 3}}
            assert (await served.post("/invoke", bad, token=TOKEN_ALL))[0] == 400
            async with http_client(served.base, HANDSHAKE, token=TOKEN_ALL) as client:
                assert not (await client.call("docs__echo", {"text": SECRET})).is_error
        # the bridge is closed: every record is sent
    assert {path for path, _ in receiver.requests} == {"/v1/logs"}
    assert all(
        SECRET.encode() not in body and TOKEN_ALL.encode() not in body
        for _, body in receiver.requests
    )
    rest, invalid, mcp = sorted(receiver.records, key=lambda r: r["time"])
    assert set(rest) - {"service", "event", "body"} <= set(FIELDS)
    assert rest["service"] == "bridge-under-test" and rest["event"] == "bridge.audit"
    assert rest["caller"] == "ci-robot" and rest["frontend"] == "rest"
    assert rest["tool"] == "docs__echo" and rest["upstream"] == "docs" and rest["version"] == 1
    assert rest["outcome"] == "ok" and rest["body"] == "call docs__echo ok"
    assert rest["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert isinstance(rest["duration_ms"], float) and isinstance(rest["upstream_ms"], float)
    assert invalid["outcome"] == invalid["error_class"] == "invalid_arguments"
    assert "upstream_ms" not in invalid  # it never reached the upstream
    assert mcp["frontend"] == "mcp"


async def test_records_a_collector_refuses_are_counted_and_warned_once(caplog):
    caplog.set_level(logging.WARNING, logger="bridge.audit")
    receiver = LogReceiver(status=503)
    async with serve_asgi(receiver) as collector:
        config = config_with(audit={"otlp": True, "otlp_endpoint": collector})
        async with serving(
            FakeUpstream(name="docs", tools=[tool("echo")]), config=config
        ) as served:
            audit = served.bridge.telemetry.otlp_audit
            assert isinstance(audit, OtlpAudit)
            for _ in range(3):
                status, _, _ = await served.post("/invoke", {"tool": "docs__echo", "arguments": {}})
                assert status == 200
                await audit.flush()  # now rather than within the second
            assert audit.dropped == 3
            assert value(await scrape(served), "bridge_audit_records_lost") == 3
    warned = [r for r in caplog.records if "cannot be sent" in r.getMessage()]
    assert len(warned) == 1 and "HTTP 503" in warned[0].getMessage()
