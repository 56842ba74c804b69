"""The IETF A2T draft served at the root: enumeration and paging, signatures, versions, pinned
invocation, and every status code an invocation can answer with."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

from bridge.model import BridgeError, ToolError, UpstreamResult
from bridge.translate.ietf import INT_UNBOUNDED
from tests.fakes import FakeUpstream, tool
from tests.serve.rest_env import TOKEN_ALL, TOKEN_NARROW, config_with, narrow_surfaces, serving


def many(count: int) -> FakeUpstream:
    return FakeUpstream(name="bulk", tools=[tool(f"t{i:05d}") for i in range(count)])


async def walk(served, page_limit: int, **params) -> tuple[list[str], list[dict]]:
    names, pagings, cursor = [], [], None
    while True:
        query = {"pageLimit": page_limit, **params, **({"pageCursor": cursor} if cursor else {})}
        status, body, _ = await served.get("/tools", **query)
        assert status == 200, body
        names += [item["name"] for item in body["items"]]
        pagings.append(body["paging"])
        cursor = body["paging"].get("next")
        if not cursor:
            return names, pagings


async def test_pages_of_one_cover_every_tool_once_in_name_order():
    async with serving(many(7)) as served:
        names, pagings = await walk(served, 1)
        assert names == sorted(f"bulk__t{i:05d}" for i in range(7))
        assert len(pagings) == 7 and all(p["pageLimit"] == 1 for p in pagings)
        assert "next" not in pagings[-1]


async def test_pages_of_500_and_the_limit_is_clamped():
    async with serving(many(1203)) as served:
        names, pagings = await walk(served, 500)
        assert len(names) == len(set(names)) == 1203
        assert [p["pageLimit"] for p in pagings] == [500, 500, 500]
        status, body, _ = await served.get("/tools", pageLimit=5000)
        assert status == 200 and body["paging"]["pageLimit"] == 500 and len(body["items"]) == 500


async def test_paging_survives_a_catalog_change_between_pages():
    up = many(6)
    async with serving(up) as served:
        _, first, _ = await served.get("/tools", pageLimit=3)
        served.bridge.catalog.apply_tools(
            "bulk", [*up.tools, tool("t00000a")]
        )  # sorts into the first page
        _, second, _ = await served.get("/tools", pageLimit=3, pageCursor=first["paging"]["next"])
        seen = [i["name"] for i in first["items"] + second["items"]]
        assert seen == [f"bulk__t{i:05d}" for i in range(6)]  # nothing skipped, nothing twice


async def test_bad_paging_parameters_are_400_naming_the_parameter():
    async with serving(many(2)) as served:
        deep = base64.urlsafe_b64encode(
            b"[" * 5000
        ).decode()  # a forged cursor too deep for the JSON reader
        for params, parameter in (
            ({"pageLimit": 0}, "pageLimit"),
            ({"pageLimit": "ten"}, "pageLimit"),
            ({"pageCursor": "garbage!"}, "pageCursor"),
            ({"pageCursor": deep}, "pageCursor"),
        ):
            status, body, _ = await served.get("/tools", **params)
            assert status == 400, params
            assert body["error"]["error_class"] == "invalid_arguments"
            assert body["error"]["details"]["parameter"] == parameter


async def test_tags_filter_keeps_tools_carrying_every_tag():
    up = FakeUpstream(
        name="t", tools=[tool("a", tags=["x", "y"]), tool("b", tags=["x"]), tool("c")]
    )
    async with serving(up) as served:
        _, body, _ = await served.get("/tools", tags="x")
        assert [i["name"] for i in body["items"]] == ["t__a", "t__b"]
        _, body, _ = await served.get("/tools", tags="x,y")
        assert [i["name"] for i in body["items"]] == ["t__a"]
        names, _ = await walk(served, 1, tags="x")
        assert names == ["t__a", "t__b"]


async def test_signature_follows_the_draft():
    weather = tool(
        "lookup_weather",
        description="Look up the weather.",
        props={
            "city": {"type": "string", "description": "The city."},
            "nights": {"type": "integer", "maximum": 30},
            "days": {"type": "integer"},
            "metric": {"type": "boolean", "default": True},
            "cabin": {
                "type": "string",
                "enum": ["ECONOMY", "BUSINESS"],
                "x-enum-descriptions": {"ECONOMY": "Least expensive."},
            },
        },
        required=["city", "cabin"],
        output_schema={
            "type": "object",
            "properties": {"temp": {"type": "integer", "description": "degrees"}},
        },
    )
    async with serving(FakeUpstream(name="w", tools=[weather])) as served:
        tool_id = served.tool_id("w__lookup_weather")
        for ref in (tool_id, "w__lookup_weather"):
            status, sig, _ = await served.get(f"/tools/{ref}")
            assert status == 200
        assert uuid.UUID(sig["toolId"]) and sig["toolId"] == tool_id
        assert sig["version"] == sig["currentVersion"] == 1 and isinstance(sig["version"], int)
        params = {p["name"]: p for p in sig["input_parameters"]}
        assert params["city"] == {
            "id": "city",
            "name": "city",
            "type": "string",
            "description": "The city.",
            "required": True,
        }
        assert (
            params["nights"]["type"] == "int"
            and params["nights"]["max"] == 30
            and params["nights"]["required"] is False
        )
        assert (
            params["days"]["max"] == INT_UNBOUNDED
        )  # no maximum: not the draft's default of 65535
        assert params["metric"]["type"] == "boolean"
        assert params["cabin"]["allowed-values"] == [
            {"name": "ECONOMY", "description": "Least expensive."},
            {"name": "BUSINESS"},
        ]
        assert sig["output_parameters"] == [
            {"id": "temp", "name": "temp", "type": "int", "description": "degrees"}
        ]
        assert "input_schema" not in sig  # the flat parameters carry the whole schema
        assert sig["x-agent-tool"]["namespace"] == "w"


async def test_inexpressible_input_is_served_with_the_full_schema():
    nested = tool(
        "book",
        props={
            "when": {"type": "string"},
            "guests": {"type": "array", "items": {"type": "string"}},
            "price": {"type": "number"},
        },
        required=["when"],
    )
    async with serving(FakeUpstream(name="n", tools=[nested])) as served:
        _, sig, _ = await served.get("/tools/n__book")
        assert [p["name"] for p in sig["input_parameters"]] == [
            "when"
        ]  # what the flat types can express
        assert sig["input_schema"]["properties"]["guests"]["type"] == "array"
        status, body, _ = await served.post(
            "/tools/n__book:invoke",
            {
                "name": "n__book",
                "input_parameters": [
                    {"name": "when", "value": "today"},
                    {"name": "guests", "value": ["ann", "bo"]},
                    {"name": "price", "value": 9.5},
                ],
            },
        )
        assert status == 200, body
        assert served.bridge.catalog.slots["n"].upstream.calls[-1][1] == {
            "when": "today",
            "guests": ["ann", "bo"],
            "price": 9.5,
        }


async def test_invocation_answers_output_parameters_and_the_envelope():
    shaped = tool(
        "shaped", output_schema={"type": "object", "properties": {"echo": {"type": "object"}}}
    )
    async with serving(FakeUpstream(name="f", tools=[tool("echo"), shaped])) as served:
        status, body, _ = await served.post(
            "/tools/f__echo:invoke",
            {"name": "f__echo", "input_parameters": [{"name": "text", "value": "hi"}]},
        )
        assert status == 200
        assert body["output_parameters"] == [{"name": "result", "value": {"echo": {"text": "hi"}}}]
        assert (
            body["x-tool-result"]["status"] == "succeeded"
            and body["x-tool-result"]["content"][0]["text"] == "hi"
        )
        _, body, _ = await served.post(
            f"/tools/{served.tool_id('f__shaped')}:invoke",
            {"input_parameters": [{"name": "text", "value": "x"}]},
        )
        assert body["output_parameters"] == [{"name": "echo", "value": {"text": "x"}}]
        _, body, _ = await served.post(
            "/tools/f__echo:invoke", {"arguments": {"text": "as an object"}}
        )
        assert body["x-tool-result"]["content"][0]["text"] == "as an object"


async def test_versions_newest_first_paginated_and_pinned_invocation():
    up = FakeUpstream(
        name="v", tools=[tool("greet", props={"text": {"type": "string"}}, required=["text"])]
    )
    async with serving(up) as served:
        tool_id = served.tool_id("v__greet")
        # a breaking change upstream: `text` is gone, `name` is required
        up.tools = [tool("greet", props={"name": {"type": "string"}}, required=["name"])]
        served.bridge.catalog.apply_tools("v", up.tools)
        status, body, _ = await served.get(f"/tools/{tool_id}/versions")
        assert status == 200 and [s["version"] for s in body["items"]] == [2, 1]
        assert all(s["currentVersion"] == 2 for s in body["items"])
        assert body["items"][1]["x-agent-tool"]["compatibility"] == "initial"
        assert body["items"][0]["x-agent-tool"]["compatibility"] == "breaking"
        _, page1, _ = await served.get(f"/tools/{tool_id}/versions", pageLimit=1)
        _, page2, _ = await served.get(
            f"/tools/{tool_id}/versions", pageLimit=1, pageCursor=page1["paging"]["next"]
        )
        assert [page1["items"][0]["version"], page2["items"][0]["version"]] == [
            2,
            1,
        ] and "next" not in page2["paging"]
        status, old, _ = await served.get(f"/tools/{tool_id}/versions/1")
        assert (
            status == 200
            and [p["name"] for p in old["input_parameters"]] == ["text"]
            and old["currentVersion"] == 2
        )
        # '²' passes str.isdigit() but not int(); 2^64 does not fit an SQLite integer
        for missing in ("9", "abc", "0", "²", "18446744073709551616", "9" * 5000):
            status, body, _ = await served.get(f"/tools/{tool_id}/versions/{missing}")
            assert status == 404 and body["error"]["error_code"] == "unknown_version", missing
            status, body, _ = await served.post(
                f"/tools/{tool_id}/versions/{missing}:invoke", {"input_parameters": []}
            )
            assert status == 404 and body["error"]["error_code"] == "unknown_version", missing
            assert body["error"]["error_class"] == "unknown_tool", (
                missing
            )  # as the GET of the version says
        status, body, _ = await served.post(
            "/invoke", {"tool": "v__greet", "arguments": {"name": "x"}, "version": 2**70}
        )
        assert status == 404 and body["error"]["error_code"] == "unknown_version"

        # the pinned old version validates against its own schema, then fails clearly: the upstream changed
        status, body, _ = await served.post(
            f"/tools/{tool_id}/versions/1:invoke",
            {"input_parameters": [{"name": "text", "value": "hi"}]},
        )
        assert status == 409, body
        assert (
            body["error"]["error_class"] == "capability_gap"
            and body["error"]["error_code"] == "pinned_version_unservable"
        )
        assert "breaking change at version 2" in body["error"]["message"]
        # the current version works
        status, body, _ = await served.post(
            f"/tools/{tool_id}/versions/2:invoke",
            {"input_parameters": [{"name": "name", "value": "ann"}]},
        )
        assert status == 200
        status, body, _ = await served.post(
            f"/tools/{tool_id}:invoke", {"input_parameters": [{"name": "name", "value": "ann"}]}
        )
        assert status == 200 and body["x-tool-result"]["version"] == 2
        status, body, _ = await served.post(
            f"/tools/{tool_id}/versions/7:invoke", {"input_parameters": []}
        )
        assert status == 404 and body["error"]["error_code"] == "unknown_version"


async def test_malformed_requests_are_400_with_a_pointer():
    async with serving(FakeUpstream(name="f")) as served:
        cases = [
            (b'{"input_parameters": [', "", "line 1"),
            (b'{"input_parameters": [{"value": 1}]}', "/input_parameters/0/name", None),
            (b'{"input_parameters": [{"name": "text"}]}', "/input_parameters/0/value", None),
            (b'{"input_parameters": {"text": "x"}}', "/input_parameters", None),
            (b'{"name": "other_tool", "input_parameters": []}', "/name", None),
            (b"[1, 2]", "", None),
            (b"", "", None),
            (b"\xff\xfe", "", None),
            # values JSON cannot carry: refused, not handed to the upstream as null or inf
            (
                b'{"input_parameters": [{"name": "text", "value": NaN}]}',
                "",
                "NaN is not a JSON value",
            ),
            (b'{"input_parameters": [{"name": "text", "value": -Infinity}]}', "", "-Infinity"),
            (b'{"input_parameters": [{"name": "text", "value": 1e400}]}', "", "too large"),
            (
                b'{"input_parameters": [{"name": "text", "value": ' + b"9" * 5000 + b"}]}",
                "",
                "not valid JSON",
            ),
            # about a thousand levels: past the JSON reader's recursion
            (
                b'{"input_parameters": [{"name": "text", "value": '
                + b"[" * 5000
                + b"]" * 5000
                + b"}]}",
                "",
                "nests too deep",
            ),
        ]
        for raw, pointer, text in cases:
            status, body, _ = await served.post("/tools/f__echo:invoke", raw=raw)
            assert status == 400, raw
            assert body["error"]["error_class"] == "invalid_arguments"
            assert body["error"]["details"]["pointer"] == pointer, raw
            if text:
                assert text in body["error"]["message"]
        # text that is not Unicode (a lone surrogate, escaped or as its bytes) and nesting past
        # MAX_ARGUMENT_DEPTH levels: refused by the pipeline, naming where
        for raw, pointer in (
            (b'{"input_parameters": [{"name": "text", "value": "\\ud800"}]}', "/text"),
            (b'{"input_parameters": [{"name": "text", "value": "\xed\xa0\x80"}]}', "/text"),
            (
                b'{"tool": "f__echo", "arguments": {"text": "x", "d": '
                + b"[" * 80
                + b"]" * 80
                + b"}}",
                "/d" + "/0" * 63,
            ),
        ):
            status, body, _ = await served.post(
                "/invoke" if raw.startswith(b'{"tool"') else "/tools/f__echo:invoke", raw=raw
            )
            assert status == 400 and body["error"]["error_class"] == "invalid_arguments", raw
            assert body["error"]["details"]["errors"][0]["path"] == pointer
        _, body, _ = await served.post("/tools/f__echo:invoke", raw=b'{"a": 1,\n "b": }')
        assert body["error"]["details"]["line"] == 2
        # arguments that do not match the schema: 400 with the pipeline's envelope
        status, body, _ = await served.post(
            "/tools/f__echo:invoke", {"input_parameters": [{"name": "text", "value": 5}]}
        )
        assert status == 400 and body["error"]["details"]["errors"][0]["path"] == "/text"
        assert body["x-tool-result"]["status"] == "rejected"


async def test_a_key_given_twice_in_one_object_is_400_naming_the_object_on_every_body_route():
    # JSON's reader kept the last of the two silently, where the config loader refuses them
    routes = [
        (
            "/invoke",
            b'{"tool": "f__echo", "arguments": {"text": "x", "text": "y"}}',
            "/arguments",
            "text",
        ),
        (
            "/invoke",
            b'{"tool": "f__echo", "tool": "f__other", "arguments": {"text": "x"}}',
            "",
            "tool",
        ),
        (
            "/tools/f__echo:invoke",
            b'{"input_parameters": [{"name": "text", "value": {"a/b": 1, "a/b": 2}}]}',
            "/input_parameters/0/value",
            "a/b",
        ),
        ("/a2t/tools/f__echo", b'{"text": "x", "text": "y"}', "", "text"),
    ]
    async with serving(FakeUpstream(name="f")) as served:
        for path, raw, pointer, key in routes:
            status, body, _ = await served.post(path, raw=raw)
            assert status == 400, (path, body)
            error = body["error"]
            assert error["error_class"] == "invalid_arguments", error
            assert error["error_code"] == "repeated_key", error
            assert error["details"] == {"pointer": pointer, "key": key}, error
            assert f"gives the key {key!r} twice in one object" in error["message"], error
        raw = b'{"tool": "f__echo", "arguments": {"text": "x"}}'
        status, _, _ = await served.post("/invoke", raw=raw)
        assert status == 200


async def test_body_over_the_limit_is_413_with_or_without_content_length():
    config = config_with(server={"max_body_bytes": 2048})
    async with serving(FakeUpstream(name="f"), config=config) as served:
        big = {"input_parameters": [{"name": "text", "value": "x" * 4096}]}
        status, body, _ = await served.post("/tools/f__echo:invoke", big)
        assert status == 413 and body["error"]["details"]["max_body_bytes"] == 2048

        async def chunks():
            for _ in range(8):
                yield b" " * 512

        async with served.http.post(
            "/tools/f__echo:invoke", data=chunks(), headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 413
            assert (await response.json())["error"]["error_class"] == "invalid_arguments"
        status, _, _ = await served.post(
            "/tools/f__echo:invoke", {"input_parameters": [{"name": "text", "value": "small"}]}
        )
        assert status == 200


async def test_a_body_in_many_chunks_or_with_a_byte_order_mark_is_read_whole():
    async with serving(FakeUpstream(name="f")) as served:
        document = json.dumps({"input_parameters": [{"name": "text", "value": "é" * 300}]}).encode()

        async def chunks():
            for start in range(0, len(document), 7):
                yield document[start : start + 7]

        async with served.http.post(
            "/tools/f__echo:invoke", data=chunks(), headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 200
            assert (await response.json())["output_parameters"][0]["value"] == {
                "echo": {"text": "é" * 300}
            }
        status, body, _ = await served.post("/tools/f__echo:invoke", raw=b"\xef\xbb\xbf" + document)
        assert status == 200 and body["output_parameters"][0]["value"] == {
            "echo": {"text": "é" * 300}
        }


async def test_auth_missing_token_401_and_a_tool_the_surface_blocks_is_answered_as_a_missing_one():
    up = FakeUpstream(name="f", tools=[tool("echo"), tool("secret_box")])
    async with serving(up, config=config_with(**narrow_surfaces())) as served:
        for token in (None, "not-a-known-token-at-all"):
            status, body, response = await served.get("/tools", token=token)
            assert status == 401 and body["error"]["error_class"] == "credential_missing"
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
        async with served.http.get("/tools", headers={"Authorization": "Basic abc"}) as response:
            assert response.status == 401
        secret_id = served.tool_id("f__secret_box")
        status, _, _ = await served.get(f"/tools/{secret_id}", token=TOKEN_ALL)
        assert status == 200
        _, listing, _ = await served.get("/tools", token=TOKEN_NARROW)
        assert [i["name"] for i in listing["items"]] == ["f__echo"]
        missing_id = str(uuid.uuid4())
        for path in ("/tools/{}", "/tools/{}/versions", "/tools/{}/versions/1"):
            hidden = await served.get(path.format(secret_id), token=TOKEN_NARROW)
            absent = await served.get(path.format(missing_id), token=TOKEN_NARROW)
            assert hidden[0] == absent[0] == 404
            assert hidden[1]["error"] == {
                **absent[1]["error"],
                "message": absent[1]["error"]["message"].replace(missing_id, secret_id),
            }
        # a call too: the surface's rule is access control, which says nothing of what it denies
        for path in ("/tools/{}:invoke", "/tools/{}/versions/1:invoke"):
            blocked = await served.post(
                path.format(secret_id), {"input_parameters": []}, token=TOKEN_NARROW
            )
            absent = await served.post(
                path.format(missing_id), {"input_parameters": []}, token=TOKEN_NARROW
            )
            assert blocked[0] == absent[0] == 404
            assert absent[1]["error"]["error_class"] == "unknown_tool"
            message = absent[1]["error"]["message"].replace(missing_id, secret_id)
            assert blocked[1]["error"] == {**absent[1]["error"], "message": message}
        assert up.calls == []


async def test_status_codes_of_error_results():
    up = FakeUpstream(name="f", tools=[tool("echo"), tool("wipe", destructive=True)])
    async with serving(up, config=config_with(invoke={"default_timeout": 0.3})) as served:

        async def call(name: str = "f__echo") -> tuple[int, dict, dict]:
            status, body, response = await served.post(
                f"/tools/{name}:invoke", {"input_parameters": [{"name": "text", "value": "x"}]}
            )
            return status, body, dict(response.headers)

        status, body, _ = await call("f__wipe")  # declared destructive, surface does not allow it
        assert status == 403 and body["error"]["error_class"] == "permission_denied"

        up.result = UpstreamResult(
            is_error=True, error=ToolError(error_class="execution_failed", message="disk on fire")
        )
        status, body, _ = await call()
        assert status == 422 and body["error"]["message"] == "disk on fire"
        up.result = None

        up.raise_error = BridgeError("slow down", error_class="rate_limited", retry_after=3)
        status, body, headers = await call()
        assert status == 429 and headers["Retry-After"] == "3"

        up.raise_error = BridgeError(
            "vendor down", error_class="dependency_unavailable", retry_after=2.5
        )
        status, body, headers = await call()
        assert (
            status == 503
            and headers["Retry-After"] == "3"
            and body["error"]["recoverability"] == "retry_later"
        )
        up.raise_error = None

        up.gate = asyncio.Event()  # never opened: the call times out
        status, body, _ = await call()
        assert status == 504 and body["error"]["error_class"] == "timeout"
        up.gate = None

        up.raise_error = RuntimeError(
            "adapter bug"
        )  # an unexpected exception is still a result, not a 500
        status, body, _ = await call()
        assert status == 422 and body["error"]["error_class"] == "execution_failed"
        up.raise_error = None

        up.result = UpstreamResult(
            is_error=True,
            error=ToolError(
                error_class="rate_limited",
                message="slow down",
                recoverability="retry",
                retry_after=float("inf"),
            ),
        )
        status, body, headers = await call()  # a delay no client can wait is read as unknown
        assert status == 429 and "Retry-After" not in headers
        up.result = None

        served.bridge.catalog.slots["f"].health.state = "unavailable"  # the upstream went away
        status, body, headers = await call()
        assert (
            status == 503
            and body["error"]["error_class"] == "dependency_unavailable"
            and "Retry-After" in headers
        )


async def test_unexpected_faults_are_structured_never_tracebacks(monkeypatch):
    async with serving(FakeUpstream(name="f")) as served:

        async def broken(*args, **kwargs):
            raise RuntimeError("internal detail that must not leak")

        monkeypatch.setattr(served.bridge.invoker, "invoke", broken)
        status, body, _ = await served.post("/tools/f__echo:invoke", {"input_parameters": []})
        assert status == 500 and body["error"]["error_class"] == "execution_failed"
        assert "internal detail" not in str(body) and "Traceback" not in str(body)
        status, body, _ = await served.get("/no/such/route")
        assert status == 404 and body["error"]["error_code"] == "route_not_found"
        async with served.http.delete("/tools") as response:
            assert (
                response.status == 405
                and (await response.json())["error"]["error_code"] == "method_not_allowed"
            )
        for path in (
            "/tools/f__echo:invoke",
            "/tools/f__echo/versions/1:invoke",
        ):  # the invoke routes, with GET
            status, body, response = await served.get(path)
            assert (
                status == 405
                and body["error"]["error_code"] == "method_not_allowed"
                and response.headers["Allow"] == "POST"
            )
        # an empty tool id or version in an invoke path names nothing: 404, as documented
        for path in ("/tools/:invoke", "/tools/f__echo/versions/:invoke"):
            status, body, _ = await served.post(path, {"input_parameters": []})
            assert status == 404 and body["error"]["error_class"] == "unknown_tool", (path, body)


async def test_text_that_is_not_valid_unicode_is_answered_with_replacement_characters():
    # an unpaired "\ud83d" escape from an upstream reaches a result as a string no UTF-8 encoder
    # takes: the answer carries U+FFFD instead of failing after the call ran (the caller's own is
    # refused before the call: test_malformed_requests_are_400_with_a_pointer)
    up = FakeUpstream(name="f")
    async with serving(up) as served:
        up.result = UpstreamResult(
            content=[{"type": "text", "text": "n\ud83d"}],
            structured_content={"echo": {"text": "n\ud83d"}},
        )
        status, body, _ = await served.post(
            "/tools/f__echo:invoke", {"input_parameters": [{"name": "text", "value": "n"}]}
        )
        assert status == 200, body
        assert body["x-tool-result"]["content"][0]["text"] == "n\ufffd"
        assert body["x-tool-result"]["structured_content"] == {"echo": {"text": "n\ufffd"}}
        up.result = None
        up.raise_error = BridgeError(
            "the upstream said: bad \udc00 input", error_class="execution_failed"
        )
        status, body, _ = await served.post(
            "/invoke", {"tool": "f__echo", "arguments": {"text": "x"}}
        )
        assert status == 422 and body["error"]["message"] == "the upstream said: bad \ufffd input"


async def test_an_unknown_name_is_quoted_by_its_beginning_not_sent_back_whole():
    long = "x" * 60_000
    async with serving(FakeUpstream(name="f")) as served:
        answers = [
            await served.get(f"/tools/{long}"),
            await served.post("/invoke", {"tool": long, "arguments": {}}),
            await served.post(f"/a2t/tools/{long}", {}),
            await served.get(f"/surfaces/{long}"),
        ]
        for status, body, _ in answers:
            assert status in (200, 404) and len(json.dumps(body)) < 2_000, status
            message = body["error"]["message"]
            assert (
                "x" * 60 in message and "x" * 61 not in message and "(60000 characters)" in message
            ), message


async def test_a_body_that_does_not_arrive_in_time_is_408_and_frees_the_connection():
    # Content-Length 100, then 8 bytes and nothing: once held the connection for good
    async with serving(
        FakeUpstream(name="f"), config=config_with(server={"body_timeout": 0.3})
    ) as served:
        host, port = served.base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(
                b'POST /invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"tool":'
            )
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), head
        finally:
            writer.close()
        status, _, _ = await served.post("/invoke", {"tool": "f__echo", "arguments": {"text": "x"}})
        assert status == 200


async def test_a_client_closing_the_connection_cancels_its_call_on_every_invoke_route():
    from tests.serve.mcp_support import CancelAwareUpstream

    routes = [
        ("/invoke", b'{"tool": "f__echo", "arguments": {"text": "x"}}'),
        ("/tools/f__echo:invoke", b'{"input_parameters": [{"name": "text", "value": "x"}]}'),
        ("/a2t/tools/f__echo", b'{"text": "x"}'),
    ]
    for path, body in routes:
        up = CancelAwareUpstream(name="f")
        up.gate = asyncio.Event()  # the call waits until cancelled
        async with serving(up) as served:
            host, port = served.base.removeprefix("http://").rsplit(":", 1)
            _reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST "
                + path.encode()
                + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            async with asyncio.timeout(10):
                while not up.calls:  # the call reached the upstream
                    await asyncio.sleep(0.01)
            writer.close()
            async with asyncio.timeout(10):
                await up.canceled.wait()
            up.gate.set()
            status, _, _ = await served.post(
                "/invoke", {"tool": "f__echo", "arguments": {"text": "y"}}
            )
            assert status == 200, path
