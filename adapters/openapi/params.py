"""Serialization of tool arguments into an HTTP request the way an OpenAPI document describes it:
parameter `style` / `explode` (simple, form, label, matrix, deepObject, spaceDelimited,
pipeDelimited) for path, query, header and cookie, and JSON, form-urlencoded, multipart, text and
binary request bodies."""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import aiohttp

from adapters.openapi.records import BodySpec, Operation, ParamSpec
from bridge.model import BridgeError

__all__ = [
    "RequestParts",
    "build_request",
    "serialize_cookie",
    "serialize_header",
    "serialize_path",
    "serialize_query",
]

# what `allowReserved` lets through unencoded: RFC 3986's reserved characters, less those a query
# cannot hold as they are (`#` would end it, `[` `]`) or that split or change it as a form (`&`
# would start another parameter, `+` reads as a space), which OpenAPI 3.1.1 leaves encoded
_RESERVED = ":/?@!$'()*,;="


@dataclass
class RequestParts:
    """Everything of one request except the credentials, which `adapters.openapi.auth` adds."""

    method: str
    url: str  # server URL plus the expanded path, percent-encoded
    query: list[str] = field(default_factory=list)  # encoded `name=value` items
    headers: dict[str, str] = field(default_factory=dict)
    cookies: list[str] = field(default_factory=list)  # `name=value` items
    data: Any = None  # bytes, str or aiohttp.FormData
    tls: ssl.SSLContext | None = (
        None  # of the API's origin only: a client certificate's, or `ca_file`'s
    )

    def full_url(self) -> str:
        return self.url + ("?" + "&".join(self.query) if self.query else "")

    def header_items(self) -> dict[str, str]:
        """The headers to send, the cookies as one `Cookie` header: after the cookies of a
        `Cookie` header given otherwise (a configured one), but those of the same names."""
        headers = dict(self.headers)
        if self.cookies:
            names = {_name(item) for item in self.cookies}
            given = [headers.pop(key) for key in [k for k in headers if k.lower() == "cookie"]]
            kept = [
                item
                for value in given
                for part in value.split(";")
                if (item := part.strip()) and _name(item) not in names
            ]
            headers["Cookie"] = "; ".join([*kept, *self.cookies])
        return headers

    def set_header(self, name: str, value: str) -> None:
        """Set header `name`, in place of one of the same name in another case (a request
        carries a header once: aiohttp, given `X-Key` and `x-key`, sends the one given last)."""
        lower = name.lower()
        for key in [k for k in self.headers if k.lower() == lower]:
            del self.headers[key]
        self.headers[name] = value

    def default_headers(self, headers: dict[str, str]) -> None:
        """Add `headers` the request does not already carry (compared without case). A
        configured `Cookie`'s cookies take the place of the request's own of their names (an
        exploded object parameter's keys), as a configured header does a header parameter's;
        a credential's cookie, set after, takes theirs."""
        taken = {k.lower() for k in self.headers}
        for name, value in headers.items():
            if name.lower() not in taken:
                self.headers[name] = value
            if name.lower() == "cookie":
                configured = {_name(item) for part in value.split(";") if (item := part.strip())}
                self.cookies = [item for item in self.cookies if _name(item) not in configured]

    def set_query(self, name: str, item: str) -> None:
        """Put one encoded `name=value` item in place of any other of that name."""
        self.query = [i for i in self.query if _name(i) != name] + [item]

    def set_cookie(self, name: str, item: str) -> None:
        self.cookies = [i for i in self.cookies if _name(i) != name] + [item]


def _name(item: str) -> str:
    """The name of an encoded `name=value` item of a query or a Cookie header."""
    return unquote(item.partition("=")[0])


def _invalid(message: str) -> BridgeError:
    return BridgeError(message, error_class="invalid_arguments", recoverability="change_arguments")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _enc(value: Any, reserved: bool = False) -> str:
    return quote(_text(value), safe=_RESERVED if reserved else "")


