"""The IETF A2T draft projections, both directions: flat parameters and when they are lossless,
the drafts' sloppy example shapes, invocations and their errors' pointers."""

from __future__ import annotations

import math

import pytest

from bridge.model import ToolError, ToolResult
from bridge.translate.ietf import (
    DRAFT_INT_MAX,
    INT_UNBOUNDED,
    flat_parameters,
    output_parameters,
    parse_invocation,
    parse_invocation_response,
    parse_signature,
    render_invocation,
    render_outputs,
    render_signature,
    schema_from_parameters,
)
from bridge.translate.wire import WireFormatError


def test_flat_schemas_round_trip_losslessly():
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City", "maxLength": 80},
            "nights": {"type": "integer", "minimum": 1, "maximum": 30, "default": 2},
            "count": {"type": "integer"},
            "pets": {"type": "boolean"},
            "cabin": {
                "type": "string",
                "enum": ["ECONOMY", "BUSINESS"],
                "x-enum-descriptions": {"ECONOMY": "cheap"},
            },
        },
        "required": ["city", "cabin"],
    }
    params, lossless = flat_parameters(schema)
    assert lossless
    by_name = {p["name"]: p for p in params}
    assert (
        by_name["count"]["max"] == INT_UNBOUNDED
        and "maximum" not in schema_from_parameters(params)[0]["properties"]["count"]
    )
    assert by_name["nights"] == {
        "id": "nights",
        "name": "nights",
        "type": "int",
        "max": 30,
        "min": 1,
        "default": 2,
        "required": False,
    }
    rebuilt, ids = schema_from_parameters(params)
    assert rebuilt["properties"] == schema["properties"] and sorted(rebuilt["required"]) == sorted(
        schema["required"]
    )
    assert ids == {n: n for n in schema["properties"]}


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "number"},
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "properties": {"x": {"type": "string"}}},
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    ],
)
def test_inexpressible_properties_are_left_out_and_flagged(prop):
    params, lossless = flat_parameters(
        {"type": "object", "properties": {"ok": {"type": "string"}, "other": prop}}
    )
    assert [p["name"] for p in params] == ["ok"] and not lossless


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "string", "format": "date"},
        {"type": ["string", "null"]},
        {"type": "string", "title": "Text"},
        {"oneOf": [{"const": "A", "description": "first"}, {"const": "B"}]},
    ],
)
def test_lossy_but_expressible_properties_are_listed(prop):
    params, lossless = flat_parameters({"type": "object", "properties": {"p": prop}})
    assert len(params) == 1 and not lossless
    if "oneOf" in prop:
        assert params[0]["allowed-values"] == [{"name": "A", "description": "first"}, {"name": "B"}]


def test_signature_carries_the_full_schema_only_when_needed():
    base = dict(
        tool_id="0479a45d-ad0a-49d4-94db-75edf00d2ca4",
        name="t",
        description="d" * 2500,
        version=2,
        current_version=3,
        tags=["a"],
        output_schema=None,
    )
    flat = render_signature(
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
        extension={},
        **base,
    )
    assert "input_schema" not in flat
    assert len(flat["description"]) == 1999 and flat["x-agent-tool"]["description"] == "d" * 2500
    nested = render_signature(
        input_schema={
            "type": "object",
            "properties": {"x": {"type": "object"}},
            "additionalProperties": False,
        },
        **base,
    )
    assert (
        nested["input_schema"]["additionalProperties"] is False and nested["input_parameters"] == []
    )
    assert nested["output_parameters"] == [
        {
            "id": "result",
            "name": "result",
            "type": "json",
            "description": "The tool's result: its structured content, or its text when it has none.",
        }
    ]


