"""The names and URIs the MCP frontend gives upstreams' resources and prompts, and the surface
rules that match them: pure functions, no servers."""

from __future__ import annotations

import pytest

from bridge.config import Rule
from bridge.serve.mcp_federated import (
    FederatedItem,
    _rule_matches,
    _template_pattern,
    namespaced_uri,
    split_uri,
)


@pytest.mark.parametrize(
    "uri",
    ["file:///tmp/a b.txt", "test://static-text", "https://x.test/p?q=1#f", "note://item/{id}"],
)
def test_a_namespaced_uri_turns_back_into_the_upstreams_own(uri: str) -> None:
    namespaced = namespaced_uri("files", uri)
    assert namespaced == f"bridge://upstream/files/{uri}"
    assert split_uri(namespaced) == ("files", uri)


@pytest.mark.parametrize("uri", ["bridge://results/abc", "bridge://upstream/files", "note://a"])
def test_other_uris_name_no_upstream(uri: str) -> None:
    assert split_uri(uri) is None


def test_a_template_matches_its_expansions_and_nothing_else() -> None:
    pattern = _template_pattern("test://template/{id}/data")
    assert pattern.fullmatch("test://template/42/data")
    assert not pattern.fullmatch("test://template/4/2/data")
    assert not pattern.fullmatch("test://other/42/data")
    assert _template_pattern("file:///{+path}").fullmatch("file:///tmp/a/b.txt")


def test_surface_rules_match_resources_and_prompts_by_name_upstream_and_kind() -> None:
    prompt = FederatedItem("fx", "greet", "fx__greet", {})
    assert _rule_matches("fx__*", prompt, "prompts")
    assert _rule_matches(Rule(upstream="f*"), prompt, "prompts")
    assert _rule_matches(Rule(kind="mcp_prompt"), prompt, "prompts")
    assert not _rule_matches(Rule(kind="mcp_prompt"), prompt, "resources")
    assert not _rule_matches(Rule(tag="x"), prompt, "prompts")  # a tool's fact: no match
    assert _rule_matches(Rule(read_only=True), prompt, "prompts")
    assert not _rule_matches(Rule(read_only=False), prompt, "prompts")
