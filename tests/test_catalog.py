"""Catalog: names, ids, collisions, failure isolation, change events, reconnects."""

from __future__ import annotations

import asyncio
import gc
import re
import threading
import tracemalloc

import pytest

from bridge.catalog import MAX_DESCRIPTION_CHARS, OFF_LOOP_TOOLS, Catalog, exposed_name
from bridge.model import SafetyHints, UpstreamTool
from bridge.store import Store
from bridge.upstream import UpstreamEvent
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.servers import until

NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def test_exposed_name_cleaning_and_64_rule():
    assert exposed_name("gh", "repos/get-content") == "gh__repos_get-content"
    long = exposed_name("vendor", "x" * 100)
    assert len(long) == 64 and NAME_RULE.match(long)
    other = exposed_name("vendor", "x" * 99 + "y")
    assert other != long and len(other) == 64  # distinct long names stay distinct
    assert NAME_RULE.match(exposed_name("ns", "héllo wörld!"))


async def test_collisions_get_deterministic_suffixes():
    async def build() -> dict[str, str]:
        up = FakeUpstream(
            name="api",
            tools=[
                tool("get pet", native_id="a"),
                tool("get/pet", native_id="b"),
                tool("get_pet", native_id="c"),
            ],
        )
        catalog = Catalog(Store())
        catalog.add_upstream(up)
        await catalog.start()
        names = {d.native_id: d.name for d in catalog.declarations()}
        await catalog.close()
        return names

    first, second = await build(), await build()
    assert first == second
    assert len(set(first.values())) == 3
    assert all(NAME_RULE.match(n) for n in first.values())
    assert "api__get_pet" in first.values()


async def test_ids_and_names_stable_across_builds_and_restarts(tmp_path):
    db = tmp_path / "b.db"
    results = []
    for _ in range(2):
        store = Store(db)
        catalog = Catalog(store)
        catalog.add_upstream(FakeUpstream(name="one", tools=[tool("alpha"), tool("beta")]))
        await catalog.start()
        results.append(sorted((d.tool_id, d.name, d.version) for d in catalog.declarations()))
        await catalog.close()
        store.close()
    assert results[0] == results[1]
    # the id is a UUIDv5 of (namespace, native id), so any replica computes the same
    from bridge.model import tool_uuid

    assert {r[0] for r in results[0]} == {tool_uuid("one", "alpha"), tool_uuid("one", "beta")}
    # a UUID is one in either case
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="one", tools=[tool("alpha")]))
    await catalog.start()
    assert catalog.resolve(tool_uuid("one", "alpha").upper()).name == "one__alpha"
    await catalog.close()


async def test_failing_upstream_leaves_others_serving():
    good = FakeUpstream(name="good", tools=[tool("ok")])
    bad = FakeUpstream(
        FakeConfig(name="bad", fail_start="connection refused on 127.0.0.1:9", retry_initial=30)
    )
    catalog = Catalog(Store())
    catalog.add_upstream(good)
    catalog.add_upstream(bad)
    await catalog.start()
    try:
        assert catalog.slot("good").health.state == "ready"
        assert catalog.slot("bad").health.state == "failed"
        assert "connection refused" in catalog.slot("bad").health.reason
        assert catalog.resolve("good__ok") is not None
        assert catalog.pending_providers() == ["bad"]
    finally:
        await catalog.close()


async def test_a_failure_that_repeats_is_warned_once_until_its_reason_changes_or_the_upstream_recovers(
    caplog,
):
    # every retry of a broken upstream was a warning: 60 of them wrote 130 a minute, for good
    caplog.set_level("INFO", logger="bridge.catalog")
    up = FakeUpstream(
        FakeConfig(name="bad", fail_start="refused", retry_initial=0.001, retry_max=0.001)
    )
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    await catalog.start(wait=False)

    def said(level: str) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelname == level and r.getMessage().startswith("upstream bad failed")
        ]

    try:
        await until(lambda: up.started >= 5)
        assert (
            len(said("WARNING")) == 1 and "refused" in said("WARNING")[0] and len(said("INFO")) >= 3
        )
        up.config.fail_start = "reset by peer"
        await until(lambda: len(said("WARNING")) == 2)
        assert "reset by peer" in said("WARNING")[1]
        up.config.fail_start = None
        await until(lambda: catalog.slot("bad").health.state == "ready")
        up.config.fail_start = "reset by peer"  # after a recovery, the same reason is news again
        up.drop("gone")
        await until(lambda: len(said("WARNING")) == 3)
    finally:
        await catalog.close()


