"""Projections between MCP wire shapes and the bridge's records.

Parse direction (MCP → bridge): an MCP `Tool` becomes an `UpstreamTool` with its safety facts
and their sources, a `CallToolResult` an `UpstreamResult`, a progress notification the
arguments of a progress record. Inputs are JSON-shaped dicts in MCP's wire spelling
(camelCase, `_meta`), so these functions depend on no SDK version. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.model import (
    FactSource,
    SafetyHints,
    ToolError,
    UpstreamResult,
    UpstreamTool,
    object_shaped,
    takes_objects,
)
from bridge.text import text_of

__all__ = [
    "CONTENT_TYPES",
    "MCP_SOURCE",
    "MCP_TOOL_KIND",
    "TASK_REQUIRED_REASON",
    "content_from_mcp",
    "plain_text",
    "progress_from_mcp",
    "result_from_mcp",
    "safety_from_mcp",
    "tool_from_mcp",
]

MCP_SOURCE = "mcp"
MCP_TOOL_KIND = "mcp_tool"
# The content block types of CallToolResult.content (MCP 2025-11-25 and 2026-07-28).
CONTENT_TYPES = ("text", "image", "audio", "resource_link", "resource")
# Blocked reason of a tool the server only runs as a task (execution.taskSupport = required):
# the bridge calls tools directly, so such a call could never succeed.
TASK_REQUIRED_REASON = "mcp_task_required"
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# a dict is told a Mapping at once, without the ABC's check (a Python call)
_MAPPING = (dict, Mapping)


# ---------------------------------------------------------------------------------------------
# parse: MCP → bridge
# ---------------------------------------------------------------------------------------------


def _hint(annotations: Mapping[str, Any], key: str) -> bool | None:
    value = annotations.get(key)
    return value if isinstance(value, bool) else None


def safety_from_mcp(annotations: Mapping[str, Any] | None) -> SafetyHints:
    """Safety facts from MCP tool annotations, each with where it came from.

    A hint the server gave is `declared`. Without one the Agent Tool defaults apply (`default`):
    not read-only, not idempotent, open world, and not destructive — MCP's own default
    (`destructiveHint: true` when absent) would make every unannotated tool destructive and
    block it, so only an explicit `destructiveHint: true` marks a tool destructive. MCP gives
    `destructiveHint` and `idempotentHint` meaning only for tools that are not read-only; for a
    read-only tool the bridge infers not destructive and idempotent (`inferred`)."""
    ann = annotations or {}
    sources: dict[str, FactSource] = {}

    read_only_hint = _hint(ann, "readOnlyHint")
    read_only = bool(read_only_hint)
    sources["read_only"] = "declared" if read_only_hint is not None else "default"

    destructive_hint = _hint(ann, "destructiveHint")
    idempotent_hint = _hint(ann, "idempotentHint")
    if read_only:
        destructive, sources["destructive"] = False, "inferred"
        idempotent, sources["idempotent"] = True, "inferred"
    else:
        destructive = bool(destructive_hint)
        sources["destructive"] = "declared" if destructive_hint is not None else "default"
        idempotent = bool(idempotent_hint)
        sources["idempotent"] = "declared" if idempotent_hint is not None else "default"

    open_world_hint = _hint(ann, "openWorldHint")
    open_world = True if open_world_hint is None else open_world_hint
    sources["open_world"] = "declared" if open_world_hint is not None else "default"

    return SafetyHints(
        read_only=read_only,
        destructive=destructive,
        idempotent=idempotent,
        open_world=open_world,
        sources=sources,
    )


def tool_from_mcp(
    tool: Mapping[str, Any],
    *,
    server_id: str,
    protocol_version: str | None,
) -> UpstreamTool:
    """One MCP `Tool` (wire dict) as the bridge's `UpstreamTool`.

    The MCP tool name is both the routing key and the native name. `inputSchema` becomes the
    model input schema, `outputSchema` the output contract; annotations, icons, `execution` and
    `_meta` are kept verbatim under `annotations["mcp"]`."""
    name = str(tool["name"])
    annotations = found if isinstance(found := tool.get("annotations"), Mapping) else None
    title = tool.get("title") or (annotations or {}).get("title")
    kept = {
        key: tool[key]
        for key in ("annotations", "icons", "execution", "_meta")
        if tool.get(key) is not None
    }
    execution = found if isinstance(found := tool.get("execution"), Mapping) else {}
    input_schema = tool.get("inputSchema")
    output_schema = tool.get("outputSchema")
    return UpstreamTool(
        native_id=name,
        name=name,
        title=title if isinstance(title, str) else None,
        description=str(tool.get("description") or ""),
        tool_kind=MCP_TOOL_KIND,
        input_schema=dict(input_schema)
        if isinstance(input_schema, Mapping)
        else dict(_EMPTY_OBJECT_SCHEMA),
        output_schema=dict(output_schema) if isinstance(output_schema, Mapping) else None,
        safety=safety_from_mcp(annotations),
        external_mapping={
            "source": MCP_SOURCE,
            "server_id": server_id,
            "tool_name": name,
            "mcp_protocol_version": protocol_version,
            "method": "tools/call",
        },
        annotations={"mcp": kept} if kept else {},
        blocked_reason=TASK_REQUIRED_REASON if execution.get("taskSupport") == "required" else None,
        blocked_detail=(
            "the server runs it only as a task (execution.taskSupport: required), and the bridge calls tools directly"
            if execution.get("taskSupport") == "required"
            else None
        ),
    )


def content_from_mcp(blocks: Sequence[Any] | None) -> list[dict[str, Any]]:
    """MCP content blocks as the bridge keeps them: the MCP wire shapes themselves (text,
    image, audio, resource_link, embedded resource), `_meta` and annotations included. A block
    of a type this bridge does not know yet is kept as it came."""
    out: list[dict[str, Any]] = []
    for block in blocks or ():
        if isinstance(block, _MAPPING):
            out.append(dict(block))
        else:  # not an object: keep what it said, as text
            out.append({"type": "text", "text": str(block)})
    return out


def result_from_mcp(
    result: Mapping[str, Any], *, native_ref: dict[str, Any] | None = None
) -> UpstreamResult:
    """A `CallToolResult` (wire dict) as an `UpstreamResult`: every content block, the
    structured content, `isError` (a tool-level failure the model can read and act on) and the
    native `_meta`."""
    content = content_from_mcp(result.get("content"))
    is_error = bool(result.get("isError"))
    error = None
    if is_error:
        message = text_of(content) or "the MCP tool reported an error"
        error = ToolError(
            error_class="execution_failed",
            message=message if len(message) <= 2000 else message[:1997] + "...",
            error_code="mcp_tool_error",
            recoverability="change_arguments",
            native_error_ref={"source": MCP_SOURCE, "isError": True},
        )
    meta = result.get("_meta")
    return UpstreamResult(
        content=content,
        structured_content=result.get("structuredContent"),
        is_error=is_error,
        error=error,
        native_ref=native_ref,
        meta=dict(meta) if meta is not None and isinstance(meta, _MAPPING) else None,
    )


def progress_from_mcp(progress: float, total: float | None, message: str | None) -> dict[str, Any]:
    """Keyword arguments of `CallContext.report_progress` for one `notifications/progress`.

    `percent` when the server gave a total; `current_step`/`total_steps` when both numbers are
    whole (MCP progress is any increasing number)."""
    out: dict[str, Any] = {"message": message}
    if total is not None and total > 0:
        out["percent"] = round(max(0.0, min(100.0, progress / total * 100)), 2)
    if float(progress).is_integer() and progress >= 0:
        out["current_step"] = int(progress)
        if total is not None and float(total).is_integer() and total > 0:
            out["total_steps"] = int(total)
    return out


# ---------------------------------------------------------------------------------------------
# render: bridge → MCP (the MCP frontend, bridge.serve.mcp): ToolDeclaration -> MCP Tool with
# annotations from the safety hints (ToolResult -> CallToolResult: bridge/translate/mcp_results.py)
# ---------------------------------------------------------------------------------------------

import mcp.types as _types  # noqa: E402
from mcp_types.version import MODERN_PROTOCOL_VERSIONS as _MODERN_VERSIONS  # noqa: E402
from pydantic import TypeAdapter as _TypeAdapter  # noqa: E402
from pydantic import ValidationError as _ValidationError  # noqa: E402

from bridge.model import ToolDeclaration as _ToolDeclaration  # noqa: E402

__all__ += [
    "CALL_TOOL",
    "RESULT_META_KEY",
    "SEARCH_TOOLS",
    "TOOL_META_KEY",
    "is_modern",
    "render_annotations",
    "render_output_schema",
    "render_tool",
]

TOOL_META_KEY = "a2t-bridge/tool"
RESULT_META_KEY = "a2t-bridge/result"
SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"

_ICON: _TypeAdapter[_types.Icon] = _TypeAdapter(_types.Icon)
_HINT_FIELDS = (
    ("read_only", "read_only_hint"),
    ("destructive", "destructive_hint"),
    ("idempotent", "idempotent_hint"),
    ("open_world", "open_world_hint"),
)
_SAFETY_DEFAULTS = SafetyHints()


def is_modern(protocol_version: str | None) -> bool:
    """Whether a protocol version belongs to the sessionless 2026-07-28 era."""
    return protocol_version in _MODERN_VERSIONS


def render_annotations(decl: _ToolDeclaration) -> _types.ToolAnnotations | None:
    """MCP annotations from the safety hints. A fact is rendered when an upstream declared it, the
    bridge inferred it, or it was set to something other than the fail-safe default; an unknown
    fact is left out, so the client applies MCP's own fail-safe default (destructive, open world)."""
    safety = decl.safety
    hints: dict[str, Any] = {}
    for fact, hint in _HINT_FIELDS:
        value = getattr(safety, fact)
        if safety.source_of(fact) != "default" or value != getattr(_SAFETY_DEFAULTS, fact):
            hints[hint] = value
    if decl.title:
        hints["title"] = decl.title
    return _types.ToolAnnotations(**hints) if hints else None


