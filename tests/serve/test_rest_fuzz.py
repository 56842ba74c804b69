"""Fuzzing the served REST API from its own OpenAPI document: hypothesis draws operations, path
and query parameters, tokens and bodies (valid per the documented schema, arbitrary JSON, or
broken bytes) and every answer must be documented for its operation, match the documented schema,
and never be a 5xx."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.serve.openapi_doc import openapi_document
from tests.fakes import FakeUpstream, tool
from tests.serve.rest_env import (
    TOKEN_ALL,
    TOKEN_NARROW,
    Served,
    config_with,
    narrow_surfaces,
    serving,
)

DOCUMENT = openapi_document()
COMPONENTS = DOCUMENT["components"]
OPERATIONS = [
    (path, method, op)
    for path, item in sorted(DOCUMENT["paths"].items())
    for method, op in sorted(item.items())
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


WORDS = ["text", "choice", "n", "A", "B", "deep", "fz__echo", "fz__pick"]


def from_schema(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for the subset of JSON Schema the document uses ($ref, type lists, enum, objects
    with properties and required, arrays, strings with pattern or minLength, bounded integers)."""
    if "$ref" in schema:
        return from_schema(COMPONENTS["schemas"][schema["$ref"].rsplit("/", 1)[-1]], depth)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return st.one_of([from_schema(s, depth) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, depth) for k in kind])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "object" and schema.get("properties") and depth < 4:
        props = schema["properties"]
        required = [k for k in schema.get("required", []) if k in props]
        return st.fixed_dictionaries(
            {k: from_schema(props[k], depth + 1) for k in required},
            optional={k: from_schema(v, depth + 1) for k, v in props.items() if k not in required},
        )
    if kind == "object":
        return st.dictionaries(st.sampled_from(WORDS) | st.text(max_size=6), JSON, max_size=3)
    if kind == "array":
        return st.lists(
            from_schema(schema.get("items", {}), depth + 1),
            min_size=schema.get("minItems", 0),
            max_size=3,
        )
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.sampled_from(WORDS) | st.text(min_size=schema.get("minLength", 0), max_size=10)
    if kind == "integer":
        return st.integers(
            min_value=schema.get("minimum", -5), max_value=schema.get("maximum", 10**4)
        )
    if kind == "number":
        return st.integers(-100, 100) | st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    return JSON


def rooted(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema whose `#/components/...` references resolve (the document's components ride along)."""
    return {**schema, "components": COMPONENTS}


_VALIDATORS: dict[str, jsonschema.Draft202012Validator] = {}


def validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = jsonschema.Draft202012Validator(
            rooted(schema), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
    return _VALIDATORS[key]


def tools() -> FakeUpstream:
    return FakeUpstream(
        name="fz",
        tools=[
            tool("echo"),
            tool(
                "pick",
                props={
                    "choice": {"type": "string", "enum": ["A", "B"]},
                    "n": {"type": "integer", "maximum": 9},
                },
                required=["choice"],
            ),
            tool(
                "secret_nested",
                props={"deep": {"type": "object", "properties": {"x": {"type": "array"}}}},
            ),
            tool("wipe", destructive=True),
        ],
    )


def words(served: Served) -> st.SearchStrategy[str]:
    known = [d.tool_id for d in served.bridge.catalog.declarations()] + [
        d.name for d in served.bridge.catalog.declarations()
    ]
    # "." and ".." are path segments a client normalizes away, so they are not drawn
    return (
        st.sampled_from(known)
        | st.sampled_from(["1", "2", "fz", "default", "narrow", "nope"])
        | st.text(
            st.characters(codec="ascii", exclude_characters="/?#%\x00"), min_size=1, max_size=10
        ).filter(lambda w: w.strip(".") != "")
    )


def request_for(
    served: Served,
) -> st.SearchStrategy[tuple[str, str, dict[str, Any], dict[str, Any], Any, dict[str, Any]]]:
    @st.composite
    def draw(
        draw_: st.DrawFn,
    ) -> tuple[str, str, dict[str, Any], dict[str, Any], Any, dict[str, Any]]:
        path, method, op = draw_(st.sampled_from(OPERATIONS))
        url, query, headers = path, {}, {}
        for param in op.get("parameters", []):
            if param["in"] == "path":
                url = url.replace("{" + param["name"] + "}", draw_(words(served)))
            elif param["in"] == "header" and draw_(st.booleans()):
                headers[param["name"]] = str(draw_(from_schema(param["schema"])))
            elif param["in"] == "query" and (param["required"] or draw_(st.booleans())):
                value = draw_(from_schema(param["schema"]) | st.text(max_size=6))
                query[param["name"]] = (
                    json.dumps(value) if isinstance(value, bool) else str(value)
                ).replace("\x00", "")
        token = draw_(
            st.sampled_from([TOKEN_ALL] * 5 + [TOKEN_NARROW] * 3 + [None, "wrong-token-value"])
        )
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body: Any = None
        if "requestBody" in op:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            body = draw_(st.one_of(from_schema(schema), JSON, st.binary(max_size=20)))
        return method, url, query, headers, body, op

    return draw()


async def test_served_api_keeps_to_its_openapi_document():
    config = config_with(**narrow_surfaces())
    config["surfaces"][1]["block"] = ["*secret*"]
    async with serving(tools(), config=config) as served:

        @settings(
            max_examples=400,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=[
                HealthCheck.function_scoped_fixture,
                HealthCheck.too_slow,
                HealthCheck.filter_too_much,
                HealthCheck.data_too_large,
            ],
        )
        @given(request_for(served))
        async def check(
            request: tuple[str, str, dict[str, Any], dict[str, Any], Any, dict[str, Any]],
        ) -> None:
            method, url, query, headers, body, op = request
            kwargs: dict[str, Any] = {"params": query, "headers": headers, "allow_redirects": False}
            if isinstance(body, bytes):
                kwargs["data"] = body
                headers["Content-Type"] = "application/json"
            elif body is not None:
                kwargs["json"] = body
            async with served.http.request(method.upper(), url, **kwargs) as response:
                status, text = response.status, await response.text()
                content_type = response.content_type
            where = f"{method.upper()} {url} {query} -> {status}: {text[:300]}"
            assert status < 500, where
            documented = op["responses"].get(str(status))
            assert documented is not None, f"undocumented status: {where}"
            if content_type == "application/json" and "application/json" in documented.get(
                "content", {}
            ):
                errors = sorted(
                    validator(documented["content"]["application/json"]["schema"]).iter_errors(
                        json.loads(text)
                    ),
                    key=str,
                )
                assert not errors, (
                    f"{where}\n{errors[0].message} at {list(errors[0].absolute_path)}"
                )

        await run_sync_hypothesis(check)


async def run_sync_hypothesis(check: Any) -> None:
    """Run a hypothesis test whose body is a coroutine, every example on this event loop."""
    import asyncio

    loop = asyncio.get_running_loop()
    inner = check.hypothesis.inner_test

    def sync_inner(*args: Any, **kwargs: Any) -> None:
        future = asyncio.run_coroutine_threadsafe(inner(*args, **kwargs), loop)
        future.result(timeout=30)

    check.hypothesis.inner_test = sync_inner
    await asyncio.to_thread(check)