def _pairs(value: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    return ((str(k), v) for k, v in value.items() if v is not None)


def _prepare(spec: ParamSpec, value: Any) -> Any:
    """A `content` parameter is one string in its media type (JSON here)."""
    if spec.media_type is not None and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value


def serialize_path(spec: ParamSpec, value: Any) -> str:
    """The text that replaces `{name}` in the path template."""
    value = _prepare(spec, value)
    style, explode, name = spec.style, spec.explode, quote(spec.name, safe="")
    if style == "simple":
        if isinstance(value, list):
            return ",".join(_enc(v) for v in value)
        if isinstance(value, dict):
            return ",".join(
                f"{_enc(k)}={_enc(v)}" if explode else f"{_enc(k)},{_enc(v)}"
                for k, v in _pairs(value)
            )
        return _enc(value)
    if style == "label":
        if isinstance(value, list):
            return "." + ("." if explode else ",").join(_enc(v) for v in value)
        if isinstance(value, dict):
            if explode:
                return "".join(f".{_enc(k)}={_enc(v)}" for k, v in _pairs(value))
            return "." + ",".join(f"{_enc(k)},{_enc(v)}" for k, v in _pairs(value))
        return "." + _enc(value)
    if style == "matrix":
        if isinstance(value, list):
            if explode:
                return "".join(f";{name}={_enc(v)}" for v in value)
            return f";{name}=" + ",".join(_enc(v) for v in value)
        if isinstance(value, dict):
            if explode:
                return "".join(f";{_enc(k)}={_enc(v)}" for k, v in _pairs(value))
            return f";{name}=" + ",".join(f"{_enc(k)},{_enc(v)}" for k, v in _pairs(value))
        return f";{name}" if value == "" else f";{name}={_enc(value)}"
    raise _invalid(
        f"path parameter {spec.name!r} has style {style!r}, which OpenAPI does not allow in a path"
    )


def serialize_query(spec: ParamSpec, value: Any) -> list[str]:
    """Encoded `name=value` items for the query string."""
    value = _prepare(spec, value)
    style, explode, reserved = spec.style, spec.explode, spec.allow_reserved
    name = quote(spec.name, safe="[]")

    def enc(v: Any) -> str:
        return _enc(v, reserved)

    if style == "deepObject":
        if not isinstance(value, (dict, list)):
            return [f"{name}={enc(value)}"]
        return _deep(name, value, enc)
    if style in ("spaceDelimited", "pipeDelimited") and not explode:
        sep = "%20" if style == "spaceDelimited" else "|"
        if isinstance(value, list):
            return [f"{name}=" + sep.join(enc(v) for v in value)]
        if isinstance(value, dict):
            return [f"{name}=" + sep.join(f"{enc(k)}{sep}{enc(v)}" for k, v in _pairs(value))]
        return [f"{name}={enc(value)}"]
    if style not in ("form", "spaceDelimited", "pipeDelimited"):
        raise _invalid(
            f"query parameter {spec.name!r} has style {style!r}, which OpenAPI does not allow in a query"
        )
    if isinstance(value, list):
        if explode:
            return [f"{name}={enc(v)}" for v in value]
        return [f"{name}=" + ",".join(enc(v) for v in value)]
    if isinstance(value, dict):
        if explode:
            return [f"{quote(k, safe='[]')}={enc(v)}" for k, v in _pairs(value)]
        return [f"{name}=" + ",".join(f"{enc(k)},{enc(v)}" for k, v in _pairs(value))]
    return [f"{name}={enc(value)}"]


def _deep(prefix: str, value: dict[str, Any] | list[Any], enc: Any) -> list[str]:
    """deepObject items: `o[k]=v` for an object's keys, `a[0]=v` for an array's items, nested
    (`items[0][price]=p`). OpenAPI leaves arrays undefined here; indexes are what Stripe, whose
    document uses deepObject arrays throughout, and the `qs` convention read."""
    out: list[str] = []
    pairs = (
        ((str(i), v) for i, v in enumerate(value) if v is not None)
        if isinstance(value, list)
        else _pairs(value)
    )
    for key, item in pairs:
        inner = f"{prefix}[{quote(key, safe='')}]"
        if isinstance(item, (dict, list)):
            out.extend(_deep(inner, item, enc))
        else:
            out.append(f"{inner}={enc(item)}")
    return out


def serialize_header(spec: ParamSpec, value: Any) -> str:
    value = _prepare(spec, value)
    if isinstance(value, list):
        text = ",".join(_text(v) for v in value)
    elif isinstance(value, dict):
        text = ",".join(
            f"{k}={_text(v)}" if spec.explode else f"{k},{_text(v)}" for k, v in _pairs(value)
        )
    else:
        text = _text(value)
    if "\r" in text or "\n" in text:
        raise _invalid(f"header parameter {spec.name!r} must not contain line breaks")
    return text


def serialize_cookie(spec: ParamSpec, value: Any) -> list[str]:
    """`name=value` items of the Cookie header (form style)."""
    value = _prepare(spec, value)
    name = spec.name
    if isinstance(value, list):
        if spec.explode:
            return [f"{name}={_enc(v)}" for v in value]
        return [f"{name}=" + ",".join(_enc(v) for v in value)]
    if isinstance(value, dict):
        if spec.explode:  # the keys are cookie names: a `;` in one must not start another cookie
            return [f"{_enc(k)}={_enc(v)}" for k, v in _pairs(value)]
        return [f"{name}=" + ",".join(f"{_enc(k)},{_enc(v)}" for k, v in _pairs(value))]
    return [f"{name}={_enc(value)}"]


# ---------------------------------------------------------------------- bodies


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _invalid(f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"{what} is not valid base64") from None


def _form_items(key: str, value: Any, encoding: dict[str, Any]) -> list[str]:
    style = encoding.get("style", "form")
    explode = encoding.get("explode", style == "form")
    spec = ParamSpec(
        prop=key,
        name=key,
        location="query",
        style=style,
        explode=explode,
        allow_reserved=bool(encoding.get("allowReserved")),
    )
    return serialize_query(spec, value)


def _body(body: BodySpec, value: Any) -> tuple[Any, str | None]:
    """(payload, content type); the content type is None where aiohttp sets it (multipart)."""
    encodings = dict(body.encoding)
    if body.kind == "json":
        return json.dumps(
            value, ensure_ascii=False, separators=(",", ":")
        ).encode(), body.media_type
    if body.kind == "form":
        if not isinstance(value, dict):
            raise _invalid("a form body must be an object")
        items = [i for k, v in _pairs(value) for i in _form_items(k, v, encodings.get(k, {}))]
        return "&".join(items).encode(), body.media_type
    if body.kind == "multipart" and body.file_part is not None:
        form = aiohttp.FormData(quote_fields=True)
        content_type = encodings.get(body.file_part, {}).get("contentType")
        form.add_field(
            body.file_part,
            _b64(value, "the body"),
            filename=body.file_part,
            content_type=content_type or "application/octet-stream",
        )
        return form, None
    if body.kind == "multipart":
        if not isinstance(value, dict):
            raise _invalid("a multipart body must be an object")
        form = aiohttp.FormData(quote_fields=True)
        for key, item in _pairs(value):
            content_type = encodings.get(key, {}).get("contentType")
            if key in body.binary_fields:
                form.add_field(
                    key,
                    _b64(item, f"field {key!r}"),
                    filename=key,
                    content_type=content_type or "application/octet-stream",
                )
            elif isinstance(item, list) and all(not isinstance(i, (dict, list)) for i in item):
                for part in item:
                    form.add_field(key, _text(part), content_type=content_type or "text/plain")
            elif isinstance(item, (dict, list)):
                form.add_field(key, _text(item), content_type=content_type or "application/json")
            else:
                form.add_field(key, _text(item), content_type=content_type or "text/plain")
        if not value:  # aiohttp sends a form without fields as application/x-www-form-urlencoded
            return aiohttp.MultipartWriter("form-data"), None
        return form, None
    if body.kind == "text":
        return _text(value).encode(), body.media_type
    return _b64(value, "the body"), body.media_type


def _check_segments(template: str, path: str) -> None:
    """Refuse a path whose values made a whole segment `.` or `..`: servers and proxies resolve
    dot segments (RFC 3986), so the request would reach another route. (A value never holds a
    `/`: it is percent-encoded.)"""
    made = [segment for segment in path.split("/") if segment in (".", "..")]
    if len(made) > len([segment for segment in template.split("/") if segment in (".", "..")]):
        raise _invalid(
            f"the path parameters of {template} made a path segment '{made[-1]}', which a server reads as a "
            "step in the path: a path value cannot be '.' or '..'"
        )


def build_request(op: Operation, arguments: dict[str, Any]) -> RequestParts:
    """The request for one call of `op` with validated arguments (no credentials yet)."""
    path = op.path
    parts = RequestParts(method=op.method, url="")
    for spec in op.params:
        if spec.prop not in arguments or arguments[spec.prop] is None:
            if spec.location == "path":
                raise _invalid(f"path parameter {spec.prop!r} is required")
            continue
        value = arguments[spec.prop]
        if spec.location == "path":
            written = serialize_path(spec, value)
            if (
                not written
            ):  # `/users/{id}/keys` with id "" is `/users//keys`: another route, or none
                raise _invalid(
                    f"path parameter {spec.prop!r} is empty: a path value needs at least one character"
                )
            path = path.replace("{" + spec.name + "}", written)
        elif spec.location == "query":
            parts.query.extend(serialize_query(spec, value))
        elif spec.location == "header":
            parts.set_header(spec.name, serialize_header(spec, value))
        else:
            parts.cookies.extend(serialize_cookie(spec, value))
    _check_segments(op.path, path)
    parts.url = op.server_url + path
    body = op.body
    if body is not None:
        if body.prop is not None:
            value = arguments.get(body.prop)
            present = body.prop in arguments
        else:
            value = {k: arguments[k] for k in body.fields if k in arguments}
            present = bool(value) or body.required
            missing = [k for k in body.fields_required if k not in value]
            if (
                value and missing
            ):  # the input schema cannot say it: an optional body is all or nothing
                raise _invalid(
                    f"the request body of {op.method} {op.path} is optional, but once any of its fields is "
                    f"given it needs {', '.join(repr(k) for k in missing)} too (give none of its fields to send no body)"
                )
        if present:
            parts.data, content_type = _body(body, value)
            if content_type:
                parts.set_header("Content-Type", content_type)
    return parts
