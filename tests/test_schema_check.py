"""The quick schema check never accepts what jsonschema rejects, and accepts the plain cases."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.arguments import SchemaValidators
from bridge.schema_check import compile_quick_check

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False),
    st.sampled_from([0.0, 1.0, 2.0]),
    st.text("ab", max_size=3),
)
INSTANCES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    ),
    max_leaves=8,
)
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]


def schemas() -> st.SearchStrategy[dict[str, Any]]:
    def node(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        keywords = st.fixed_dictionaries(
            {},
            optional={
                "type": st.one_of(
                    st.sampled_from(TYPES),
                    st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
                ),
                "enum": st.lists(SCALARS, min_size=1, max_size=3),
                "const": SCALARS,
                "minimum": st.integers(-3, 3),
                "maximum": st.integers(-3, 3),
                "exclusiveMinimum": st.floats(-3, 3),
                "exclusiveMaximum": st.integers(-3, 3),
                "minLength": st.integers(0, 3),
                "maxLength": st.integers(0, 3),
                "pattern": st.sampled_from(["^a", "b$", "a+b"]),
                "properties": st.dictionaries(
                    st.sampled_from(["a", "b", "c"]), children, max_size=3
                ),
                "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True),
                "additionalProperties": st.one_of(st.booleans(), children),
                "items": children,
                "minItems": st.integers(0, 2),
                "maxItems": st.integers(0, 3),
                "description": st.just("annotation"),
                "format": st.just("date-time"),
            },
        )
        return keywords

    return st.recursive(st.just({}), node, max_leaves=6)


@settings(
    max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(schemas(), INSTANCES)
def test_quick_check_accepts_only_what_jsonschema_accepts(
    schema: dict[str, Any], instance: Any
) -> None:
    quick = compile_quick_check(schema)
    assert quick is not None, schema  # everything drawn here is inside the covered subset
    if quick(instance):
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(instance))
        assert not errors, (schema, instance, errors[0].message)


def test_plain_tool_schemas_get_a_check_that_accepts_valid_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0},
            "unit": {"enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    quick = compile_quick_check(schema)
    assert quick is not None
    assert quick({"a": 3, "unit": "c", "tags": ["x"]})
    assert not quick({"a": -1}) and not quick({"unit": "c"}) and not quick({"a": 1, "other": 2})
    # not judged exactly, so left to jsonschema: 1.0 is an integer there
    assert not quick({"a": 1.0})
    validators = SchemaValidators()
    assert validators.errors(("t", 1), schema, {"a": 1.0}) == []
    assert validators.errors(("t", 1), schema, {"a": 1}) == []
    assert [e["path"] for e in validators.errors(("t", 1), schema, {"a": -1, "other": 2})] == [
        "/",
        "/a",
    ]


def test_schemas_outside_the_subset_get_no_quick_check() -> None:
    for schema in (
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"anyOf": [{"type": "string"}]},
        {"type": "object", "properties": {"a": {"oneOf": []}}},
        {"type": "number", "exclusiveMinimum": True},
        {"type": "any"},
        {"items": [{"type": "string"}]},
        {"type": "object", "required": "a"},
        {"type": "object", "nullable": True},
        {"pattern": "("},
    ):
        assert compile_quick_check(schema) is None, schema
    assert compile_quick_check({})("anything")  # the empty schema accepts everything
