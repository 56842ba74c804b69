"""Projections of the bridge's results onto MCP (the MCP frontend, bridge.serve.mcp): a
`ToolResult` as a `CallToolResult`, with the bridge's own `_meta` entry after the upstream's, its
errors in words a model can follow; and the parts of the most common result, which the frontend
may write without the SDK's models. Pure: no I/O."""

from __future__ import annotations

import json as _json
import math as _math
from collections.abc import Mapping
from typing import Any

import mcp.types as _types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS as _MODERN_VERSIONS
from pydantic import TypeAdapter as _TypeAdapter
from pydantic import ValidationError as _ValidationError

from bridge.model import ToolError
from bridge.model import ToolResult as _ToolResult
from bridge.text import text_of
from bridge.translate.mcp import MCP_SOURCE, RESULT_META_KEY, plain_text

__all__ = ["error_guidance", "plain_json", "plain_result", "render_result"]

_CONTENT_BLOCK: _TypeAdapter[Any] = _TypeAdapter(_types.ContentBlock)
# a dict is told a Mapping at once, without the ABC's check (a Python call)
_MAPPING = (dict, Mapping)


def error_guidance(error: ToolError, tool_name: str | None) -> str:
    """What the caller should do next, in words a model can follow."""
    name = tool_name or "the tool"
    cls = error.error_class
    if error.recoverability == "provide_input":
        return (
            f"{name} waits for input from a user, which this client was not asked for or did not "
            "give: call it again from a client that answers elicitations, and answer the question."
        )
    if cls == "schema_not_loaded":
        return (
            f'Call search_tools with query "select:{name}" to load its schema, then call {name} again; '
            f'or call it right away through call_tool with {{"name": "{name}", "arguments": {{...}}}}.'
        )
    if cls == "unknown_tool":
        return "Call search_tools to find the right tool name, then call that tool."
    if cls in ("invalid_arguments", "schema_validation_failed"):
        return (
            f"Fix the arguments so they match the input schema of {name} "
            f'(search_tools with "select:{name}" returns it) and call again.'
        )
    if cls == "capability_gap":
        return "Call the current version of the tool with arguments its schema accepts."
    if cls in (
        "permission_denied",
        "policy_blocked",
        "hook_blocked",
        "approval_rejected",
        "sandbox_violation",
    ):
        return "This surface does not allow the call; use another tool or ask the operator to change the surface's rules."
    if cls == "credential_missing":
        return "The bridge has no credentials for this tool's upstream; an operator must configure them. Use another tool meanwhile."
    if cls == "setup_required":
        return "The tool's upstream needs setup by an operator before it can be used. Use another tool meanwhile."
    if error.recoverability == "setup":
        # a certificate the bridge cannot verify, a proxy it cannot use: every retry fails the same way
        return (
            "The tool's upstream cannot be reached until an operator fixes the bridge's configuration, as the message above says; "
            "do not retry. Use another tool meanwhile."
        )
    if cls == "timeout":
        return "The call took too long; retry it, perhaps with a smaller request."
    if cls in ("rate_limited", "dependency_unavailable"):
        wait = (
            f" after {error.retry_after:g} seconds" if error.retry_after is not None else " later"
        )
        if cls == "rate_limited":
            return f"Too many calls for now (a rate limit); retry{wait}."
        return f"The upstream is unavailable or busy; retry{wait}."
    if cls == "result_too_large":
        return "Narrow the request so the result is smaller."
    if cls in ("canceled", "sibling_canceled"):
        return "The call was canceled; call again if the result is still needed."
    if error.recoverability == "retry":
        return "Retry the call."
    if error.recoverability == "change_arguments":
        return "Change the arguments and call again."
    return "The tool reported a failure; read the message above, change the arguments if they caused it, or use another tool."


def _content_blocks(blocks: list[dict[str, Any]]) -> list[Any]:
    out = []
    for block in blocks:
        text = plain_text(block)
        if text is not None:  # the model the union's validation makes, made directly
            out.append(_types.TextContent(type="text", text=text))
            continue
        try:
            out.append(_CONTENT_BLOCK.validate_python(block, by_name=False))
        except _ValidationError:
            # a block in no MCP shape still reaches the caller, as its JSON text
            out.append(_types.TextContent(type="text", text=_json_text(block)))
    return out


def _json_text(value: Any) -> str:
    return _json.dumps(value, ensure_ascii=False, default=str)


def _single_json_text(blocks: list[dict[str, Any]]) -> Any:
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    if len(texts) != 1 or not isinstance(texts[0], str):
        return None
    try:
        return _json.loads(texts[0])
    except ValueError:
        return None


def _reserved_meta_key(key: str) -> bool:
    """A `_meta` key MCP reserves for itself: its prefix has a `modelcontextprotocol` or `mcp`
    label (`io.modelcontextprotocol/serverInfo`). The verdicts on the keys seen are kept (an
    upstream stamps the same few keys on every result)."""
    reserved = _RESERVED.get(key)
    if reserved is None:
        prefix, slash, _ = key.partition("/")
        reserved = bool(slash) and any(
            label in ("modelcontextprotocol", "mcp") for label in prefix.split(".")
        )
        if len(_RESERVED) >= _RESERVED_KEPT:
            _RESERVED.clear()
        _RESERVED[key] = reserved
    return reserved


_RESERVED: dict[str, bool] = {}
_RESERVED_KEPT = 1024


