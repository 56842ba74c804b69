"""The a2t dialect projections: capabilities, tools, the three meta shapes, execute responses and
error codes."""

from __future__ import annotations

import pytest

from bridge.model import ToolDeclaration, ToolError, ToolResult
from bridge.translate.a2t import (
    error_class_of,
    error_code_of,
    parse_capabilities,
    parse_execute,
    parse_listing,
    parse_meta,
    parse_tool,
    render_execute,
    render_tool,
)
from bridge.translate.wire import WireFormatError

NEW_TOOL = {
    "name": "multiply",
    "description": "Multiply",
    "input_schema": {"type": "object"},
    "group_id": "math",
}


def test_capabilities_parse_endpoints_and_drop_zero_limits():
    caps = parse_capabilities(
        {
            "version": "1.0",
            "features": {"groups": True, "search": True, "dynamic_tools": False},
            "endpoints": {"tools": "/v2/tools", "groups": "/v2/groups"},
            "limits": {"max_tools_per_request": 50, "max_search_results": 0},
        }
    )
    assert (caps.tools, caps.groups, caps.limits) == (
        "/v2/tools",
        "/v2/groups",
        {"max_tools_per_request": 50},
    )
    assert (
        parse_capabilities(
            {"features": {"groups": False}, "endpoints": {"tools": "/t", "groups": "/g"}}
        ).groups
        is None
    )
    with pytest.raises(WireFormatError) as info:
        parse_capabilities({"endpoints": {}})
    assert info.value.pointer == "/endpoints/tools"


@pytest.mark.parametrize(
    "body",
    [
        {"result": "ok", "meta": {"type": "tools_added", "data": {"tools": [NEW_TOOL]}}},
        {"result": "ok", "meta": {"type": "tools_added", "tools": [NEW_TOOL]}},
        {"result": {"result": "ok", "meta": {"type": "tools_added", "tools": [NEW_TOOL]}}},
    ],
)
def test_three_meta_shapes(body):
    meta, result = parse_meta(body)
    assert (
        meta is not None
        and meta.type == "tools_added"
        and meta.tools == [NEW_TOOL]
        and result == "ok"
    )


def test_group_refresh_and_no_meta():
    meta, _ = parse_meta(
        {"result": 1, "meta": {"type": "group_refresh", "data": {"group_ids": ["a", "b"]}}}
    )
    assert meta.group_ids == ["a", "b"]
    meta, _ = parse_meta({"result": 1, "meta": {"type": "group_refresh", "group_ids": ["c"]}})
    assert meta.group_ids == ["c"]
    assert parse_meta({"result": {"meta": "not a notice"}}) == (None, {"meta": "not a notice"})


def test_execute_with_error_object_is_an_error_result():
    result, meta = parse_execute(
        {"result": None, "error": {"code": "tool_not_found", "message": "Tool not found: foo"}}
    )
    assert (
        result.is_error
        and result.error.error_class == "unknown_tool"
        and result.error.error_code == "tool_not_found"
    )
    assert meta is None
    result, _ = parse_execute({"result": {"celsius": 4}})
    assert (
        result.structured_content == {"celsius": 4}
        and result.content[0]["text"] == '{"celsius": 4}'
    )
    # a result of any JSON type keeps its type (the number 5 was passed on as the text "5"); text is text
    for value in (5, 2.5, True, [1, 2]):
        result, _ = parse_execute({"result": value})
        assert result.structured_content == value and type(result.structured_content) is type(value)
    assert parse_execute({"result": "five"})[0].structured_content is None
    assert parse_execute({"result": None})[0].structured_content is None


def test_error_codes_both_ways():
    assert (
        error_code_of("unknown_tool") == "tool_not_found" and error_code_of("timeout") == "timeout"
    )
    assert (
        error_class_of("execution_error") == "execution_failed"
        and error_class_of("rate_limited") == "rate_limited"
    )
    assert (
        error_class_of("unauthorized") == "credential_missing"
        and error_class_of("weird") == "execution_failed"
    )


def test_tool_and_execute_round_trip_keep_the_catalog_facts():
    decl = ToolDeclaration(
        tool_id="id",
        namespace="files",
        name="files__read",
        native_name="read",
        description="Read a file",
        tags=["fs"],
        external_mappings=[{"source": "mcp", "tool_name": "read"}],
        input_contract={
            "model_input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}
        },
    )
    wire = render_tool(decl)
    assert (wire["name"], wire["group_id"]) == ("files__read", "files")
    tool = parse_tool(wire, base_url="http://a")
    assert (
        tool.native_id == "files__read"
        and tool.description == "Read a file"
        and tool.tags == ["fs"]
    )
    assert tool.external_mapping["upstream_mappings"] == [{"source": "mcp", "tool_name": "read"}]
    assert tool.input_schema == decl.input_schema
    failed = ToolResult(
        result_id="r",
        invocation_id="i",
        status="failed",
        is_error=True,
        error=ToolError(error_class="dependency_unavailable", message="down", retry_after=1.5),
    )
    body = render_execute(failed)
    assert (
        body["result"] is None
        and body["error"]["code"] == "dependency_unavailable"
        and body["error"]["retry_after"] == 1.5
    )
    back, _ = parse_execute(body)
    assert back.error.error_class == "dependency_unavailable" and back.error.retry_after == 1.5


def test_listing_treats_missing_total_as_unknown():
    assert parse_listing({"tools": [NEW_TOOL]}, "tools") == ([NEW_TOOL], None)
    assert parse_listing({"tools": None, "total": 0}, "tools") == ([], None)
    with pytest.raises(WireFormatError):
        parse_listing({"tools": {}}, "tools")