async def test_pending_providers_follow_every_change_of_state():
    # the list is kept between searches: each change of an upstream's state, however made, and
    # each upstream added must show in the next answer
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="one", tools=[tool("a")]))
    catalog.add_upstream(FakeUpstream(name="two", tools=[tool("b")]))
    assert catalog.pending_providers() == ["one", "two"]  # connecting
    await catalog.start()
    try:
        assert catalog.pending_providers() == []
        catalog.slot("two").health.state = "unavailable"
        assert catalog.pending_providers() == ["two"]
        catalog.pending_providers().append("changed by a caller")  # a copy: the kept list is not
        assert catalog.pending_providers() == ["two"]
        catalog.slot("two").health.state = "ready"
        assert catalog.pending_providers() == []
        catalog.add_upstream(FakeUpstream(name="three"))
        assert catalog.pending_providers() == ["three"]
    finally:
        await catalog.close()


async def test_slow_upstream_does_not_block_others():
    slow = FakeUpstream(FakeConfig(name="slow", start_timeout=0.3, retry_initial=30))
    slow.start_gate = asyncio.Event()  # never opens
    fast = FakeUpstream(name="fast")
    catalog = Catalog(Store())
    catalog.add_upstream(slow)
    catalog.add_upstream(fast)
    start = asyncio.get_running_loop().time()
    await catalog.start()
    try:
        assert asyncio.get_running_loop().time() - start < 2
        assert catalog.slot("fast").health.state == "ready"
        assert catalog.slot("slow").health.state == "failed"
        assert "start_timeout" in catalog.slot("slow").health.reason
    finally:
        await catalog.close()


async def test_outage_marks_tools_with_reason_then_recovers():
    up = FakeUpstream(
        FakeConfig(name="flaky", retry_initial=0.01, retry_max=0.05), tools=[tool("a")]
    )
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    changes = []
    catalog.subscribe(changes.append)
    await catalog.start()
    try:
        decl = catalog.resolve("flaky__a")
        assert decl.loading_state == "loaded"
        up.config.fail_start = "process exited with code 1"
        up.drop("process exited with code 1")
        await until(lambda: catalog.slot("flaky").health.state in ("unavailable", "failed"))
        assert catalog.resolve("flaky__a").loading_state == "unavailable"
        assert "exited" in catalog.resolve("flaky__a").loading_reason
        up.config.fail_start = None
        await until(lambda: catalog.slot("flaky").health.state == "ready")
        assert catalog.resolve("flaky__a").loading_state == "loaded"
        assert up.started >= 2 and up.closed >= 1
        assert any(c.state_changed for c in changes)
    finally:
        await catalog.close()


async def test_a_listener_follows_the_catalog_from_its_changes_and_their_replay():
    """A change says the state its upstream is in after it; a listener subscribing with
    `replay` is first told what the catalog holds (each upstream, its tools, its state), so it
    follows the catalog without reading it."""
    up = FakeUpstream(
        FakeConfig(name="flaky", retry_initial=0.01, retry_max=0.05), tools=[tool("a")]
    )
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="listed", tools=[]))
    catalog.apply_tools("listed", [tool("x"), tool("y")])
    catalog.add_upstream(up)
    changes = []
    catalog.subscribe(changes.append, replay=True)
    assert [(c.upstream, [d.name for d in c.added], c.state) for c in changes] == [
        ("listed", ["listed__x", "listed__y"], "ready"),
        ("flaky", [], "connecting"),
    ]
    await catalog.start()
    try:
        last = changes[-1]
        assert (last.upstream, [d.name for d in last.added], last.state) == (
            "flaky",
            ["flaky__a"],
            "ready",
        )
        up.config.fail_start = "process exited with code 1"
        up.drop("process exited with code 1")
        await until(lambda: catalog.slot("flaky").health.state in ("unavailable", "failed"))
        assert changes[-1].state in ("unavailable", "failed")
        up.config.fail_start = None
        await until(lambda: catalog.slot("flaky").health.state == "ready")
        assert changes[-1].state == "ready"
    finally:
        await catalog.close()


