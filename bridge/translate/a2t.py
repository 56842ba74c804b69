"""Projections between Agent Tool declarations and the a2t dialect (the Go reference
implementation's shapes): the capabilities document, tools, groups, execute responses and the
three meta shapes found in the wild. Pure functions, both directions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bridge.model import (
    ErrorClass,
    SafetyHints,
    ToolDeclaration,
    ToolError,
    ToolResult,
    UpstreamResult,
    UpstreamTool,
)
from bridge.text import text_of
from bridge.translate.wire import (
    AGENT_TOOL_KEY,
    ERROR_CLASSES,
    TOOL_RESULT_KEY,
    WireFormatError,
    declaration_extension,
    read_extension,
    result_from_envelope,
)

__all__ = [
    "CAPABILITIES_PATH",
    "Capabilities",
    "Meta",
    "error_class_of",
    "error_code_of",
    "execute_value",
    "group_refresh_meta",
    "parse_capabilities",
    "parse_execute",
    "parse_listing",
    "parse_meta",
    "parse_tool",
    "render_capabilities",
    "render_execute",
    "render_group",
    "render_tool",
]

CAPABILITIES_PATH = "/.well-known/a2t-capabilities.json"

# a2t error codes that are not Agent Tool error classes
_CODE_TO_CLASS: dict[str, ErrorClass] = {
    "tool_not_found": "unknown_tool",
    "group_not_found": "unknown_tool",
    "execution_error": "execution_failed",
    "unauthorized": "credential_missing",
    "forbidden": "permission_denied",
    "invalid_params": "invalid_arguments",
    "invalid_arguments": "invalid_arguments",
}


@dataclass
class Capabilities:
    version: str
    tools: str
    groups: str | None
    features: dict[str, bool] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)


@dataclass
class Meta:
    """A meta notice of an execute response: `tools_added` (with the new tools) or
    `group_refresh` (with the group ids to re-list); other types are kept but not acted on."""

    type: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    group_ids: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- capabilities


def render_capabilities(
    tools_path: str, groups_path: str, *, max_tools: int, max_groups: int
) -> dict[str, Any]:
    return {
        "version": "1.0",
        "features": {"groups": True, "search": True, "dynamic_tools": True},
        "endpoints": {"tools": tools_path, "groups": groups_path},
        "limits": {"max_tools_per_request": max_tools, "max_groups_per_request": max_groups},
    }


def parse_capabilities(doc: Any) -> Capabilities:
    if not isinstance(doc, dict):
        raise WireFormatError("the capabilities document must be a JSON object")
    endpoints = doc.get("endpoints")
    if (
        not isinstance(endpoints, dict)
        or not isinstance(endpoints.get("tools"), str)
        or not endpoints["tools"]
    ):
        raise WireFormatError(
            "the capabilities document has no `endpoints.tools`", "/endpoints/tools"
        )
    features = found if isinstance(found := doc.get("features"), dict) else {}
    features = {k: bool(v) for k, v in features.items()}
    groups = (
        endpoints.get("groups")
        if isinstance(endpoints.get("groups"), str) and endpoints.get("groups")
        else None
    )
    if groups is not None and features.get("groups") is False:
        groups = None
    limits_raw = found if isinstance(found := doc.get("limits"), dict) else {}
    limits = {
        k: v
        for k, v in limits_raw.items()
        if isinstance(v, int) and not isinstance(v, bool) and v > 0
    }
    version = found if isinstance(found := doc.get("version"), str) else "1.0"
    return Capabilities(
        version=version, tools=endpoints["tools"], groups=groups, features=features, limits=limits
    )


# ----------------------------------------------------------------------------- tools and groups


def render_tool(decl: ToolDeclaration) -> dict[str, Any]:
    """A catalog tool as an a2t Tool; its group is its namespace (upstream)."""
    ext = declaration_extension(decl)
    ext["tags"] = decl.tags  # the a2t Tool has no tags field
    return {
        "name": decl.name,
        "description": decl.description,
        "input_schema": decl.input_schema,
        "group_id": decl.namespace,
        AGENT_TOOL_KEY: ext,
    }


def render_group(group_id: str, *, name: str, description: str, tool_count: int) -> dict[str, Any]:
    return {"id": group_id, "name": name, "description": description, "tool_count": tool_count}


def parse_tool(obj: Any, *, base_url: str, pointer: str = "") -> UpstreamTool:
    """A remote a2t Tool as an upstream tool routed by its name (unique on an a2t server)."""
    if not isinstance(obj, dict):
        raise WireFormatError("a tool must be an object", pointer)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise WireFormatError("a tool needs a string `name`", f"{pointer}/name")
    schema = obj.get("input_schema")
    if schema is None:
        schema = obj.get("inputSchema")  # tolerated: MCP's spelling
    if not isinstance(schema, dict):
        schema = {"type": "object", "properties": {}}
    ext = read_extension(obj)
    group = (
        obj.get("group_id")
        if isinstance(obj.get("group_id"), str) and obj.get("group_id")
        else None
    )
    mapping: dict[str, Any] = {"source": "a2t", "base_url": base_url, "tool_name": name}
    if group:
        mapping["group_id"] = group
    mapping.update(ext.origin())
    description = ext.description or (
        obj.get("description") if isinstance(obj.get("description"), str) else ""
    )
    return UpstreamTool(
        native_id=name,
        name=name,
        description=description,
        title=ext.title,
        tool_kind=ext.tool_kind or "function",
        input_schema=schema,
        output_schema=ext.output_schema,
        safety=ext.safety or SafetyHints(),
        tags=ext.tags if ext.present else ([group] if group else []),
        search_hint=ext.search_hint,
        external_mapping=mapping,
        annotations=ext.annotations,
    )


def parse_listing(doc: Any, key: str) -> tuple[list[Any], int | None]:
    """Items and `total` of a ToolsResponse (`key="tools"`) or GroupsResponse (`key="groups"`).
    `total` is omitempty in the reference: absent means unknown (None)."""
    if not isinstance(doc, dict):
        raise WireFormatError(f"a {key} listing must be a JSON object")
    items = doc.get(key)
    if items is None:
        items = []
    if not isinstance(items, list):
        raise WireFormatError(f"`{key}` must be an array", f"/{key}")
    total = doc.get("total")
    return items, total if isinstance(total, int) and not isinstance(
        total, bool
    ) and total > 0 else None


# ----------------------------------------------------------------------------- errors


def error_code_of(error_class: str) -> str:
    """The a2t error code for an Agent Tool error class (the reference's own code where it has one)."""
    return "tool_not_found" if error_class == "unknown_tool" else error_class


def error_class_of(code: Any) -> ErrorClass:
    if isinstance(code, str):
        if code in ERROR_CLASSES:
            return code  # type: ignore[return-value]
        if code in _CODE_TO_CLASS:
            return _CODE_TO_CLASS[code]
    return "execution_failed"


# ----------------------------------------------------------------------------- execute


def execute_value(result: ToolResult) -> Any:
    """The `result` value of an execute response: structured content when there is some, else the
    text, else the content blocks."""
    if result.structured_content is not None:
        return result.structured_content
    if all(b.get("type") == "text" for b in result.content):
        return text_of(result.content)
    return result.content


def render_execute(result: ToolResult, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ExecuteResponse for a result envelope: `result`, `error` `{code, message}` when the call
    failed (plus the Agent Tool error fields), `meta` when given, and the whole envelope under
    `x-tool-result`."""
    body: dict[str, Any] = {"result": None if result.is_error else execute_value(result)}
    if result.is_error and result.error is not None:
        err = result.error
        body["error"] = {
            "code": error_code_of(err.error_class),
            "message": err.message,
            "error_class": err.error_class,
            "recoverability": err.recoverability,
        }
        if err.retry_after is not None:
            body["error"]["retry_after"] = err.retry_after
    if meta is not None:
        body["meta"] = meta
    body[TOOL_RESULT_KEY] = result.to_json()
    return body


def group_refresh_meta(group_ids: list[str]) -> dict[str, Any]:
    """The Go helpers' wire shape (`NewMetaGroupRefresh`)."""
    return {"type": "group_refresh", "data": {"group_ids": list(group_ids)}}


def _meta_of(raw: Any) -> Meta | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        return None
    data = found if isinstance(found := raw.get("data"), dict) else {}
    tools = data.get("tools", raw.get("tools"))
    group_ids = data.get("group_ids", raw.get("group_ids"))
    return Meta(
        type=raw["type"],
        tools=[t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else [],
        group_ids=[g for g in group_ids if isinstance(g, str)]
        if isinstance(group_ids, list)
        else [],
        raw=raw,
    )


def parse_meta(body: dict[str, Any]) -> tuple[Meta | None, Any]:
    """The meta notice of an execute response in any of its three shapes (top-level with `data`,
    top-level flat, nested inside `result`), and the tool's result with a nested meta removed."""
    result = body.get("result")
    meta = _meta_of(body.get("meta"))
    if meta is not None:
        return meta, result
    if isinstance(result, dict):
        nested = _meta_of(result.get("meta"))
        if nested is not None:
            rest = {k: v for k, v in result.items() if k != "meta"}
            return nested, rest["result"] if set(rest) == {"result"} else rest
    return None, result


def parse_execute(body: Any) -> tuple[UpstreamResult, Meta | None]:
    """An ExecuteResponse as an upstream result and its meta notice. HTTP 200 with an `error`
    object is an error result; a remote bridge's `x-tool-result` envelope is taken as is."""
    if not isinstance(body, dict):
        raise WireFormatError("an execute response must be a JSON object")
    meta, value = parse_meta(body)
    from_envelope = result_from_envelope(body.get(TOOL_RESULT_KEY))
    if from_envelope is not None:
        return from_envelope, meta
    err = body.get("error")
    if isinstance(err, dict) and err:
        code = err.get("code")
        message = (
            found
            if isinstance(found := err.get("message"), str)
            else f"the upstream reported {code or 'an error'}"
        )
        error = ToolError(
            error_class=error_class_of(err.get("error_class") or code),
            message=message,
            error_code=code if isinstance(code, str) else None,
            native_error_ref={k: v for k, v in err.items() if k in ("code", "message")},
        )
        return UpstreamResult(
            is_error=True, error=error, content=[{"type": "text", "text": message}]
        ), meta
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    # a result of any JSON type but text keeps its type (`{"result": 5}` is the number 5, not "5")
    structured = value if value is not None and not isinstance(value, str) else None
    return UpstreamResult(
        content=[{"type": "text", "text": text}], structured_content=structured
    ), meta