def _result_meta(result: _ToolResult) -> dict[str, Any]:
    """The bridge's own `_meta` entry, after the `_meta` an MCP upstream gave the result (other
    kinds' `meta`, HTTP headers say, is not MCP's to carry). Keys MCP reserves describe the
    upstream's own exchange (its `serverInfo` stamp named the upstream as the server that
    answered the client) and are left out."""
    native = result.native_ref or {}
    upstream: dict[str, Any] = {}
    if (
        native.get("source") == MCP_SOURCE
        and result.meta is not None
        and isinstance(result.meta, _MAPPING)
    ):
        for key, value in result.meta.items():
            # a key seen before is decided by its kept verdict, without a call
            if not (_RESERVED[key] if key in _RESERVED else _reserved_meta_key(str(key))):
                upstream[key] = value
    meta: dict[str, Any] = {
        "invocation_id": result.invocation_id,
        "result_id": result.result_id,
        "status": result.status,
    }
    if result.tool_id is not None:
        meta["tool_id"] = result.tool_id
    if result.version is not None:
        meta["version"] = result.version
    if result.duration_ms is not None:
        meta["duration_ms"] = result.duration_ms
    if result.persisted is not None:
        meta["persisted_ref"] = result.persisted.persisted_ref
    return {**upstream, RESULT_META_KEY: meta}


def _structured(result: _ToolResult, output_schema: dict[str, Any] | None) -> Any:
    """The structured content of a success: its own, else, for a tool listed with
    `output_schema`, the JSON of its one text block (None without either)."""
    structured = result.structured_content
    if structured is None and output_schema is not None:
        structured = _single_json_text(result.content)
    return structured


def plain_result(
    result: _ToolResult, output_schema: dict[str, Any] | None = None
) -> tuple[list[str], dict[str, Any] | None, dict[str, Any]] | None:
    """The texts of the content blocks, the structured content and the `_meta` of the
    `CallToolResult` that `render_result` makes of a success whose blocks are all plain text
    (`plain_text`), whose structured content (given, or derived for `output_schema`) is None or
    an object, and that keeps no result in the store, when its structured content and `_meta`
    hold JSON values alone (`plain_json`): the most common result, which the MCP frontend may
    put on the wire without the SDK's models (bridge/serve/mcp_plain.py). None for any other."""
    if result.is_error or result.persisted is not None:
        return None
    texts = []
    for block in result.content:
        text = plain_text(block)
        if text is None:
            return None
        texts.append(text)
    structured = _structured(result, output_schema)
    if structured is not None:
        if structured.__class__ is not dict or not plain_json(structured):
            return None
        if not texts:
            texts = [_json_text(structured)]
    duration = result.duration_ms
    if duration is not None and not _math.isfinite(duration):
        return None
    meta = _result_meta(result)
    if len(meta) > 1 and not plain_json(meta):  # the upstream's own `_meta` keys
        return None
    return texts, structured, meta


# how deep `plain_json` looks before it gives up
_PLAIN_DEPTH = 32


def plain_json(value: Any, depth: int = _PLAIN_DEPTH) -> bool:
    """Whether `value` is made of JSON values alone (objects with string keys, arrays, strings,
    booleans, integers, finite numbers, null), as JSON decoding makes them, no deeper than
    `depth`: the SDK's models dump those unchanged (a number JSON cannot hold, they write as
    null)."""
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:
        return True
    if cls is float:
        return _math.isfinite(value)
    if not depth:
        return False
    if cls is dict:
        return all(k.__class__ is str and plain_json(v, depth - 1) for k, v in value.items())
    if cls is list:
        return all(plain_json(v, depth - 1) for v in value)
    return False


def render_result(
    result: _ToolResult,
    protocol_version: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> _types.CallToolResult:
    """A result envelope as an MCP `CallToolResult`.

    Errors become `isError` results whose text says what happened and what to do next, with the
    error record in `structuredContent`. Successes keep their content blocks and structured content;
    before 2026-07-28 structured content must be an object, so other values travel as text only.
    `output_schema` is the schema the tool was listed with: a result that lacks structured content
    but carries exactly one JSON text block gets that JSON as structured content, and an error
    carries its record in the bridge's `_meta` entry instead (clients check `structuredContent`
    against the output schema, error results too: the TypeScript SDK refused them).
    """
    modern = protocol_version in _MODERN_VERSIONS  # is_modern
    if result.is_error:
        error = result.error or ToolError(
            error_class="execution_failed", message="the tool reported an error"
        )
        text = text_of(result.content)
        if error.message not in text:
            headline = f"{error.error_class}: {error.message}"
            text = f"{headline}\n{text}" if text else headline
        others = [b for b in result.content if b.get("type") != "text"]
        record = {"error": error.to_json(), "status": result.status}
        meta = _result_meta(result)
        if output_schema is not None:
            meta[RESULT_META_KEY]["error"] = record["error"]
        return _types.CallToolResult(
            content=[
                _types.TextContent(
                    type="text", text=f"{text}\n{error_guidance(error, result.tool_name)}"
                ),
                *_content_blocks(others),
            ],
            structured_content=record if output_schema is None else None,
            is_error=True,
            _meta=meta,
        )
    structured = _structured(result, output_schema)
    content = _content_blocks(result.content)
    if structured is not None and not modern and not isinstance(structured, dict):
        if not content:
            content = [_types.TextContent(type="text", text=_json_text(structured))]
        structured = None
    if structured is not None and not content:
        content = [_types.TextContent(type="text", text=_json_text(structured))]
    return _types.CallToolResult(
        content=content,
        structured_content=structured,
        is_error=False,
        _meta=_result_meta(result),
    )
