"""What a mapped OpenAPI operation keeps for its calls: the `Operation` record the invoker builds
the HTTP request from, the specs of its parameters and request body, and the kind of body a
media type is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["BodyKind", "BodySpec", "Location", "Operation", "ParamSpec", "body_kind"]

Location = Literal["path", "query", "header", "cookie"]
BodyKind = Literal["json", "form", "multipart", "text", "binary"]


@dataclass(frozen=True)
class ParamSpec:
    prop: str  # property of the tool's input
    name: str  # name on the wire
    location: Location
    style: str
    explode: bool
    allow_reserved: bool = False
    media_type: str | None = None  # a `content` parameter: the value is serialized as this type


@dataclass(frozen=True)
class BodySpec:
    media_type: str
    kind: BodyKind
    prop: str | None  # the input property holding the whole body, or None when inlined
    fields: tuple[str, ...] = ()  # inlined body properties
    required: bool = False
    # the inlined body's own required properties: an optional body given any field needs them
    fields_required: tuple[str, ...] = ()
    encoding: tuple[tuple[str, dict[str, Any]], ...] = ()
    binary_fields: frozenset[str] = frozenset()
    file_part: str | None = None  # a multipart body that is one file: the name of its part


@dataclass
class Operation:
    native_id: str
    name: str
    method: str
    path: str
    server_url: str
    params: tuple[ParamSpec, ...]
    body: BodySpec | None
    security: list[dict[str, list[str]]] | None
    idempotent: bool
    wrap_result: bool
    operation_id: str | None = None


def body_kind(media_type: str) -> BodyKind:
    mt = media_type.split(";")[0].strip().lower()
    if mt == "application/json" or mt.endswith("+json") or mt == "*/*":
        return "json"
    if mt == "application/x-www-form-urlencoded":
        return "form"
    if mt.startswith("multipart/"):
        return "multipart"
    if (
        mt.startswith("text/")
        or mt.endswith(("+xml", "+yaml"))
        or mt in ("application/xml", "application/yaml", "application/x-yaml")
    ):
        return "text"
    return "binary"
