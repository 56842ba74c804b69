"""`prefix: always | never | when_needed`: tools named as their upstream gave them where no other
tool holds the name, the upstream's name before them otherwise; ids never change, and a name once
given stays across restarts (the store keeps it)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge.catalog import Catalog
from bridge.config import ConfigError, load_config
from bridge.model import tool_uuid
from bridge.store import Store
from tests.fakes import FakeConfig, FakeUpstream, tool


async def names(
    upstreams: list[FakeUpstream], store: Store | None = None
) -> dict[tuple[str, str], str]:
    """The names given to the upstreams' tools, listed one upstream after the other."""
    catalog = Catalog(store or Store())
    for upstream in upstreams:
        catalog.add_upstream(upstream)
        catalog.apply_tools(upstream.name, upstream.tools)
    return {(d.namespace, d.native_name): d.name for d in catalog.declarations()}


def fake(name: str, prefix: str, *tools: str) -> FakeUpstream:
    return FakeUpstream(FakeConfig(name=name, prefix=prefix), tools=[tool(t) for t in tools])


async def test_prefix_always_is_the_default_and_names_every_tool_with_its_upstream() -> None:
    assert FakeConfig(name="x").prefix == "always"
    assert await names([fake("one", "always", "echo")]) == {("one", "echo"): "one__echo"}


async def test_never_and_when_needed_keep_the_upstreams_names_where_free() -> None:
    found = await names(
        [
            fake("one", "always", "echo"),
            fake("two", "never", "echo", "list files"),
            fake("three", "when_needed", "ping"),
        ]
    )
    assert found == {
        ("one", "echo"): "one__echo",
        ("two", "echo"): "echo",
        ("two", "list files"): "list_files",
        ("three", "ping"): "ping",
    }


async def test_a_name_another_upstream_holds_gets_the_prefix_and_never_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="bridge.catalog"):
        found = await names(
            [
                fake("one", "never", "echo"),
                fake("two", "never", "echo"),
                fake("three", "when_needed", "echo"),
            ]
        )
    assert found == {
        ("one", "echo"): "echo",
        ("two", "echo"): "two__echo",
        ("three", "echo"): "three__echo",
    }
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "upstream two (prefix: never)" in warned[0], warned


async def test_the_meta_tools_names_are_never_given() -> None:
    found = await names([fake("one", "never", "search_tools", "call_tool")])
    assert found == {
        ("one", "search_tools"): "one__search_tools",
        ("one", "call_tool"): "one__call_tool",
    }


async def test_names_and_ids_stay_across_restarts_whatever_order_upstreams_start(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "names.db")
    first = await names(
        [fake("one", "when_needed", "echo"), fake("two", "when_needed", "echo")], store
    )
    again = await names(
        [fake("two", "when_needed", "echo"), fake("one", "when_needed", "echo")], store
    )
    assert first == again == {("one", "echo"): "echo", ("two", "echo"): "two__echo"}
    store.close()


async def test_a_prefix_changed_in_the_config_renames_its_tools_keeping_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "names.db")
    assert await names([fake("one", "always", "echo")], store) == {("one", "echo"): "one__echo"}
    catalog = Catalog(store)
    catalog.add_upstream(fake("one", "never", "echo"))
    catalog.apply_tools("one", [tool("echo")])
    decl = catalog.resolve("echo")
    assert decl is not None and decl.tool_id == tool_uuid("one", "echo")
    store.close()


def test_an_unknown_prefix_is_a_config_error_naming_the_choices(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("upstreams:\n  - {name: one, kind: mcp, command: x, prefix: sometimes}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "prefix" in text and "when_needed" in text, text
