"""What an MCP upstream's errors become: the configured secrets are masked in every error text,
on every frontend."""

from __future__ import annotations

import pytest

from tests.adapters.test_mcp_failures import stdio
from tests.serve.mcp_support import HANDSHAKE, MODERN, http_client
from tests.serve.rest_env import config_with, serving


async def test_a_secret_in_a_tools_error_result_is_masked_on_every_frontend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk-live-7f3a9c2e41"
    monkeypatch.setenv("MY_SECRET", secret)
    upstream = stdio("srv", env={"MY_SECRET": "${MY_SECRET}"}, ping_interval=None)
    said = f"the key {secret} was refused"
    masked = "the key *** was refused"
    async with serving(config=config_with(upstreams=[upstream])) as served:
        result = await served.bridge.invoker.invoke("srv__fail", {"text": said})
        assert result.is_error and result.content == [{"type": "text", "text": masked}]
        assert result.error.error_code == "mcp_tool_error" and result.error.message == masked

        rest = {"arguments": {"text": said}}
        status, body, _ = await served.post("/tools/srv__fail:invoke", rest)
        assert status == 422 and secret not in str(body) and masked in str(body), body
        status, body, _ = await served.post("/a2t/tools/srv__fail", {"text": said})
        assert status == 200 and secret not in str(body), body
        assert body["error"]["message"] == masked, body
        for era in (HANDSHAKE, MODERN):
            async with http_client(served.base, era) as client:
                answer = await client.call("srv__fail", {"text": said})
                text = " ".join(block.text for block in answer.content)
                assert answer.is_error and masked in text, era
                assert secret not in str(answer.model_dump()), era
