"""Text as the bridge quotes and stores it: a caller's name or id quoted in an error message,
lone surrogates (which no UTF-8 encoder accepts) replaced in an upstream's values, and the text
of a result's content blocks."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

__all__ = ["QUOTED_CHARS", "has_surrogates", "quoted", "text_of", "without_surrogates"]


_SURROGATE = re.compile("[\ud800-\udfff]")
QUOTED_CHARS = 60


def quoted(text: str) -> str:
    """A caller's name or id as an error message quotes it: its first QUOTED_CHARS characters,
    and its length when longer (a 60 KB id is not sent back whole)."""
    return (
        repr(text)
        if len(text) <= QUOTED_CHARS
        else f"{text[:QUOTED_CHARS]!r}… ({len(text)} characters)"
    )


def text_of(content: list[dict[str, Any]]) -> str:
    """The text of the text blocks of `content` (content blocks in MCP shapes), a line each."""
    return "\n".join(
        b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def has_surrogates(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate replaced by U+FFFD, walking strings, lists, tuples,
    dicts and records. An upstream's JSON may hold an unpaired `\\ud800` escape; Python reads it
    into a string that no UTF-8 encoder (SQLite, Tantivy, an HTTP response) accepts. A valid
    pair is read as one character, so any surrogate left in a string is a lone one."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(without_surrogates(v) for v in value)
    if isinstance(value, BaseModel):
        return value.model_copy(
            update={k: without_surrogates(getattr(value, k)) for k in type(value).model_fields}
        )
    return value
