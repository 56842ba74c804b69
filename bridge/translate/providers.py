"""Provider function-calling formats compiled from tool declarations: OpenAI (plain and strict),
Gemini and Anthropic, with the tool's safety facts tunnelled into its description (ATIP
"safety metadata tunneling": `[⚠️ DESTRUCTIVE | ⚠️ NOT REVERSIBLE | ⚠️ NOT IDEMPOTENT |
💰 BILLABLE]`, `[🔒 READ-ONLY]`). Pure functions over `bridge.model` records."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bridge.model import SafetyHints, ToolDeclaration

__all__ = [
    "OPENAI_DESCRIPTION_LIMIT",
    "PROVIDERS",
    "Compiled",
    "StrictSchemaError",
    "compile_tools",
    "describe",
    "gemini_schema",
    "safety_flags",
    "safety_suffix",
    "strict_schema",
    "to_anthropic",
    "to_gemini",
    "to_openai",
]

PROVIDERS = ("openai", "openai-strict", "gemini", "anthropic")
OPENAI_DESCRIPTION_LIMIT = 1024

WARNING = "\u26a0\ufe0f"
FLAG_DESTRUCTIVE = f"{WARNING} DESTRUCTIVE"
FLAG_NOT_REVERSIBLE = f"{WARNING} NOT REVERSIBLE"
FLAG_NOT_IDEMPOTENT = f"{WARNING} NOT IDEMPOTENT"
FLAG_BILLABLE = "\U0001f4b0 BILLABLE"
FLAG_READ_ONLY = "\U0001f512 READ-ONLY"

# Keywords OpenAI strict mode accepts; everything else is dropped (or, when dropping would let
# the model send something the tool rejects, the tool falls back to non-strict).
_STRICT_KEEP = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "$ref",
    "$defs",
    "definitions",
}
_STRICT_REFUSE = {
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "contains",
    "unevaluatedProperties",
    "propertyNames",
}
_GEMINI_KEEP = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "default",
    "items",
    "minimum",
    "maximum",
    "propertyOrdering",
}
# `$ref`s inlined for Gemini, which takes no `$defs`: at most 8 nested on one path, 200 in a schema
_GEMINI_REF_DEPTH = 8
_GEMINI_REF_BUDGET = 200
_GEMINI_FORMATS = {
    "string": {"enum", "date-time"},
    "number": {"float", "double"},
    "integer": {"int32", "int64"},
}
_NAME_RULES = {
    "openai": (re.compile(r"[^A-Za-z0-9_-]"), 64, "[A-Za-z0-9_-]"),
    "anthropic": (re.compile(r"[^A-Za-z0-9_-]"), 64, "[A-Za-z0-9_-]"),
    "gemini": (re.compile(r"[^A-Za-z0-9_.-]"), 64, "[A-Za-z0-9_.-], starting with a letter or _"),
}


class StrictSchemaError(ValueError):
    """A schema OpenAI strict mode cannot express; `pointer` says where."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer or '/'}: {reason}")
        self.pointer = pointer
        self.reason = reason


# ----------------------------------------------------------------------------- descriptions


def safety_flags(hints: SafetyHints) -> list[str]:
    """The flags a tool's safety facts call for, in the RFC's order. A fact left at its
    fail-safe default (nobody declared or inferred it) raises no flag."""
    flags = []
    if hints.destructive:
        flags.append(FLAG_DESTRUCTIVE)
    if hints.reversible is False:
        flags.append(FLAG_NOT_REVERSIBLE)
    if hints.idempotent is False and hints.source_of("idempotent") != "default":
        flags.append(FLAG_NOT_IDEMPOTENT)
    if hints.billable:
        flags.append(FLAG_BILLABLE)
    if hints.read_only and not hints.destructive:
        flags.append(FLAG_READ_ONLY)
    return flags


def safety_suffix(hints: SafetyHints) -> str:
    flags = safety_flags(hints)
    return f"[{' | '.join(flags)}]" if flags else ""


def describe(decl: ToolDeclaration, limit: int | None = None) -> str:
    """`"{description} [{flags}]"`. With a `limit`, the base text is cut (ending in `...`) so the
    whole fits and the safety suffix is always kept whole."""
    base = (decl.description or decl.title or decl.name).strip()
    suffix = safety_suffix(decl.safety)
    text = f"{base} {suffix}" if base and suffix else (base or suffix)
    if limit is None or len(text) <= limit:
        return text
    if not suffix:
        return base[: limit - 3].rstrip() + "..."
    room = max(0, limit - len(suffix) - 4)
    return base[:room].rstrip() + "... " + suffix


