"""Tool search following the catalog (bridge.search.feed): tools added, changed and removed,
upstreams going and coming back, and the text an API's tools share looked at again."""

from __future__ import annotations

import sys
import threading

from bridge.catalog import Catalog
from bridge.config import SurfaceConfig
from bridge.search.service import ToolSearch
from bridge.store import Store
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool
from tests.search.support import fs_tools, start_env, tools_a
from tests.servers import until


async def test_index_follows_tool_add_change_and_removal(env):
    up = env.ups["api"]
    up.change_tools([*tools_a(), tool("rotate_keys", description="Rotate the signing keys.")])
    await until(lambda: env.catalog.resolve("api__rotate_keys") is not None)
    assert await env.search.wait_indexed()
    assert env.names("signing keys")[0] == "api__rotate_keys"

    changed = [
        t if t.name != "rotate_keys" else tool("rotate_keys", description="Renew TLS certificates.")
        for t in up.tools
    ]
    up.change_tools(changed)
    await until(lambda: "TLS" in env.catalog.resolve("api__rotate_keys").description)
    assert await env.search.wait_indexed()
    assert env.names("certificates")[0] == "api__rotate_keys"
    assert "api__rotate_keys" not in env.names("signing")

    up.change_tools([t for t in changed if t.name != "rotate_keys"])
    await until(lambda: env.catalog.resolve("api__rotate_keys") is None)
    assert await env.search.wait_indexed()
    assert env.names("certificates") == []
    assert env.search.index.num_docs == len(env.catalog)


async def test_a_matchs_hint_follows_its_tool_and_the_text_its_api_shares(env):
    blurb = "Part of the Acme API for orders and carts. Tool description: "
    orders = [
        tool("create_order", description=blurb + "Create an order."),
        tool("cancel_order", description=blurb + "Cancel an order."),
    ]

    def hint(query: str) -> tuple[str, str | None]:
        first = env.search.search(query, surface=env.surface).matches[0]
        return first.name, first.search_hint

    env.catalog.apply_tools("billing", orders)
    assert await env.search.wait_indexed()
    # two tools do not share a text yet: the blurb's first sentence is the tool's own
    assert hint("cancel an order") == (
        "billing__cancel_order",
        "Part of the Acme API for orders and carts",
    )
    env.catalog.apply_tools(
        "billing", [*orders, tool("refund_order", description=blurb + "Refund an order.")]
    )
    assert await env.search.wait_indexed()
    assert hint("cancel an order") == (
        "billing__cancel_order",
        "Cancel an order",
    )  # a third: the blurb is shared
    env.catalog.apply_tools(
        "billing",
        [
            orders[0],
            tool("cancel_order", description=blurb + "Void an order before it ships."),
            tool("refund_order", description=blurb + "Refund an order."),
        ],
    )
    assert await env.search.wait_indexed()
    assert hint("void an order") == ("billing__cancel_order", "Void an order before it ships")


async def test_index_follows_a_whole_upstream_going_and_coming_back(env):
    before = env.search.index.num_docs
    env.catalog.apply_tools("billing", [])
    assert await env.search.wait_indexed()
    assert env.search.index.num_docs == before - 2
    assert env.names("refund") == []
    env.catalog.apply_tools("billing", [tool("refund", description="Refund a payment.")])
    assert await env.search.wait_indexed()
    assert env.names("refund") == ["billing__refund"]


async def test_an_outage_does_not_rewrite_the_index(env):
    written = env.search.index.documents_written
    slot = env.catalog.slot("api")
    attempts, generation = slot.health.attempts, env.catalog.generation
    env.ups["api"].drop("connection reset")  # marked unavailable, then reconnected and re-listed
    await until(lambda: slot.health.attempts > attempts and slot.health.state == "ready")
    assert env.catalog.generation >= generation + 2
    assert await env.search.wait_indexed()
    assert env.search.index.documents_written == written  # only the loading state changed
    assert env.names("repositories")[0] == "api__list_repositories"


async def test_shared_text_follows_the_listing_tool_by_tool():
    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    try:

        def hint(query: str) -> str:
            return e.search.search(query, surface=e.surface).matches[0].search_hint

        assert hint("working directory").startswith(
            "This tool belongs"
        )  # two tools: not shared yet
        up.change_tools(fs_tools(("cd", "ls", "rm")))
        await until(lambda: e.catalog.resolve("fs__rm") is not None)
        assert await e.search.wait_indexed()
        # the third tool makes the blurb shared: the first two are written again
        assert (
            hint("working directory")
            == "Change the current working directory to the specified folder"
        )
        assert e.search.index.num_docs == 3
        up.change_tools(fs_tools(("cd", "rm")))
        await until(lambda: e.catalog.resolve("fs__ls") is None)
        assert await e.search.wait_indexed()
        assert hint("working directory").startswith("This tool belongs")
        assert e.search.index.num_docs == 2
    finally:
        await e.close()


