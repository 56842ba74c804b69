"""Equal schemas of an OpenAPI document's tools held once (adapters/openapi/shared.py): the tools,
and the catalog's declarations, share one object for each distinct schema; what the frontends
and translators make of a schema is a copy of their own."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import adapters.openapi.operations as operations
from adapters.openapi.bounds import OUTPUT_MAX_VALUES
from adapters.openapi.config import OpenAPIConfig
from adapters.openapi.operations import map_operations
from adapters.openapi.shared import SharedSchemas
from adapters.openapi.upstream import OpenAPIUpstream
from bridge.catalog import Catalog
from bridge.store import Store
from bridge.translate import a2t, ietf, providers
from bridge.translate.mcp import render_tool
from tests.adapters.test_openapi import _document
from tests.adapters.test_openapi_bounds import _linked, _parse

# each parent reaches the same entity, by a path parameter of its own name (Microsoft Graph's
# /users/{user-id}/events, /groups/{group-id}/events, ...)
PARENTS = ("users", "groups", "sites", "teams")


def _entity_paths() -> dict[str, Any]:
    entity = {"$ref": "#/components/schemas/Obj0"}
    answer = {"200": {"description": "ok", "content": {"application/json": {"schema": entity}}}}
    paths: dict[str, Any] = {}
    for parent in PARENTS:
        param = [
            {"name": f"{parent}-id", "in": "path", "required": True, "schema": {"type": "string"}}
        ]
        paths[f"/{parent}/{{{parent}-id}}/obj"] = {
            "get": {"operationId": f"{parent}.get", "parameters": param, "responses": answer},
            "patch": {
                "operationId": f"{parent}.update",
                "parameters": param,
                "responses": answer,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": entity}},
                },
            },
        }
    return paths


def _mapped(tmp_path) -> tuple[Any, list[Any]]:
    doc = _parse(tmp_path, _document(_entity_paths(), components={"schemas": _linked(60)}))
    return doc, map_operations(doc, base_url="http://127.0.0.1:1")[1]


def _declared(doc: Any, tools: list[Any]) -> dict[str, Any]:
    catalog = Catalog(Store())
    catalog.add_upstream(
        OpenAPIUpstream(OpenAPIConfig(name="svc", spec=doc.source, base_url="http://127.0.0.1:1"))
    )
    catalog.apply_tools("svc", tools)
    return {d.native_id: d for d in catalog.declarations()}


def test_operations_answering_one_big_schema_hold_one_object(tmp_path, monkeypatch):
    doc, tools = _mapped(tmp_path)
    outputs = [t.output_schema for t in tools]
    assert len(outputs) == 2 * len(PARENTS) and all(o is outputs[0] for o in outputs)
    # a schema past the bound, cut to its top level: each property reduced to its type and
    # description, in one object too
    assert "$defs" not in outputs[0] and "link_1" in outputs[0]["properties"]
    # the PATCH bodies differ in their path parameter only: the rest of them is shared
    patches = [t.input_schema for t in tools if t.native_id.endswith(".update")]
    assert len({id(p) for p in patches}) == len(PARENTS)
    assert all(p["properties"]["link_1"] is patches[0]["properties"]["link_1"] for p in patches)
    assert all(
        p["properties"]["users-id"] is patches[0]["properties"]["users-id"]
        for p in patches
        if "users-id" in p["properties"]
    )

    declared = _declared(doc, tools)
    assert all(d.output_schema is outputs[0] for d in declared.values())
    assert all(declared[t.native_id].input_schema is t.input_schema for t in tools)

    # held once, written out as before: every schema as the mapping makes it without sharing
    monkeypatch.setattr(operations.SharedSchemas, "intern", lambda self, value: value)
    _, apart = _mapped(tmp_path)
    assert [json.dumps([t.input_schema, t.output_schema]) for t in apart] == [
        json.dumps([t.input_schema, t.output_schema]) for t in tools
    ]
    assert len({id(t.output_schema) for t in apart}) == len(apart)


def test_a_translated_copy_changed_leaves_the_other_tools_as_they_were(tmp_path):
    doc, tools = _mapped(tmp_path)
    declared = _declared(doc, tools)
    first, second = declared["users.update"], declared["groups.update"]
    shared_output = second.output_schema
    before = json.dumps([second.input_schema, second.output_schema])

    tool = render_tool(first, "2025-06-18")
    tool.input_schema["properties"] = {}
    tool.input_schema["required"] = ["x"]
    assert tool.output_schema is not None
    tool.output_schema.clear()
    for made in (
        providers.to_openai(first),
        providers.to_openai(first, strict=True, omitted=[]),
        providers.to_anthropic(first),
        providers.to_gemini(first),
    ):
        params = (
            made.get("input_schema") or made.get("parameters") or made["function"]["parameters"]
        )
        for prop in params["properties"].values():
            prop["description"] = "changed"
        params["properties"].clear()
    rendered = a2t.render_tool(first)
    ietf.render_declaration(first)
    json.dumps(rendered)

    assert json.dumps([second.input_schema, second.output_schema]) == before
    assert second.output_schema is shared_output and first.output_schema is shared_output
    assert json.dumps(first.output_schema) == json.dumps(shared_output)


def test_shared_schemas_hold_equal_values_once():
    shared = SharedSchemas()
    a = shared.intern({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}})
    b = shared.intern({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}})
    assert a is b
    # an equal part of another schema is the one held
    c = shared.intern({"type": "array", "items": {"type": "integer", "minimum": 0}})
    assert c["items"] is a["properties"]["n"]
    # a value whose every part is new is kept as it is
    fresh = {"type": "string", "enum": ["x", "y"]}
    assert shared.intern(fresh) is fresh and shared.intern(dict(fresh)) is fresh


def test_shared_schemas_tell_apart_what_json_tells_apart():
    shared = SharedSchemas()
    values = [
        {"const": 1},
        {"const": 1.0},
        {"const": True},
        {"const": 0.0},
        {"const": -0.0},
        {"const": "1"},
        {"const": None},
        {"const": [1]},
        {"const": {"1": 1}},
        {"a": 1, "b": 2},
        {"b": 2, "a": 1},
    ]
    held = [shared.intern(json.loads(json.dumps(v))) for v in values]
    assert [json.dumps(h) for h in held] == [
        json.dumps(v) for v in values
    ]  # types, and the order of keys
    assert len({id(h) for h in held}) == len(values)
    assert len(shared) == len(values) + 2  # and the [1] and {"1": 1} inside them
    assert shared.intern(3) == 3 and shared.intern(None) is None
    assert OUTPUT_MAX_VALUES == 5_000  # the bound the entity above is past


def test_the_parts_an_operation_builds_for_itself_go_once_it_is_mapped(tmp_path):
    # 60 operations, each with a query parameter written out in full (an object of 200 fields):
    # each operation's schema is built anew, and its tool holds the one equal to the first; the
    # others go as soon as their operation is mapped (the peak stays near 0.1 MB; kept until the
    # whole document was mapped, they would peak at 4 MB here, not held by the tools)
    fields = {
        "type": "object",
        "properties": {
            f"field_{k}": {"type": "string", "description": f"field {k}"} for k in range(200)
        },
    }
    paths = {
        f"/things{i}": {
            "get": {
                "operationId": f"list{i}",
                "parameters": [
                    {
                        "name": "filter",
                        "in": "query",
                        "style": "deepObject",
                        "schema": json.loads(json.dumps(fields)),
                    }
                ],
                "responses": {"204": {"description": "none"}},
            }
        }
        for i in range(60)
    }
    doc = _parse(tmp_path, _document(paths))
    tracemalloc.start()
    try:
        _, tools = map_operations(doc, base_url="http://127.0.0.1:1")
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(
        t.input_schema["properties"]["filter"] is tools[0].input_schema["properties"]["filter"]
        for t in tools
    )
    assert peak - held < 1_000_000, (held, peak)