async def test_tools_changed_applies_only_the_difference():
    up = FakeUpstream(name="u", tools=[tool("a"), tool("b")])
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    changes = []
    await catalog.start()
    catalog.subscribe(changes.append)
    try:
        up.change_tools([tool("a"), tool("c")])
        await until(lambda: catalog.resolve("u__c") is not None)
        change = changes[-1]
        assert [d.name for d in change.added] == ["u__c"]
        assert [d.name for d in change.removed] == ["u__b"]
        assert change.updated == []
        assert catalog.resolve("u__b") is None
    finally:
        await catalog.close()


async def test_refresh_interval_relists_without_notice():
    up = FakeUpstream(FakeConfig(name="r", refresh_interval=0.05), tools=[tool("a")])
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    await catalog.start()
    try:
        up.tools = [tool("a"), tool("late")]  # no event: only the refresh can find it
        await until(lambda: catalog.resolve("r__late") is not None)
    finally:
        await catalog.close()


async def test_duplicate_upstream_names_rejected():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="x"))
    with pytest.raises(ValueError):
        catalog.add_upstream(FakeUpstream(name="x"))


async def test_text_that_is_not_valid_unicode_is_listed_with_replacement_characters(
    tmp_path, caplog
):
    # what json.loads makes of an unpaired "\ud800" escape in an upstream's listing: a string
    # no UTF-8 encoder takes (the store, the search index, every HTTP answer)
    up = FakeUpstream(
        name="odd",
        tools=[
            tool("fine"),
            tool(
                "described",
                description="bad \ud800 text",
                props={"q": {"type": "string", "description": "\udc00"}},
            ),
            tool("named\ud83d", native_id="id\ud83d"),
        ],
    )
    catalog = Catalog(Store(str(tmp_path / "b.db")))
    catalog.add_upstream(up)
    await catalog.start()
    try:
        assert catalog.slots["odd"].health.state == "ready"
        by_name = {d.native_name: d for d in catalog.declarations()}
        assert set(by_name) == {"fine", "described", "named\ufffd"}
        assert by_name["described"].description == "bad \ufffd text"
        assert by_name["described"].input_schema["properties"]["q"]["description"] == "\ufffd"
        assert by_name["named\ufffd"].native_id == "id\ufffd" and by_name["fine"].version == 1
        assert "not valid Unicode" in caplog.text
        # a later listing with the same text changes nothing
        assert catalog.apply_tools("odd", up.tools).empty
    finally:
        await catalog.close()


async def test_a_description_over_the_cap_is_cut_once_with_a_warning(caplog):
    up = FakeUpstream(
        name="wordy",
        tools=[
            tool("manual", description="x" * 100_000),
            tool("long_but_fine", description="y" * MAX_DESCRIPTION_CHARS),
        ],
    )
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    await catalog.start()
    try:
        by_name = {d.native_name: d for d in catalog.declarations()}
        cut = by_name["manual"].description
        assert len(cut) == MAX_DESCRIPTION_CHARS and cut.endswith("x…")
        assert by_name["long_but_fine"].description == "y" * MAX_DESCRIPTION_CHARS
        warning = f"upstream wordy: tool 'manual' has a description of 100000 characters; it is cut to {MAX_DESCRIPTION_CHARS}"
        assert caplog.messages.count(warning) == 1
        # the same listing again: nothing changes, nothing is said twice
        assert catalog.apply_tools("wordy", up.tools).empty
        assert caplog.messages.count(warning) == 1
    finally:
        await catalog.close()


async def test_a_declaration_holds_its_own_facts_and_little_else(tmp_path):
    """Memory a catalog keeps per tool (Python objects, traced; the store's SQLite pages are its
    own): 2,376 B on the development machine; 5,250 B when every declaration had its own set of
    the names of its fields (pydantic's, 2.2 KB) and the versions kept every signature."""
    tools = [tool(f"op_{i}") for i in range(2000)]
    catalog = Catalog(Store(tmp_path / "store.db"))
    catalog.add_upstream(FakeUpstream(name="api", tools=tools))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        catalog.apply_tools("api", tools)
        gc.collect()
        held = sum(
            stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename")
        )
    finally:
        tracemalloc.stop()
    assert held / len(tools) < 2800
    # the shared set still says what pydantic's own would: every field was given
    first, second = (catalog.resolve("api__op_0"), catalog.resolve("api__op_1"))
    assert first.model_fields_set == set(type(first).model_fields)
    first.loading_reason = "assigned"
    copy = second.model_copy(update={"title": "copied"})
    assert (
        copy.title == "copied"
        and second.title is None
        and second.model_fields_set == set(type(second).model_fields)
    )
    assert (
        first.to_json()["loading_reason"] == "assigned" and "loading_reason" not in second.to_json()
    )
    await catalog.close()


