"""Compaction of the search index (bridge.search.compaction): fewer segments, no deleted
documents, the changes arriving meanwhile kept, a failure or a close leaving the index as it was."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bridge.catalog import Catalog
from bridge.config import SurfaceConfig
from bridge.search.analysis import analyze_query
from bridge.search.document import tool_key
from bridge.search.service import ToolSearch
from bridge.store import Store
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool
from tests.search.support import (
    FailingIndex,
    FullDisk,
    assert_reopens_as,
    hits,
    indexed,
    start_env,
    written_index,
)


def test_a_compaction_writes_the_index_again_in_fewer_segments_and_keeps_its_content(
    tmp_path, monkeypatch
):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    path = str(tmp_path / "compact.index")
    tools = {
        f"t{i}": indexed(f"t{i}", f"report number {i}", namespace=f"ns{i % 3}") for i in range(300)
    }
    index = si.ToolIndex(path)
    try:
        for batch in range(3):  # three commits, three segments (Tantivy merges eight at a time)
            index.submit([t for tool_id, t in tools.items() if int(tool_id[1:]) % 3 == batch])
            assert index.flush()
        assert index.segments == 3
        commits = index.commits
        monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 4)
        index.compact(list(tools.values()))  # fewer segments than COMPACT_SEGMENTS: nothing is done
        assert index.compacted() and index.commits == commits and index.segments == 3
        monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
        kept = [t for tool_id, t in tools.items() if tool_id != "t7"]  # t7 no longer listed
        kept[0] = indexed("t0", "forecast of the weather", namespace="ns0")  # t0 changed
        kept[1] = indexed(
            "t1", "report number 1", namespace="moved"
        )  # t1 listed by another upstream
        index.compact(kept)
        index.submit(
            [indexed("late", "late report", namespace="ns1")]
        )  # written after the compaction
        assert index.flush() and index.compacted()
        # the compaction's segment, and the late tool's unless it came in time to be written into the new index too
        assert index.segments <= 2 and index.num_docs == index.tool_count == 300
        # the new index is searched in place of the old, whose folder is gone
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g2"]
        assert hits(index, "weather forecast") == ["t0"]
        assert "t7" not in set(hits(index, "report number 7", 300))
        assert hits(index, "late") == ["late"]
        assert "t1" in index._digests["moved"] and "t1" not in index._digests["ns1"]
        # the key of the tool no longer listed is dropped; the moved tool's is kept
        assert tool_key("t7") not in index._by_key and index._by_key[tool_key("t1")] == "t1"
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 300)  # the digest log agrees with the compacted index


def test_a_compaction_left_off_at_close_keeps_the_index_as_it_was(tmp_path, monkeypatch):

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 2)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 10)
    compacting, started, go_on = threading.Event(), threading.Event(), threading.Event()

    def convert(tool_id: str):
        if (
            tool_id == "t5" and compacting.is_set()
        ):  # the compaction waits here until `close` has begun
            started.set()
            go_on.wait(10)
        return indexed(tool_id, f"report number {tool_id}")

    path = str(tmp_path / "closing.index")
    index = si.ToolIndex(path, convert=convert)
    for first in (0, 10):
        index.submit([f"t{i}" for i in range(first, first + 10)])
        assert index.flush()
    assert index.segments == 2
    compacting.set()
    index.compact([f"t{i}" for i in range(20)])
    assert started.wait(10)
    closing = threading.Thread(target=index.close)
    closing.start()
    deadline = time.monotonic() + 10
    while (
        not index._closing and time.monotonic() < deadline
    ):  # close has begun: the compaction leaves off
        time.sleep(0.001)
    go_on.set()
    closing.join(30)
    assert not closing.is_alive()
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 20
        assert reopened.segments == 2  # not written again
    finally:
        reopened.close()


def test_changes_arriving_during_a_compaction_are_searchable_before_it_ends_and_win_over_it(
    tmp_path, monkeypatch
):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    texts = {f"t{i}": f"report number {i}" for i in range(600)}
    seen: dict[str, object] = {}  # what the compaction's converter saw of the change, while it ran
    index: si.ToolIndex

    def convert(tool_id: str):
        if "compacting" in seen and tool_id == "t100":
            # the compaction is under way, and its writing is held up here (as Tantivy's writer holds
            # its caller while it writes a full segment to a busy disk): the catalog changes
            seen["ticket"] = index.submit(
                [indexed("t500", "forecast of the weather"), indexed("new", "fresh ledger")],
                deletes=[("ns", "t501")],
            )
            seen["committed"] = index.flush(10) and not index.compacted(0)
            seen["found"] = hits(index, "weather forecast")
        return indexed(tool_id, texts[tool_id])

    path = str(tmp_path / "interleaved.index")
    index = si.ToolIndex(path, convert=convert)
    try:
        for batch in range(3):  # three commits, three segments
            index.submit([f"t{i}" for i in range(batch * 200, batch * 200 + 200)])
            assert index.flush()
        assert index.segments == 3
        seen["compacting"] = True
        index.compact(list(texts))  # its list still has t500 as it was, and t501
        assert index.compacted(30)
        # the change was committed while the compaction's writing was held up, before its last tool
        assert seen["committed"] and seen["found"] == ["t500"]
        # and the compaction left its tools alone: the changed one, the deleted one, the new one
        assert hits(index, "weather forecast") == ["t500"]
        assert hits(index, "ledger") == ["new"]
        assert "t501" not in set(hits(index, "report number 501", 600))
        assert index.num_docs == index.tool_count == 600
        assert index.segments == 1  # the new index, written in one commit, change included
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 600)  # the digest log agrees with the index


def test_tools_a_compaction_read_as_a_change_listed_them_again_are_written_into_it_once(
    tmp_path, monkeypatch
):
    # the compaction's tools are read on the writer thread, after the catalog listed deleted tools
    # again: the change that lists them, submitted before it was committed, has the last word in
    # the new index and wrote them a second time, leaving their first documents deleted there (a
    # quarter of the new index's documents, in a catalog that lost a third of its tools and got
    # them back), and nothing compacted it again until the next commit
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 1)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    texts = {f"t{i}": f"report number {i}" for i in range(300)}
    seen: dict[str, object] = {}
    index: si.ToolIndex

    def convert(tool_id: str):
        if "compacting" in seen and tool_id == "t100" and "committed" not in seen:
            # t0-t99 written into the new index; the change listing them again is committed now
            index.submit([indexed(f"t{i}", texts[f"t{i}"]) for i in range(50)])
            seen["committed"] = index.flush(10)
        return indexed(tool_id, texts[tool_id])

    index = si.ToolIndex(str(tmp_path / "relisted.index"), convert=convert)
    try:
        index.submit(list(texts))
        assert index.flush()
        index.submit(deletes=[("ns", f"t{i}") for i in range(50)])
        assert index.flush() and index.tool_count == 250
        seen["compacting"] = True
        index.compact(list(texts))  # read as the catalog holds them: all 300
        assert index.compacted(30) and seen["committed"]
        assert index.num_docs == index.tool_count == 300
        assert index.deleted == 0
        assert sorted(hits(index, "report number", 300)) == sorted(texts)  # each once
    finally:
        index.close()


def test_a_change_whose_commit_fails_during_a_compaction_is_tried_again_and_kept_by_it(
    tmp_path, monkeypatch
):

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    disk: FullDisk
    index: si.ToolIndex
    changed = threading.Event()

    def convert(tool_id: str):
        if (
            tool_id == "t100" and index.segments == 3 and disk.tries == 0
        ):  # under way: a change whose commit fails
            disk.failing = True
            index.submit([indexed("t5", "forecast of the weather")])
            changed.set()
        return indexed(tool_id, f"report number {tool_id}")

    path = str(tmp_path / "failing.index")
    index = si.ToolIndex(path, convert=convert)
    index.retry_first = index.retry_last = 0.01
    try:
        for batch in range(3):
            index.submit([f"t{i}" for i in range(batch * 100, batch * 100 + 100)])
            assert index.flush()
        disk = index._writer = FullDisk(index._writer)
        index.compact([f"t{i}" for i in range(300)])  # t5 as it was
        assert changed.wait(10)
        assert (
            not index.flush(0.2) and disk.tries >= 2
        )  # the change is tried again; the compaction waits
        assert not index.compacted(0) and index.segments == 3
        disk.failing = False
        assert index.flush(10.0) and index.compacted(30)
        assert hits(index, "weather forecast") == ["t5"]
        # the new index's segment, and the change's when it came after the compaction's own commit
        assert index.num_docs == index.tool_count == 300 and index.segments in (1, 2)
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)
    try:
        assert (
            reopened.opened_existing and reopened._digests == digests and reopened.num_docs == 300
        )
        assert hits(reopened, "weather forecast") == ["t5"]
    finally:
        reopened.close()


def test_a_compaction_whose_commit_fails_leaves_the_index_as_it_was(tmp_path, monkeypatch, caplog):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    path = str(tmp_path / "full.index")
    index = si.ToolIndex(path)
    new_index = index._new_index
    index._new_index = lambda generation: FailingIndex(new_index(generation))
    try:
        for batch in range(3):
            index.submit(
                [
                    indexed(f"t{i}", f"report number {i}")
                    for i in range(batch * 100, batch * 100 + 100)
                ]
            )
            assert index.flush()
        index.compact([indexed(f"t{i}", f"report number {i}") for i in range(300)])
        assert index.compacted(30)
        assert "compaction left off (No space left on device" in caplog.text
        assert index.segments == 3 and index.num_docs == index.tool_count == 300
        assert sorted(p.name for p in Path(path).iterdir()) == [
            "bridge-search.json",
            "g1",
        ]  # the new one dropped
        index.submit(
            [indexed("t5", "forecast of the weather")]
        )  # and the index searched takes changes as before
        assert index.flush()
        assert hits(index, "weather forecast") == ["t5"]
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 300)


def test_a_reopened_index_drops_the_folder_of_a_compaction_left_off_by_a_crash(tmp_path):
    import bridge.search.index as si

    path = str(tmp_path / "crash.index")
    written_index(path, indexed("a", "alpha report"))
    (Path(path) / "g2").mkdir()  # a compaction's new index, written when the process ended
    (Path(path) / "g2" / "meta.json").write_text("{}")
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 1
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g1"]
    finally:
        reopened.close()


async def test_tools_removed_and_listed_again_score_as_in_a_fresh_index():
    """A deleted tool's document stays in its segment, and BM25 counts it, until Tantivy merges the
    segment: once deleted documents are COMPACT_DELETED of the index, it is compacted, and the same
    requests over the same tools score as in an index that never lost one."""
    from bridge.search.compaction import COMPACT_DELETED

    words = [
        "invoice",
        "customer",
        "refund",
        "payment",
        "report",
        "weather",
        "forecast",
        "city",
        "user",
        "account",
        "file",
        "folder",
        "message",
        "channel",
        "ticket",
        "flight",
    ]
    listing = [
        tool(
            f"tool_{i}",
            description=f"{words[i % 16].title()} the {words[(i * 7) % 16]} of a {words[(i * 3 + 1) % 16]} "
            f"and its {words[(i * 5 + 2) % 16]}.",
        )
        for i in range(48)
    ]
    fresh = await start_env([FakeUpstream(name="ops", tools=listing)])
    churned = await start_env([FakeUpstream(name="ops", tools=listing)])
    try:
        for third in range(2):  # a third of the tools gone from a listing, then back in the next
            churned.catalog.apply_tools("ops", [t for i, t in enumerate(listing) if i % 3 != third])
            assert await churned.search.wait_indexed()
            churned.catalog.apply_tools("ops", listing)
            assert await churned.search.wait_indexed()
        index = churned.search.index
        assert index.compacted() and index.deleted_share < COMPACT_DELETED and index.num_docs == 48
        for request in [
            "refund a customer payment",
            "weather forecast for a city",
            "user account",
            "file in a folder",
            "ticket",
        ]:
            analyzed = analyze_query(request)
            want = fresh.search.index.search(fresh.search.index.query(analyzed), 20)
            got = index.search(index.query(analyzed), 20)
            # the same statistics: the same scores, whatever the segments (float sums aside)
            assert [tool_id for tool_id, _ in got] == [tool_id for tool_id, _ in want], request
            assert [score for _, score in got] == pytest.approx(
                [score for _, score in want], rel=1e-6
            ), request
            assert fresh.names(request) == churned.names(request)
    finally:
        await fresh.close()
        await churned.close()


async def test_a_small_catalog_losing_and_listing_again_its_tools_does_not_write_a_generation_each_time(
    tmp_path, monkeypatch
):
    """Five tools, one gone from a listing and back in the next, 20 times: each removal was 20% of
    the index's documents (COMPACT_DELETED), and wrote a new generation of it; the index now waits
    for COMPACT_DELETED_MIN deleted documents, and never holds more than two generations on disk."""

    monkeypatch.setattr("bridge.search.writer.COMMIT_WINDOW", 0.005)
    listing = [
        tool(f"tool_{i}", description=f"Report the {word} of the ledger.")
        for i, word in enumerate(["invoice", "weather", "ticket", "flight", "folder"])
    ]
    path = tmp_path / "bridge.index"

    def folders() -> list[str]:
        return sorted(p.name for p in path.iterdir() if p.is_dir())

    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=str(path))
    most = 0  # generation folders on disk at once
    try:
        for round_ in range(20):
            env.catalog.apply_tools("ops", [t for i, t in enumerate(listing) if i != round_ % 5])
            assert await env.search.wait_indexed() and env.search.index.compacted()
            most = max(most, len(folders()))
            env.catalog.apply_tools("ops", listing)
            assert await env.search.wait_indexed() and env.search.index.compacted()
            most = max(most, len(folders()))
        generation = env.search.index._generation
        assert (
            generation <= 1 + 40 // 8
        )  # a compaction for every 8 deleted documents (COMPACT_DELETED_MIN) at most, not 20
        assert env.names("flight ledger")[:1] == ["ops__tool_3"]
    finally:
        await env.close()
    assert most <= 2 and folders() == [f"g{generation}"]
    env = await start_env(
        [FakeUpstream(name="ops", tools=listing)], path=str(path)
    )  # a restart reopens it, and leaves no other
    try:
        assert env.search.index.opened_existing and env.search.index.num_docs == 5
        assert folders() == [f"g{generation}"]
    finally:
        await env.close()


async def test_the_index_is_compacted_once_every_upstream_has_listed(tmp_path, monkeypatch):

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    catalog = Catalog(Store())
    names = ["alpha", "beta", "gamma", "delta"]
    for name in names:
        catalog.add_upstream(FakeUpstream(name=name))
    search = ToolSearch(catalog, str(tmp_path / "bridge.index"))
    try:
        for name in names[:3]:  # listed one after another: a commit, and a segment, each
            catalog.apply_tools(
                name,
                [
                    tool(f"{name}_report_{i}", description=f"Report {i} of {name}.")
                    for i in range(40)
                ],
            )
            assert await search.wait_indexed()
        assert (
            search.index.segments == 3 and search.index.compacted() and search.index.segments == 3
        )
        catalog.apply_tools(
            "delta",
            [tool(f"delta_report_{i}", description=f"Report {i} of delta.") for i in range(40)],
        )
        assert await search.wait_indexed() and search.index.compacted()
        assert search.index.segments == 1 and search.index.num_docs == 160
        surface = Surface(SurfaceConfig(name="default"), catalog)
        matches = search.search("a report of gamma", surface=surface, limit=40).matches
        assert len(matches) == 40 and {m.namespace for m in matches} == {"gamma"}
    finally:
        search.close()
