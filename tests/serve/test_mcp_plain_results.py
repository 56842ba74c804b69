"""A `tools/call` result of text blocks alone is put on the wire without the SDK's models
(bridge/serve/mcp_plain.py): in every protocol version, byte for byte what the SDK's
shaping makes of the `CallToolResult` `render_result` renders; any other result is left to the
SDK, and so is every result when the SDK shapes a probe in an unknown form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.server.lowlevel import Server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from bridge.model import ResultPersistence, ToolResult
from bridge.serve.mcp_plain import PlainResults
from bridge.serve.mcp_sdk import result_shaper
from bridge.translate.mcp_results import plain_result, render_result

VERSIONS = [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS]
SERVER = Server("a2t-bridge", version="0.1.0", title="Tool federation bridge")


def result(**fields: Any) -> ToolResult:
    values: dict[str, Any] = {
        "invocation_id": "inv_1",
        "result_id": "res_1",
        "status": "succeeded",
        "tool_id": "f10aac22-1646-5d6e-90ce-001211083813",
        "version": 3,
        "duration_ms": 14.039,
        "content": [{"type": "text", "text": "hi"}],
        "tool_name": "svc__echo",
    }
    return ToolResult(**{**values, **fields})


PLAIN = [
    result(),
    result(content=[{"type": "text", "text": 'hé ✓ \u2028 "q" \\ \x00'}]),
    result(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
    result(content=[]),
    result(tool_id=None, version=None, duration_ms=None),
    result(status="succeeded", content=[{"type": "text", "text": "not json {"}]),
    result(structured_content={"echo": {"text": "hé", "n": [1, 2.5, None, True]}}),
    result(content=[], structured_content={"temperature": 21.5, "unit": "°C"}),
    result(content=[{"type": "text", "text": '{"temperature": 21}'}]),  # structured for a schema
    result(
        meta={"vendor/trace": {"a": None, "b": [1.5]}},
        native_ref={"source": "mcp", "tool": "echo"},
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index", range(len(PLAIN)))
def test_a_plain_result_is_written_as_the_sdk_shapes_it(version: str, index: int) -> None:
    shape = result_shaper(SERVER)
    plain = PlainResults(shape)
    made = PLAIN[index]
    for output_schema in (None, {"type": "object"}):
        parts = plain_result(made, output_schema)
        assert parts is not None
        wire = plain(version, *parts)
        sdk = shape("tools/call", version, render_result(made, version, output_schema))
        assert wire is not None
        # the same fields, in the same order, down to the bytes the transports write
        assert json.dumps(wire) == json.dumps(sdk)


def test_other_results_are_left_to_the_sdk() -> None:
    upstream_meta = result(
        meta={"vendor/trace": {"a": float("inf")}}, native_ref={"source": "mcp", "tool": "echo"}
    )
    deep: dict[str, Any] = {}
    for _ in range(40):
        deep = {"d": deep}
    persisted = ResultPersistence(
        decision_id="dec_1", invocation_id="inv_1", persisted_ref={"ref": "res_1"}
    )
    others = [
        result(is_error=True),
        result(structured_content=[1, 2]),  # an array: text alone before 2026-07-28
        result(structured_content={"t": float("nan")}),  # which the SDK writes as null
        result(structured_content={"t": (1, 2)}),
        result(structured_content=deep),
        result(content=[{"type": "image", "data": "AAAA", "mimeType": "image/png"}]),
        result(content=[{"type": "text", "text": "hi", "annotations": {"priority": 1}}]),
        result(content=[{"type": "text", "text": 5}]),
        upstream_meta,
        result(persisted=persisted),
        result(duration_ms=float("nan")),
    ]
    for other in others:
        assert plain_result(other) is None, other
    # one JSON text block becomes the structured content of a tool listed with an output schema
    json_text = result(content=[{"type": "text", "text": "[21]"}])
    assert plain_result(json_text) is not None
    assert plain_result(json_text, {"type": "object"}) is None


def test_an_upstream_meta_of_reserved_keys_alone_keeps_a_result_plain() -> None:
    stamped = result(
        meta={"io.modelcontextprotocol/serverInfo": {"name": "echo", "version": "1"}},
        native_ref={"source": "mcp", "tool": "echo"},
    )
    parts = plain_result(stamped)
    assert parts is not None and list(parts[2]) == ["a2t-bridge/result"]


@pytest.mark.parametrize(
    "reshape",
    [
        lambda shaped: {**shaped, "ttlMs": {"hint": 5}},  # a field in no known form
        lambda shaped: {**shaped, "content": [{**shaped["content"][0], "annotations": {}}]},
        lambda shaped: {k: v for k, v in shaped.items() if k != "_meta"},
        lambda shaped: {**shaped, "_meta": {"first/stamp": {}, **shaped["_meta"]}},
        lambda shaped: {**shaped, "structuredContent": {"sieved": True}},
    ],
)
def test_a_probe_shaped_in_another_form_leaves_its_version_to_the_sdk(reshape: Any) -> None:
    shape = result_shaper(SERVER)
    plain = PlainResults(lambda method, version, made: reshape(shape(method, version, made)))
    assert plain(MODERN_PROTOCOL_VERSIONS[0], ["hi"], None, {"a2t-bridge/result": {}}) is None


def test_a_probe_the_sdk_refuses_leaves_its_version_to_the_sdk(caplog) -> None:
    def refuse(method: str, version: str, made: Any) -> dict[str, Any]:
        raise ValueError(f"{version} is not a known protocol version")

    plain = PlainResults(refuse)
    for _ in range(2):
        assert plain("2099-01-01", ["hi"], None, {"a2t-bridge/result": {}}) is None
    assert caplog.text.count("results of protocol 2099-01-01 are shaped by the SDK alone") == 1
