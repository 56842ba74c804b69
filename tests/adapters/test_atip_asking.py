"""What an ATIP command waits for (input on stdin, answers to prompts), asked of the caller as an
elicitation when its client can answer one (the MCP frontend sets `CALLER_ASKS` for such a
client): the fixture tool `legacy` run for real, its `ask` command reading the reply on stdin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from bridge.config import parse_config
from bridge.model import ToolResult
from bridge.runtime import Bridge
from bridge.upstream import CALLER_ASKS, AskRefused
from tests.adapters.test_atip import FIXTURES

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def legacy(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Bridge]:
    work = tmp_path_factory.mktemp("legacy")
    upstream = {
        "name": "legacy",
        "kind": "atip",
        "command": ["python", str(FIXTURES / "legacy_cli.py")],
        "xdg_data_home": str(work / "data"),
        "xdg_config_home": str(work / "config"),
        "system_dirs": [],
        "cache": False,
    }
    config = {"store": {"path": ":memory:"}, "upstreams": [upstream]}
    async with Bridge(parse_config(config, base_dir=str(work))) as bridge:
        yield bridge


async def invoke_asked(
    bridge: Bridge, answer: Any, asked: list[dict[str, Any]], tool: str = "legacy__legacy_ask"
) -> ToolResult:
    async def asker(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append({"method": method, **params})
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    token = CALLER_ASKS.set(asker)
    try:
        return await bridge.invoker.invoke(tool, {})
    finally:
        CALLER_ASKS.reset(token)


async def test_the_reply_is_written_to_the_commands_stdin(legacy: Bridge) -> None:
    asked: list[dict[str, Any]] = []
    result = await invoke_asked(legacy, {"action": "accept", "content": {"input": "yes"}}, asked)
    assert result.status == "succeeded", result
    assert result.structured_content == {"answer": "yes", "argv": []}
    assert [a["method"] for a in asked] == ["elicitation/create"]
    assert asked[0]["message"] == (
        "`legacy ask` {} (Read an answer from stdin) waits for input on stdin and answers to "
        "prompts: what should it read?"
    )
    assert asked[0]["requestedSchema"]["required"] == ["input"]


async def test_a_caller_that_cannot_answer_gets_provide_input(legacy: Bridge) -> None:
    result = await legacy.invoker.invoke("legacy__legacy_ask", {})  # no Asker: a REST caller
    assert result.is_error and result.status == "rejected"
    error = result.error
    assert error is not None
    assert (error.error_class, error.error_code, error.recoverability) == (
        "capability_gap",
        "requires_user_interaction",
        "provide_input",
    )
    assert "cannot answer an elicitation" in error.message
    refused = AskRefused(-32602, "Elicitation not supported")
    error = (await invoke_asked(legacy, refused, [])).error
    assert error is not None and error.recoverability == "provide_input"
    assert "refused the question (-32602: Elicitation not supported)" in error.message


async def test_a_declined_question_runs_nothing(legacy: Bridge) -> None:
    for answer in ({"action": "decline"}, {"action": "cancel"}):
        result = await invoke_asked(legacy, answer, [])
        assert result.is_error and result.status == "rejected" and result.error is not None
        assert (result.error.error_class, result.error.error_code) == (
            "approval_rejected",
            "input_declined",
        )
        assert result.error.recoverability == "provide_input"


async def test_a_password_is_never_asked(legacy: Bridge) -> None:
    asked: list[dict[str, Any]] = []
    result = await invoke_asked(legacy, {"action": "accept"}, asked, "legacy__legacy_login")
    assert result.error is not None and result.error.error_class == "policy_blocked"
    assert result.error.error_code == "requires_user_interaction" and not asked
