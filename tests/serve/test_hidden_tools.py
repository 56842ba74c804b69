"""A tool a surface's own rule blocks (`block:`, `read_only: true`) is answered exactly as a tool
that does not exist, on every route and protocol; blocks the upstream or the tool imposes stay
visible with their reason; health detail beyond up/down needs a token."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest

from bridge.model import SafetyHints, tool_uuid
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import ERAS, MODERN, EraClient, error_class, http_client, text_of
from tests.serve.rest_env import Served, config_with, serving

TOKEN_GUARDED = "token-of-the-guarded-surface"
TOKEN_READONLY = "token-of-the-read-only-surface"
TOKEN_OPS = "token-of-the-ops-surface"
HIDDEN, MISSING = "x__leak", "x__nope"  # of one length: the answers compare byte for byte
HIDDEN_ID, MISSING_ID = tool_uuid("x", "leak"), tool_uuid("x", "nope")

TOKENS = [
    {"token": TOKEN_GUARDED, "surface": "guarded"},
    {"token": TOKEN_READONLY, "surface": "readonly"},
    {"token": TOKEN_OPS, "surface": "ops"},
]
CONFIG = config_with(
    server={"tokens": TOKENS},
    surfaces=[
        {"name": "guarded", "block": [{"name": HIDDEN, "reason": "secret_tool"}]},
        {"name": "readonly", "read_only": True},
        {"name": "ops"},
    ],
)
SURFACES = [
    pytest.param(TOKEN_GUARDED, id="block-rule"),
    pytest.param(TOKEN_READONLY, id="read-only"),
]


def upstream() -> FakeUpstream:
    props = {
        "text": {"type": "string"},
        # a header the 2026-07-28 era's SDK checks against the schema before dispatch
        "zone": {"type": "string", "x-mcp-header": "Zone"},
    }
    output = {"type": "object", "properties": {"echo": {"type": "object"}}, "required": ["echo"]}
    leak = tool(
        "leak", description="Leak the keys.", props=props, required=["text"], output_schema=output
    )
    asks = SafetyHints(read_only=True, requires_user_interaction=True)
    edit = tool("edit", read_only=True).model_copy(update={"safety": asks})
    return FakeUpstream(name="x", tools=[leak, tool("look", read_only=True), edit])


_RANDOM = re.compile(r"\b(inv|res)_[0-9a-f]{32}\b")
# what differs between any two answers: left out of the comparison
_VARYING = {"duration_ms", "created_at", "date", "content-length"}


def _same_shape(value: Any, name: str, tool_id: str) -> Any:
    """`value` with the name and id asked for as placeholders, without random ids and times."""
    text = json.dumps(value, sort_keys=True).replace(name, "<name>").replace(tool_id, "<id>")

    def strip(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: strip(v) for k, v in item.items() if k not in _VARYING}
        if isinstance(item, list):
            return [strip(v) for v in item]
        return item

    return strip(json.loads(_RANDOM.sub(r"\1_*", text)))


Ask = Callable[[str, str], Awaitable[Any]]


def rest_requests(served: Served, token: str) -> dict[str, Ask]:
    """Each REST request that names a tool, as a function of (name, tool id): its status, body
    and every header."""

    async def send(
        method: str, path: str, body: Any = None, raw: bytes | None = None, **params: Any
    ) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        payload: dict[str, Any] = {"json": body} if body is not None else {}
        if raw is not None:
            headers["Content-Type"] = "application/json"
            payload = {"data": raw}
        request = served.http.request(
            method, path, params=params or None, headers=headers, **payload
        )
        async with request as response:
            text = await response.text()
            kept = {k.lower(): v for k, v in response.headers.items() if k.lower() not in _VARYING}
            return response.status, json.loads(text) if text else None, kept

    def post(path: str, body: Any = None, raw: bytes | None = None) -> Ask:
        return lambda n, i: send("POST", path.format(n=n, i=i), body(n, i) if body else None, raw)

    def get(path: str, **params: str) -> Ask:
        return lambda n, i: send(
            "GET", path.format(n=n, i=i), **{k: v.format(n=n, i=i) for k, v in params.items()}
        )

    no_arguments = {"arguments": {}}
    return {
        "POST /invoke": post("/invoke", lambda n, i: {"tool": n, **no_arguments}),
        "POST /invoke by id": post("/invoke", lambda n, i: {"tool": i, **no_arguments}),
        "POST /invoke, bad arguments": post(
            "/invoke", lambda n, i: {"tool": n, "arguments": {"text": 5}}
        ),
        "POST /invoke, pinned": post("/invoke", lambda n, i: {"tool": n, "version": 9}),
        "POST /tools/{name}:invoke {}": post("/tools/{n}:invoke", lambda n, i: {}),
        "POST /tools/{id}:invoke {}": post("/tools/{i}:invoke", lambda n, i: {}),
        "POST /tools/{name}:invoke, wrong name": post(
            "/tools/{n}:invoke", lambda n, i: {"name": "other", **no_arguments}
        ),
        "POST /tools/{name}:invoke, a good call": post(
            "/tools/{n}:invoke", lambda n, i: {"arguments": {"text": "a"}}
        ),
        "POST /tools/{name}:invoke, not JSON": post("/tools/{n}:invoke", raw=b"{not json"),
        "POST /tools/{name}/versions/1:invoke": post(
            "/tools/{n}/versions/1:invoke", lambda n, i: no_arguments
        ),
        "POST /tools/{name}/versions/x:invoke": post(
            "/tools/{n}/versions/x:invoke", lambda n, i: {}
        ),
        "GET /tools/{name}": get("/tools/{n}"),
        "GET /tools/{id}": get("/tools/{i}"),
        "GET /tools/{name}:invoke": get("/tools/{n}:invoke"),
        "GET /tools/{name}/versions": get("/tools/{n}/versions"),
        "GET /tools/{name}/versions/1": get("/tools/{n}/versions/1"),
        "GET /tools/{name}/versions/x": get("/tools/{n}/versions/x"),
        "GET /declarations/{id}": get("/declarations/{i}"),
        "POST /a2t/tools/{name}": post("/a2t/tools/{n}", lambda n, i: {"text": "a"}),
        "POST /a2t/tools/{id}": post("/a2t/tools/{i}", lambda n, i: {}),
        "POST /a2t/tools/{name}, not an object": post("/a2t/tools/{n}", lambda n, i: [1]),
        "POST /a2t/groups/x/tools/{name}": post(
            "/a2t/groups/x/tools/{n}", lambda n, i: {"text": "a"}
        ),
        "GET /search select:": get("/search", q="select:{n},{i}", include_schema="true"),
        "GET /a2t/tools select:": get("/a2t/tools", q="select:{n}"),
    }


def mcp_requests(client: EraClient) -> dict[str, Ask]:
    """Each MCP request that names a tool, as a function of (name, tool id): its whole result."""

    async def call(name: str, arguments: dict[str, Any]) -> Any:
        result = await client.call(name, arguments)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    def through(n: str, query: str) -> dict[str, Any]:
        return {"name": n, "arguments": {"query": query}}

    return {
        "tools/call {name}": lambda n, i: call(n, {"text": "a"}),
        "tools/call {id}": lambda n, i: call(i, {}),
        "tools/call {name}, bad arguments": lambda n, i: call(n, {"text": 5}),
        "call_tool {name}": lambda n, i: call("call_tool", {"name": n, "arguments": {"text": "a"}}),
        "call_tool {id}": lambda n, i: call("call_tool", {"name": i}),
        "search_tools select:": lambda n, i: call("search_tools", {"query": f"select:{n},{i}"}),
        "call_tool search_tools": lambda n, i: call(
            "call_tool", through("search_tools", f"select:{i}")
        ),
    }


async def differences(requests: dict[str, Ask]) -> dict[str, tuple[Any, Any]]:
    """For each request, the hidden tool's answer and the missing one's where they differ."""
    found = {}
    for label, ask in requests.items():
        hidden = _same_shape(await ask(HIDDEN, HIDDEN_ID), HIDDEN, HIDDEN_ID)
        missing = _same_shape(await ask(MISSING, MISSING_ID), MISSING, MISSING_ID)
        if hidden != missing:
            found[label] = (hidden, missing)
    return found


async def modern_call_with_a_header(base: str, token: str, name: str) -> tuple[int, Any]:
    """A raw 2026-07-28 `tools/call` giving `zone`, without its `Mcp-Param-Zone` header."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"text": "a", "zone": "eu"}, "_meta": meta},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(f"{base}/mcp", json=body, headers=headers)
    return response.status_code, _same_shape(response.json(), name, name)


