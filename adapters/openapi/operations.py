"""OpenAPI operations as tools: selection (include / exclude), names, descriptions, the merged
input schema (parameters plus request body, whose mapping is `bodies`'), safety hints from HTTP
semantics, and for each the `Operation` record the invoker needs to build the HTTP request."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.openapi.bodies import BodyMapping
from adapters.openapi.bounds import bounded_input_schema
from adapters.openapi.records import Operation, ParamSpec
from adapters.openapi.schema import SchemaInliner, SpecError
from adapters.openapi.shared import SharedSchemas
from adapters.openapi.spec import HTTP_METHODS, Document
from bridge.model import SafetyHints, UpstreamTool

__all__ = ["Selector", "map_operations", "shown_url"]

_NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
_IGNORED_HEADERS = {"accept", "content-type", "authorization"}  # OpenAPI: described elsewhere
_DEFAULT_STYLE = {"path": "simple", "header": "simple", "query": "form", "cookie": "form"}


class Selector(BaseModel):
    """Matches operations; every given field must match. A bare string is an operationId glob."""

    model_config = ConfigDict(extra="forbid")

    tag: str | None = Field(default=None, description="glob over the operation's tags")
    operation_id: str | None = Field(default=None, description="glob over operationId")
    path: str | None = Field(default=None, description="glob over the path template, e.g. /repos/*")
    method: list[str] | None = Field(default=None, description="HTTP methods, e.g. [get, head]")

    @field_validator("method", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        value = [value] if isinstance(value, str) else value
        return [str(v).lower() for v in value] if isinstance(value, list) else value

    def matches(self, method: str, path: str, operation_id: str | None, tags: list[str]) -> bool:
        if self.method is not None and method not in self.method:
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.operation_id is not None and not fnmatch.fnmatchcase(
            operation_id or "", self.operation_id
        ):
            return False
        return not (
            self.tag is not None and not any(fnmatch.fnmatchcase(t, self.tag) for t in tags)
        )


SelectorSpec = str | Selector


def _as_selector(spec: SelectorSpec) -> Selector:
    return spec if isinstance(spec, Selector) else Selector(operation_id=spec)


def _safety(method: str, op: dict[str, Any]) -> SafetyHints:
    """HTTP semantics (inferred), overridden by `x-safety: {...}` or `x-read-only` / `x-destructive`
    / `x-idempotent` / `x-open-world` extensions (declared)."""
    read_only = method in ("get", "head", "options")
    facts: dict[str, bool] = {
        "read_only": read_only,
        "destructive": method == "delete",
        "idempotent": read_only or method in ("put", "delete", "trace"),
    }
    sources: dict[str, Any] = {k: "inferred" for k in facts}
    declared: dict[str, Any] = {}
    block = op.get("x-safety")
    if isinstance(block, dict):
        declared.update({_snake(k): v for k, v in block.items()})
    for key in ("x-read-only", "x-readonly", "x-destructive", "x-idempotent", "x-open-world"):
        if key in op:
            declared[_snake(key[2:].replace("readonly", "read-only"))] = op[key]
    known = (
        "read_only",
        "destructive",
        "idempotent",
        "open_world",
        "reversible",
        "billable",
        "requires_user_interaction",
    )
    for key, value in declared.items():
        if key in known and isinstance(value, bool):
            facts[key] = value
            sources[key] = "declared"
    if (
        sources.get("read_only") == "declared"
        and facts["read_only"]
        and "destructive" not in declared
    ):
        facts["destructive"] = False
    return SafetyHints(**facts, sources=sources)


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).replace("-", "_").lower()


def _clean(name: str) -> str:
    return _INVALID.sub("_", name).strip("_")


def _describe(summary: str, description: str, limit: int) -> str:
    text = summary.strip()
    description = description.strip()
    opening, flat = " ".join(text.split()), " ".join(description.split())
    if flat.startswith(opening) and (len(flat) == len(opening) or not flat[len(opening)].isalnum()):
        text = description or text  # a summary that is the description's opening is said once
    elif description:
        text = f"{text}\n\n{description}" if text else description
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    stop = max(cut.rfind(". "), cut.rfind("\n"))
    cut = cut[: stop + 1] if stop > limit // 2 else cut.rsplit(" ", 1)[0]
    return cut.rstrip() + "…"


def shown_url(url: str) -> str:
    """A server URL as callers and health see it: without a user and password (`base_url:
    https://ann:secret@host` sends them as Basic credentials; they are not shown)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _server_url(servers: Any, doc: Document, variables: dict[str, str], where: str) -> str:
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], dict):
        raise SpecError(
            "the document names no server; set `base_url` in the upstream's config", where
        )
    server = servers[0]
    url = str(server.get("url", ""))
    declared = server.get("variables") or {}
    if not isinstance(declared, dict):
        raise SpecError(
            f"`servers[0].variables` must be an object of variables, got {type(declared).__name__}",
            where,
        )
    for name, var in declared.items():
        value = variables.get(name, var.get("default") if isinstance(var, dict) else None)
        if value is None:
            raise SpecError(
                f"server variable {name!r} has no default; set it under `server_variables`", where
            )
        url = url.replace("{" + name + "}", str(value))
    if not urlsplit(url).scheme:
        if urlsplit(doc.uri).scheme in ("http", "https"):
            url = urljoin(doc.uri, url)
        else:
            raise SpecError(
                f"the server URL {url!r} is relative and the document was read from a file; "
                "set `base_url` in the upstream's config",
                where,
            )
    return url.rstrip("/")


