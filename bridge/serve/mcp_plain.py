"""The most common `tools/call` result written without the SDK's models, for the lean path
(bridge/serve/mcp_lean.py): a success of plain text blocks, with structured content and `_meta`
of JSON values alone, put on the wire in the form the SDK's own shaping gives it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import mcp.types as types

from bridge.model import ToolResult
from bridge.translate.mcp_results import plain_result, render_result

__all__ = ["PlainResults"]

log = logging.getLogger("bridge.serve.mcp")

# the probe `PlainResults` has the SDK shape, and the kinds of its fields
_PROBE_TEXT = "\x00probe"
_PROBE_KEY = "probe/entry"
_PROBE_ENTRY = {"probe": 1}
_PROBE_STRUCTURED = {"probe": [1, "two"]}
_CONSTANT, _CONTENT, _STRUCTURED, _META = 0, 1, 2, 3


class PlainResults:
    """Called as `plain(protocol_version, texts, structured, meta)`: the `tools/call` result whose
    content is text blocks alone (`texts`), whose structured content is `structured` (an object, or
    None for none) and whose `_meta` is `meta`, all of JSON values alone (no number JSON cannot
    hold) and no `_meta` key MCP reserves, as the SDK's shaping (`shape`, of `result_shaper`) puts
    it on the wire, made without its models: the same fields in the same order, the same constant
    ones (`isError`, `resultType` on 2026-07-28), structured content where the version has it, and
    the same `serverInfo` stamp. The form of each protocol version is learnt once, from a probe
    result of that kind the shaping shapes; a version whose probe comes out in any other form (a
    later SDK's sieve, a cache hint on `tools/call`) gets None, for the SDK to shape."""

    def __init__(self, shape: Callable[[str, str, Any], dict[str, Any]]) -> None:
        self._shape = shape
        self._forms: dict[str, list[tuple[str, int, Any]] | None] = {}
        self.written = 0

    def __call__(
        self,
        protocol_version: str,
        texts: list[str],
        structured: dict[str, Any] | None,
        meta: dict[str, Any],
    ) -> dict[str, Any] | None:
        try:
            form = self._forms[protocol_version]
        except KeyError:
            form = self._forms[protocol_version] = self._learn(protocol_version)
        if form is None:
            return None
        wire: dict[str, Any] = {}
        for key, kind, value in form:
            if kind == _CONTENT:
                if value:  # `text` first, as the sieve's model declares it
                    wire[key] = [{"text": text, "type": "text"} for text in texts]
                else:
                    wire[key] = [{"type": "text", "text": text} for text in texts]
            elif kind == _META:
                wire[key] = {**meta, **value}
            elif kind == _STRUCTURED:
                if structured is not None:
                    wire[key] = structured
            else:
                wire[key] = value
        return wire

    def _learn(self, protocol_version: str) -> list[tuple[str, int, Any]] | None:
        """The fields of the shaped probe in their order: (key, kind, what the kind needs)."""
        probe = types.CallToolResult(
            content=[types.TextContent(type="text", text=_PROBE_TEXT)],
            structured_content=dict(_PROBE_STRUCTURED),
            is_error=False,
            _meta={_PROBE_KEY: dict(_PROBE_ENTRY)},
        )
        try:
            shaped = self._shape("tools/call", protocol_version, probe)
        except Exception:
            log.warning("results of protocol %s are shaped by the SDK alone", protocol_version)
            return None
        form: list[tuple[str, int, Any]] = []
        for key, value in shaped.items():
            if key == "content":
                block = value[0] if isinstance(value, list) and len(value) == 1 else None
                if block != {"type": "text", "text": _PROBE_TEXT}:
                    return None
                form.append((key, _CONTENT, next(iter(block)) == "text"))
            elif key == "structuredContent":
                if value != _PROBE_STRUCTURED:
                    return None
                form.append((key, _STRUCTURED, None))
            elif key == "_meta":
                if (
                    not isinstance(value, dict)
                    or next(iter(value), None) != _PROBE_KEY
                    or value[_PROBE_KEY] != _PROBE_ENTRY
                ):
                    return None
                stamp = {k: v for k, v in value.items() if k != _PROBE_KEY}
                form.append((key, _META, stamp))
            elif value is None or isinstance(value, bool | int | float | str):
                form.append((key, _CONSTANT, value))
            else:
                return None
        if not {"content", "_meta"} <= {key for key, kind, _ in form if kind != _CONSTANT}:
            return None
        return form

    def render(
        self, result: ToolResult, protocol_version: str | None, output_schema: dict[str, Any] | None
    ) -> Any:
        """A call's result on the wire where this makes it (`written` counts those), else the
        SDK's `CallToolResult` of it (`render_result`), for the SDK to shape."""
        plain = plain_result(result, output_schema)
        if plain is not None and protocol_version is not None:
            wire = self(protocol_version, *plain)
            if wire is not None:
                self.written += 1
                return wire
        return render_result(result, protocol_version, output_schema)