async def test_shared_text_is_looked_at_on_the_index_thread_not_the_event_loop():

    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    threads: list[str] = []
    refresh = e.search.shared.refresh

    def recording(namespace, tools):
        threads.append(threading.current_thread().name)
        return refresh(namespace, tools)

    e.search.shared.refresh = recording  # type: ignore[method-assign]
    try:
        up.change_tools(fs_tools(("cd", "ls", "rm")))  # a pass over the whole listing
        await until(lambda: e.catalog.resolve("fs__rm") is not None)
        assert await e.search.wait_indexed()
        assert threads and threading.main_thread().name not in threads
        assert (
            e.search.search("remove a file", surface=e.surface).matches[0].search_hint
            == "Remove a file or directory"
        )
    finally:
        await e.close()


async def test_changes_of_one_upstream_committed_together_look_at_its_shared_text_once():
    """Each change of an upstream looks at its listing's shared text again (a pass over the whole
    listing); of changes committed together, the last looks, at the newest listing, and the
    upstream is written again if its shared text changed since the last look."""

    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    looked: list[str] = []
    refresh = e.search.shared.refresh

    def recording(namespace, tools):
        looked.append(namespace)
        return refresh(namespace, tools)

    e.search.shared.refresh = recording  # type: ignore[method-assign]
    held, holding = threading.Event(), threading.Event()

    def hold():  # the writer thread is busy: the changes below queue up meanwhile
        holding.set()
        held.wait(10)

    try:
        e.search.index.submit(prepare=hold)
        assert holding.wait(10)
        e.catalog.apply_tools(
            "fs", fs_tools(("cd", "ls", "rm"))
        )  # the third tool makes the blurb shared
        e.catalog.apply_tools("fs", fs_tools(("cd", "ls", "rm", "mkdir")))
        e.catalog.apply_tools("fs", fs_tools(("cd", "ls", "mkdir")))
        held.set()
        assert await e.search.wait_indexed()
        assert looked == ["fs"]
        hints = {
            m.name: m.search_hint
            for m in e.search.search("directory", surface=e.surface, limit=5).matches
        }
        assert hints == {
            "fs__cd": "Change the current working directory to the specified folder",
            "fs__ls": "List the contents of the current directory",
            "fs__mkdir": "Create a new directory in the current directory",
        }
        assert e.search.index.num_docs == e.search.index.tool_count == 3
    finally:
        held.set()
        await e.close()


class WatchedSlots(dict):
    """A catalog's upstreams, noting each read that tool search makes of them, and its thread."""

    def __init__(self, slots: dict) -> None:
        super().__init__(slots)
        self.reads: list[str] = []

    def _note(self) -> None:
        caller = sys._getframe(2)  # what reads them (the catalog's own methods may)
        if caller.f_globals.get("__name__", "").startswith("bridge.search"):
            self.reads.append(f"{caller.f_code.co_name} on {threading.current_thread().name}")

    def __getitem__(self, key):
        self._note()
        return super().__getitem__(key)

    def __iter__(self):
        self._note()
        return super().__iter__()

    def get(self, key, default=None):
        self._note()
        return super().get(key, default)

    def keys(self):
        self._note()
        return super().keys()

    def values(self):
        self._note()
        return super().values()

    def items(self):
        self._note()
        return super().items()


async def test_search_follows_the_catalog_from_its_changes_not_its_upstreams(monkeypatch):
    """What search knows of the catalog's upstreams (their tools, which have listed, their
    names) comes from the change events, replayed when it starts: neither the catalog's thread
    nor the index's writer thread, which lists every tool for a compaction, reads the catalog's
    upstreams, which the catalog's thread changes meanwhile."""
    monkeypatch.setattr("bridge.search.compaction.COMPACT_DELETED_MIN", 1)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_DELETED", 0.1)
    listing = [
        tool(f"tool_{i}", description=f"Report the {word} of the ledger.")
        for i, word in enumerate(["invoice", "weather", "ticket", "flight", "folder"])
    ]
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="ledger", tools=listing))
    catalog.apply_tools("ledger", listing)  # listed before search starts: told by the replay
    notes = [tool("add_note", description="Add a note.")]
    catalog.add_upstream(FakeUpstream(name="notes", tools=notes))
    slots = catalog.slots = WatchedSlots(catalog.slots)
    search = ToolSearch(catalog)
    surface = Surface(SurfaceConfig(name="default"), catalog)

    def names(query: str) -> list[str]:
        return [m.name for m in search.search(query, surface=surface).matches]

    try:
        assert await search.wait_indexed()
        assert names("flight") == ["ledger__tool_3"]
        await catalog.start()  # `notes` lists: every upstream has listed
        assert await search.wait_indexed()
        assert names("note") == ["notes__add_note"]
        changed = [*listing[:4], tool("tool_4", description="Report the folders of the ledger.")]
        # a deleted document: the writer thread lists every tool to compact the index
        catalog.apply_tools("ledger", changed)
        assert await search.wait_indexed() and search.index.compacted()
        assert search.index.deleted == 0 and search.index.tool_count == 6
        hint = search.search("flight", surface=surface, namespace="ledgr").hint
        assert "namespaces like it: ledger" in hint
    finally:
        search.close()
        await catalog.close()
    assert slots.reads == []
