"""An OpenAPI operation's request body and success response as parts of its tool: the media type
chosen (JSON first, a media type before a range), an object body inlined among the parameters or
kept whole under a property of its own, forms, multipart files and XML as the adapter sends them,
and the output schema of the first success response with JSON content."""

from __future__ import annotations

import itertools
from typing import Any

from adapters.openapi.bounds import bounded_output_schema
from adapters.openapi.records import BodyKind, BodySpec, body_kind
from adapters.openapi.schema import SchemaInliner, SpecError

__all__ = ["BodyMapping"]

_BODY_PREFERENCE = {"json": 0, "form": 1, "multipart": 2, "text": 3, "binary": 4}


def _is_xml(media_type: str) -> bool:
    mt = media_type.split(";")[0].strip().lower()
    return mt.endswith(("/xml", "+xml"))


def _described(schema: Any) -> str:
    """What an object schema's description says, for the string that stands in for it."""
    text = schema.get("description") if isinstance(schema, dict) else None
    return f" ({text})" if isinstance(text, str) and text.strip() else ""


def _concrete(media_type: str, kind: BodyKind) -> str:
    """The Content-Type to send for a request body's media type: a range such as `*/*`,
    `application/*+json` or `text/*` names no type a request can carry, so the usual type of its
    kind stands in for it."""
    if "*" not in media_type.split(";")[0]:
        return media_type
    if kind == "text":
        return (
            "application/xml" if media_type.split(";")[0].strip().endswith("+xml") else "text/plain"
        )
    return {
        "json": "application/json",
        "form": "application/x-www-form-urlencoded",
        "multipart": "multipart/form-data",
    }.get(kind, "application/octet-stream")


def _body_prop(properties: dict[str, Any]) -> str:
    """The input property for a whole body: `body`, else `request_body`, `_body`, then `body_2`,
    `body_3` ... (parameters may hold any of these names)."""
    for prop in ("body", "request_body", "_body"):
        if prop not in properties:
            return prop
    return next(p for n in itertools.count(2) if (p := f"body_{n}") not in properties)


