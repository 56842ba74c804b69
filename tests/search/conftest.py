"""Fixtures of the tests of tool search."""

from __future__ import annotations

import pytest

from bridge.search.static import STATIC_TABLE, load_static
from tests.fakes import FakeUpstream, tool
from tests.search.support import start_env, tools_a


@pytest.fixture
async def env():
    e = await start_env(
        [
            FakeUpstream(name="api", tools=tools_a()),
            FakeUpstream(
                name="billing",
                tools=[
                    tool(
                        "create_invoice",
                        description="Create a draft invoice.",
                        tool_kind="openapi_operation",
                    ),
                    tool("refund", description="Refund a payment.", tool_kind="openapi_operation"),
                ],
            ),
        ]
    )
    yield e
    await e.close()


@pytest.fixture(scope="module")
def static():
    encoder = load_static()
    assert encoder is not None, f"the shipped table {STATIC_TABLE} is missing"
    return encoder