@pytest.mark.parametrize("token", SURFACES)
async def test_a_tool_a_surface_rule_blocks_is_answered_as_a_missing_one_everywhere(token):
    up = upstream()
    async with serving(up, config=CONFIG) as served:
        assert await differences(rest_requests(served, token)) == {}
        for era in ERAS:
            async with http_client(served.base, era, token=token) as client:
                assert await differences(mcp_requests(client)) == {}, era
        # the SDK reads a tool's schema to check Mcp-Param headers before dispatch: a header of
        # the hidden tool's schema is not checked, as for a tool that does not exist
        hidden = await modern_call_with_a_header(served.base, token, HIDDEN)
        assert hidden == await modern_call_with_a_header(served.base, token, MISSING)
        assert up.calls == []
        # the tool runs on a surface that shows it, by name and by id alike
        call = {"tool": HIDDEN_ID, "arguments": {"text": "a"}}
        status, body, _ = await served.post("/invoke", call, token=TOKEN_OPS)
        assert status == 200 and body["tool_name"] == HIDDEN


@pytest.mark.parametrize("token", SURFACES)
async def test_the_callers_own_surface_record_names_no_hidden_tool(token):
    async with serving(upstream(), config=CONFIG) as served:
        surface = "guarded" if token == TOKEN_GUARDED else "readonly"
        status, body, _ = await served.get(f"/surfaces/{surface}", token=token)
        assert status == 200
        text = json.dumps(body)
        assert HIDDEN not in text and HIDDEN_ID not in text
        # a block the tool itself imposes stays in the record with its reason: the caller can
        # act on it
        blocked = [(b["name"], b["reason"]) for b in body["blocked_tools"]]
        assert blocked == [("x__edit", "requires_user_interaction")]
        assert body["selection_policy"]["counts"] == {"loaded": 1, "deferred": 0, "blocked": 1}
        # another surface's record is not the caller's to read, whatever its name
        other = "guarded" if surface == "readonly" else "readonly"
        for name in ("ops", other, "no-such-surface"):
            status, missing, _ = await served.get(f"/surfaces/{name}", token=token)
            assert status == 404 and missing["error"]["error_code"] == "surface_not_found"


