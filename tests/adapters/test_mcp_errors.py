"""What an MCP upstream's errors become: a JSON-RPC error the server answers keeps its code and
message, and a live session stays one; the configured secrets are masked in every error text,
on every frontend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.adapters.mcp_fixtures.server import build_server
from tests.adapters.test_mcp_failures import pid_of, stdio
from tests.serve.mcp_support import HANDSHAKE, MODERN, http_client
from tests.serve.rest_env import Served, config_with, serving
from tests.servers import serve_asgi

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "sk-live-7f3a9c2e41"
# the stdio and HTTP upstreams speaking each era
UPSTREAMS = {"legacy": ("local", "remote"), "2026-07-28": ("local_modern", "remote_modern")}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served() -> AsyncIterator[Served]:
    """One served bridge for the module: the fixture server over stdio (given the secret in its
    environment, as a configured secret) and over HTTP, in each era."""
    server, _ = build_server()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MY_SECRET", SECRET)
        async with serve_asgi(server.streamable_http_app()) as base:
            secret = {"env": {"MY_SECRET": "${MY_SECRET}"}, "ping_interval": None}
            upstreams = [
                stdio("local", protocol="legacy", **secret),
                stdio("local_modern", protocol="2026-07-28", **secret),
                {"name": "remote", "kind": "mcp", "url": f"{base}/mcp", "protocol": "legacy"},
                {
                    "name": "remote_modern",
                    "kind": "mcp",
                    "url": f"{base}/mcp",
                    "protocol": "2026-07-28",
                },
            ]
            # the four upstreams' tools pass the default surface's auto_load_threshold: the
            # tool the masking test calls over MCP stays loaded
            surface = {"name": "default", "load": ["local_modern__fail"]}
            config = config_with(upstreams=upstreams, surfaces=[surface])
            async with serving(config=config) as bridge_served:
                yield bridge_served


# codes of JSON-RPC's server-error range the SDK also uses for errors it makes up itself
# (-32000 for a closed connection, -32001 for a request timeout), and one it does not
SERVER_ERRORS = [
    (-32000, "plain failure"),
    (-32001, "the backend timed out"),
    (-32099, "quota spent"),
]


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_json_rpc_error_of_the_server_keeps_its_code_and_message_and_the_session(
    protocol: str, served: Served
) -> None:
    bridge = served.bridge
    local, remote = UPSTREAMS[protocol]
    pid = await pid_of(bridge, local)
    for up in (local, remote):
        for code, message in SERVER_ERRORS:
            arguments = {"code": code, "message": message}
            failed = await bridge.invoker.invoke(f"{up}__fail", arguments)
            error = failed.error
            assert failed.status == "failed", (up, code, error)
            assert error.error_class == "execution_failed", (up, code, error)
            assert error.message == f"fail: MCP error {code}: {message}"
            ref = {"source": "mcp", "code": code, "message": message}
            assert error.native_error_ref == ref
            # the call may have run: nothing invites repeating it
            assert error.recoverability == "not_recoverable" and error.retry_after is None
        # the session was never lost
        assert bridge.catalog.slot(up).health.state == "ready"
        echoed = await bridge.invoker.invoke(f"{up}__echo", {"text": "still"})
        assert echoed.content[0]["text"] == "still"
    assert await pid_of(bridge, local) == pid


async def test_a_secret_in_a_tools_error_result_is_masked_on_every_frontend(
    served: Served,
) -> None:
    said = f"the key {SECRET} was refused"
    masked = "the key *** was refused"
    result = await served.bridge.invoker.invoke("local_modern__fail", {"text": said})
    assert result.is_error and result.content == [{"type": "text", "text": masked}]
    assert result.error.error_code == "mcp_tool_error" and result.error.message == masked

    # a JSON-RPC error quoting it was masked by the adapter already; it still is
    refused = await served.bridge.invoker.invoke(
        "local_modern__fail", {"code": -32000, "message": said}
    )
    assert refused.error.message == f"fail: MCP error -32000: {masked}"

    rest = {"arguments": {"text": said}}
    status, body, _ = await served.post("/tools/local_modern__fail:invoke", rest)
    assert status == 422 and SECRET not in str(body) and masked in str(body), body
    status, body, _ = await served.post("/a2t/tools/local_modern__fail", {"text": said})
    assert status == 200 and SECRET not in str(body), body
    assert body["error"]["message"] == masked, body
    for era in (HANDSHAKE, MODERN):
        async with http_client(served.base, era) as client:
            answer = await client.call("local_modern__fail", {"text": said})
            text = " ".join(block.text for block in answer.content)
            assert answer.is_error and masked in text, era
            assert SECRET not in str(answer.model_dump()), era