async def test_a_large_listing_is_declared_off_the_event_loop_and_versioned_in_the_store_first(
    tmp_path, monkeypatch
):
    on_loop: list[bool] = []
    declare = Catalog._declare

    def recorded(self, slot, tool):
        on_loop.append(threading.current_thread() is threading.main_thread())
        return declare(self, slot, tool)

    monkeypatch.setattr(Catalog, "_declare", recorded)
    tools = [tool(f"t{i:03d}") for i in range(OFF_LOOP_TOOLS + 20)]
    up = FakeUpstream(name="big", tools=tools)
    catalog = Catalog(Store(tmp_path / "b.db"))
    catalog.add_upstream(up)
    seen_versions: list[list[int]] = []
    # when the catalog shows a new version, the store has it already
    catalog.subscribe(
        lambda change: seen_versions.append(
            [len(catalog.versions.history(d)) for d in change.added + change.updated]
        )
    )
    await catalog.start()
    try:
        assert len(catalog.slots["big"].tools) == len(tools)
        assert on_loop and not any(on_loop)  # every declaration made on a worker thread
        before = catalog.resolve("big__t000")

        on_loop.clear()
        unchanged = await catalog.take_tools("big", list(tools))
        assert (
            unchanged.empty and catalog.resolve("big__t000") is before
        )  # the same record, not a new one
        assert on_loop == []  # told unchanged without declaring any tool again

        up.change_tools([tool("t000", description="Says something else now."), *tools[1:]])
        await until(lambda: catalog.resolve("big__t000").version == 2)
        assert [h.version for h in catalog.versions.history(catalog.resolve("big__t000"))] == [2, 1]
        assert on_loop == [False]  # the changed tool alone declared, on a worker thread

        on_loop.clear()
        late = [tool(f"late{i:03d}") for i in range(OFF_LOOP_TOOLS)]
        up.emit(UpstreamEvent("tools_added", tools=tuple(late)))  # merged with the tools it has
        await until(lambda: catalog.resolve("big__late000") is not None)
        assert len(catalog.slots["big"].tools) == len(tools) + len(late)
        assert len(on_loop) == len(late) and not any(
            on_loop
        )  # the tools it had are not declared again
        assert all(counts and min(counts) >= 1 for counts in seen_versions)
    finally:
        await catalog.close()
    assert (
        len(Store(tmp_path / "b.db").assigned_names()) == len(tools) + OFF_LOOP_TOOLS
    )  # every name given is kept


# a new value of every fact an upstream gives of a tool (`UpstreamTool`), and where its declaration shows it
CHANGED_FACTS = {
    "name": ("renamed", lambda d: d.native_name),
    "description": ("Says something else now.", lambda d: d.description),
    "title": ("A title", lambda d: d.title),
    "tool_kind": ("mcp_tool", lambda d: d.tool_kind),
    "input_schema": (
        {"type": "object", "properties": {"q": {"type": "string"}}},
        lambda d: d.input_schema,
    ),
    "output_schema": (
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        lambda d: d.output_schema,
    ),
    "safety": (SafetyHints(billable=True), lambda d: d.safety),
    "tags": (["finance"], lambda d: d.tags),
    "search_hint": ("find the things", lambda d: d.search_hint),
    "external_mapping": ({"source": "fake", "path": "/x"}, lambda d: d.external_mappings[0]),
    "annotations": ({"audience": "ops"}, lambda d: d.annotations),
    "lifecycle": ("deprecated", lambda d: d.lifecycle),
    "blocked_reason": ("withdrawn by its vendor", lambda d: d.blocked_reason),
    "blocked_detail": ("ask the vendor", lambda d: d.blocked_detail),
    "timeout": (5.0, lambda d: d.timeout),
}


