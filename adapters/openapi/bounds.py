"""Input and output schemas of a size a tool list can carry. An API whose objects refer to one another
(Stripe's: a checkout session names its customer, invoice, payment intent, each of which names
more) describes one answer in a schema of megabytes, and every tool lists its own: 452 tools of
Stripe's document held 317 MB of output schemas, which every `tools/list` would send and every
version had to hash. Past `OUTPUT_MAX_VALUES`, an output schema keeps its top level, and each
property keeps its own schema only when that is small and refers to nothing; the others keep
their type and description. The schema cut so accepts every answer the whole one accepts (it
only ever drops constraints), so a client checking structured content against it never refuses
a good answer.

Input schemas are bounded the same way past `INPUT_MAX_VALUES`: an operation whose body names
objects that name more (Microsoft Graph's `PATCH /security` takes the security object, whose
collections hold alerts, cases, users ...) listed a megabyte of `$defs` for one tool. The top
level keeps every property, `required` and `additionalProperties`; properties are kept whole,
smallest first, while they fit and refer to no `$defs`; the others keep their type and
description (and their `minItems` and `minProperties`). Only constraints below the top level are dropped, and only whole property schemas
(never a branch of a `oneOf`, `not` or `if`, whose loosening could refuse a value), so every
argument the whole schema accepts is still accepted; the server judges what was left out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["INPUT_MAX_VALUES", "OUTPUT_MAX_VALUES", "bounded_input_schema", "bounded_output_schema"]

# Values (objects, arrays and scalars, counted as written out) an output schema may hold whole.
OUTPUT_MAX_VALUES = 5_000
# Values (likewise) an input schema may hold whole.
INPUT_MAX_VALUES = 5_000
# Values a property's schema may hold and still be kept whole in a schema that is cut.
PROPERTY_MAX_VALUES = 100
# Values a property cut to its type, title and description holds at most, written out.
_CUT_VALUES = 6
# Keywords whose subschemas decide the type where they stand: a property carrying one of them
# keeps no `type` of its own when cut (its branches may allow others).
_COMBINED = ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else")
# Counts the values a schema node holds written out (at least up to the bound it is compared with).
Sizer = Callable[[Any], int]
_NOTE = "nested schemas left out as too large; see the API's documentation"
_INPUT_NOTE = "nested schemas left out as too large; the API checks them; see its documentation"
_PROPERTY_NOTE = "its schema is left out as too large"


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


def _cut_property(schema: Any, keep: bool | None = None) -> Any:
    """`schema` when `keep` (by default: when small and referring to nothing), else its title,
    description and, where no combinator decides it, its `type`: a schema that accepts every
    value the whole one does. A boolean schema is kept as it is."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return {}
    if keep is None:
        keep = _over(schema, PROPERTY_MAX_VALUES) >= 0 and not _refers(schema)
    if keep:
        return schema
    out: dict[str, Any] = {"description": _described(schema, _PROPERTY_NOTE)}
    if "title" in schema:
        out["title"] = schema["title"]
    if isinstance(schema.get("type"), str | list) and not any(k in schema for k in _COMBINED):
        out["type"] = schema["type"]
    return out


def _keeping_minimums(cut: Any, whole: Any) -> Any:
    """`cut` with the `minItems` and `minProperties` of `whole`, the property's schema it stands
    for: a required list or object parameter gets one from the mapper (an empty one is sent as
    no parameter at all), and a cut property that lost it would let `[]` through."""
    if not isinstance(cut, dict) or cut is whole or not isinstance(whole, dict):
        return cut
    kept = {
        key: whole[key]
        for key in ("minItems", "minProperties")
        if type(whole.get(key)) is int and key not in cut
    }
    return {**cut, **kept} if kept else cut


def _counted(limit: int) -> Sizer:
    """A Sizer that walks each node anew, counting up to `limit + 1` values at most."""
    return lambda node: limit - _over(node, limit)


def bounded_output_schema(schema: dict[str, Any], size: Sizer | None = None) -> dict[str, Any]:
    """`schema` when it holds at most OUTPUT_MAX_VALUES values; else its top level with the
    large or referring properties reduced to their type and description, without `$defs`
    (an object with only a description when the top level itself is too large or combines
    schemas). `size` counts a node's values (the mapper's counts each shared part once)."""
    if (size or _counted(OUTPUT_MAX_VALUES))(schema) <= OUTPUT_MAX_VALUES:
        return schema
    properties = schema.get("properties")
    if isinstance(properties, dict) and not any(k in schema for k in _COMBINED):
        kept = {k: v for k, v in schema.items() if k in ("type", "title", "required")}
        cut = {
            **kept,
            "description": _described(schema, _NOTE),
            "properties": {name: _cut_property(sub) for name, sub in properties.items()},
        }
        if _over(cut, OUTPUT_MAX_VALUES) >= 0:
            return cut
    out: dict[str, Any] = {"type": "object", "description": _described(schema, _NOTE)}
    if "title" in schema:
        out["title"] = schema["title"]
    return out


