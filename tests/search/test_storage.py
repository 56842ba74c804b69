"""Storage of the search index (bridge.search.storage): reopened across restarts without being
written again, its digest log, its generations, merged segments searched."""

from __future__ import annotations

import time
from pathlib import Path

from bridge.store import Store
from tests.fakes import FakeUpstream, tool
from tests.search.support import assert_reopens_as, hits, indexed, start_env, tools_a, written_index


async def test_restart_reopens_the_index_without_rewriting_it(tmp_path):
    path = str(tmp_path / "bridge.index")
    db = tmp_path / "bridge.db"

    async def run(tools, upstreams=("api",)):
        store = Store(db)
        ups = [
            FakeUpstream(name=n, tools=tools if n == "api" else [tool("other")]) for n in upstreams
        ]
        e = await start_env(ups, path, store)
        stats = (
            e.search.index.opened_existing,
            e.search.index.documents_written,
            e.search.index.num_docs,
            e.names("repositories"),
        )
        await e.close()
        store.close()
        return stats

    assert await run(tools_a(), ("api", "extra")) == (False, 6, 6, ["api__list_repositories"])
    # same catalog: reopened, nothing written
    assert await run(tools_a(), ("api", "extra")) == (True, 0, 6, ["api__list_repositories"])
    # one tool changed, one gone, an upstream no longer configured: only the difference is written
    changed = [t for t in tools_a() if t.name != "delete_user"]
    changed[1] = tool("list_repositories", description="List the code repositories of a team.")
    opened, written, docs, found = await run(changed)
    assert (opened, written, docs) == (True, 1, 4)
    assert found == ["api__list_repositories"]
    # a damaged format marker: rebuilt from the catalog
    (Path(path) / "bridge-search.json").write_text("{}")
    assert (await run(changed))[:3] == (False, 4, 4)


def test_segments_merged_after_the_last_commit_are_searched_without_another_commit(tmp_path):
    import tantivy

    import bridge.search.index as si

    path = str(tmp_path / "merged.index")
    index = si.ToolIndex(path)
    try:
        # eight commits of small segments: the eighth starts a merge of all eight in the background
        for batch in range(8):
            index.submit(
                [indexed(f"t{batch}-{i}", f"report {batch} number {i}") for i in range(2_000)]
            )
            assert index.flush(60.0)
        assert index.num_docs == 16_000

        def merged(
            segments, seconds: float
        ) -> int:  # the segment count, once under 8 or after `seconds`
            deadline = time.monotonic() + seconds
            while (count := segments()) >= 8 and time.monotonic() < deadline:
                time.sleep(0.02)
            return count

        on_disk = tantivy.Index.open(
            str(Path(path) / "g1")
        )  # a reader of what the index holds now, merges included
        done = merged(lambda: (on_disk.reload(), on_disk.searcher().num_segments)[1], 60)
        assert done < 8
        assert merged(lambda: index.segments, 10) == done
        assert index.num_docs == 16_000
    finally:
        index.close()


def test_a_torn_or_unreadable_digest_log_empties_the_index_which_is_written_again(tmp_path, caplog):
    # a crash or a full disk in the middle of an append leaves a torn last line: every command
    # once stopped on it (ValueError: invalid literal for int()), at every restart
    import bridge.search.index as si

    for damage in (b"abc\tns\t", b"abc\tns\tnot-hex\n", b"\xff\xfe\x00garbage\n"):
        path = str(tmp_path / f"torn{len(damage)}.index")
        written_index(path, indexed("a", "alpha report"), indexed("b", "beta report"))
        log_path = next(Path(path).glob("g*/digests.log"))
        with open(log_path, "ab") as fh:
            fh.write(damage)
        reopened = si.ToolIndex(path)
        try:
            assert not reopened.opened_existing and reopened.num_docs == reopened.tool_count == 0, (
                damage
            )
        finally:
            reopened.close()
    assert caplog.text.count("unreadable line") == 3


def test_the_digest_log_of_a_running_index_is_written_anew_once_it_outgrows_its_tools(
    tmp_path, monkeypatch
):
    # a line a change, for the process's whole life: a bridge whose tools kept changing grew it
    # without end (it was rewritten only at the next start)
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.storage.LOG_SLACK", 10)
    path = str(tmp_path / "log.index")
    index = si.ToolIndex(path)
    try:
        for round_ in range(12):  # 3 tools, changed 12 times: 36 lines without the rewrite
            index.submit([indexed(t, f"{t} report version {round_}") for t in ("a", "b", "c")])
            assert index.flush()
        log_path = next(Path(path).glob("g*/digests.log"))
        assert len(log_path.read_text().splitlines()) <= 2 * 3 + 10 + 3
        assert hits(index, "version 11", limit=3) and index.tool_count == 3
        digests = {ns: dict(tools) for ns, tools in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 3)  # the log written anew agrees with the index


def test_an_index_whose_current_generation_is_gone_is_rebuilt_saying_so(tmp_path, caplog):
    import bridge.search.index as si

    path = str(tmp_path / "gone.index")
    written_index(path, indexed("a", "alpha report"))
    (Path(path) / "g1" / "meta.json").unlink()
    reopened = si.ToolIndex(path)
    try:
        assert not reopened.opened_existing and reopened.num_docs == 0
    finally:
        reopened.close()
    assert "names no index it holds (generation 1); rebuilding it" in caplog.text
