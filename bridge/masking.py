"""Masking of configured secret values (tokens, keys, the environment an upstream is given) in
the text and JSON values the bridge passes on: log lines, error texts, what an upstream said.

Every adapter and the invocation pipeline mask with these two functions, so a secret is masked
alike wherever it shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

__all__ = ["MASK", "SHORTEST_SECRET", "masked", "masked_url", "masked_value", "secret_values"]

MASK = "***"
# A value this short is no secret (`DEBUG: "1"`, `MODE: "on"`), and masking it would garble every
# text it occurs in.
SHORTEST_SECRET = 4


def secret_values(values: Iterable[str | None]) -> list[str]:
    """The values that are masked: each once, at least SHORTEST_SECRET characters long, the
    longest first (so that a secret holding another is masked whole)."""
    return sorted({v for v in values if v and len(v) >= SHORTEST_SECRET}, key=len, reverse=True)


def masked(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value in it replaced by MASK."""
    for secret in secret_values(secrets):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def masked_url(url: str) -> str:
    """`url` with the password in it replaced by MASK (a database's URL in a log line or in
    health)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    port = f":{parts.port}" if parts.port else ""
    return parts._replace(
        netloc=f"{parts.username or ''}:{MASK}@{parts.hostname or ''}{port}"
    ).geturl()


def masked_value(value: Any, secrets: Iterable[str]) -> Any:
    """`value` with every secret value in its strings replaced by MASK, walking strings, lists,
    tuples, dicts (keys and values) and records (a copy of each field masked); the value itself
    when there is no secret to mask."""
    found = secret_values(secrets)
    return _masked_value(value, found) if found else value


def _masked_value(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {_masked_value(k, secrets): _masked_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked_value(v, secrets) for v in value)
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return value.model_copy(
            update={k: _masked_value(getattr(value, k), secrets) for k in fields}
        )
    return value
