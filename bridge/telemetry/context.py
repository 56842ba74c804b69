"""W3C trace context (`traceparent`, `tracestate`) as the bridge takes it from a caller and
passes it on to an upstream, with or without tracing of its own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["TRACEPARENT", "TRACESTATE", "from_meta", "trace_id_of", "valid_traceparent"]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# version 00 (and any later version, read as 00 is: its first four fields), ids not all zero
_TRACEPARENT = re.compile(
    r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(-.*)?"
)
MAX_TRACESTATE = 512  # W3C: 32 members of up to 256 characters; a longer one is dropped, not cut


def valid_traceparent(value: Any) -> str | None:
    """`value` when it is a traceparent the bridge may pass on (version ff and malformed ones
    are not), else None."""
    if not isinstance(value, str) or len(value) > 256:
        return None
    value = value.strip()
    if (
        _TRACEPARENT.fullmatch(value) is None
        or value.startswith("ff")
        or (value.startswith("00") and len(value) != 55)
    ):
        return None
    return value


def valid_tracestate(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TRACESTATE:
        return None
    return value.strip()


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a valid traceparent."""
    return traceparent[3:35] if traceparent else None


def from_meta(meta: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(traceparent, tracestate) an MCP request carries in `params._meta`, as the MCP
    specification reserves those keys for W3C trace context."""
    if not meta:
        return None, None
    parent = valid_traceparent(meta.get(TRACEPARENT))
    return parent, valid_tracestate(meta.get(TRACESTATE)) if parent else None
