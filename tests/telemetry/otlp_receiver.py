"""An OTLP/HTTP trace receiver on loopback for the tests, decoding the protobuf with
opentelemetry-proto."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.servers import read_body


@dataclass
class Span:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    error: bool


def _value(any_value: Any) -> Any:
    return (
        getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None
    )


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.paths.append(scope["path"])
        request = ExportTraceServiceRequest()
        request.ParseFromString(await read_body(receive))
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Span(
                            resource["service.name"],
                            span.name,
                            span.kind,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                            span.status.code == 2,
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def one(self, service: str, name: str) -> Span:
        found = [s for s in self.spans if s.service == service and s.name == name]
        assert len(found) == 1, (service, name, [(s.service, s.name) for s in self.spans])
        return found[0]
