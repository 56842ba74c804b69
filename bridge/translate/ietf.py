"""Projections between Agent Tool declarations and the IETF A2T draft's wire shapes
(`draft-rosenberg-aiproto-a2t-00`): ToolSignature with flat `input_parameters` /
`output_parameters`, invocation requests and responses. Pure functions, both directions: the
REST frontend renders with them and the `a2t` upstream adapter parses with them."""

from __future__ import annotations

import json
from typing import Any

from bridge.model import (
    SafetyHints,
    ToolDeclaration,
    ToolResult,
    UpstreamResult,
    UpstreamTool,
    VersionRecord,
)
from bridge.text import text_of
from bridge.translate.wire import (
    AGENT_TOOL_KEY,
    TOOL_RESULT_KEY,
    WireFormatError,
    declaration_extension,
    read_extension,
    result_from_envelope,
)

__all__ = [
    "DRAFT_INT_MAX",
    "INT_UNBOUNDED",
    "MAX_DESCRIPTION",
    "RESULT_OUTPUT",
    "flat_parameters",
    "output_parameters",
    "parse_invocation",
    "parse_invocation_response",
    "parse_signature",
    "render_declaration",
    "render_invocation",
    "render_outputs",
    "render_signature",
    "render_version",
    "schema_from_outputs",
    "schema_from_parameters",
]

# The draft gives an `int` without `max` a maximum of 65535; an unbounded integer is rendered
# with this explicit max (the largest integer every JSON reader keeps exactly).
INT_UNBOUNDED = 2**53 - 1
DRAFT_INT_MAX = 65535
MAX_DESCRIPTION = 1999  # the draft: "MUST be < 2000 characters"
RESULT_OUTPUT = "result"  # the single output of a tool that declares no output schema
_RESULT_OUTPUT_PARAM = {
    "id": RESULT_OUTPUT,
    "name": RESULT_OUTPUT,
    "type": "json",
    "description": "The tool's result: its structured content, or its text when it has none.",
}


# ----------------------------------------------------------------------------- input parameters


def _string_enum(schema: dict[str, Any]) -> list[str] | None:
    values = schema.get("enum")
    if (
        isinstance(values, list)
        and values
        and all(isinstance(v, str) for v in values)
        and schema.get("type") in (None, "string")
    ):
        return values
    one_of = schema.get("oneOf") or schema.get("anyOf")
    if (
        isinstance(one_of, list)
        and one_of
        and all(isinstance(o, dict) and isinstance(o.get("const"), str) for o in one_of)
    ):
        return [o["const"] for o in one_of]
    return None


