"""The component schemas of the REST frontend's OpenAPI document (bridge.serve.openapi_doc): the
error and result envelopes, the Agent Tool records, the IETF A2T draft's records."""

from __future__ import annotations

from typing import Any, get_args

from bridge.model import ErrorClass, Recoverability

__all__ = ["ANY", "BOOL", "INT", "NAME_LIST", "OBJ", "STR", "component_schemas", "obj", "ref"]


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str], props: dict[str, Any], *, closed: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return schema


STR = {"type": "string"}


INT = {"type": "integer"}


BOOL = {"type": "boolean"}


ANY: dict[str, Any] = {}


OBJ = {"type": "object"}


NAME_LIST = {"type": "array", "items": STR}


def component_schemas() -> dict[str, Any]:
    allowed = obj(["name"], {"name": STR, "description": STR})
    error = obj(
        ["error_class", "message"],
        {
            "error_class": {"type": "string", "enum": list(get_args(ErrorClass))},
            "message": STR,
            "error_code": {"type": ["string", "null"]},
            "recoverability": {"type": "string", "enum": list(get_args(Recoverability))},
            "retry_after": {"type": ["number", "null"]},
            "details": {"type": ["object", "null"]},
            "native_error_ref": {"type": ["object", "null"]},
        },
    )
    tool_result = obj(
        ["schema_version", "result_id", "invocation_id", "status", "created_at"],
        {
            "schema_version": STR,
            "result_id": STR,
            "invocation_id": STR,
            "tool_id": STR,
            "tool_name": STR,
            "version": INT,
            "status": STR,
            "is_error": BOOL,
            "content": {"type": "array", "items": OBJ},
            "structured_content": ANY,
            "error": ref("Error"),
            "persistence_refs": NAME_LIST,
            "persisted": OBJ,
            "native_ref": OBJ,
            "meta": OBJ,
            "created_at": STR,
            "duration_ms": {"type": "number"},
        },
    )
    return {
        "Error": error,
        "ErrorBody": obj(
            ["error"], {"error": ref("Error"), "status": INT, "x-tool-result": ref("ToolResult")}
        ),
        "ToolResult": tool_result,
        "AllowedValue": allowed,
        "InputParameter": obj(
            ["id", "name", "type", "required"],
            {
                "id": STR,
                "name": STR,
                "type": {"type": "string", "enum": ["string", "int", "boolean", "enum"]},
                "description": STR,
                "required": BOOL,
                "max": INT,
                "min": INT,
                "maxLength": INT,
                "default": ANY,
                "allowed-values": {"type": "array", "items": ref("AllowedValue")},
            },
        ),
        "OutputParameter": obj(
            ["id", "name", "type"],
            {
                "id": STR,
                "name": STR,
                "type": {"type": "string", "enum": ["string", "int", "enum", "json"]},
                "description": STR,
                "allowed-values": {"type": "array", "items": ref("AllowedValue")},
            },
        ),
        "AgentToolExtension": obj(
            ["namespace", "tool_kind", "safety", "external_mappings"],
            {
                "namespace": STR,
                "native_name": STR,
                "tool_kind": STR,
                "upstream_kind": STR,
                "lifecycle": STR,
                "loading_state": STR,
                "safety": OBJ,
                "external_mappings": {"type": "array", "items": OBJ},
                "title": STR,
                "search_hint": STR,
                "description": STR,
                "output_schema": OBJ,
                "annotations": OBJ,
            },
        ),
        "ToolSignature": obj(
            [
                "toolId",
                "name",
                "description",
                "version",
                "currentVersion",
                "tags",
                "input_parameters",
                "output_parameters",
            ],
            {
                "toolId": {"type": "string", "format": "uuid"},
                "name": {"type": "string", "maxLength": 254},
                "description": {"type": "string", "maxLength": 1999},
                "version": {"type": "integer", "minimum": 1},
                "currentVersion": {"type": "integer", "minimum": 1},
                "tags": NAME_LIST,
                "input_parameters": {"type": "array", "items": ref("InputParameter")},
                "output_parameters": {
                    "type": "array",
                    "items": ref("OutputParameter"),
                    "minItems": 1,
                },
                "input_schema": {
                    "type": "object",
                    "description": "the full JSON Schema of the input, when the flat parameters cannot carry all of it",
                },
                "x-agent-tool": ref("AgentToolExtension"),
            },
        ),
        "Paging": obj(["pageLimit"], {"pageLimit": {"type": "integer", "minimum": 1}, "next": STR}),
        "ToolSignaturePage": obj(
            ["items", "paging"],
            {"items": {"type": "array", "items": ref("ToolSignature")}, "paging": ref("Paging")},
        ),
        "NamedValue": obj(
            ["name", "value"], {"name": {"type": "string", "minLength": 1}, "value": ANY}
        ),
        "InvokeRequest": obj(
            [],
            {
                "name": STR,
                "input_parameters": {"type": "array", "items": ref("NamedValue")},
                "arguments": {
                    "type": "object",
                    "description": "extension: arguments as one object, merged with input_parameters",
                },
            },
        ),
        "InvokeResponse": obj(
            ["output_parameters", "x-tool-result"],
            {
                "output_parameters": {"type": "array", "items": ref("NamedValue")},
                "x-tool-result": ref("ToolResult"),
            },
        ),
        "Capabilities": obj(
            ["version", "features", "endpoints"],
            {
                "version": STR,
                "features": obj([], {"groups": BOOL, "search": BOOL, "dynamic_tools": BOOL}),
                "endpoints": obj(["tools"], {"tools": STR, "groups": STR}),
                "limits": {"type": "object", "additionalProperties": INT},
            },
        ),
        "A2TTool": obj(
            ["name", "description", "input_schema"],
            {
                "name": STR,
                "description": STR,
                "input_schema": OBJ,
                "group_id": STR,
                "x-agent-tool": ref("AgentToolExtension"),
            },
        ),
        "ToolsResponse": obj(
            ["tools", "total", "offset", "limit"],
            {
                "tools": {"type": "array", "items": ref("A2TTool")},
                "total": INT,
                "offset": INT,
                "limit": INT,
            },
        ),
        "Group": obj(
            ["id", "name", "tool_count"],
            {"id": STR, "name": STR, "description": STR, "parent_id": STR, "tool_count": INT},
        ),
        "GroupsResponse": obj(
            ["groups", "total", "offset", "limit"],
            {
                "groups": {"type": "array", "items": ref("Group")},
                "total": INT,
                "offset": INT,
                "limit": INT,
            },
        ),
        "ExecuteResponse": obj(
            ["result"],
            {
                "result": ANY,
                "error": obj(
                    ["code", "message"],
                    {
                        "code": STR,
                        "message": STR,
                        "error_class": STR,
                        "recoverability": STR,
                        "retry_after": {"type": "number"},
                    },
                ),
                "meta": obj(["type"], {"type": STR, "data": OBJ}),
                "x-tool-result": ref("ToolResult"),
            },
        ),
        "InvokeRecordRequest": obj(
            ["tool"],
            {
                "tool": {"type": "string", "minLength": 1},
                "arguments": OBJ,
                "version": {"type": "integer", "minimum": 1},
            },
        ),
        "ToolSearchResult": obj(
            ["schema_version", "query", "query_type", "matches"],
            {
                "schema_version": STR,
                "query": STR,
                "query_type": {"type": "string", "enum": ["select", "keyword"]},
                "matches": {
                    "type": "array",
                    "items": obj(
                        ["tool_id", "name"],
                        {
                            "tool_id": STR,
                            "name": STR,
                            "score": {"type": "number"},
                            "alternatives": {
                                "type": "array",
                                "description": "tools of other upstreams with the same native name and a similar meaning",
                                "items": obj(
                                    ["tool_id", "name"],
                                    {"tool_id": STR, "name": STR, "namespace": STR},
                                ),
                            },
                            "alternatives_total": {
                                "type": "integer",
                                "description": "how many alternatives, when more than `alternatives` names",
                            },
                        },
                    ),
                },
                "total_deferred_tools": INT,
                "pending_providers": NAME_LIST,
                "missing_names": NAME_LIST,
                "next_action": STR,
                "hint": STR,
                "suggestions": {
                    "type": "array",
                    "description": "when no tool matched a free-text query: the tools nearest to "
                    "it in meaning, which share none of its words",
                    "items": obj(
                        ["tool_id", "name"],
                        {
                            "tool_id": STR,
                            "name": STR,
                            "score": {"type": "number", "description": "cosine of query and tool"},
                        },
                    ),
                },
            },
        ),
        "ToolSurface": obj(
            ["schema_version", "surface_id", "scope"],
            {
                "schema_version": STR,
                "surface_id": STR,
                "scope": STR,
                "loaded_tools": NAME_LIST,
                "deferred_tools": {"type": "array", "items": OBJ},
                "blocked_tools": {"type": "array", "items": OBJ},
            },
        ),
        "ToolDeclaration": obj(
            [
                "schema_version",
                "tool_id",
                "namespace",
                "name",
                "description",
                "lifecycle",
                "tool_kind",
            ],
            {
                "schema_version": STR,
                "tool_id": STR,
                "namespace": STR,
                "name": STR,
                "description": STR,
                "lifecycle": STR,
                "tool_kind": STR,
                "input_contract": OBJ,
                "external_mappings": {"type": "array", "items": OBJ},
                "version": INT,
            },
        ),
        "Health": obj(
            ["status"],
            {
                "status": {"type": "string", "enum": ["ok", "degraded"]},
                "store": obj(
                    ["writable", "since", "reason"], {"writable": BOOL, "since": STR, "reason": STR}
                ),
            },
        ),
        "Ready": obj(
            ["ready", "upstreams"],
            {
                "ready": BOOL,
                "starting": NAME_LIST,
                "tools": INT,
                "search": {"type": "string", "enum": ["ready", "indexing", "failing"]},
                "upstreams": {
                    "type": "array",
                    "items": obj(
                        ["name", "kind", "state"],
                        {"name": STR, "kind": STR, "state": STR, "tool_count": INT, "reason": STR},
                    ),
                },
            },
        ),
    }