def _shape(
    schema: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str], bool] | None:
    """The properties, the required names and whether `type: object` holds, of an object schema
    seen through its `$ref`s into `defs` and its `allOf` parts: each of them holds for every
    value the schema accepts, so a schema made of them accepts all of those too. None when no
    properties are found (or a `$ref` leads back to one being read)."""
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref[len("#/$defs/") :] if ref.startswith("#/$defs/") else None
        if name is None or name in seen or name not in defs:
            return None
        return _shape(defs[name], defs, (*seen, name))
    props: dict[str, Any] = (
        dict(schema["properties"]) if isinstance(schema.get("properties"), dict) else {}
    )
    required = (
        [r for r in schema.get("required") or [] if isinstance(r, str)]
        if isinstance(schema.get("required"), list)
        else []
    )
    is_object = schema.get("type") == "object"
    for part in parts if isinstance(parts := schema.get("allOf"), list) else ():
        inner = _shape(part, defs, seen)
        if inner is not None:  # a part without properties: its constraints are left out
            for key, sub in inner[0].items():
                props.setdefault(key, sub)
            required += inner[1]
            is_object = is_object or inner[2]
    return (props, list(dict.fromkeys(required)), is_object) if props else None


def _opened(schema: Any, defs: dict[str, Any]) -> dict[str, Any] | None:
    """A large property's schema as an object of its own properties, each kept whole when small
    and referring to nothing, else cut to its type and description; its `required` names kept,
    and nothing else (combinators, `additionalProperties`): it accepts every value the whole
    one does. None when it is no object with properties."""
    shape = _shape(schema, defs)
    if shape is None:
        return None
    props, required, is_object = shape
    out: dict[str, Any] = {
        "description": _described(schema, "its nested schemas are left out as too large")
    }
    if is_object:
        out["type"] = "object"
    out["properties"] = {key: _cut_property(sub) for key, sub in props.items()}
    if required:
        out["required"] = required
    return out


def bounded_input_schema(schema: dict[str, Any], size: Sizer | None = None) -> dict[str, Any]:
    """`schema` when it holds at most INPUT_MAX_VALUES values; else without `$defs`, its
    top-level keys kept, and each property whole while the properties kept so far, smallest
    first, fit in INPUT_MAX_VALUES and it refers to nothing; the others, while they fit, as an
    object of their own properties (`_opened`), else reduced to their type, title and
    description (as are all of them when even that is too large, or when the top level
    combines schemas: then it is an object with a description only). `size` counts a node's
    values, as for `bounded_output_schema`."""
    size = size or _counted(INPUT_MAX_VALUES)
    if size(schema) <= INPUT_MAX_VALUES:
        return schema
    properties = schema.get("properties")
    if isinstance(properties, dict) and not any(k in schema for k in _COMBINED):
        top = {k: v for k, v in schema.items() if k not in ("$defs", "properties", "description")}
        # each property cut holds a few values (its type, title and description): set aside first
        budget = INPUT_MAX_VALUES - size(top) - 10 - _CUT_VALUES * len(properties)
        sizes = {name: size(sub) for name, sub in properties.items()}
        kept: set[str] = set()
        for name in sorted(properties, key=lambda n: (sizes[n], n)):
            if sizes[name] - _CUT_VALUES > budget:
                break
            if not _refers(properties[name]):
                kept.add(name)
                budget -= sizes[name] - _CUT_VALUES
        # the others, while they fit, keep their own properties (an object body: the fields of
        # Microsoft Graph's user for `PATCH /users/{id}`), each cut in turn
        defs = found if isinstance(found := schema.get("$defs"), dict) else {}
        opened: dict[str, dict[str, Any]] = {}
        for name in sorted((n for n in properties if n not in kept), key=lambda n: (sizes[n], n)):
            fields = _opened(properties[name], defs)
            if fields is not None and (grown := size(fields) - _CUT_VALUES) <= budget:
                opened[name] = fields
                budget -= grown
        cut = {
            **top,
            "description": _described(schema, _INPUT_NOTE),
            "properties": {
                name: _keeping_minimums(opened.get(name) or _cut_property(sub, name in kept), sub)
                for name, sub in properties.items()
            },
        }
        if _over(cut, INPUT_MAX_VALUES) >= 0 and not _refers(top):
            return cut
    out: dict[str, Any] = {"type": "object", "description": _described(schema, _INPUT_NOTE)}
    if "title" in schema:
        out["title"] = schema["title"]
    return out