def test_parse_the_drafts_example_shapes():
    sig = {
        "toolId": "0479a45d-ad0a-49d4-94db-75edf00d2ca4",
        "name": "lookup_weather_by_city",
        "description": "Invoke this tool to lookup the weather for a given city.",
        "version": "1",  # shown as a string in the drafts
        "currentVersion": 1,
        "tags": ["system", "retrievals"],
        "input_parameters": [
            {
                "id": "city",
                "name": "City",
                "type": "string",
                "description": "The city for the weather lookup.",
            },
            {
                "id": "flight_class",
                "name": "Flight Class",
                "type": "enum",
                "description": "The cabin class",
                "allowed-values": {
                    "v": [
                        {"name": "ECONOMY", "description": "Least expensive cabin."},
                        {"name": "BUSINESS"},
                    ]
                },
            },
            {"id": "nights", "name": "Nights", "type": "int", "required": False},
            {"id": "note", "name": "Note"},  # type defaults to string
        ],
        "output_parameters": [
            {"id": "temp-fh", "name": "Temperature in Fahrenheit", "type": "int"}
        ],
    }
    tool = parse_signature(sig, base_url="http://vendor")
    assert (
        tool.native_id == sig["toolId"]
        and tool.name == "lookup_weather_by_city"
        and tool.tags == ["system", "retrievals"]
    )
    props = tool.input_schema["properties"]
    assert tool.input_schema["required"] == ["City", "Flight Class", "Note"]
    assert props["Flight Class"]["enum"] == ["ECONOMY", "BUSINESS"]
    assert props["Flight Class"]["x-enum-descriptions"] == {"ECONOMY": "Least expensive cabin."}
    assert props["Nights"] == {"type": "integer", "maximum": DRAFT_INT_MAX}
    assert props["Note"] == {"type": "string"}
    assert tool.external_mapping["parameter_ids"] == {
        "City": "city",
        "Flight Class": "flight_class",
        "Nights": "nights",
        "Note": "note",
    }
    assert tool.external_mapping["output_ids"] == {"Temperature in Fahrenheit": "temp-fh"}
    assert (tool.external_mapping["version"], tool.external_mapping["current_version"]) == (1, 1)


@pytest.mark.parametrize(
    ("sig", "pointer"),
    [
        ({"name": "x"}, "/toolId"),
        ({"toolId": "u"}, "/name"),
        ({"toolId": "u", "name": "x", "version": 0}, "/version"),
        (
            {"toolId": "u", "name": "x", "input_parameters": [{"type": "enum", "name": "e"}]},
            "/input_parameters/0/allowed-values",
        ),
        (
            {"toolId": "u", "name": "x", "input_parameters": [{"type": "string"}]},
            "/input_parameters/0/name",
        ),
    ],
)
def test_malformed_signatures_name_the_problem(sig, pointer):
    with pytest.raises(WireFormatError) as info:
        parse_signature(sig, base_url="http://vendor")
    assert info.value.pointer == pointer


def test_invocation_both_ways():
    body = render_invocation("t", {"City": "Omaha", "n": 2})
    assert body == {
        "name": "t",
        "input_parameters": [{"name": "City", "value": "Omaha"}, {"name": "n", "value": 2}],
    }
    assert parse_invocation(body, tool_names=("t",)) == {"City": "Omaha", "n": 2}
    assert parse_invocation(
        {"arguments": {"a": 1}, "input_parameters": [{"name": "b", "value": 2}]}
    ) == {"a": 1, "b": 2}
    for bad, pointer in (
        ([], ""),
        ({"name": "u", "input_parameters": []}, "/name"),
        ({}, "/input_parameters"),
        (
            {"input_parameters": [{"name": "a", "value": 1}, {"name": "a", "value": 2}]},
            "/input_parameters/1/name",
        ),
        ({"arguments": 3}, "/arguments"),
    ):
        with pytest.raises(WireFormatError) as info:
            parse_invocation(bad, tool_names=("t",))
        assert info.value.pointer == pointer


def test_outputs_and_envelope_round_trip():
    ok = ToolResult(
        result_id="r",
        invocation_id="i",
        status="succeeded",
        content=[{"type": "text", "text": "hi"}],
        structured_content={"temp": 80, "ratio": math.inf},
    )
    body = render_outputs(ok, {"type": "object", "properties": {"temp": {"type": "integer"}}})
    assert body["output_parameters"] == [{"name": "temp", "value": 80}]
    back = parse_invocation_response(body)
    assert back.content == ok.content and back.structured_content == {
        "temp": 80,
        "ratio": None,
    }  # JSON has no infinity
    failed = ToolResult(
        result_id="r",
        invocation_id="i",
        status="failed",
        is_error=True,
        error=ToolError(error_class="rate_limited", message="later", retry_after=2),
    )
    back = parse_invocation_response({"x-tool-result": failed.to_json()})
    assert (
        back.is_error and back.error.error_class == "rate_limited" and back.error.retry_after == 2
    )
    plain = parse_invocation_response({"output_parameters": [{"name": "Temperature", "value": 80}]})
    assert plain.structured_content == {"Temperature": 80}
    text = render_outputs(
        ToolResult(
            result_id="r",
            invocation_id="i",
            status="succeeded",
            content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        ),
        None,
    )
    assert text["output_parameters"] == [{"name": "result", "value": "a\nb"}]


def test_an_output_property_of_several_types_is_json():
    # OpenAPI 3.0's `nullable` becomes ["string", "null"]; the type list was looked up as a dict
    # key and every listing of such a tool answered 500
    params = output_parameters(
        {
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"type": ["integer"]},
                "c": {"type": ["string", "integer"]},
                "d": {"type": "string"},
            },
        }
    )
    assert [p["type"] for p in params] == ["json", "int", "json", "string"]
