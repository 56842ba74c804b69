"""The MCP frontend's two meta tools, listed whenever a surface defers anything:
`search_tools` (find deferred tools, with their full input schemas) and `call_tool` (call any
surfaced tool by name). Their MCP definitions, argument checks and the search answer's shape."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
import mcp.types as types

from bridge.arguments import invalid_arguments, schema_errors
from bridge.model import BridgeError, DeferredToolRef, ToolSearchResult
from bridge.search import MAX_QUERY_CHARS
from bridge.translate.mcp import CALL_TOOL, SEARCH_TOOLS

__all__ = [
    "CALL_TOOL",
    "MAX_SEARCH_LIMIT",
    "META_TOOL_NAMES",
    "SEARCH_TOOLS",
    "call_arguments",
    "meta_tools",
    "search_arguments",
    "search_payload",
    "short_description",
]

META_TOOL_NAMES = frozenset({SEARCH_TOOLS, CALL_TOOL})
MAX_SEARCH_LIMIT = 50

_SEARCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What the tool should do, in keywords (e.g. 'create issue github'), "
            "or 'select:name1,name2' to fetch tools by exact name.",
            "maxLength": MAX_QUERY_CHARS,
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_LIMIT,
            "default": 10,
            "description": "Most matches to return.",
        },
        "namespace": {"type": "string", "description": "Only tools of this upstream."},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Only tools carrying every one of these tags.",
        },
        "kind": {
            "type": "string",
            "description": "Only tools of this kind, e.g. openapi_operation or mcp_tool.",
        },
        "read_only": {
            "type": "boolean",
            "description": "true: only read-only tools; false: only tools that change things.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
_SEARCH_MATCHES: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "native_name": {"type": "string"},
            "description": {"type": "string"},
            "input_schema": {"type": "object"},
            "loading_state": {"type": "string"},
        },
        "required": ["name", "input_schema"],
    },
}
_SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "matches": _SEARCH_MATCHES,
        "how_to_call": {"type": "string"},
        "total_deferred_tools": {"type": "integer"},
        "suggestions": {
            **_SEARCH_MATCHES,
            "description": "When nothing matched: the tools nearest in meaning, "
            "which share none of the query's words; check one fits before calling it.",
        },
        "hint": {"type": "string"},
    },
    "required": ["query", "matches", "how_to_call"],
}
_CALL_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Exact tool name, as search_tools returned it."},
        "arguments": {
            "type": "object",
            "description": "Arguments matching that tool's input schema.",
            "default": {},
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}
_SEARCH_VALIDATOR = jsonschema.Draft202012Validator(_SEARCH_INPUT)
_CALL_VALIDATOR = jsonschema.Draft202012Validator(_CALL_INPUT)


def meta_tools() -> list[types.Tool]:
    return [
        types.Tool(
            name=SEARCH_TOOLS,
            title="Search tools",
            description=(
                "Find tools that are not in your tool list yet. Returns the best matches with their full "
                "input schemas. Call a match through call_tool; when your client follows tool list changes, "
                "the matches are also added to your tool list and can be called by name."
            ),
            input_schema=_SEARCH_INPUT,
            output_schema=_SEARCH_OUTPUT,
            annotations=types.ToolAnnotations(
                title="Search tools",
                read_only_hint=True,
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        ),
        types.Tool(
            name=CALL_TOOL,
            title="Call a tool",
            description=(
                "Call any tool found through search_tools, by its exact name. The arguments are checked "
                "against that tool's input schema before anything runs."
            ),
            input_schema=_CALL_INPUT,
        ),
    ]


def _check(validator: jsonschema.Draft202012Validator, tool: str, arguments: Any) -> None:
    errors = schema_errors(validator, arguments)
    if errors:
        raise invalid_arguments(repr(tool), errors)


def search_arguments(arguments: Any) -> dict[str, Any]:
    """Checked keyword arguments for `ToolSearch.search` (a `limit` above the maximum is clamped;
    `1e400`, which the SDK's reader takes as infinity, is no integer)."""
    limit = arguments.get("limit") if isinstance(arguments, dict) else None
    if (
        isinstance(limit, int | float)
        and not isinstance(limit, bool)
        and MAX_SEARCH_LIMIT < limit < math.inf
    ):
        arguments = {**arguments, "limit": MAX_SEARCH_LIMIT}
    _check(_SEARCH_VALIDATOR, SEARCH_TOOLS, arguments)
    tags = arguments.get("tags")
    if not arguments["query"].strip() and not (
        arguments.get("namespace")
        or tags
        or arguments.get("kind")
        or arguments.get("read_only") is not None
    ):
        # as over REST: an empty query lists tools only when a filter says which
        raise BridgeError(
            "the query of search_tools is empty; give keywords, select:name1,name2, or a filter "
            "(namespace, tags, kind, read_only) that lists tools by itself",
            error_class="invalid_arguments",
            recoverability="change_arguments",
            details={"parameter": "query"},
        )
    return {
        "query": arguments["query"],
        "limit": int(arguments.get("limit", 10)),  # 5.0 is an integer to JSON Schema
        "namespace": arguments.get("namespace"),
        "tags": list(tags) if tags else None,
        "kind": arguments.get("kind"),
        "read_only": arguments.get("read_only"),
    }


def call_arguments(arguments: Any) -> tuple[str, dict[str, Any]]:
    """(tool name, its arguments) from a `call_tool` call."""
    _check(_CALL_VALIDATOR, CALL_TOOL, arguments)
    return arguments["name"], arguments.get("arguments") or {}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def short_description(text: str | None, limit: int = 200) -> str:
    """First paragraph, cut at a sentence end when it is long."""
    text = (text or "").strip().split("\n\n", 1)[0].replace("\n", " ")
    if len(text) <= limit:
        return text
    cut = text[:limit]
    ends = [m.start() for m in _SENTENCE_END.finditer(cut)]
    return cut[: ends[-1]] if ends and ends[-1] > limit // 3 else cut.rstrip() + "..."


def search_payload(
    result: ToolSearchResult, *, by_name: bool, native_names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The structured answer of `search_tools`. `by_name` says the matches were added to the
    caller's tool list (handshake-era sessions); `native_names` gives, by tool id, each match's
    name at its upstream (the MCP tool name, operationId, skill id, command or federated name)."""
    matches = [_search_match(ref, native_names) for ref in result.matches]
    if by_name and matches:
        how = "The matches are now in your tool list: call them by name (or through call_tool)."
    elif result.suggestions and not matches:
        how = 'Call a suggestion that does what is asked through call_tool with {"name": <its name>, "arguments": {...}}.'
    else:
        how = 'Call a match through call_tool with {"name": <match name>, "arguments": {...}}.'
    payload: dict[str, Any] = {
        "query": result.query,
        "matches": matches,
        "how_to_call": how,
        "total_deferred_tools": result.total_deferred_tools,
    }
    if result.missing_names:
        payload["missing_names"] = result.missing_names
    if result.pending_providers:
        payload["pending_providers"] = result.pending_providers
    if result.suggestions:  # no match: the tools nearest in meaning, called through call_tool
        payload["suggestions"] = [_search_match(ref, native_names) for ref in result.suggestions]
    if result.hint:
        payload["hint"] = result.hint
    return payload


def _search_match(ref: DeferredToolRef, native_names: Mapping[str, str] | None) -> dict[str, Any]:
    """One match (or suggestion) of `search_payload`."""
    match: dict[str, Any] = {
        "name": ref.name,
        "description": short_description(ref.description or ref.search_hint),
        "input_schema": ref.input_schema or {"type": "object", "properties": {}},
        "loading_state": ref.loading_state,
    }
    if ref.namespace:
        match["namespace"] = ref.namespace
    if native_names and native_names.get(ref.tool_id):  # the tool's own name at its upstream
        match["native_name"] = native_names[ref.tool_id]
    if ref.score is not None:
        match["score"] = ref.score
    if ref.reason:
        match["reason"] = ref.reason
    if (
        ref.alternatives
    ):  # other upstreams' tools of this name and meaning, callable through call_tool
        match["alternatives"] = [c["name"] for c in ref.alternatives]
        if ref.alternatives_total:
            match["alternatives_total"] = ref.alternatives_total
    return match