def _provider_names(decls: list[ToolDeclaration], provider: str) -> list[str]:
    """Names each provider accepts; a name changed by cleaning that collides gets `_2`, `_3`."""
    pattern, limit, _allowed = _NAME_RULES[provider]
    cleaned = []
    for decl in decls:
        name = pattern.sub("_", decl.name)[:limit] or "tool"
        if provider == "gemini" and not re.match(r"[A-Za-z_]", name):
            name = ("_" + name)[:limit]
        cleaned.append(name)
    # a name the provider takes as it is keeps it: a model's call of `a_b` must reach `a_b`, not
    # the `a.b` cleaned into it
    seen = {name for name, decl in zip(cleaned, decls, strict=True) if name == decl.name}
    out = []
    for name, decl in zip(cleaned, decls, strict=True):
        candidate, n = name, 1
        if name != decl.name:
            while candidate in seen:
                n += 1
                candidate = f"{name[: limit - len(str(n)) - 1]}_{n}"
            seen.add(candidate)
        out.append(candidate)
    return out


# ----------------------------------------------------------------------------- schemas


def _root(schema: dict[str, Any] | None) -> dict[str, Any]:
    """Function parameters are always an object schema."""
    schema = copy.deepcopy(schema) if isinstance(schema, dict) else {}
    schema.pop("$schema", None)
    schema.pop("$id", None)
    if schema.get("type") == "object" or (
        schema.get("type") is None and not any(k in schema for k in ("anyOf", "oneOf", "allOf"))
    ):
        # an object root stays as it is, its `anyOf`/`allOf` and `$ref` too (a call is checked
        # against the tool's own schema: arguments put under `value` would fail it)
        schema["type"] = "object"
        if "$ref" not in schema:  # the target's properties are the root's
            schema.setdefault("properties", {})
        return schema
    return {"type": "object", "properties": {"value": schema}, "required": ["value"]}