async def test_an_open_server_shows_only_the_callers_own_surface():
    # every caller of an open server is on server.default_surface: another surface's record
    # would name the tools this one hides
    config = config_with(server={"default_surface": "guarded"}, surfaces=CONFIG["surfaces"])
    async with serving(upstream(), config=config) as served:
        status, body, _ = await served.get("/surfaces/guarded")
        assert status == 200 and HIDDEN not in json.dumps(body)
        status, body, _ = await served.get("/surfaces/ops")
        assert status == 404 and HIDDEN not in json.dumps(body)


@pytest.mark.parametrize("era", ERAS)
async def test_a_block_the_tool_imposes_stays_visible_with_its_reason(era):
    async with serving(upstream(), config=CONFIG) as served:
        call = {"tool": "x__edit", "arguments": {}}
        status, body, _ = await served.post("/invoke", call, token=TOKEN_GUARDED)
        assert status == 403 and body["error"]["error_code"] == "requires_user_interaction"
        assert "x__edit" in body["error"]["message"]
        status, body, _ = await served.post(
            "/tools/x__edit:invoke", {"arguments": {}}, token=TOKEN_READONLY
        )
        assert status == 403 and body["error"]["error_code"] == "requires_user_interaction"
        status, body, _ = await served.post("/a2t/tools/x__edit", {}, token=TOKEN_GUARDED)
        assert status == 200 and body["error"]["code"] == "policy_blocked"
        assert "(requires_user_interaction)" in body["error"]["message"]
        async with http_client(served.base, era, token=TOKEN_GUARDED) as client:
            result = await client.call("x__edit", {})
            assert error_class(result) == "policy_blocked"
            assert "requires_user_interaction" in text_of(result)


async def test_a_surface_rule_hides_a_tool_its_upstream_blocks_too():
    # the operator's rule decides first: a tool it blocks is hidden, whatever else blocks it
    surfaces = [{"name": "guarded", "block": ["x__edit"]}, {"name": "readonly"}, {"name": "ops"}]
    async with serving(
        upstream(), config=config_with(server=CONFIG["server"], surfaces=surfaces)
    ) as served:
        call = {"tool": "x__edit", "arguments": {}}
        status, body, _ = await served.post("/invoke", call, token=TOKEN_GUARDED)
        assert status == 404 and body["error"]["error_class"] == "unknown_tool"
        status, body, _ = await served.post("/invoke", call, token=TOKEN_READONLY)
        assert status == 403 and body["error"]["error_code"] == "requires_user_interaction"


async def test_health_detail_needs_a_token_when_tokens_are_configured():
    down = FakeUpstream(name="down", fail_start="connection refused to 10.0.0.7", retry_initial=30)
    async with serving(upstream(), down, config=CONFIG) as served:
        for token in (None, "not-a-token-at-all"):
            status, body, _ = await served.get("/readyz", token=token)
            assert status == 200 and body == {
                "ready": True,
                "starting": [],
                "search": "ready",
                "upstreams": [
                    {"name": "x", "kind": "fake", "state": "ready"},
                    {"name": "down", "kind": "fake", "state": "failed"},
                ],
            }
        _, body, _ = await served.get("/readyz", token=TOKEN_GUARDED)
        assert body["tools"] == 3 and body["upstreams"] == [
            {"name": "x", "kind": "fake", "state": "ready", "tool_count": 3},
            {
                "name": "down",
                "kind": "fake",
                "state": "failed",
                "tool_count": 0,
                "reason": "connection refused to 10.0.0.7",
            },
        ]


async def test_the_log_says_why_a_hidden_tool_was_answered_as_missing(caplog):
    async with serving(upstream(), config=CONFIG) as served:
        with caplog.at_level("INFO", logger="bridge.surface"):
            call = {"tool": HIDDEN, "arguments": {}}
            status, _, _ = await served.post("/invoke", call, token=TOKEN_GUARDED)
        assert status == 404
        said = [r.getMessage() for r in caplog.records if r.name == "bridge.surface"]
        assert any(
            HIDDEN in line and "(secret_tool)" in line and "guarded" in line for line in said
        ), said
