"""A quick acceptance test for the plain input schemas most tools have.

`jsonschema` validates any schema, but walks it through generic keyword dispatch: about 30 µs
for an object of two integers, a sixth of what the bridge spends on a call. Most tools'
schemas use only types, properties, required, enums, bounds and lengths. For those,
`compile_quick_check` builds a predicate from closures that answers in a microsecond or two.

The predicate only ever says "certainly valid": `False` means "not sure", and the caller then
asks `jsonschema`, which decides and words the errors. A schema using anything outside the
subset (references, combinators, conditionals, draft-4 boolean bounds, ...) gets no predicate
at all. Values the predicate does not judge exactly (a float where an integer is wanted,
numbers in an enum) also answer `False` and are left to `jsonschema`, so the two can never
disagree on what is accepted."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["QuickCheck", "compile_quick_check"]

QuickCheck = Callable[[Any], bool]

# Keywords that never reject an instance (format is an annotation: no format checker is used).
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "format",
        "contentMediaType",
        "contentEncoding",
        "$schema",
        "$id",
    }
)
_CHECKED = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
    }
)
_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,  # 1.0 is an integer to JSON Schema: left to jsonschema
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}


def _any_of(tests: list[QuickCheck]) -> QuickCheck:
    """A check passing when any of `tests` does (`type` naming several types)."""
    return lambda value: any(test(value) for test in tests)


class _Unsupported(Exception):
    """The schema uses something the quick check does not cover."""


def compile_quick_check(schema: Any) -> QuickCheck | None:
    """A predicate true only for instances `schema` accepts, or None when the schema is outside
    the subset the predicate covers."""
    try:
        return _compile(schema, depth=0)
    except (_Unsupported, re.error, RecursionError):
        return None


def _number(value: Any) -> float | int:
    if type(value) not in (int, float):
        raise _Unsupported
    return value


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _Unsupported
    return value


def _compile(schema: Any, depth: int) -> QuickCheck:
    if depth > 32:
        raise _Unsupported
    if schema is True:
        return lambda v: True
    if type(schema) is not dict:
        raise _Unsupported
    checks: list[QuickCheck] = []
    for key in schema:
        if key not in _CHECKED and key not in _ANNOTATIONS and not key.startswith("x-"):
            raise _Unsupported
    if "type" in schema:
        names = schema["type"]
        names = [names] if type(names) is str else names
        if type(names) is not list or not names or any(n not in _TYPES for n in names):
            raise _Unsupported
        tests = [_TYPES[n] for n in names]
        checks.append(tests[0] if len(tests) == 1 else _any_of(tests))
    if "enum" in schema or "const" in schema:
        allowed = schema["enum"] if "enum" in schema else [schema["const"]]
        if type(allowed) is not list:
            raise _Unsupported
        strings = frozenset(a for a in allowed if type(a) is str)
        checks.append(lambda v: type(v) is str and v in strings)
    checks.extend(_number_checks(schema))
    checks.extend(_string_checks(schema))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        checks.append(_object_check(schema, depth))
    if "items" in schema or "minItems" in schema or "maxItems" in schema:
        checks.append(_array_check(schema, depth))
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # the common `type` and one more: no generator to run through
        first, second = checks
        return lambda v: first(v) and second(v)
    return lambda v: all(check(v) for check in checks)


def _number_checks(schema: dict[str, Any]) -> list[QuickCheck]:
    checks: list[QuickCheck] = []
    bounds = {
        k: _number(schema[k])
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        if k in schema
    }
    if not bounds:
        return checks
    low, high = bounds.get("minimum"), bounds.get("maximum")
    xlow, xhigh = bounds.get("exclusiveMinimum"), bounds.get("exclusiveMaximum")

    def within(v: Any) -> bool:
        if type(v) is not int and type(v) is not float:
            return True  # bounds apply to numbers only
        return (
            (low is None or v >= low)
            and (high is None or v <= high)
            and (xlow is None or v > xlow)
            and (xhigh is None or v < xhigh)
        )

    checks.append(within)
    return checks


def _string_checks(schema: dict[str, Any]) -> list[QuickCheck]:
    checks: list[QuickCheck] = []
    if "minLength" in schema or "maxLength" in schema:
        shortest = _count(schema.get("minLength", 0))
        longest = _count(schema["maxLength"]) if "maxLength" in schema else None
        checks.append(
            lambda v: (
                type(v) is not str
                or (len(v) >= shortest and (longest is None or len(v) <= longest))
            )
        )
    if "pattern" in schema:
        if type(schema["pattern"]) is not str:
            raise _Unsupported
        search = re.compile(schema["pattern"]).search
        checks.append(lambda v: type(v) is not str or search(v) is not None)
    return checks


def _object_check(schema: dict[str, Any], depth: int) -> QuickCheck:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if (
        type(properties) is not dict
        or type(required) is not list
        or any(type(r) is not str for r in required)
    ):
        raise _Unsupported
    known = {name: _compile(sub, depth + 1) for name, sub in properties.items()}
    needed = tuple(required)
    extra_check = (
        None
        if extra is True
        else (lambda v: False)
        if extra is False
        else _compile(extra, depth + 1)
    )

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return True  # object keywords apply to objects only
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            sub = known.get(name)
            if sub is not None:
                if not sub(item):
                    return False
            elif extra_check is not None and not extra_check(item):
                return False
        return True

    return check


def _array_check(schema: dict[str, Any], depth: int) -> QuickCheck:
    items = schema.get("items", True)
    if type(items) is not dict and items is not True:
        raise _Unsupported  # tuple-form items (draft 4-7) or `items: false`
    item_check = _compile(items, depth + 1)
    shortest = _count(schema.get("minItems", 0))
    longest = _count(schema["maxItems"]) if "maxItems" in schema else None

    def check(value: Any) -> bool:
        if type(value) is not list:
            return True
        if len(value) < shortest or (longest is not None and len(value) > longest):
            return False
        return all(item_check(item) for item in value)

    return check