def _merged(node: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """`node` with an `allOf` part merged in: the properties and `required` of both, and the
    part's other keywords where the node has none of its own."""
    merged = {**part, **node}
    own, more = node.get("properties") or {}, part.get("properties") or {}
    if own or more:
        merged["properties"] = {
            **own,
            **{k: v for k, v in more.items() if k not in own},
        }  # the node's first
    if part.get("required") or node.get("required"):
        merged["required"] = list(
            dict.fromkeys([*(node.get("required") or []), *(part.get("required") or [])])
        )
    return merged


def _with_note(node: dict[str, Any], note: str) -> None:
    node["description"] = f"{node['description']} ({note})" if node.get("description") else note


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """The same schema also accepting null (how strict mode says "optional")."""
    node = dict(node)
    kind = node.get("type")
    if "$ref" in node or "const" in node or (kind is None and "enum" not in node):
        described = {k: node.pop(k) for k in ("description",) if k in node}
        if "anyOf" in node and len(node) == 1:
            return {**described, "anyOf": [*node["anyOf"], {"type": "null"}]}
        return {**described, "anyOf": [node, {"type": "null"}]}
    if isinstance(kind, str) and kind != "null":
        node["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        node["type"] = [*kind, "null"]
    if isinstance(node.get("enum"), list) and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node


def strict_schema(
    schema: dict[str, Any] | None, omitted: list[str] | None = None
) -> dict[str, Any]:
    """A parameters schema that passes OpenAI strict mode: every object closed
    (`additionalProperties: false`) with every property listed in `required`, optional ones
    made nullable, unsupported keywords dropped (a default is kept as a note in the
    description). An optional property strict mode cannot express (a free-form object, say) is
    left out when `omitted` is given, which then lists why; a required one, or anything else
    strict mode cannot express (`allOf`, `not`, ...), raises StrictSchemaError."""
    root = _root(schema)
    if not root.get("properties") and "additionalProperties" not in root and "$ref" not in root:
        root["additionalProperties"] = False  # a bare object at the top means "no arguments"
    out = _strict(root, "", omitted)
    for key in ("$defs", "definitions"):
        if isinstance(root.get(key), dict):
            out[key] = {
                name: _strict(sub, f"/{key}/{name}", omitted) for name, sub in root[key].items()
            }
    return out


def _strict(node: Any, pointer: str, omitted: list[str] | None = None) -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        raise StrictSchemaError(pointer, "accepts any value")
    refused = sorted(k for k in node if k in _STRICT_REFUSE)
    if refused and not (refused == ["allOf"] and len(node["allOf"]) == 1):
        raise StrictSchemaError(pointer, f"uses {', '.join(refused)}")
    node = dict(node)
    if "allOf" in node:  # one-element allOf: the element merged in, checked as the node is
        node = _merged(node, node.pop("allOf")[0])
        refused = sorted(k for k in node if k in _STRICT_REFUSE)
        if refused:
            raise StrictSchemaError(pointer, f"uses {', '.join(refused)}")
    if not pointer and ("anyOf" in node or "oneOf" in node):
        raise StrictSchemaError(
            pointer or "/", "is one of several shapes (strict mode takes one object at the top)"
        )
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    if node.pop("nullable", False) is True:
        node = _nullable(node)
    out: dict[str, Any] = {
        k: v
        for k, v in node.items()
        if k in _STRICT_KEEP - {"properties", "items", "anyOf", "$defs", "definitions"}
    }
    if "default" in node:
        _with_note(out, f"default: {json.dumps(node['default'], ensure_ascii=False)}")
    kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "anyOf" in node:
        out["anyOf"] = [
            _strict(sub, f"{pointer}/anyOf/{i}", omitted) for i, sub in enumerate(node["anyOf"])
        ]
    if "object" in kinds or "properties" in node:
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties", True)
        if not properties and extra is not False:
            raise StrictSchemaError(pointer, "is a free-form object (no declared properties)")
        if isinstance(extra, dict) and extra:
            raise StrictSchemaError(pointer, "has a schema for additional properties")
        required = set(node.get("required") or [])
        out["properties"] = {}
        for name, sub in properties.items():
            try:
                converted = _strict(sub, f"{pointer}/properties/{name}", omitted)
            except StrictSchemaError as exc:
                if name in required or omitted is None:
                    raise
                omitted.append(str(exc))  # optional: the call is complete without it
                continue
            out["properties"][name] = converted if name in required else _nullable(converted)
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
        if "type" not in out:
            out["type"] = "object"
    if "array" in kinds or "items" in node:
        if not isinstance(node.get("items"), dict):
            raise StrictSchemaError(pointer, "is an array without an item schema")
        out["items"] = _strict(node["items"], f"{pointer}/items", omitted)
    if not any(k in out for k in ("type", "anyOf", "$ref", "enum", "const")):
        raise StrictSchemaError(pointer, "has no type")
    return out


def gemini_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """A parameters schema in Gemini's OpenAPI subset: `$ref`s inlined, type lists turned into
    `nullable`/`anyOf`, unsupported keywords and formats dropped, non-string enums moved into
    the description."""
    root = _root(schema)
    defs = {**(root.get("definitions") or {}), **(root.get("$defs") or {})}
    return _gemini(root, defs, (), [_GEMINI_REF_BUDGET])


def _gemini(
    node: Any, defs: dict[str, Any], chain: tuple[str, ...], budget: list[int]
) -> dict[str, Any]:
    """`chain` holds the `$ref`s being inlined around `node`; `budget` the inlinings left for the
    whole schema (one list shared by every call)."""
    if not isinstance(node, dict):
        return {}
    node = dict(node)
    ref = node.pop("$ref", None)
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        # a schema is written out once on each path: its reference back to itself stops there
        # (inlining a recursive schema to a fixed depth repeats it as often as it branches: an
        # expression of `And`, `Or` and `Not` expressions, eight levels deep, is 3^8 copies)
        if target is None or ref in chain or len(chain) >= _GEMINI_REF_DEPTH or budget[0] <= 0:
            return {"type": "object", "description": node.get("description") or f"see {ref}"}
        budget[0] -= 1
        node = {**target, **node}
        chain = (*chain, ref)
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    if "allOf" in node:
        for part in node.pop("allOf"):
            node = _merged(node, _gemini(part, defs, chain, budget))
    if "const" in node:
        node["enum"] = [node.pop("const")]
    kind = node.get("type")
    if kind == "null":  # Vercel's `{ssoUserId: {type: null}}`: as a type list of "null" alone
        kind = ["null"]
    if isinstance(kind, list):
        real = [k for k in kind if k != "null"]
        if "null" in kind:
            node["nullable"] = True
        if len(real) == 1:
            node["type"] = real[0]
        else:
            node.pop("type")
            if real:
                node["anyOf"] = [{"type": k} for k in real]
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _GEMINI_KEEP}
    fmt = out.get("format")
    if fmt is not None and fmt not in _GEMINI_FORMATS.get(str(out.get("type")), set()):
        out.pop("format")
    enum = out.get("enum")
    if isinstance(enum, list):
        values = [v for v in enum if v is not None]
        if not all(isinstance(v, str) for v in values):
            out.pop("enum")
            _with_note(out, "one of " + ", ".join(json.dumps(v) for v in values))
        else:
            out["enum"] = values
            out.setdefault("type", "string")
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: _gemini(v, defs, chain, budget) for k, v in out["properties"].items()
        }
        if "required" in out:
            out["required"] = [r for r in out["required"] if r in out["properties"]]
    if "items" in out:
        out["items"] = _gemini(out["items"], defs, chain, budget)
    if "anyOf" in out:
        branches = [s for s in out.pop("anyOf") if isinstance(s, dict)]
        real = [
            _gemini(s, defs, chain, budget)
            for s in branches
            if s.get("type") not in ("null", ["null"])
        ]
        if len(real) < len(branches):  # `{anyOf: [X, {type: null}]}`: X, nullable
            out["nullable"] = True
        if len(real) == 1 and not set(real[0]) & (set(out) - {"description"}):
            out = {**real[0], **out}
        elif real:
            out["anyOf"] = real
    return out