def test_a_listing_that_changes_any_fact_of_a_tool_changes_its_declaration_and_only_then(
    monkeypatch,
):
    assert set(CHANGED_FACTS) == set(UpstreamTool.model_fields) - {
        "native_id"
    }  # a new fact needs a line here
    declared: list[str] = []
    declare = Catalog._declare
    monkeypatch.setattr(
        Catalog,
        "_declare",
        lambda self, slot, t: declared.append(t.native_id) or declare(self, slot, t),
    )
    base = tool("op")
    long = tool("long", description="x" * (MAX_DESCRIPTION_CHARS + 10))  # cut when declared
    scalar = tool("scalar").model_copy(
        update={"input_schema": {"type": "string"}}
    )  # blocked: its input is not an object
    catalog = Catalog(Store())
    catalog.add_upstream(
        FakeUpstream(FakeConfig(name="api", tags=["team"]))
    )  # tags of its own, added to each tool's
    catalog.apply_tools("api", [base, long, scalar])
    assert catalog.resolve("api__scalar").blocked_reason and catalog.resolve(
        "api__long"
    ).description.endswith("…")
    for field_name, (value, shown) in CHANGED_FACTS.items():
        declared.clear()
        assert catalog.apply_tools("api", [base, long, scalar]).empty
        assert declared == []  # a tool listed as it was is not declared again
        changed = catalog.apply_tools(
            "api", [base.model_copy(update={field_name: value}), long, scalar]
        )
        assert [d.native_id for d in changed.updated] == ["op"] and declared == ["op"], field_name
        decl = catalog.resolve("api__op")
        expected = [*value, "team"] if field_name == "tags" else value
        assert shown(decl) == expected, field_name
        back = catalog.apply_tools("api", [base, long, scalar])
        assert [d.native_id for d in back.updated] == ["op"], field_name


async def test_closing_waits_for_the_names_a_large_listing_is_writing(tmp_path, monkeypatch):
    store = Store(tmp_path / "b.db")
    writing, go_on = threading.Event(), threading.Event()
    save = store.save_names

    def held(rows):  # the names' write, on its worker thread, held until the test lets it go
        writing.set()
        go_on.wait(10)
        save(rows)

    monkeypatch.setattr(store, "save_names", held)
    catalog = Catalog(store)
    catalog.add_upstream(
        FakeUpstream(name="big", tools=[tool(f"t{i:03d}") for i in range(OFF_LOOP_TOOLS)])
    )
    await catalog.start(wait=False)
    await until(writing.is_set)
    closing = asyncio.create_task(
        catalog.close()
    )  # cancels the upstream's task, which awaits the write
    for _ in range(50):
        await asyncio.sleep(0)
    assert not closing.done()  # the write is not abandoned half way
    go_on.set()
    await closing
    assert len(store.assigned_names()) == OFF_LOOP_TOOLS


async def test_closing_closes_every_upstream_at_once():
    # a stdio server may take its shutdown_timeout to exit: closed one after another, 300 of
    # them held a stopping bridge for minutes
    ups = [FakeUpstream(name=f"u{i}") for i in range(50)]
    catalog = Catalog(Store())
    for up in ups:
        up.close_gate = asyncio.Event()
        catalog.add_upstream(up)
    await catalog.start()
    closing = asyncio.create_task(catalog.close())
    await until(lambda: all(up.closed == 1 for up in ups))  # every close begun while none has ended
    for up in ups:
        up.close_gate.set()
    await closing


async def test_has_pending_follows_every_upstream_state_without_looking_at_each():
    catalog = Catalog(Store())
    fine = FakeUpstream(name="fine")
    catalog.add_upstream(fine)
    catalog.add_upstream(FakeUpstream(FakeConfig(name="off", enabled=False)))
    catalog.add_upstream(
        FakeUpstream(FakeConfig(name="broken", fail_start="refused", retry_initial=30))
    )
    assert catalog.has_pending() and catalog.pending_providers() == ["fine", "off", "broken"]
    await catalog.start()
    try:
        assert catalog.pending_providers() == ["broken"] and catalog.has_pending()
        catalog.slots["broken"].health.state = "ready"  # as its listing would, once back
        catalog.slots["broken"].health.state = "ready"  # the same state again counts once
        assert catalog.pending_providers() == [] and not catalog.has_pending()
        fine.start_gate = asyncio.Event()  # its reconnect waits
        fine.drop("connection lost")
        await until(lambda: catalog.slots["fine"].health.state != "ready")
        assert catalog.pending_providers() == ["fine"] and catalog.has_pending()
        fine.start_gate.set()
        await until(lambda: catalog.slots["fine"].health.state == "ready")
        assert catalog.pending_providers() == [] and not catalog.has_pending()
    finally:
        await catalog.close()


