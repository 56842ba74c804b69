"""Projections between MCP wire shapes and the bridge's records.

Parse direction (MCP → bridge): an MCP `Tool` becomes an `UpstreamTool` with its safety facts
and their sources, a `CallToolResult` an `UpstreamResult`, a progress notification the
arguments of a progress record. Inputs are JSON-shaped dicts in MCP's wire spelling
(camelCase, `_meta`), so these functions depend on no SDK version. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.model import FactSource, SafetyHints, ToolError, UpstreamResult, UpstreamTool

__all__ = [
    "MCP_SOURCE",
    "MCP_TOOL_KIND",
    "CONTENT_TYPES",
    "TASK_REQUIRED_REASON",
    "safety_from_mcp",
    "tool_from_mcp",
    "content_from_mcp",
    "result_from_mcp",
    "progress_from_mcp",
]

MCP_SOURCE = "mcp"
MCP_TOOL_KIND = "mcp_tool"
# The content block types of CallToolResult.content (MCP 2025-11-25 and 2026-07-28).
CONTENT_TYPES = ("text", "image", "audio", "resource_link", "resource")
# Blocked reason of a tool the server only runs as a task (execution.taskSupport = required):
# the bridge calls tools directly, so such a call could never succeed.
TASK_REQUIRED_REASON = "mcp_task_required"
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


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
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), Mapping) else None
    title = tool.get("title") or (annotations or {}).get("title")
    kept = {key: tool[key] for key in ("annotations", "icons", "execution", "_meta") if tool.get(key) is not None}
    execution = tool.get("execution") if isinstance(tool.get("execution"), Mapping) else {}
    input_schema = tool.get("inputSchema")
    output_schema = tool.get("outputSchema")
    return UpstreamTool(
        native_id=name,
        name=name,
        title=title if isinstance(title, str) else None,
        description=str(tool.get("description") or ""),
        tool_kind=MCP_TOOL_KIND,
        input_schema=dict(input_schema) if isinstance(input_schema, Mapping) else dict(_EMPTY_OBJECT_SCHEMA),
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
    )


def content_from_mcp(blocks: Sequence[Any] | None) -> list[dict[str, Any]]:
    """MCP content blocks as the bridge keeps them: the MCP wire shapes themselves (text,
    image, audio, resource_link, embedded resource), `_meta` and annotations included. A block
    of a type this bridge does not know yet is kept as it came."""
    out: list[dict[str, Any]] = []
    for block in blocks or ():
        if isinstance(block, Mapping):
            out.append(dict(block))
        else:  # not an object: keep what it said, as text
            out.append({"type": "text", "text": str(block)})
    return out


def _first_text(content: list[dict[str, Any]]) -> str:
    texts = [b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str)]
    return "\n".join(texts)


def result_from_mcp(result: Mapping[str, Any], *, native_ref: dict[str, Any] | None = None) -> UpstreamResult:
    """A `CallToolResult` (wire dict) as an `UpstreamResult`: every content block, the
    structured content, `isError` (a tool-level failure the model can read and act on) and the
    native `_meta`."""
    content = content_from_mcp(result.get("content"))
    is_error = bool(result.get("isError"))
    error = None
    if is_error:
        message = _first_text(content) or "the MCP tool reported an error"
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
        meta=dict(meta) if isinstance(meta, Mapping) else None,
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