def _is_object_schema(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "object" or ("properties" in schema and "type" not in schema):
        return True
    parts = schema.get("allOf")
    return (
        "type" not in schema
        and isinstance(parts, list)
        and any(_is_object_schema(p) for p in parts)
    )


class BodyMapping:
    """The body side of the operation mapper (a mixin: the mapper holds the inliner)."""

    inliner: SchemaInliner

    def request_body(
        self,
        raw: Any,
        doc_base: str,
        where: str,
        properties: dict[str, Any],
        required: list[str],
        needs: set[str],
    ) -> BodySpec | None:
        if raw is None:
            return None
        body, base = self.inliner.resolve(raw, doc_base, where)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, dict) or not content:
            return None
        # of the preferred kind, a media type before a range (`application/json` before `application/*+json`)
        key = min(content, key=lambda mt: (_BODY_PREFERENCE[body_kind(mt)], "*" in mt))
        kind = body_kind(key)
        media = content[key]
        media_type = _concrete(key, kind)
        if not isinstance(media, dict | None):
            raise SpecError(
                f"a media type object (with a `schema`) is expected, got {type(media).__name__}",
                f"{where}.content[{key!r}]",
            )
        media = media or {}
        at = f"{where}.content[{key!r}].schema"
        schema = self.inliner.unwrap(
            self.inliner.expand(media.get("schema", {}), base, at, "input", needs), "input"
        )
        is_required = bool(body.get("required"))
        encoding = found if isinstance(found := media.get("encoding"), dict) else {}
        if (
            "*" in key
            and isinstance(schema, dict)
            and schema.get("type") == "string"
            and schema.get("format") == "binary"
        ):
            kind, media_type = (
                "binary",
                "application/octet-stream",
            )  # `*/*` of bytes: a file, not a JSON string
        if kind == "binary":
            schema = {
                "type": "string",
                "contentEncoding": "base64",
                "description": f"the {media_type} body, base64-encoded",
            }
        elif (
            kind == "text"
            and _is_xml(media_type)
            and not (isinstance(schema, dict) and schema.get("type") == "string")
        ):
            # an object has no one XML form (element or attribute, names, wrapping, namespaces):
            # the caller writes the document, rather than JSON being sent labelled as XML
            schema = {
                "type": "string",
                "contentMediaType": media_type,
                "description": f"the {media_type} body: an XML document" + _described(schema),
            }
        elif kind == "text" and not schema:
            schema = {"type": "string"}
        file_part = None
        if (
            kind in ("form", "multipart")
            and not _is_object_schema(schema)
            and not (
                isinstance(schema, dict)
                and any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref"))
            )
        ):
            # a form names its fields: a body described as one string, an array or anything
            # (`{}`) is sent as the adapter can send it, and described so
            about = (
                schema.get("description")
                if isinstance(schema, dict) and isinstance(schema.get("description"), str)
                else ""
            )
            if (
                kind == "multipart"
                and isinstance(schema, dict)
                and schema.get("type") == "string"
                and (schema.get("format") in ("binary", "byte") or "contentMediaType" in schema)
            ):
                file_part = (
                    "file"  # Jira's attachments: one file, in the part every such API names `file`
                )
                schema = {
                    "type": "string",
                    "contentEncoding": "base64",
                    "description": f"{about or 'the file'} (base64-encoded; sent as the multipart part `file`)",
                }
            else:
                schema = {
                    "type": "object",
                    "description": f"{about} (the form's fields, by name)"
                    if about
                    else "the form's fields, by name",
                }
        binary_fields: set[str] = set()
        if kind == "multipart" and _is_object_schema(schema):
            props = dict(schema.get("properties") or {})
            for key, sub in props.items():
                if isinstance(sub, dict) and (
                    sub.get("format") in ("binary", "byte") or "contentMediaType" in sub
                ):
                    binary_fields.add(key)
                    props[key] = {
                        "type": "string",
                        "contentEncoding": "base64",
                        "description": (sub.get("description") or f"content of {key}")
                        + " (base64-encoded)",
                    }
            schema = {**schema, "properties": props}
        fields = tuple((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else ()
        inline = (
            kind in ("json", "form", "multipart")
            and _is_object_schema(schema)
            and fields
            and not any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref"))
            and not any(f in properties for f in fields)
        )
        enc = tuple((k, v) for k, v in encoding.items() if isinstance(v, dict))
        if inline:
            properties.update(schema["properties"])
            if is_required:
                required.extend(
                    r for r in schema.get("required") or [] if r in schema["properties"]
                )
            fields_required = tuple(
                r for r in schema.get("required") or [] if r in schema["properties"]
            )
            return BodySpec(
                media_type=media_type,
                kind=kind,
                prop=None,
                fields=fields,
                required=is_required,
                fields_required=fields_required,
                encoding=enc,
                binary_fields=frozenset(binary_fields),
            )
        prop = _body_prop(properties)
        properties[prop] = schema if isinstance(schema, dict) else {}
        if is_required:
            required.append(prop)
        return BodySpec(
            media_type=media_type,
            kind=kind,
            prop=prop,
            required=is_required,
            encoding=enc,
            binary_fields=frozenset(binary_fields),
            file_part=file_part,
        )

    def response_schema(
        self, raw: Any, doc_base: str, where: str
    ) -> tuple[dict[str, Any] | None, bool]:
        """The JSON schema of the first success response that has content (`2XX` last), when that
        content has a JSON media type; wrapped in `{result: ...}` when it is not an object
        (structured content is always an object)."""
        if not isinstance(raw, dict):
            return None, False
        codes = sorted(
            (str(c) for c in raw if str(c).startswith("2")), key=lambda c: (c.upper() == "2XX", c)
        )
        for code in codes:
            response, base = self.inliner.resolve(raw[code], doc_base, f"{where}[{code!r}]")
            content = response.get("content") if isinstance(response, dict) else None
            if not isinstance(content, dict):
                continue
            for media_type, media in content.items():
                if (
                    body_kind(media_type) == "json"
                    and isinstance(media, dict)
                    and "schema" in media
                ):
                    at = f"{where}[{code!r}].content[{media_type!r}].schema"
                    needs: set[str] = set()
                    schema = self.inliner.unwrap(
                        self.inliner.expand(media["schema"], base, at, "output", needs), "output"
                    )
                    if _is_object_schema(schema):
                        return bounded_output_schema(
                            self.inliner.with_defs(dict(schema), needs, "output"),
                            self.inliner.written_size,
                        ), False
                    wrapped = {
                        "type": "object",
                        "properties": {"result": schema if isinstance(schema, dict) else {}},
                        "required": ["result"],
                    }
                    return bounded_output_schema(
                        self.inliner.with_defs(wrapped, needs, "output"), self.inliner.written_size
                    ), True
            return None, False
        return None, False
