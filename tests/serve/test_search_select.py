"""`select:` with filters over each way in: REST `/search` (and an A2T group's `q=select:`), MCP
`search_tools` and `bridge search` (tests/test_cli.py) answer alike: a named tool the filters
leave out is in `missing_names` with the filter said in the hint, a blocked one is never revealed."""

from __future__ import annotations

import pytest

from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import ERAS, http_client, served_bridge
from tests.serve.rest_env import serving

SURFACE = {
    "surfaces": [
        {
            "name": "default",
            "defer": ["*"],
            "block": [{"name": "docs__secret_keys", "reason": "policy_blocked"}],
        }
    ]
}
QUERY = (
    "select:docs__search_documents,docs__delete_document,other__documents_count,docs__secret_keys"
)
LEFT_OUT = (
    "not found on this surface: docs__secret_keys; left out by the filters: docs__delete_document (read_only), "
    "other__documents_count (namespace); ask again without those filters to have them"
)


def upstreams() -> list[FakeUpstream]:
    return [
        FakeUpstream(
            name="docs",
            tools=[
                tool(
                    "search_documents",
                    description="Full text search over documents",
                    read_only=True,
                ),
                tool("delete_document", description="Delete a document", destructive=True),
                tool("secret_keys", description="List secret keys", read_only=True),
            ],
        ),
        FakeUpstream(name="other", tools=[tool("documents_count", read_only=True)]),
    ]


async def test_rest_search_and_an_a2t_group_keep_the_filters_of_a_selection():
    async with serving(*upstreams(), config={"store": {"path": ":memory:"}, **SURFACE}) as served:
        status, body, _ = await served.get("/search", q=QUERY, namespace="docs", read_only="true")
        assert status == 200 and [m["name"] for m in body["matches"]] == ["docs__search_documents"]
        assert body["missing_names"] == [
            "docs__delete_document",
            "other__documents_count",
            "docs__secret_keys",
        ]
        assert body["hint"] == LEFT_OUT
        _, body, _ = await served.get(
            "/search", q=QUERY
        )  # without filters: every visible tool named
        assert [m["name"] for m in body["matches"]] == [
            "docs__search_documents",
            "docs__delete_document",
            "other__documents_count",
        ]
        # an A2T group's search is a search within its upstream: another group's tool is not in it
        _, body, _ = await served.get(
            "/a2t/groups/docs/tools", q="select:other__documents_count,docs__delete_document"
        )
        assert [t["name"] for t in body["tools"]] == ["docs__delete_document"] and body[
            "total"
        ] == 1


@pytest.mark.parametrize("era", ERAS)
async def test_mcp_search_tools_keeps_the_filters_of_a_selection(era):
    async with served_bridge(SURFACE, upstreams()) as srv, http_client(srv.url, era) as client:
        found = await client.search(QUERY, namespace="docs", read_only=True)
        assert [m["name"] for m in found["matches"]] == ["docs__search_documents"]
        assert found["missing_names"] == [
            "docs__delete_document",
            "other__documents_count",
            "docs__secret_keys",
        ]
        assert found["hint"] == LEFT_OUT