def _tags(op: dict[str, Any]) -> list[str]:
    """The string tags of an operation (a bare string is no list of tags, not one per letter)."""
    tags = op.get("tags")
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _needs_a_value(schema: dict[str, Any]) -> None:
    """A required parameter's list gets `minItems: 1`, and its object, when it requires no
    property, `minProperties: 1`: an empty one is sent as no parameter at all (RFC 6570 leaves
    it undefined; a path gets an empty segment), which the server reads as the parameter missing."""
    if schema.get("type") == "array" and not (
        isinstance(schema.get("minItems"), int) and schema["minItems"] >= 1
    ):
        schema["minItems"] = 1
    elif (
        schema.get("type") == "object"
        and not schema.get("required")
        and (schema.get("properties") or schema.get("additionalProperties") is not False)
        and not (isinstance(schema.get("minProperties"), int) and schema["minProperties"] >= 1)
    ):
        schema["minProperties"] = 1


def _free(prop: str, properties: dict[str, Any]) -> str:
    """`prop`, or `prop_2`, `prop_3` ... when taken: Twilio's `StartTime<` and `StartTime>` both
    clean to `query_StartTime`, and one property would have been sent as both parameters."""
    candidate, n = prop, 1
    while candidate in properties:
        n += 1
        candidate = f"{prop[: 64 - len(str(n)) - 1]}_{n}"
    return candidate


