"""Schema size bounds of OpenAPI tools (adapters/openapi/bounds.py): a large referenced schema is
held once for all the tools that use it, and an input schema past INPUT_MAX_VALUES is cut to its
top level without refusing any argument the whole schema accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import adapters.openapi.operations as operations
from adapters.openapi.bounds import INPUT_MAX_VALUES, bounded_input_schema
from adapters.openapi.config import OpenAPIConfig
from adapters.openapi.operations import map_operations
from adapters.openapi.spec import parse_document
from adapters.openapi.upstream import OpenAPIUpstream
from bridge.catalog import Catalog
from bridge.store import Store
from tests.adapters.test_openapi import _document, _values, _write, bridge_for, call, upstream_of


def _linked(count: int) -> dict[str, Any]:
    """`count` objects, each of 30 fields naming the next three (Microsoft Graph's entities name
    one another through their navigation properties)."""

    def obj(i: int) -> dict[str, Any]:
        props: dict[str, Any] = {"id": {"type": "string"}}
        props.update({f"field_{k}": {"type": "string", "maxLength": 40} for k in range(30)})
        props.update(
            {
                f"link_{j}": {"anyOf": [{"$ref": f"#/components/schemas/Obj{j}"}, {"type": "null"}]}
                for j in range(i + 1, min(i + 4, count))
            }
        )
        return {"type": "object", "properties": props, "additionalProperties": False}

    return {f"Obj{i}": obj(i) for i in range(count)}


def _parse(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = Path(_write(tmp_path, doc))
    return parse_document(path.read_text(), path.as_uri(), str(path))


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def test_a_large_referenced_schema_is_one_object_for_every_tool(tmp_path):
    # 60 operations taking the same large schema: each tool's `$defs` holds that one object, in
    # the mapping and in the catalog's declarations alike (not 60 copies)
    shared = {
        "type": "object",
        "properties": {
            f"f{k}": {"type": "string", "description": f"field {k}"} for k in range(200)
        },
    }
    paths = {
        f"/things{i}": {
            "post": {
                "operationId": f"make{i}",
                "requestBody": _body(
                    {
                        "type": "object",
                        "properties": {
                            "spec": {"$ref": "#/components/schemas/Shared"},
                            "n": {"type": "integer"},
                        },
                    }
                ),
            }
        }
        for i in range(60)
    }
    doc = _parse(tmp_path, _document(paths, components={"schemas": {"Shared": shared}}))
    _, tools = map_operations(doc, base_url="http://127.0.0.1:1")
    defs = [tool.input_schema["$defs"]["Shared"] for tool in tools]
    assert len(defs) == 60 and all(d is defs[0] for d in defs)
    assert defs[0]["properties"]["f7"] == {"type": "string", "description": "field 7"}

    catalog = Catalog(Store())
    catalog.add_upstream(
        OpenAPIUpstream(OpenAPIConfig(name="svc", spec=doc.source, base_url="http://127.0.0.1:1"))
    )
    catalog.apply_tools("svc", tools)
    declared = [d.input_schema["$defs"]["Shared"] for d in catalog.declarations()]
    assert len(declared) == 60 and all(d is defs[0] for d in declared)


def _full_and_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any], name: str
) -> tuple[dict, dict]:
    parsed = _parse(tmp_path, doc)
    cut = {
        t.name: t.input_schema for t in map_operations(parsed, base_url="http://127.0.0.1:1")[1]
    }[name]
    monkeypatch.setattr(operations, "bounded_input_schema", lambda schema, size=None: schema)
    full = {
        t.name: t.input_schema for t in map_operations(parsed, base_url="http://127.0.0.1:1")[1]
    }[name]
    return full, cut


BODY = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "mode": {"oneOf": [{"const": "a"}, {"const": "b"}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "data": {"$ref": "#/components/schemas/Obj0"},
        "either": {"oneOf": [{"$ref": "#/components/schemas/Obj1"}, {"type": "string"}]},
        "spread": {
            "type": "object",
            "properties": {f"p{k}": {"type": "integer", "minimum": k} for k in range(300)},
        },
    },
}


def _graph_like() -> dict[str, Any]:
    return _document(
        {
            "/things/{id}": {
                "patch": {
                    "operationId": "updateThing",
                    "requestBody": _body(BODY),
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "$select",
                            "in": "query",
                            "schema": {"type": "array", "items": {"enum": ["id", "name"]}},
                        },
                    ],
                }
            }
        },
        components={"schemas": _linked(40)},
    )


def test_an_input_schema_of_objects_naming_one_another_is_cut_to_its_top_level(
    tmp_path, monkeypatch
):
    full, cut = _full_and_cut(tmp_path, monkeypatch, _graph_like(), "updateThing")
    assert _values(full) > 3 * INPUT_MAX_VALUES and "$defs" in full
    assert (
        _values(cut) <= INPUT_MAX_VALUES and "$defs" not in cut and '"$ref"' not in json.dumps(cut)
    )
    jsonschema.Draft202012Validator.check_schema(cut)
    # the top level as it was: every property, the required ones, no others taken
    assert list(cut["properties"]) == list(full["properties"])
    assert cut["required"] == ["id", "name"] and cut["additionalProperties"] is False
    assert "left out as too large" in cut["description"]
    for small in (
        "id",
        "query__select",
        "name",
        "mode",
        "tags",
        "spread",
    ):  # whole: they fit and refer to nothing
        assert cut["properties"][small] == full["properties"][small], small
    # a large object keeps its own properties, each cut in turn; a oneOf is cut whole
    data = cut["properties"]["data"]
    assert (
        data["type"] == "object"
        and "additionalProperties" not in data
        and "left out as too large" in data["description"]
    )
    assert data["properties"]["field_1"] == {"type": "string", "maxLength": 40}
    assert data["properties"]["link_1"] == {"description": "its schema is left out as too large"}
    assert cut["properties"]["either"] == {"description": "its schema is left out as too large"}

    whole, bounded = jsonschema.Draft202012Validator(full), jsonschema.Draft202012Validator(cut)
    accepted = [
        {"id": "1", "name": "n"},
        {"id": "1", "name": "n", "mode": "b", "tags": ["x"], "spread": {"p3": 3}, "either": "text"},
        {
            "id": "1",
            "name": "n",
            "data": {"id": "o", "field_1": "x", "link_1": {"field_2": "y", "link_3": None}},
        },
        {"id": "1", "name": "n", "either": {"id": "o1", "link_2": {"link_4": {"field_0": "deep"}}}},
        {"id": "1", "name": "n", "query__select": ["id"]},
    ]
    for args in accepted:  # what the whole schema accepts, the cut one does
        assert whole.is_valid(args) and bounded.is_valid(args), args
    refused_by_both = [
        {"name": "n"},  # a required parameter missing
        {"id": "1"},  # a required body field missing
        {"id": "1", "name": "n", "unknown": 1},  # no such property
        {"id": "1", "name": "x" * 21},  # a kept constraint
        {"id": "1", "name": "n", "mode": "c"},
        {"id": "1", "name": "n", "spread": {"p9": 1}},
    ]
    for args in refused_by_both:
        assert not whole.is_valid(args) and not bounded.is_valid(args), args
    assert not whole.is_valid(
        {"id": "1", "name": "n", "data": {"field_1": 5}}
    ) and not bounded.is_valid({"id": "1", "name": "n", "data": {"field_1": 5}})
    # a value refused only below a cut property goes to the server, which judges it
    nested = {"id": "1", "name": "n", "data": {"link_1": {"field_2": 5}}}
    assert not whole.is_valid(nested) and bounded.is_valid(nested)


def test_a_small_input_schema_is_the_same_object():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    assert bounded_input_schema(schema) is schema


def test_a_top_level_that_cannot_be_cut_becomes_an_open_object():
    # ten thousand small properties: even cut to their types they are too many
    many = {
        "type": "object",
        "properties": {
            f"p{i}": {"type": "string", "minLength": 1} for i in range(INPUT_MAX_VALUES)
        },
        "additionalProperties": False,
        "required": ["p1"],
    }
    cut = bounded_input_schema(many)
    assert cut["type"] == "object" and set(cut) == {"type", "description"}
    assert jsonschema.Draft202012Validator(cut).is_valid({"p1": "x", "p2": ""})
    assert jsonschema.Draft202012Validator(many).is_valid(
        {"p1": "x"}
    ) and jsonschema.Draft202012Validator(cut).is_valid({"p1": "x"})


async def test_a_cut_input_schema_still_checks_its_top_level_through_the_bridge(tmp_path):
    async with bridge_for(
        _write(tmp_path, _graph_like()),
        base_url="http://127.0.0.1:1",
        validate_spec="off",
        retries={"count": 0},
    ) as bridge:
        decl = bridge.catalog.resolve("svc__updateThing")
        assert decl is not None and "$defs" not in decl.input_schema
        assert _values(decl.input_schema) <= INPUT_MAX_VALUES
        refused = await call(bridge, "updateThing", {"id": "1", "name": "n", "unknown": 1})
        assert refused.error is not None and refused.error.error_class == "invalid_arguments"
        # arguments only the cut part would refuse are sent (here to a closed port): the API judges them
        sent = await call(
            bridge, "updateThing", {"id": "1", "name": "n", "data": {"link_1": {"field_2": 5}}}
        )
        assert sent.error is not None and sent.error.error_class == "dependency_unavailable"
        assert (await upstream_of(bridge).health())["operations"] == 1


def test_a_large_body_named_as_one_property_keeps_its_fields(tmp_path, monkeypatch):
    # Microsoft Graph's `PATCH /users/{id}` takes the user, `allOf: [entity, {...its fields}]`,
    # as one `body` property: cut whole, it told nothing of the user's fields
    user = {
        "allOf": [
            {"$ref": "#/components/schemas/Entity"},
            {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "maxLength": 5},
                    "manager": {"$ref": "#/components/schemas/Obj0"},
                    **{
                        f"field_{k}": {"type": "string", "description": f"field {k}"}
                        for k in range(150)
                    },
                },
            },
        ]
    }
    schemas = {
        **_linked(40),
        "Entity": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
        "User": user,
    }
    doc = _document(
        {
            "/users/{id}": {
                "patch": {
                    "operationId": "updateUser",
                    "requestBody": _body({"$ref": "#/components/schemas/User"}),
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                }
            }
        },
        components={"schemas": schemas},
    )
    full, cut = _full_and_cut(tmp_path, monkeypatch, doc, "updateUser")
    assert _values(cut) <= INPUT_MAX_VALUES and '"$ref"' not in json.dumps(cut)
    body = cut["properties"]["body"]
    assert (
        body["type"] == "object"
        and body["required"] == ["id", "name"]
        and "additionalProperties" not in body
    )
    assert set(body["properties"]) == {"id", "name", "manager", *(f"field_{k}" for k in range(150))}
    assert body["properties"]["name"] == {"type": "string", "maxLength": 5}  # small: whole
    assert body["properties"]["manager"] == {"description": "its schema is left out as too large"}
    whole, bounded = jsonschema.Draft202012Validator(full), jsonschema.Draft202012Validator(cut)
    for args in (
        {"id": "1", "body": {"id": "u", "name": "ann"}},
        {
            "id": "1",
            "body": {
                "id": "u",
                "name": "ann",
                "field_3": "x",
                "manager": {"id": "m", "link_1": None},
            },
        },
    ):
        assert whole.is_valid(args) and bounded.is_valid(args), args
    for args in (
        {"id": "1", "body": {"name": "ann"}},
        {"id": "1", "body": {"id": "u", "name": "toolong"}},
        {"id": "1"},
    ):
        assert not whole.is_valid(args) and not bounded.is_valid(args), args
    nested = {"id": "1", "body": {"id": "u", "name": "ann", "manager": {"field_1": 5}}}
    assert not whole.is_valid(nested) and bounded.is_valid(nested)  # left to the API


def test_a_required_list_or_object_cut_to_its_top_level_still_needs_a_value(tmp_path, monkeypatch):
    # a required array or object parameter gets minItems / minProperties 1 (an empty one is sent
    # as no parameter at all); cut, it kept only its type, and `[]` was sent as nothing
    doc = _document(
        {
            "/things/{id}": {
                "patch": {
                    "operationId": "updateThing",
                    "requestBody": _body(BODY),
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "ids",
                            "in": "query",
                            "required": True,
                            "schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Obj1"},
                            },
                        },
                        {
                            "name": "filter",
                            "in": "query",
                            "style": "deepObject",
                            "required": True,
                            "schema": {
                                "type": "object",
                                "properties": {"o": {"$ref": "#/components/schemas/Obj2"}},
                            },
                        },
                    ],
                }
            }
        },
        components={"schemas": _linked(40)},
    )
    full, cut = _full_and_cut(tmp_path, monkeypatch, doc, "updateThing")
    assert (
        full["properties"]["ids"]["minItems"] == 1
        and full["properties"]["filter"]["minProperties"] == 1
    )
    ids, filters = cut["properties"]["ids"], cut["properties"]["filter"]
    assert ids == {
        "description": "its schema is left out as too large",
        "type": "array",
        "minItems": 1,
    }
    assert (
        filters["minProperties"] == 1
        and filters["properties"]["o"]["description"] == "its schema is left out as too large"
    )
    whole, bounded = jsonschema.Draft202012Validator(full), jsonschema.Draft202012Validator(cut)
    good = {"id": "1", "name": "n", "ids": [{"id": "a"}], "filter": {"o": {"id": "b"}}}
    assert whole.is_valid(good) and bounded.is_valid(good)
    for empty in ({"ids": []}, {"filter": {}}):
        assert not whole.is_valid({**good, **empty}) and not bounded.is_valid({**good, **empty}), (
            empty
        )


def test_operations_using_the_same_referenced_schemas_get_their_defs_gathered_once(
    tmp_path, monkeypatch
):
    # 40 operations answering one of 8 objects that name one another: each needs the same
    # `$defs`, gathered once for all (not walked anew for each), even before equal schemas are
    # looked up (adapters/openapi/shared.py)
    monkeypatch.setattr(operations.SharedSchemas, "intern", lambda self, value: value)
    answer = {
        "200": {
            "description": "ok",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Obj0"}}},
        }
    }
    paths = {
        f"/things{i}": {"get": {"operationId": f"get{i}", "responses": answer}} for i in range(40)
    }
    _, tools = map_operations(
        _parse(tmp_path, _document(paths, components={"schemas": _linked(8)})),
        base_url="http://127.0.0.1:1",
    )
    defs = [tool.output_schema["$defs"] for tool in tools]
    assert len(defs) == 40 and all(d is defs[0] for d in defs)
    assert defs[0] and all(name.startswith("Obj") for name in defs[0])