def _enum_descriptions(schema: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    given = schema.get("x-enum-descriptions")
    if isinstance(given, dict):
        out.update({str(k): v for k, v in given.items() if isinstance(v, str)})
    elif isinstance(given, list) and isinstance(schema.get("enum"), list):
        out.update(
            {str(k): v for k, v in zip(schema["enum"], given, strict=False) if isinstance(v, str)}
        )
    for option in schema.get("oneOf") or schema.get("anyOf") or []:
        if (
            isinstance(option, dict)
            and isinstance(option.get("const"), str)
            and isinstance(option.get("description"), str)
        ):
            out.setdefault(option["const"], option["description"])
    return out


def _flat_parameter(name: str, schema: Any, required: bool) -> dict[str, Any] | None:
    """One property as a draft parameter, or None when the draft's types cannot express it."""
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    if isinstance(declared, list):
        non_null = [t for t in declared if t != "null"]
        declared = non_null[0] if len(non_null) == 1 else None
    param: dict[str, Any] = {"id": name, "name": name}
    enum = _string_enum(schema)
    if enum is not None:
        param["type"] = "enum"
        descriptions = _enum_descriptions(schema)
        param["allowed-values"] = [
            {"name": v, **({"description": descriptions[v]} if v in descriptions else {})}
            for v in enum
        ]
    elif declared == "string":
        param["type"] = "string"
        if isinstance(schema.get("maxLength"), int):
            param["maxLength"] = schema["maxLength"]
    elif declared == "integer":
        param["type"] = "int"
        maximum = schema.get("maximum")
        param["max"] = (
            int(maximum)
            if isinstance(maximum, (int, float)) and not isinstance(maximum, bool)
            else INT_UNBOUNDED
        )
        minimum = schema.get("minimum")
        if isinstance(minimum, (int, float)) and not isinstance(minimum, bool):
            param["min"] = int(minimum)
    elif declared == "boolean":
        param["type"] = "boolean"
    else:
        return None
    if isinstance(schema.get("description"), str):
        param["description"] = schema["description"]
    if "default" in schema:
        param["default"] = schema["default"]
    param["required"] = required
    return param


def flat_parameters(schema: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The draft's `input_parameters` for a JSON Schema, and whether they carry all of it
    (when they do not, the signature also carries the schema itself as `input_schema`)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    required = schema.get("required") if isinstance(schema, dict) else None
    required_set = (
        {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    )
    params = []
    for name, prop in props.items():
        param = _flat_parameter(str(name), prop, name in required_set)
        if param is not None:
            params.append(param)
    rebuilt, _ = schema_from_parameters(params)
    return params, _normalized(rebuilt) == _normalized(schema)


def _normalized(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "type" not in out and "properties" in out:
        out["type"] = "object"
    out.setdefault("properties", {})
    required = out.pop("required", None)
    if required:
        out["required"] = sorted(required) if isinstance(required, list) else required
    return out


def _parameter_schema(param: dict[str, Any], pointer: str) -> dict[str, Any]:
    kind = param.get("type") or "string"
    schema: dict[str, Any]
    if kind == "string":
        schema = {"type": "string"}
        if isinstance(param.get("maxLength"), int):
            schema["maxLength"] = param["maxLength"]
    elif kind == "int":
        schema = {"type": "integer"}
        maximum = param.get("max", DRAFT_INT_MAX)
        if (
            isinstance(maximum, (int, float))
            and not isinstance(maximum, bool)
            and maximum < INT_UNBOUNDED
        ):
            schema["maximum"] = int(maximum)
        if isinstance(param.get("min"), (int, float)) and not isinstance(param.get("min"), bool):
            schema["minimum"] = int(param["min"])
    elif kind == "boolean":
        schema = {"type": "boolean"}
    elif kind == "enum":
        allowed = param.get("allowed-values")
        if isinstance(allowed, dict):  # the drafts' examples wrap the array in braces
            allowed = next((v for v in allowed.values() if isinstance(v, list)), [])
        if not isinstance(allowed, list) or not allowed:
            raise WireFormatError(
                "an enum parameter needs a non-empty `allowed-values` array",
                f"{pointer}/allowed-values",
            )
        names, descriptions = [], {}
        for i, entry in enumerate(allowed):
            value = entry.get("name") if isinstance(entry, dict) else entry
            if not isinstance(value, str):
                raise WireFormatError(
                    "each allowed value needs a string `name`", f"{pointer}/allowed-values/{i}"
                )
            names.append(value)
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("description"), str)
                and entry["description"]
            ):
                descriptions[value] = entry["description"]
        schema = {"type": "string", "enum": names}
        if descriptions:
            schema["x-enum-descriptions"] = descriptions
    else:  # a type the draft does not define (e.g. `json`): any JSON value
        schema = {}
    if isinstance(param.get("description"), str):
        schema["description"] = param["description"]
    if "default" in param:
        schema["default"] = param["default"]
    return schema


def schema_from_parameters(params: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """JSON Schema of draft `input_parameters`, and each parameter's name -> id. Parameters are
    keyed by `name` (what an invocation sends); `required` defaults to true as the draft says."""
    if not isinstance(params, list):
        raise WireFormatError("`input_parameters` must be an array", "/input_parameters")
    props: dict[str, Any] = {}
    required: list[str] = []
    ids: dict[str, str] = {}
    for i, param in enumerate(params):
        pointer = f"/input_parameters/{i}"
        if not isinstance(param, dict):
            raise WireFormatError("a parameter must be an object", pointer)
        name = found if isinstance(found := param.get("name"), str) else param.get("id")
        if not isinstance(name, str) or not name:
            raise WireFormatError("a parameter needs a string `name`", f"{pointer}/name")
        if name in props:
            continue
        props[name] = _parameter_schema(param, pointer)
        ids[name] = str(param.get("id", name))
        if param.get("required", True) is not False:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema, ids


# ----------------------------------------------------------------------------- outputs


def _output_type(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "json"
    if _string_enum(schema) is not None:
        return "enum"
    declared = schema.get("type")
    if isinstance(
        declared, list
    ):  # ["string"] is a string; ["string", "null"] may be null, which only json says
        declared = declared[0] if len(declared) == 1 else None
    return (
        {"string": "string", "integer": "int"}.get(declared, "json")
        if isinstance(declared, str)
        else "json"
    )


def output_parameters(output_schema: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The draft's `output_parameters`: one per property of an object output schema, else a
    single `result` of type json."""
    props = output_schema.get("properties") if isinstance(output_schema, dict) else None
    if not isinstance(props, dict) or not props:
        return [dict(_RESULT_OUTPUT_PARAM)]
    out = []
    for name, schema in props.items():
        param: dict[str, Any] = {"id": name, "name": name, "type": _output_type(schema)}
        if param["type"] == "enum":
            descriptions = _enum_descriptions(schema)
            param["allowed-values"] = [
                {"name": v, **({"description": descriptions[v]} if v in descriptions else {})}
                for v in _string_enum(schema) or []
            ]
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            param["description"] = schema["description"]
        out.append(param)
    return out


def schema_from_outputs(params: Any) -> dict[str, Any] | None:
    """An output schema for draft `output_parameters`; None for the single `result` output."""
    if not isinstance(params, list) or not params:
        return None
    if (
        len(params) == 1
        and isinstance(params[0], dict)
        and params[0].get("name") == RESULT_OUTPUT
        and params[0].get("type") == "json"
    ):
        return None
    props: dict[str, Any] = {}
    for i, param in enumerate(params):
        if not isinstance(param, dict) or not isinstance(param.get("name") or param.get("id"), str):
            raise WireFormatError(
                "an output parameter needs a string `name`", f"/output_parameters/{i}"
            )
        name = param.get("name") or param["id"]
        kind = param.get("type") or "string"
        if kind == "json":
            schema: dict[str, Any] = {}
            if isinstance(param.get("description"), str):
                schema["description"] = param["description"]
        else:
            schema = _parameter_schema(
                {**param, "max": INT_UNBOUNDED} if kind == "int" else param,
                f"/output_parameters/{i}",
            )
        props[name] = schema
    return {"type": "object", "properties": props}


# ----------------------------------------------------------------------------- signatures


def render_signature(
    *,
    tool_id: str,
    name: str,
    description: str,
    version: int,
    current_version: int,
    tags: list[str],
    input_schema: dict[str, Any],
    output_schema: dict[str, Any] | None,
    extension: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A draft ToolSignature. `input_schema` rides along when the flat parameters cannot carry
    the whole input schema; `x-agent-tool` carries the catalog facts the draft has no field for."""
    params, lossless = flat_parameters(input_schema)
    signature: dict[str, Any] = {
        "toolId": tool_id,
        "name": name,
        "description": description
        if len(description) <= MAX_DESCRIPTION
        else description[: MAX_DESCRIPTION - 1] + "…",
        "version": version,
        "currentVersion": current_version,
        "tags": list(tags),
        "input_parameters": params,
        "output_parameters": output_parameters(output_schema),
    }
    if not lossless:
        signature["input_schema"] = input_schema
    if extension is not None:
        if len(description) > MAX_DESCRIPTION:
            extension = {**extension, "description": description}
        signature[AGENT_TOOL_KEY] = extension
    return signature


def render_declaration(decl: ToolDeclaration) -> dict[str, Any]:
    """The current version of a catalog tool as a ToolSignature."""
    return render_signature(
        tool_id=decl.tool_id,
        name=decl.name,
        description=decl.description,
        version=decl.version,
        current_version=decl.version,
        tags=decl.tags,
        input_schema=decl.input_schema,
        output_schema=decl.output_schema,
        extension=declaration_extension(decl),
    )


def render_version(decl: ToolDeclaration, record: VersionRecord) -> dict[str, Any]:
    """One stored version of a catalog tool as a ToolSignature (its own description and schemas,
    the tool's current identity and `currentVersion`)."""
    signature = record.signature
    description = (
        found if isinstance(found := signature.get("description"), str) else decl.description
    )
    output_schema = found if isinstance(found := signature.get("output_schema"), dict) else None
    input_schema = found if isinstance(found := signature.get("input_schema"), dict) else {}
    ext = declaration_extension(decl, output_schema=output_schema)
    if output_schema is None:
        ext.pop("output_schema", None)
    ext["signature_digest"] = record.digest
    ext["compatibility"] = record.compatibility
    ext["created_at"] = record.created_at
    return render_signature(
        tool_id=decl.tool_id,
        name=decl.name,
        description=description,
        version=record.version,
        current_version=decl.version,
        tags=decl.tags,
        input_schema=input_schema,
        output_schema=output_schema,
        extension=ext,
    )


def _positive_int(value: Any, pointer: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, str) and value.isdigit():  # the drafts' examples show versions as strings
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WireFormatError("must be a positive integer", pointer)
    return value


def parse_signature(sig: Any, *, base_url: str) -> UpstreamTool:
    """A remote ToolSignature as an upstream tool routed by its `toolId`. The external mapping
    keeps toolId, version, currentVersion and the parameter ids; a remote bridge's `x-agent-tool`
    facts (native mappings, safety, kind) are kept too."""
    if not isinstance(sig, dict):
        raise WireFormatError("a tool signature must be an object")
    tool_id, name = sig.get("toolId"), sig.get("name")
    if not isinstance(tool_id, str) or not tool_id:
        raise WireFormatError("a tool signature needs a string `toolId`", "/toolId")
    if not isinstance(name, str) or not name:
        raise WireFormatError("a tool signature needs a string `name`", "/name")
    version = _positive_int(sig.get("version"), "/version", default=1)
    current = _positive_int(sig.get("currentVersion"), "/currentVersion", default=version)
    flat_schema, ids = schema_from_parameters(sig.get("input_parameters") or [])
    full = sig.get("input_schema")
    ext = read_extension(sig)
    outputs = sig.get("output_parameters")
    output_schema = ext.output_schema or schema_from_outputs(outputs)
    mapping: dict[str, Any] = {
        "source": "ietf-a2t",
        "base_url": base_url,
        "tool_id": tool_id,
        "tool_name": name,
        "version": version,
        "current_version": current,
        "parameter_ids": ids,
    }
    if isinstance(outputs, list):
        mapping["output_ids"] = {
            o["name"]: str(o.get("id", o["name"]))
            for o in outputs
            if isinstance(o, dict) and isinstance(o.get("name"), str)
        }
    mapping.update(ext.origin())
    tags = (
        [t for t in sig.get("tags") or [] if isinstance(t, str)]
        if isinstance(sig.get("tags"), list)
        else []
    )
    description = ext.description or (
        sig.get("description") if isinstance(sig.get("description"), str) else ""
    )
    return UpstreamTool(
        native_id=tool_id,
        name=name,
        description=description,
        title=ext.title,
        tool_kind=ext.tool_kind or "function",
        input_schema=full if isinstance(full, dict) else flat_schema,
        output_schema=output_schema,
        safety=ext.safety or SafetyHints(),
        tags=tags,
        search_hint=ext.search_hint,
        external_mapping=mapping,
        annotations=ext.annotations,
    )


# ----------------------------------------------------------------------------- invocation


def parse_invocation(body: Any, *, tool_names: tuple[str, ...] = ()) -> dict[str, Any]:
    """The arguments of a draft invocation request `{name, input_parameters: [{name, value}]}`.
    An `arguments` object (extension) is accepted beside or instead of `input_parameters`.
    `tool_names` are the names the `name` field may carry (it is optional)."""
    if not isinstance(body, dict):
        raise WireFormatError("the request body must be a JSON object {name, input_parameters}", "")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or (tool_names and name not in tool_names)):
        raise WireFormatError(
            f"`name` does not name this tool (expected {tool_names[0]!r})"
            if tool_names
            else "`name` must be a string",
            "/name",
        )
    arguments: dict[str, Any] = {}
    extra = body.get("arguments")
    if extra is not None:
        if not isinstance(extra, dict):
            raise WireFormatError("`arguments` must be an object", "/arguments")
        arguments.update(extra)
    params = body.get("input_parameters", [] if extra is not None else None)
    if params is None:
        raise WireFormatError(
            "`input_parameters` is required: an array of {name, value}", "/input_parameters"
        )
    if not isinstance(params, list):
        raise WireFormatError(
            "`input_parameters` must be an array of {name, value}", "/input_parameters"
        )
    seen: set[str] = set()
    for i, entry in enumerate(params):
        if not isinstance(entry, dict):
            raise WireFormatError(
                "each input parameter must be an object {name, value}", f"/input_parameters/{i}"
            )
        pname = entry.get("name")
        if not isinstance(pname, str) or not pname:
            raise WireFormatError(
                "each input parameter needs a string `name`", f"/input_parameters/{i}/name"
            )
        if "value" not in entry:
            raise WireFormatError(
                f"input parameter {pname!r} has no `value`", f"/input_parameters/{i}/value"
            )
        if pname in seen:
            raise WireFormatError(
                f"input parameter {pname!r} is given twice", f"/input_parameters/{i}/name"
            )
        seen.add(pname)
        arguments[pname] = entry["value"]
    return arguments


def render_invocation(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "input_parameters": [{"name": k, "value": v} for k, v in arguments.items()],
    }


def render_outputs(result: ToolResult, output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The draft's invocation response for a successful result, with the whole envelope under
    `x-tool-result`."""
    props = output_schema.get("properties") if isinstance(output_schema, dict) else None
    structured = result.structured_content
    if isinstance(props, dict) and props and isinstance(structured, dict):
        outputs = [{"name": k, "value": structured[k]} for k in props if k in structured]
    else:
        value = structured if structured is not None else text_of(result.content)
        outputs = [{"name": RESULT_OUTPUT, "value": value}]
    return {"output_parameters": outputs, TOOL_RESULT_KEY: result.to_json()}


def parse_invocation_response(body: Any) -> UpstreamResult:
    """A draft invocation response as an upstream result. A remote bridge's `x-tool-result`
    envelope is taken as is; otherwise the outputs become structured content (and text)."""
    if not isinstance(body, dict):
        raise WireFormatError("the invocation response must be a JSON object")
    from_envelope = result_from_envelope(body.get(TOOL_RESULT_KEY))
    if from_envelope is not None:
        return from_envelope
    outputs = body.get("output_parameters")
    if not isinstance(outputs, list):
        raise WireFormatError(
            "the invocation response has no `output_parameters` array", "/output_parameters"
        )
    values: dict[str, Any] = {}
    for i, entry in enumerate(outputs):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise WireFormatError(
                "each output parameter needs a string `name`", f"/output_parameters/{i}"
            )
        values[entry["name"]] = entry.get("value")
    if list(values) == [RESULT_OUTPUT]:
        value = values[RESULT_OUTPUT]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return UpstreamResult(
            content=[{"type": "text", "text": text}],
            structured_content=value if isinstance(value, dict) else None,
        )
    return UpstreamResult(
        content=[{"type": "text", "text": json.dumps(values, ensure_ascii=False)}],
        structured_content=values,
    )