def _object_schema(schema: Any) -> dict[str, Any]:
    """MCP wants an object root for inputSchema; a schema that leaves `type` out gets it added."""
    if not isinstance(schema, Mapping) or not takes_objects(dict(schema)):
        # (a tool an `allow` rule shows despite its blocked reason): an object root keeps the
        # listing valid; the call is then refused by the tool's own schema
        return dict(_EMPTY_OBJECT_SCHEMA)
    if "type" not in schema:
        return {"type": "object", **schema}
    return dict(schema)


def render_output_schema(
    decl: _ToolDeclaration, protocol_version: str | None
) -> dict[str, Any] | None:
    """The outputSchema to advertise: any schema in the 2026-07-28 era, object roots only before."""
    schema = decl.output_schema
    if schema is None or not isinstance(schema, _MAPPING) or not schema:
        return None
    if is_modern(protocol_version) or (
        schema.get("type") == "object" and object_shaped(dict(schema))
    ):
        return dict(schema)
    return None


def _icons(decl: _ToolDeclaration) -> list[_types.Icon] | None:
    """The icons an MCP upstream listed the tool with (kept under `annotations.mcp`), each one
    MCP's Icon type accepts; None when there are none."""
    kept = decl.annotations.get(MCP_SOURCE)
    listed = kept.get("icons") if isinstance(kept, Mapping) else None
    icons = []
    for icon in listed if isinstance(listed, list) else ():
        try:
            icons.append(_ICON.validate_python(icon, by_name=False))
        except _ValidationError:
            continue
    return icons or None


def render_tool(decl: _ToolDeclaration, protocol_version: str | None = None) -> _types.Tool:
    """One catalog tool as an MCP `Tool`; its id, version, upstream and kind ride in `_meta`, and
    an MCP upstream's icons come along."""
    meta: dict[str, Any] = {
        "tool_id": decl.tool_id,
        "version": decl.version,
        "upstream": decl.upstream,
        "tool_kind": decl.tool_kind,
    }
    if decl.tags:
        meta["tags"] = list(decl.tags)
    return _types.Tool(
        name=decl.name,
        title=decl.title,
        description=decl.description or None,
        input_schema=_object_schema(decl.input_schema),
        output_schema=render_output_schema(decl, protocol_version),
        annotations=render_annotations(decl),
        icons=_icons(decl),
        _meta={TOOL_META_KEY: meta},
    )


def plain_text(block: Any) -> str | None:
    """The text of a content block that is `{"type": "text", "text": <string>}` and nothing
    else (the most common block, read without the SDK's models); None for any other."""
    if (
        type(block) is dict
        and len(block) == 2
        and "type" in block
        and block["type"] == "text"
        and "text" in block
    ):
        text = block["text"]
        if type(text) is str:
            return text
    return None