class _Mapper(BodyMapping):
    def __init__(
        self, doc: Document, base_url: str | None, variables: dict[str, str], description_max: int
    ) -> None:
        self.doc = doc
        self.inliner = SchemaInliner(doc.lookup, doc.uri, doc.openapi_30)
        self.shared = SharedSchemas()  # the tools' schemas, each distinct one held once
        self.base_url = base_url.rstrip("/") if base_url else None
        self.variables = variables
        self.description_max = description_max
        self._servers: dict[int, str] = {}

    def server_for(self, servers: Any, where: str) -> str:
        if self.base_url:
            return self.base_url
        key = id(servers)
        if key not in self._servers:
            self._servers[key] = _server_url(servers, self.doc, self.variables, where)
        return self._servers[key]

    def parameters(
        self, raw: Any, doc_base: str, where: str
    ) -> list[tuple[dict[str, Any], str, str]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise SpecError("`parameters` must be a list", where)
        out = []
        for i, item in enumerate(raw):
            at = f"{where}[{i}]"
            param, base = self.inliner.resolve(item, doc_base, at)
            if not isinstance(param, dict) or not isinstance(param.get("name"), str):
                raise SpecError(
                    "a parameter needs a `name` (a string) and `in` (path, query, header or cookie)",
                    at,
                )
            location = param.get("in")
            if not isinstance(location, str) or location not in _DEFAULT_STYLE:
                raise SpecError(f"`in` must be path, query, header or cookie, not {location!r}", at)
            out.append((param, base, at))
        return out

    def operation(
        self,
        path: str,
        method: str,
        item: dict[str, Any],
        op: dict[str, Any],
        path_at: str,
        native_id: str,
        doc_base: str,
    ) -> tuple[Operation, UpstreamTool]:
        """`doc_base` is the URI of the file the path item lives in (relative `$ref`s start there)."""
        where = f"{path_at}.{method}"
        params = {
            (x[0]["name"], x[0]["in"]): x
            for x in self.parameters(item.get("parameters"), doc_base, f"{path_at}.parameters")
        }
        params.update(
            {
                (x[0]["name"], x[0]["in"]): x
                for x in self.parameters(op.get("parameters"), doc_base, f"{where}.parameters")
            }
        )
        templated = set(re.findall(r"\{([^{}]+)\}", path))
        undeclared = sorted(templated - {name for name, location in params if location == "path"})
        if (
            undeclared
        ):  # the URL would be sent with `{x}` in it (a validated document never gets here)
            raise SpecError(
                f"the path template's {{{undeclared[0]}}} has no `in: path` parameter; declare it",
                where,
            )
        properties: dict[str, Any] = {}
        required: list[str] = []
        needs: set[str] = set()
        specs: list[ParamSpec] = []
        for (name, location), (param, base, at) in params.items():
            if location == "header" and name.lower() in _IGNORED_HEADERS:
                continue
            media_type = None
            if "schema" in param:
                schema = self.inliner.expand(param["schema"], base, f"{at}.schema", "input", needs)
            elif isinstance(param.get("content"), dict) and param["content"]:
                media_type, media = next(iter(param["content"].items()))
                if not isinstance(media, dict | None):
                    raise SpecError(
                        f"`content[{media_type!r}]` must be a media type object (with a `schema`), "
                        f"got {type(media).__name__}",
                        at,
                    )
                schema = self.inliner.expand(
                    (media or {}).get("schema", {}), base, f"{at}.content", "input", needs
                )
            else:
                schema = {}
            schema = dict(schema) if isinstance(schema, dict) else {}
            if param.get("description") and "description" not in schema:
                schema["description"] = param["description"]
            if param.get("deprecated"):
                schema["deprecated"] = True
            prop = (
                name
                if _NAME_RULE.match(name) and name not in properties
                else _free(_clean(f"{location}_{name}")[:64], properties)
            )
            if (
                prop != name
            ):  # the model still learns which parameter it fills (`query_StartTime_2`: `StartTime>`)
                note = f"the {location} parameter {name}"
                schema["description"] = (
                    f"{schema['description']} ({note})"
                    if isinstance(schema.get("description"), str) and schema["description"]
                    else note
                )
            properties[prop] = schema
            if param.get("required") or location == "path":
                required.append(prop)
                if media_type is None:
                    _needs_a_value(schema)
            style = param.get("style") or _DEFAULT_STYLE[location]
            specs.append(
                ParamSpec(
                    prop=prop,
                    name=name,
                    location=location,
                    style=style,
                    explode=param.get("explode", style == "form"),
                    allow_reserved=bool(param.get("allowReserved")),
                    media_type=media_type,
                )
            )
        body = self.request_body(
            op.get("requestBody"), doc_base, f"{where}.requestBody", properties, required, needs
        )
        input_schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            input_schema["required"] = required
        input_schema = bounded_input_schema(
            self.inliner.with_defs(input_schema, needs, "input"), self.inliner.written_size
        )
        output_schema, wrap = self.response_schema(
            op.get("responses"), doc_base, f"{where}.responses"
        )
        security = op.get("security", self.doc.data.get("security"))
        security = security if isinstance(security, list) else None
        scheme_refs = sorted(
            {name for alt in security or [] if isinstance(alt, dict) for name in alt}
        )
        server_url = self.server_for(
            op.get("servers") or item.get("servers") or self.doc.data.get("servers"), where
        )
        operation_id = found if isinstance(found := op.get("operationId"), str) else None
        name = _clean(operation_id or "") or "_".join(
            [method, *(s for s in re.split(r"[^A-Za-z0-9.-]+", path) if s)]
        )
        safety = _safety(method, op)
        summary, description = str(op.get("summary") or ""), str(op.get("description") or "")
        tags = _tags(op)
        annotations: dict[str, Any] = {
            "summary": summary or None,
            "description": description or None,
        }
        if isinstance(op.get("externalDocs"), dict):
            annotations["external_docs"] = op["externalDocs"].get("url")
        if body is not None:
            annotations["request_media_type"] = body.media_type
        tool = UpstreamTool(
            native_id=native_id,
            name=name,
            title=summary.strip() or None,
            description=_describe(summary, description, self.description_max)
            or f"{method.upper()} {path}",
            tool_kind="openapi_operation",
            input_schema=self.shared.intern(input_schema),
            output_schema=self.shared.intern(output_schema),
            safety=safety,
            tags=tags,
            # a summary of a few words is the capability phrase a hint is; a longer one is not,
            # and the search derives one from the title (the summary) and the description
            search_hint=summary.strip() if 0 < len(summary.split()) <= 10 else None,
            external_mapping={
                "source": "openapi",
                "operation_id": operation_id,
                "method": method.upper(),
                "path": path,
                "server_url": shown_url(server_url),
                "security_scheme_refs": scheme_refs,
            },
            annotations={"openapi": {k: v for k, v in annotations.items() if v is not None}},
            lifecycle="deprecated" if op.get("deprecated") is True else "available",
        )
        operation = Operation(
            native_id=native_id,
            name=name,
            method=method.upper(),
            path=path,
            server_url=server_url,
            params=tuple(specs),
            body=body,
            security=security,
            idempotent=safety.idempotent,
            wrap_result=wrap,
            operation_id=operation_id,
        )
        return operation, tool


def map_operations(
    doc: Document,
    *,
    base_url: str | None = None,
    server_variables: dict[str, str] | None = None,
    include: list[SelectorSpec] | None = None,
    exclude: list[SelectorSpec] | None = None,
    description_max: int = 600,
    skipped: list[SpecError] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> tuple[dict[str, Operation], list[UpstreamTool]]:
    """Every selected operation as (Operation by native id, tools). Raises SpecError. With a
    `skipped` list, an operation that cannot be mapped is left out and its error appended there,
    unless no operation can be (then the first error is raised). `on_phase` is told what the
    mapping does (`mapping 11,422 operations`) once the operations are selected."""
    mapper = _Mapper(doc, base_url, server_variables or {}, description_max)
    includes = [_as_selector(s) for s in include or []]
    excludes = [_as_selector(s) for s in exclude or []]
    selected: list[tuple[str, str, dict[str, Any], dict[str, Any], str, str, str | None]] = []
    for path, item in (doc.data.get("paths") or {}).items():
        if path.startswith("x-"):  # an extension of the Paths Object, not a path
            continue
        at = f"$.paths[{path!r}]"
        item_base = doc.uri
        if isinstance(item, dict) and "$ref" in item:
            item, item_base = mapper.inliner.resolve(item, doc.uri, at)
        if not isinstance(item, dict):
            raise SpecError("a path item must be an object", at)
        for method in HTTP_METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = f"{at}.{method}"
            if not isinstance(op, dict):
                raise SpecError("an operation must be an object", where)
            operation_id = found if isinstance(found := op.get("operationId"), str) else None
            tags = _tags(op)
            if includes and not any(s.matches(method, path, operation_id, tags) for s in includes):
                continue
            if any(s.matches(method, path, operation_id, tags) for s in excludes):
                continue
            selected.append((path, method, item, op, at, item_base, operation_id))
    if on_phase is not None:
        on_phase(f"mapping {len(selected):,} operation{'' if len(selected) == 1 else 's'}")
    operations: dict[str, Operation] = {}
    tools: list[UpstreamTool] = []
    for (path, method, item, op, at, item_base, _), native_id in zip(
        selected, _native_ids(selected), strict=True
    ):
        try:
            operation, tool = mapper.operation(path, method, item, op, at, native_id, item_base)
        except SpecError as exc:
            error = exc
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # a value of a type the specification does not allow, somewhere the checks above miss
            error = SpecError(
                f"{method.upper()} {path} has a malformed field ({type(exc).__name__}: {exc}); check it "
                "against the OpenAPI specification, or leave it out with `exclude`",
                f"{at}.{method}",
            )
        else:
            operations[native_id] = operation
            tools.append(tool)
            continue
        finally:
            mapper.inliner.forget_own()  # the tool holds its schemas' distinct parts; the others go
        if skipped is None:
            raise error
        skipped.append(error)
    if skipped and not tools:
        raise skipped[0]
    return operations, tools


def _native_ids(selected: list[tuple[Any, ...]]) -> list[str]:
    """One distinct id per operation: its `operationId`, or `METHOD /path` (distinct by
    construction) when it has none, repeats an earlier one, or is another operation's
    `METHOD /path` (an operationId spelled "GET /other" must not take that operation's id)."""
    generated = [f"{method.upper()} {path}" for path, method, *_ in selected]
    reserved = set(generated)
    taken: set[str] = set()
    out: list[str] = []
    for own, (*_, operation_id) in zip(generated, selected, strict=True):
        usable = (
            operation_id
            and operation_id not in taken
            and (operation_id == own or operation_id not in reserved)
        )
        native_id = operation_id if usable else own
        taken.add(native_id)
        out.append(native_id)
    return out