# ----------------------------------------------------------------------------- tools


def to_openai(
    decl: ToolDeclaration,
    strict: bool = False,
    name: str | None = None,
    omitted: list[str] | None = None,
) -> dict[str, Any]:
    """`{"type": "function", "function": {...}}`; with `strict`, the parameters follow strict
    mode (raises StrictSchemaError when they cannot; see `strict_schema` for `omitted`)."""
    parameters = strict_schema(decl.input_schema, omitted) if strict else _root(decl.input_schema)
    function: dict[str, Any] = {
        "name": name or _provider_names([decl], "openai")[0],
        "description": describe(decl, OPENAI_DESCRIPTION_LIMIT),
        "parameters": parameters,
    }
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def to_gemini(decl: ToolDeclaration, name: str | None = None) -> dict[str, Any]:
    """A Gemini `FunctionDeclaration`; a tool without parameters has no `parameters` key."""
    out: dict[str, Any] = {
        "name": name or _provider_names([decl], "gemini")[0],
        "description": describe(decl),
    }
    parameters = gemini_schema(decl.input_schema)
    if parameters.get("properties"):
        out["parameters"] = parameters
    return out


def to_anthropic(decl: ToolDeclaration, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or _provider_names([decl], "anthropic")[0],
        "description": describe(decl),
        "input_schema": _root(decl.input_schema),
    }


@dataclass
class Compiled:
    """Tools in one provider's format, plus notes on what could not be kept (a tool sent
    without strict mode, a renamed tool)."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def compile_tools(decls: Iterable[ToolDeclaration], provider: str) -> Compiled:
    """Every declaration in the provider's format. In `openai-strict`, an optional property
    strict mode cannot express is left out, and a tool whose required inputs it cannot express
    is sent with `strict: false`; a note says why in both cases."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
    decls = list(decls)
    family = "openai" if provider.startswith("openai") else provider
    names = _provider_names(decls, family)
    result = Compiled()
    for decl, name in zip(decls, names, strict=True):
        if name != decl.name:
            result.notes.append(
                f"{decl.name}: sent as {name!r} ({family} names allow {_NAME_RULES[family][2]}, 64 characters)"
            )
        try:
            _compile_one(result, decl, name, provider)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # an upstream schema the JSON Schema rules do not allow (`required` holding objects,
            # `properties` given as a list): left out, said in a note, the others still compiled
            result.notes.append(
                f"{decl.name}: left out, its input schema is malformed ({type(exc).__name__}: {exc})"
            )
    return result


def _compile_one(result: Compiled, decl: ToolDeclaration, name: str, provider: str) -> None:
    """One declaration into `result` (its tool, and notes saying what changed)."""
    if provider == "openai-strict":
        omitted: list[str] = []
        try:
            result.tools.append(to_openai(decl, strict=True, name=name, omitted=omitted))
            result.notes.extend(
                f"{decl.name}: optional property left out in strict mode, its schema at {why}"
                for why in omitted
            )
        except StrictSchemaError as exc:
            tool = to_openai(decl, strict=False, name=name)
            tool["function"]["strict"] = False
            result.tools.append(tool)
            result.notes.append(f"{decl.name}: sent with strict: false, its schema at {exc}")
    elif provider == "openai":
        result.tools.append(to_openai(decl, strict=False, name=name))
    elif provider == "gemini":
        result.tools.append(to_gemini(decl, name=name))
    else:
        result.tools.append(to_anthropic(decl, name=name))
