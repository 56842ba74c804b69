"""The JSON behind the designers' console (`/ui/api`), and the page's own serving: the catalog
page's paging and filters, a tool's page, the reasoned version diff, the streamed call, and that
one surface learns nothing of the tools another's rules hide."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.serve.console.diff import signature_diff
from bridge.versions import classify_change
from tests.fakes import FakeUpstream, tool
from tests.serve.console_env import ThreadedBridge

TOKEN = "token-of-the-designer"
TOKEN_NARROW = "token-of-the-narrow-surface"
CONFIG = {
    "store": {"path": ":memory:"},
    "server": {
        "tokens": [
            {"token": TOKEN, "surface": "default"},
            {"token": TOKEN_NARROW, "surface": "narrow"},
        ]
    },
    "surfaces": [{"name": "default"}, {"name": "narrow", "block": ["*secret*"]}],
}


@pytest.fixture(scope="module")
def served() -> Iterator[ThreadedBridge]:
    tools = [
        tool(f"tool_{i:03}", read_only=i % 2 == 0, tags=["even"] if i % 2 == 0 else [])
        for i in range(120)
    ]
    tools += [
        tool("secret_dump", description="Dump the secrets."),
        tool("needs_login", blocked_reason="credential_missing"),
    ]
    with ThreadedBridge(
        CONFIG,
        [FakeUpstream(name="big", tools=tools), FakeUpstream(name="small", tools=[tool("echo")])],
    ) as bridge:
        yield bridge


def get(served: ThreadedBridge, path: str, token: str | None = TOKEN) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(served.base + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            status, answer_headers = response.status, response.headers
    except urllib.error.HTTPError as exc:
        raw, status, answer_headers = exc.read(), exc.code, exc.headers
    kind = answer_headers.get("content-type", "")
    return status, json.loads(raw) if "json" in kind else raw.decode(), answer_headers


def post(served: ThreadedBridge, path: str, body: Any, token: str = TOKEN) -> tuple[int, str, str]:
    request = urllib.request.Request(
        served.base + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return (
                response.status,
                response.headers.get("content-type", ""),
                response.read().decode(),
            )
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("content-type", ""), exc.read().decode()


def test_the_page_is_served_without_a_token_and_its_data_needs_one(served: ThreadedBridge) -> None:
    status, page, headers = get(served, "/ui", token=None)
    assert status == 200 and "<main" in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, _, headers = get(served, "/ui/assets/console.js", token=None)
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert get(served, "/ui/api/session", token=None)[0] == 401
    assert get(served, "/ui/api/catalog", token="not-a-token-at-all")[0] == 401
    assert get(served, "/ui/assets/nothing.js", token=None)[0] == 404


def test_the_catalog_pages_and_filters(served: ThreadedBridge) -> None:
    status, first, _ = get(served, "/ui/api/catalog?limit=50")
    assert status == 200
    assert first["total"] == 122 and first["next_offset"] == 50  # the blocked tool is not listed
    assert [r["name"] for r in first["items"][:2]] == ["big__secret_dump", "big__tool_000"]
    last = get(served, "/ui/api/catalog?limit=50&offset=100")[1]
    assert len(last["items"]) == 22 and last["next_offset"] is None
    assert last["items"][-1]["name"] == "small__echo"
    ro = get(served, "/ui/api/catalog?read_only=true&upstream=big&limit=200")[1]
    assert ro["total"] == 60 and all(r["read_only"] for r in ro["items"])
    tagged = get(served, "/ui/api/catalog?tag=even&read_only=false")[1]
    assert tagged["total"] == 0
    blocked = get(served, "/ui/api/catalog?placement=blocked")[1]
    assert [(r["name"], r["reason"]) for r in blocked["items"]] == [
        ("big__needs_login", "credential_missing")
    ]
    found = get(served, "/ui/api/catalog?q=tool_042")[1]
    assert found["ranked"] and found["items"][0]["name"] == "big__tool_042"
    status, body, _ = get(served, "/ui/api/catalog?placement=hidden")
    assert status == 400 and body["error"]["details"]["parameter"] == "placement"


def test_a_tool_page_gives_tables_exports_and_no_token(served: ThreadedBridge) -> None:
    status, page, _ = get(served, "/ui/api/tools/big__tool_007")
    assert status == 200
    assert page["inputs"] == [
        {"name": "text", "type": "string", "required": False, "description": "", "constraints": {}}
    ]
    assert page["versions"][0]["compatibility"] == "initial"
    exports = page["exports"]
    assert exports["openai"]["function"]["name"] == "big__tool_007"
    assert exports["anthropic"]["name"] == "big__tool_007"
    assert exports["gemini"]["name"] == "big__tool_007"
    assert exports["mcp_tool"]["name"] == "big__tool_007"
    assert exports["mcp_config"]["mcpServers"]["a2t-bridge"]["url"] == f"{served.base}/mcp"
    assert f"/tools/{page['summary']['tool_id']}:invoke" in exports["curl"]
    assert TOKEN not in json.dumps(page)


def test_a_hidden_tool_reads_as_a_missing_one(served: ThreadedBridge) -> None:
    hidden = get(served, "/ui/api/tools/big__secret_dump", token=TOKEN_NARROW)
    missing = get(served, "/ui/api/tools/big__secret_dumq", token=TOKEN_NARROW)
    assert hidden[0] == missing[0] == 404
    assert json.dumps(hidden[1]).replace("dump", "dumq") == json.dumps(missing[1])
    assert get(served, "/ui/api/tools/big__secret_dump/diff", token=TOKEN_NARROW)[0] == 404
    assert get(served, "/ui/api/tools/big__secret_dump")[0] == 200  # shown on the other surface
    session = get(served, "/ui/api/session", token=TOKEN_NARROW)[1]
    assert session["surface"] == "narrow" and session["tools"] == 121 and session["blocked"] == 1
    for path in (
        "/ui/api/catalog?limit=200",
        "/ui/api/catalog?q=secret+dump",
        "/ui/api/upstreams",
        "/ui/api/session",
    ):
        assert "secret" not in json.dumps(get(served, path, token=TOKEN_NARROW)[1]), path
    status, kind, body = post(served, "/ui/api/invoke", {"tool": "big__secret_dump"}, TOKEN_NARROW)
    assert status == 200 and kind == "application/x-ndjson"
    result = json.loads(body)
    assert result["status"] == 404 and result["result"]["error"]["error_class"] == "unknown_tool"


def test_a_call_streams_its_progress_then_its_envelope(served: ThreadedBridge) -> None:
    status, kind, body = post(
        served, "/ui/api/invoke", {"tool": "small__echo", "arguments": {"text": "hi"}}
    )
    assert status == 200 and kind == "application/x-ndjson"
    lines = [json.loads(line) for line in body.splitlines()]
    assert [line["type"] for line in lines] == ["progress", "result"]
    assert lines[0]["progress"]["percent"] == 50
    assert lines[1]["status"] == 200 and lines[1]["result"]["structured_content"] == {
        "echo": {"text": "hi"}
    }
    bad = [
        json.loads(line)
        for line in post(
            served, "/ui/api/invoke", {"tool": "small__echo", "arguments": {"text": 5}}
        )[2].splitlines()
    ]
    assert bad[-1]["status"] == 400
    assert bad[-1]["result"]["error"]["recoverability"] == "change_arguments"
    status, kind, body = post(served, "/ui/api/invoke", {"tool": "small__echo", "version": 0})
    assert status == 400 and json.loads(body)["error"]["details"]["pointer"] == "/version"
    status, kind, body = post(served, "/ui/api/invoke", {"tool": "small__echo", "arguments": [1]})
    assert status == 400 and json.loads(body)["error"]["details"]["pointer"] == "/arguments"


def signature(
    props: dict[str, Any], required: list[str] | None = None, **facts: Any
) -> dict[str, Any]:
    return {
        "native_name": "t",
        "description": facts.pop("description", "A tool."),
        "input_schema": {"type": "object", "properties": props, "required": required or []},
        "output_schema": facts.pop("output_schema", None),
        "safety": {"read_only": False, "destructive": False, "idempotent": False, **facts},
    }


TEXT = {"type": "string"}
DIFFS = [
    pytest.param(
        signature({"a": TEXT}),
        signature({"a": TEXT, "b": TEXT}),
        "compatible",
        [("input.b", "added, optional", "compatible")],
        id="optional input added",
    ),
    pytest.param(
        signature({"a": TEXT}),
        signature({"a": TEXT, "b": TEXT}, ["b"]),
        "breaking",
        [("input.b", "added, required", "breaking")],
        id="required input added",
    ),
    pytest.param(
        signature({"a": TEXT}),
        signature({"a": {"type": "integer"}}),
        "breaking",
        [("input.a", "changed", "breaking")],
        id="input type changed",
    ),
    pytest.param(
        signature({"a": TEXT}),
        signature({}),
        "breaking",
        [("input.a", "removed", "breaking")],
        id="input removed",
    ),
    pytest.param(
        signature({"a": TEXT}),
        signature({"a": TEXT}, ["a"]),
        "breaking",
        [("input.a", "now required", "breaking")],
        id="input now required",
    ),
    pytest.param(
        signature({"a": TEXT}, ["a"]),
        signature({"a": TEXT}),
        "compatible",
        [("input.a", "now optional", "compatible")],
        id="input now optional",
    ),
    pytest.param(
        signature({}, read_only=True),
        signature({}),
        "breaking",
        [("safety.read_only", "turned off", "breaking")],
        id="no longer read-only",
    ),
    pytest.param(
        signature({}),
        signature({}, description="Other."),
        "compatible",
        [("description", "changed", "compatible")],
        id="description",
    ),
    pytest.param(
        signature({}, output_schema={"type": "object", "properties": {"x": TEXT}}),
        signature({}, output_schema={"type": "object", "properties": {}}),
        "breaking",
        [("output.x", "removed", "breaking")],
        id="output removed",
    ),
]


@pytest.mark.parametrize(("old", "new", "verdict", "changes"), DIFFS)
def test_a_version_diff_says_what_changed_and_why(
    old: dict[str, Any], new: dict[str, Any], verdict: str, changes: list[tuple[str, str, str]]
) -> None:
    diff = signature_diff(old, new)
    assert diff["compatibility"] == verdict == classify_change(old, new)
    assert [(c["where"], c["what"], c["effect"]) for c in diff["changes"]] == changes
    assert all(c["why"] for c in diff["changes"])
    assert signature_diff(old, old) == {"compatibility": "same", "changes": []}


def test_the_diff_route_compares_any_two_versions(served: ThreadedBridge) -> None:
    status, diff, _ = get(served, "/ui/api/tools/small__echo/diff")
    assert status == 200 and diff["compatibility"] == "same"
    assert diff["from"]["version"] == diff["to"]["version"] == 1
    status, body, _ = get(served, "/ui/api/tools/small__echo/diff?from=1&to=2")
    assert status == 404 and body["error"]["error_code"] == "unknown_version"


def test_upstreams_count_the_calls_of_the_callers_surface_alone(served: ThreadedBridge) -> None:
    def counted(token: str) -> dict[str, Any]:
        items = get(served, "/ui/api/upstreams", token=token)[1]["items"]
        return {u["name"]: u for u in items}

    before, narrow_before = counted(TOKEN)["small"], counted(TOKEN_NARROW)["small"]
    assert before["kind"] == "fake" and before["state"] == "ready" and before["tools"] == 1
    post(served, "/ui/api/invoke", {"tool": "small__echo", "arguments": {"text": "a"}})
    post(served, "/ui/api/invoke", {"tool": "small__echo", "arguments": {"text": 5}})
    after = counted(TOKEN)["small"]
    assert (after["calls"] - before["calls"], after["errors"] - before["errors"]) == (2, 1)
    narrow = counted(TOKEN_NARROW)["small"]
    assert (narrow["calls"], narrow["errors"]) == (narrow_before["calls"], narrow_before["errors"])
