"""The head of a `tools/call` result (all but its content blocks) checked with the SDK's types,
and the verdict on each head kept: a server answers most calls with the same head (`isError`,
`resultType`, its `serverInfo` stamp), and the SDK's checks of one head always end alike."""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from adapters.mcp.listing import check_result

__all__ = ["checked_head"]

# Heads whose verdict is kept, and the longest kept (as JSON text): a head with a large
# structured content is checked each time rather than kept.
KEPT_HEADS = 256
KEPT_HEAD_CHARS = 2048

# A head's JSON text names it exactly: heads come parsed from JSON, so two heads with one text
# hold the same values of the same types in the same order.
_TEXT = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode

_FROM_HEAD = object()  # in a kept dump's order: the value is the head's own
_SCALARS = (str, int, float, bool, type(None))

# (protocol version, head's text) -> the head checked, and its dump's keys in order, each with
# the value the dump gives it where that is a default the head lacks
_kept: dict[tuple[str, str], tuple[types.CallToolResult, tuple[tuple[str, Any], ...]]] = {}


def checked_head(version: str, head: dict[str, Any]) -> tuple[types.CallToolResult, dict[str, Any]]:
    """`head` (a result whose `content` is empty) checked as `ClientSession.send_request` checks
    it at `version`, as the SDK's model, and that model's wire dump. Raises pydantic's
    ValidationError for a head the SDK rejects."""
    try:
        text = _TEXT(head)
    except (TypeError, ValueError):  # not JSON's values: checked as it is
        text = None
    key = (version, text) if text is not None and len(text) <= KEPT_HEAD_CHARS else None
    kept = _kept.get(key) if key is not None else None
    if kept is not None:
        result, order = kept
        return result, {name: head[name] if value is _FROM_HEAD else value for name, value in order}
    check_result("tools/call", version, head)
    result = types.CallToolResult.model_validate(head, by_name=False)
    wire = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    if key is not None:
        _keep(key, head, result, wire)
    return result, wire


def _keep(
    key: tuple[str, str], head: dict[str, Any], result: types.CallToolResult, wire: dict[str, Any]
) -> None:
    """Keep the verdict on `head` when its dump is the head's own values (reordered, some
    dropped) and defaults of single values: a later equal head is then dumped by taking its
    values in that order."""
    order: list[tuple[str, Any]] = []
    for name, value in wire.items():
        if name in head and _TEXT(head[name]) == _TEXT(value):
            order.append((name, _FROM_HEAD))
        elif name not in head and isinstance(value, _SCALARS):
            order.append((name, value))
        else:
            return
    if len(_kept) >= KEPT_HEADS:
        _kept.clear()
    _kept[key] = (result, tuple(order))
