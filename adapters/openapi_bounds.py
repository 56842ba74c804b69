"""Output schemas of a size a tool list can carry. An API whose objects refer to one another
(Stripe's: a checkout session names its customer, invoice, payment intent, each of which names
more) describes one answer in a schema of megabytes, and every tool lists its own: 452 tools of
Stripe's document held 317 MB of output schemas, which every `tools/list` would send and every
version had to hash. Past `OUTPUT_MAX_VALUES`, an output schema keeps its top level, and each
property keeps its own schema only when that is small and refers to nothing; the others keep
their type and description. The schema cut so accepts every answer the whole one accepts (it
only ever drops constraints), so a client checking structured content against it never refuses
a good answer."""

from __future__ import annotations

from typing import Any

__all__ = ["OUTPUT_MAX_VALUES", "bounded_output_schema"]

# Values (objects, arrays and scalars, counted as written out) an output schema may hold whole.
OUTPUT_MAX_VALUES = 5_000
# Values a property's schema may hold and still be kept whole in a schema that is cut.
PROPERTY_MAX_VALUES = 100
# Keywords whose subschemas decide the type where they stand: a property carrying one of them
# keeps no `type` of its own when cut (its branches may allow others).
_COMBINED = ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else")
_NOTE = "nested schemas left out as too large; see the API's documentation"


def _over(node: Any, budget: int) -> int:
    """What is left of `budget` after counting `node`'s values; below 0 once it is exceeded (the
    count stops there: a schema of megabytes is not walked whole)."""
    budget -= 1
    if isinstance(node, dict):
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return budget
    for child in children:
        if budget < 0:
            break
        budget = _over(child, budget)
    return budget


def _refers(node: Any) -> bool:
    if isinstance(node, dict):
        return "$ref" in node or any(_refers(v) for v in node.values())
    if isinstance(node, list):
        return any(_refers(v) for v in node)
    return False


def _described(node: Any, text: str) -> str:
    own = node.get("description") if isinstance(node, dict) else None
    return f"{own} ({text})" if isinstance(own, str) and own else text


def _cut_property(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    if _over(schema, PROPERTY_MAX_VALUES) >= 0 and not _refers(schema):
        return schema
    out: dict[str, Any] = {"description": _described(schema, "its schema is left out as too large")}
    if "title" in schema:
        out["title"] = schema["title"]
    if isinstance(schema.get("type"), str | list) and not any(k in schema for k in _COMBINED):
        out["type"] = schema["type"]
    return out


def bounded_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` when it holds at most OUTPUT_MAX_VALUES values; else its top level with the
    large or referring properties reduced to their type and description, without `$defs`
    (an object with only a description when the top level itself is too large or combines
    schemas)."""
    if _over(schema, OUTPUT_MAX_VALUES) >= 0:
        return schema
    properties = schema.get("properties")
    if isinstance(properties, dict) and not any(k in schema for k in _COMBINED):
        kept = {k: v for k, v in schema.items() if k in ("type", "title", "required")}
        cut = {**kept, "description": _described(schema, _NOTE), "properties": {name: _cut_property(sub) for name, sub in properties.items()}}
        if _over(cut, OUTPUT_MAX_VALUES) >= 0:
            return cut
    out: dict[str, Any] = {"type": "object", "description": _described(schema, _NOTE)}
    if "title" in schema:
        out["title"] = schema["title"]
    return out