async def test_the_catalog_knows_the_kinds_of_its_tools_through_changes():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="api", tools=[]))
    catalog.add_upstream(FakeUpstream(name="ops", tools=[]))
    catalog.apply_tools("api", [tool("a", tool_kind="openapi_operation"), tool("b")])
    catalog.apply_tools("ops", [tool("c", tool_kind="shell_command")])
    assert catalog.kinds() == ["function", "openapi_operation", "shell_command"]
    catalog.apply_tools("api", [tool("a", tool_kind="function"), tool("b")])  # a tool changes kind
    assert catalog.kinds() == ["function", "shell_command"]
    catalog.apply_tools("ops", [])  # an upstream's tools gone
    assert catalog.kinds() == ["function"]
    await catalog.close()


async def test_an_upstream_removed_is_stopped_and_its_tools_leave_announced_others_untouched():
    stays, goes = (
        FakeUpstream(name="stays", tools=[tool("a")]),
        FakeUpstream(name="goes", tools=[tool("a"), tool("b")]),
    )
    broken = FakeUpstream(FakeConfig(name="broken", fail_start="refused", retry_initial=30))
    catalog = Catalog(Store())
    for up in (stays, goes, broken):
        catalog.add_upstream(up)
    await catalog.start()
    changes = []
    catalog.subscribe(changes.append)
    try:
        task = catalog.slot("goes").task
        generation = catalog.generation
        await catalog.remove_upstream("goes")
        assert task.done() and goes.closed == 1
        assert (
            "goes" not in catalog.slots
            and catalog.resolve("goes__a") is None
            and catalog.resolve("goes__b") is None
        )
        assert (
            sorted(d.name for d in changes[-1].removed) == ["goes__a", "goes__b"]
            and changes[-1].upstream == "goes"
        )
        assert catalog.changed_since(generation) == {
            d.tool_id for d in changes[-1].removed
        }  # surfaces place them again
        await catalog.remove_upstream(
            "broken"
        )  # one still failing: its retries end, nothing pending is left
        assert catalog.pending_providers() == [] and not catalog.has_pending()
        assert (stays.started, stays.closed) == (1, 0) and catalog.resolve(
            "stays__a"
        ).loading_state == "loaded"
    finally:
        await catalog.close()
    assert goes.closed == 1  # closing the catalog does not close it again


async def test_an_upstream_removed_or_restarted_stops_the_process_launched_for_it():
    import sys

    from bridge.upstream import LaunchConfig

    launch = LaunchConfig(command=sys.executable, args=["-c", "import time; time.sleep(60)"])
    catalog = Catalog(Store())
    for name in ("goes", "moves"):
        catalog.add_upstream(FakeUpstream(FakeConfig(name=name, launch=launch)))
    await catalog.start()
    try:
        processes = [catalog.slot(name).sidecar.process for name in ("goes", "moves")]
        assert all(p is not None and p.returncode is None for p in processes)
        await catalog.remove_upstream("goes")
        await catalog.replace_upstream(
            FakeUpstream(FakeConfig(name="moves", launch=launch, timeout=5))
        )
        assert all(p.returncode is not None for p in processes)  # stopped, and waited for
        await catalog.start()
        assert catalog.slot("moves").sidecar.running  # launched again with the new settings
    finally:
        await catalog.close()


async def test_an_upstream_restarted_with_new_settings_keeps_its_tools_ids_and_versions(tmp_path):
    store = Store(tmp_path / "b.db")
    old = FakeUpstream(name="svc", tools=[tool("same"), tool("edited")])
    catalog = Catalog(store)
    catalog.add_upstream(old)
    await catalog.start()
    try:
        before = {d.native_id: (d.tool_id, d.name, d.version) for d in catalog.declarations()}
        new = FakeUpstream(
            FakeConfig(name="svc", tags=["moved"], timeout=5),
            tools=[tool("same"), tool("edited", description="Edited: it says more now.")],
        )
        new.start_gate = asyncio.Event()  # it connects when the test says
        await catalog.replace_upstream(new)
        await catalog.start(wait=False)
        assert old.closed == 1 and catalog.slot("svc").upstream is new
        # meanwhile its tools stay known, unavailable as during a reconnect
        await until(lambda: new.started == 1)
        same = catalog.resolve("svc__same")
        assert (
            same.loading_state == "unavailable"
            and same.loading_reason == "restarting with new settings"
        )
        assert catalog.slot("svc").health.state == "connecting" and catalog.pending_providers() == [
            "svc"
        ]
        new.start_gate.set()
        await until(lambda: catalog.slot("svc").health.state == "ready")
        after = {d.native_id: d for d in catalog.declarations()}
        same, edited = after["same"], after["edited"]
        assert (same.tool_id, same.name, same.version) == before[
            "same"
        ] and same.loading_state == "loaded"
        assert same.tags == ["moved"]  # the new settings hold
        assert [v.version for v in catalog.versions.history(same)] == [1]  # no version bump
        assert (edited.tool_id, edited.name) == before["edited"][:2] and edited.version == 2
        assert [v.version for v in catalog.versions.history(edited)] == [
            2,
            1,
        ]  # newest first, the first kept
    finally:
        await catalog.close()
    assert new.closed == 1


