"""Single JSON Schema keywords as an OpenAPI document writes them, rewritten for a tool contract:
OpenAPI 3.0's `nullable`, an enum's repeated values, a `type` JSON Schema does not have, a
`pattern` Python cannot read, and the keywords written beside a `$ref`."""

from __future__ import annotations

import functools
import json
import re
import warnings
from typing import Any, TypeGuard

__all__ = [
    "ANNOTATIONS",
    "beside_ref",
    "distinct",
    "is_dict",
    "json_type",
    "or_null",
    "python_reads",
]


def is_dict(node: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(node, dict)


@functools.lru_cache(maxsize=4096)
def python_reads(pattern: str) -> bool:
    """Whether Python's `re` (which every JSON Schema validator here uses) compiles an ECMA-262
    `pattern`: not `\\p{L}` (Unicode properties), `[\\w-.]` (a class escape opening a range) or a
    flag group `(?i)` after the start. Python's warnings about what a later Python may read
    otherwise (`[[`: "Possible nested set") are not shown: the pattern is the document's, and
    it works today."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def json_type(kind: Any) -> bool:
    """Whether `kind` is a JSON Schema `type`: one of its seven names, or a list of them."""
    if isinstance(kind, str):
        return kind in _JSON_TYPES
    return (
        isinstance(kind, list)
        and bool(kind)
        and all(isinstance(k, str) and k in _JSON_TYPES for k in kind)
        and len(set(kind)) == len(kind)
    )


def distinct(values: list[Any]) -> list[Any]:
    """`values` without repeats, in order (`enum: [red, red, blue]`: JSON Schema asks an enum's
    values to be unique, and `validate_spec: auto` loads a document that repeats them)."""
    seen: set[str] = set()
    out = []
    for value in values:
        key = json.dumps(value, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out if len(out) < len(values) else values


_COMBINED = ("$ref", "allOf", "anyOf", "oneOf", "not", "if")


def or_null(schema: Any) -> Any:
    """`schema` also accepting null (OpenAPI 3.0 `nullable: true`): `null` added to its type and
    enum, or, when a `$ref` or combinator decides the type, `{anyOf: [schema, {type: null}]}`.
    A new object: expanded schemas are shared."""
    if not is_dict(schema):
        return schema
    kind = schema.get("type")
    if not any(k in schema for k in _COMBINED) and isinstance(kind, str | list):
        out = dict(schema)
        kinds = [kind] if isinstance(kind, str) else kind
        out["type"] = kinds if "null" in kinds else [*kinds, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if not any(k in schema for k in _COMBINED):  # no type at all: null is already accepted
        return schema
    rest = {k: v for k, v in schema.items() if k != "description"}
    described = {"description": schema["description"]} if "description" in schema else {}
    return {**described, "anyOf": [rest, {"type": "null"}]}


# Keywords that describe a value without constraining it: beside a `$ref` they are kept in
# OpenAPI 3.0 too, which ignores everything else there (`type: object` beside a `$ref` to a
# string schema would leave no value valid).
ANNOTATIONS = frozenset({"title", "description", "default", "deprecated", "readOnly", "writeOnly"})
# Keywords whose meaning depends on others beside them: a schema holding one is not merged into another.
_ENTANGLED = frozenset(
    {
        "additionalProperties",
        "unevaluatedProperties",
        "additionalItems",
        "unevaluatedItems",
        "items",
        "prefixItems",
        "if",
        "then",
        "else",
        "contains",
        "minContains",
        "maxContains",
    }
)


def beside_ref(target: dict[str, Any], siblings: dict[str, Any]) -> dict[str, Any]:
    """The referenced schema `target` with the (expanded) keywords written beside its `$ref`:
    annotations replace the target's; constraints apply as well as the target's (2020-12), merged
    into it when no keyword meets one of its own, else as `allOf: [target, constraints]`."""
    notes = {k: v for k, v in siblings.items() if k in ANNOTATIONS}
    rest = {k: v for k, v in siblings.items() if k not in ANNOTATIONS}
    if not rest or "$ref" in target:  # `{$ref: '#/$defs/X'}` takes keywords beside it as they are
        return {**target, **siblings}
    keys = set(target) - ANNOTATIONS
    if not keys & set(rest) and not (keys | set(rest)) & _ENTANGLED:
        return {**target, **rest, **notes}
    return {**notes, "allOf": [target, rest]}
