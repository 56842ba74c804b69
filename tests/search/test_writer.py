"""The writer thread of the search index (bridge.search.writer): changes searchable within their
commit window, failed commits tried again, bulk loads kept whole or not at all."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bridge.search.analysis import analyze_query
from tests.fakes import FakeUpstream, tool
from tests.search.support import FullDisk, hits, indexed, start_env


async def test_thousand_changes_are_searchable_within_a_second():
    e = await start_env([FakeUpstream(name="bulk", tools=[tool("seed")])])
    try:
        many = [
            tool(f"op_{i}", description=f"Operation number {i} on widget{i}") for i in range(1000)
        ]
        loop = asyncio.get_running_loop()
        e.catalog.apply_tools("bulk", many)  # the change is announced when this returns
        started = loop.time()
        assert await e.search.wait_indexed(timeout=5.0)
        assert loop.time() - started < 1.0
        assert e.names("widget999") == ["bulk__op_999"]
        e.catalog.apply_tools("bulk", many[:10])
        assert await e.search.wait_indexed(timeout=5.0)
        assert e.search.index.num_docs == 10
    finally:
        await e.close()


def test_a_change_submitted_while_a_long_commit_is_written_is_committed_within_commit_max_of_its_submission():
    """In a burst of changes, those submitted while the writer thread wrote a commit of hundreds
    waited for it, then for a whole COMMIT_MAX of gathering more from when the thread came to
    them: over 1 s after the catalog took them. COMMIT_MAX now counts from a change's submission."""

    import bridge.search.index as si

    written = threading.Event()
    ended: list[float] = []

    def convert(tool_id: str):
        if tool_id == "slow":  # a long commit (hundreds of changes, a busy machine)
            written.set()
            time.sleep(0.8)
            ended.append(time.monotonic())
        return indexed(tool_id, f"report {tool_id}")

    index = si.ToolIndex(convert=convert)
    try:
        index.submit(["slow"])
        assert written.wait(10)
        ticket = index.submit(["waiting"])  # submitted while the long commit is written
        stream_until = time.monotonic() + 2.0
        found = None
        while time.monotonic() < stream_until:  # the burst goes on, a change every 20 ms
            index.submit([f"burst{int(time.monotonic() * 1000)}"])
            if found is None and index.flush(0, ticket=ticket):
                found = time.monotonic()
            time.sleep(0.02)
        assert found is not None and ended
        # its COMMIT_MAX (0.5 s) had passed when the long commit ended: committed at once, with what was queued
        assert found - ended[0] < 0.45, (
            found - ended[0]
        )  # before, it waited a whole COMMIT_MAX more
        assert index.flush() and hits(index, "waiting") == ["waiting"]
    finally:
        index.close()


def test_a_close_commits_what_was_submitted_without_waiting_out_the_commit_window(
    tmp_path, monkeypatch
):
    """An index closed soon after a change (a bridge that stops right after its start) waited
    for the commit window to end, and for each further window while changes kept coming; the
    close ends the window under way, and the change is committed all the same."""
    import bridge.search.index as si
    import bridge.search.writer as writer

    monkeypatch.setattr(writer, "COMMIT_WINDOW", 5.0)
    monkeypatch.setattr(writer, "COMMIT_MAX", 10.0)
    path = str(tmp_path / "closing.index")
    index = si.ToolIndex(path)
    index.submit([indexed("t1", "weather forecast")])
    began = time.monotonic()
    index.close()
    assert time.monotonic() - began < 2.5  # not the 5 s window
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and hits(reopened, "forecast") == ["t1"]
    finally:
        reopened.close()


def test_a_failed_commit_is_tried_again_and_loses_no_change(tmp_path, caplog):
    import bridge.search.index as si

    path = str(tmp_path / "retry.index")
    index = si.ToolIndex(path)
    disk = index._writer = FullDisk(index._writer)
    index.retry_first = index.retry_last = 0.01

    def found():
        return sorted(t for t, _ in index.search(index.query(analyze_query("report")), limit=10))

    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        disk.failing = True
        index.submit([indexed("c", "gamma report")], deletes=[("ns", "b")])
        assert not index.flush(timeout=0.3)  # not searchable while the commits fail
        assert disk.tries >= 2 and index.failing and found() == ["a", "b"]
        index.submit(
            [indexed("d", "delta report")]
        )  # a change arriving meanwhile joins the retries
        disk.failing = False
        assert index.flush(timeout=10.0)
        assert found() == ["a", "c", "d"] and index.tool_count == 3 and not index.failing
        assert "search index commit failed" in caplog.text
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)  # the digest log agrees with the index: reopened as it is
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 3
    finally:
        reopened.close()


def test_a_bulk_load_whose_commit_fails_keeps_nothing_and_can_be_run_again(tmp_path):
    import bridge.search.index as si

    path = str(tmp_path / "bulk.index")
    index = si.ToolIndex(path)
    disk = index._writer = FullDisk(index._writer)

    def found(words: str):
        return sorted(t for t, _ in index.search(index.query(analyze_query(words)), limit=10))

    # `c` listed twice: its second listing replaces its first within the load
    load = [indexed("a", "alpha ledger"), indexed("c", "gamma draft"), indexed("c", "gamma report")]
    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        disk.failing = True
        with pytest.raises(ValueError, match="No space left"):
            index.bulk_load(load)
        # the index and its digests are as before the load: `a` keeps its old text, `c` is unknown
        assert (
            index.tool_count == 2 and found("report") == ["a", "b"] and found("ledger gamma") == []
        )
        disk.failing = False
        assert index.bulk_load(load) == 3  # nothing of the failed load is taken for written
        assert found("report") == ["b", "c"] and found("ledger") == ["a"] and index.tool_count == 3
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 3
    finally:
        reopened.close()