async def test_an_upstream_restarted_disabled_keeps_no_tools():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="svc", tools=[tool("a")]))
    await catalog.start()
    changes = []
    catalog.subscribe(changes.append)
    try:
        await catalog.replace_upstream(FakeUpstream(FakeConfig(name="svc", enabled=False)))
        await catalog.start(wait=False)
        assert catalog.resolve("svc__a") is None and [d.name for d in changes[-1].removed] == [
            "svc__a"
        ]
        assert catalog.slot("svc").health.state == "disabled" and catalog.slot("svc").task is None
    finally:
        await catalog.close()


async def test_an_upstream_still_connecting_says_what_its_start_is_doing(monkeypatch):
    # a start of a minute (Microsoft Graph's beta document: mapping, then declaring 22,361 tools)
    # said only `connecting`, with no reason, and was taken for a hang
    tools = [tool(f"t{i:03d}") for i in range(OFF_LOOP_TOOLS + 5)]
    up = FakeUpstream(name="big", tools=tools)
    up.start_gate = asyncio.Event()
    declaring = threading.Event()
    release = threading.Event()
    prepare = Catalog._prepare

    def held(self, slot, listed, added=None):
        declaring.set()
        release.wait(10)
        return prepare(self, slot, listed, added)

    monkeypatch.setattr(Catalog, "_prepare", held)
    catalog = Catalog(Store())
    catalog.add_upstream(up)
    await catalog.start(wait=False)
    try:
        await until(lambda: up.started == 1)
        assert [(h.state, h.reason) for h in catalog.health()] == [
            ("connecting", None)
        ]  # no phase: nothing said
        up.phase = "mapping 205 operations"
        assert [(h.state, h.reason) for h in catalog.health()] == [
            ("connecting", "mapping 205 operations")
        ]
        up.phase = None
        up.start_gate.set()
        await until(declaring.is_set)
        assert [(h.state, h.reason) for h in catalog.health()] == [
            ("connecting", f"declaring and versioning {len(tools)} tools")
        ]
        release.set()
        await until(lambda: catalog.health()[0].state == "ready")
        assert catalog.health()[0].reason is None and len(catalog) == len(tools)
    finally:
        release.set()
        await catalog.close()


async def test_a_large_listing_is_declared_signed_and_versioned_a_batch_at_a_time(
    tmp_path, monkeypatch
):
    # the canonical text of every signature of a listing, held at once, was Microsoft Graph
    # beta's 217 MB; a batch's at a time, the bridge serving it peaks at 629 MB instead of 878 MB
    from bridge import catalog as catalog_module
    from bridge import versions

    monkeypatch.setattr(catalog_module, "SIGN_BATCH", 50)
    batches: list[int] = []
    sign = versions.sign

    def recorded(decls):
        batches.append(len(decls))
        return sign(decls)

    monkeypatch.setattr(catalog_module, "sign", recorded)
    tools = [tool(f"t{i:03d}") for i in range(120)]
    tools[70] = tool("t070", description="bad \ud800 text")  # cleaned in its batch, the others kept
    catalog = Catalog(Store(tmp_path / "b.db"))
    catalog.add_upstream(FakeUpstream(name="big", tools=tools))
    await catalog.start()
    try:
        assert batches == [50, 50, 50, 20]  # the second batch signed again, cleaned
        assert len(catalog) == 120 and catalog.resolve("big__t070").description == "bad \ufffd text"
        assert all(len(catalog.versions.history(d)) == 1 for d in catalog.declarations())
    finally:
        await catalog.close()
