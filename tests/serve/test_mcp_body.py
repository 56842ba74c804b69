"""What a POST to /mcp must be before the MCP SDK sees it: one JSON-RPC message, each key of its
objects given once; anything else is answered in one sentence, in both eras, with a session or
without."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import (
    ACCEPT,
    HANDSHAKE,
    INITIALIZE,
    MODERN,
    MODERN_META,
    served_bridge,
)

CONFIG = {"surfaces": [{"name": "default", "load": ["*"]}]}
MODERN_HEADERS = {**ACCEPT, "MCP-Protocol-Version": MODERN}


def upstreams() -> list[FakeUpstream]:
    return [FakeUpstream(name="svc", tools=[tool("echo", read_only=True)])]


async def headers_of(http: httpx2.AsyncClient, url: str, how: str) -> dict[str, str]:
    """Headers of a request without a session (handshake era), in a session, or of the 2026 era."""
    if how == "modern":
        return MODERN_HEADERS
    if how == "session":
        opened = await http.post(f"{url}/mcp", json=INITIALIZE, headers=ACCEPT)
        return {
            **ACCEPT,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": HANDSHAKE,
        }
    return ACCEPT


def error_of(response: httpx2.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body
    error = body["error"]
    assert "\n" not in error["message"] and error["message"].count(". ") == 0, error  # one sentence
    return error


@pytest.mark.parametrize("how", ["no session", "session", "modern"])
async def test_a_body_that_is_no_jsonrpc_message_is_invalid_request_in_one_sentence(how):
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "svc__echo", "arguments": {"text": "x"}},
    }
    cases = [
        (json.dumps([call]), -32600, "batch"),
        (json.dumps("tools/list"), -32600, "bare string"),
        ("42", -32600, "bare number"),
        ("null", -32600, "bare null"),
        (json.dumps({"id": 5, "method": "tools/list"}), -32600, '"jsonrpc": "2.0"'),
        (json.dumps({"jsonrpc": "2.0", "id": 5}), -32600, 'a "method"'),
        ('{"jsonrpc": "2.0", "id": 5, "method": ', -32700, "line 1 column 39"),
        ("", -32700, "not valid JSON"),
    ]
    async with served_bridge(CONFIG, upstreams()) as srv, httpx2.AsyncClient(timeout=10) as http:
        headers = await headers_of(http, srv.url, how)
        for raw, code, said in cases:
            response = await http.post(f"{srv.url}/mcp", content=raw.encode(), headers=headers)
            assert response.status_code == 400, (raw, response.text)
            error = error_of(response)
            assert error["code"] == code and said in error["message"], (raw, error)


@pytest.mark.parametrize("how", ["no session", "session", "modern"])
async def test_a_key_given_twice_in_one_object_is_refused_naming_the_object(how):
    async with served_bridge(CONFIG, upstreams()) as srv, httpx2.AsyncClient(timeout=10) as http:
        headers = await headers_of(http, srv.url, how)
        meta = f', "_meta": {json.dumps(MODERN_META)}' if how == "modern" else ""
        call = (
            '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "svc__echo", '
        )
        cases = [
            ('{"jsonrpc": "2.0", "id": 5, "id": 6, "method": "tools/list"}', "", "id"),
            (
                call + '"arguments": {"text": "x", "text": "y"}' + meta + "}}",
                "/params/arguments",
                "text",
            ),
            (
                call + '"arguments": {"a/b": [{"c": 1, "c": 2}], "text": "x"}' + meta + "}}",
                "/params/arguments/a~1b/0",
                "c",
            ),
        ]
        for raw, pointer, key in cases:
            response = await http.post(
                f"{srv.url}/mcp",
                content=raw.encode(),
                headers={**headers, "Mcp-Method": "tools/call"} if how == "modern" else headers,
            )
            assert response.status_code == 400, (raw, response.text)
            error = error_of(response)
            assert error["code"] == -32600 and f"the key {key!r} twice" in error["message"], error
            assert error["data"] == {"pointer": pointer, "key": key}
        if how == "no session":
            return
        # the same call with each key once is served
        raw = call + '"arguments": {"text": "x"}' + meta + "}}"
        response = await http.post(
            f"{srv.url}/mcp",
            content=raw.encode(),
            headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": "svc__echo"}
            if how == "modern"
            else headers,
        )
        assert response.status_code == 200 and '"isError":false' in response.text.replace(
            " ", ""
        ), response.text
