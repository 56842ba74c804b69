"""Queries of the search index (bridge.search.query): typing errors widened, joined words, hits
read by their keys, ties in one order, term weights."""

from __future__ import annotations

from bridge.search.analysis import analyze_query
from bridge.search.document import tool_key
from tests.search.support import indexed


async def test_a_misspelled_word_finds_the_word_one_edit_away(env):
    # letters swapped, dropped, added: no tool has these words, so their neighbours are matched
    assert env.names("refnud the paymnet")[0] == "billing__refund"
    assert env.names("list the reposiotries")[0] == "api__list_repositories"
    assert env.names("email an invoicce")[0] == "api__send_invoice"
    # a word under 6 letters, or one with digits (an id, a code), is not widened, though one edit
    # away from 'refund'; nor is a word of a longer request, whose other words find its tools
    assert env.names("refnd") == []
    assert env.names("refund1") == []
    assert "billing__refund" not in env.names("refnud paymnet customer order today quickly")


def test_a_search_of_no_place_answers_nothing_rather_than_failing():
    import bridge.search.index as si
    from bridge.search.cover import part_scores

    index = si.ToolIndex()
    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        query = index.query(analyze_query("report"))
        assert index.search(query, limit=0) == [] and index.lookups(["report"], limit=0) == []
        assert part_scores(index, [analyze_query("report")], []) == [{}]  # no candidates, no scores
        assert [t for t, _ in index.search(query, limit=1)] in (["a"], ["b"])
    finally:
        index.close()


def test_hits_are_read_by_their_keys_and_a_key_two_ids_share_reads_the_stored_id(
    tmp_path, monkeypatch
):
    import bridge.search.index as si

    path = str(tmp_path / "keys.index")
    index = si.ToolIndex(path)
    try:
        index.bulk_load(
            [
                indexed("a", "alpha report"),
                indexed("b", "beta report"),
                indexed("c", "gamma report"),
            ]
        )
        assert sorted(
            t for t, _ in index.search(index.query(analyze_query("report")), limit=10)
        ) == ["a", "b", "c"]
        assert index._by_key == {tool_key(t): t for t in "abc"}
        index.submit(deletes=[("ns", "c")])
        assert index.flush() and tool_key("c") not in index._by_key
    finally:
        index.close()
    reopened = si.ToolIndex(path)  # the keys of a reopened index's tools are known again
    try:
        assert reopened.opened_existing and reopened._by_key == {tool_key(t): t for t in "ab"}
        assert [t for t, _ in reopened.search(reopened.query(analyze_query("beta")), limit=1)] == [
            "b"
        ]
    finally:
        reopened.close()
    # every id one key: each hit reads its stored id
    for module in ("document", "storage"):  # a document's key, and the keys the index maps
        monkeypatch.setattr(f"bridge.search.{module}.tool_key", lambda tool_id: 7)
    shared = si.ToolIndex(None)
    try:
        shared.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        assert shared._by_key == {7: None}
        assert [t for t, _ in shared.search(shared.query(analyze_query("beta")), limit=5)] == ["b"]
        assert sorted(
            t for t, _ in shared.search(shared.query(analyze_query("report")), limit=5)
        ) == ["a", "b"]
    finally:
        shared.close()


def test_tools_scoring_alike_stand_in_one_order_whatever_order_they_came_in():
    """Forty tools tie for a word: a search answers the same ones, in the same order (by their
    keys), whether they came into the index in one order, the other, or in two segments, and its
    pages follow on from one another; the order of arrival would cut the tie otherwise. (Forty:
    a tie running on past the TIE_MARGIN hits read after those asked for is cut among those.)"""
    import bridge.search.index as si

    tools = [
        indexed(f"t{i:02}", f"report {chr(97 + i // 26)}{chr(97 + i % 26)}") for i in range(40)
    ]
    by_key = [tool.tool_id for tool in sorted(tools, key=lambda tool: tool.key)]
    for batches in ([tools], [tools[::-1]], [tools[1::2], tools[::2]]):
        index = si.ToolIndex()
        try:
            for batch in batches:
                index.submit(batch)
                assert index.flush()
            query = index.query(analyze_query("report"))
            first = index.search(query, limit=10)
            assert len({score for _, score in first}) == 1  # a tie
            assert [t for t, _ in first] == by_key[:10]
            assert [t for t, _ in index.search(query, limit=10, offset=10)] == by_key[10:20]
        finally:
            index.close()


def test_term_weights_follow_a_change_of_a_tools_words():
    """The weights of words (how few tools have them) were kept until the count of tools changed:
    a tool changing its words, which keeps the count, left them as they were."""
    import math

    import bridge.search.index as si

    index = si.ToolIndex()
    try:
        index.submit([indexed("a", "alpha beta"), indexed("b", "alpha gamma")])
        assert index.flush()
        assert index.term_weights(["beta"]) == {"beta": math.log(1 + 2 / 2)}
        index.submit([indexed("b", "beta delta")])  # two tools still, and beta in both
        assert index.flush()
        assert index.term_weights(["beta", "delta"]) == {
            "beta": math.log(1 + 2 / 3),
            "delta": math.log(1 + 2 / 2),
        }
    finally:
        index.close()


def test_a_joined_word_too_common_in_a_large_catalog_is_not_matched(monkeypatch):
    import bridge.search.index as si

    index = si.ToolIndex(None)
    try:
        index.bulk_load(
            [
                indexed("a", "zipcode of city"),
                indexed("b", "zipcode by address"),
                indexed("c", "zipcode of place"),
                indexed("d", "weather of city"),
            ]
        )
        query = analyze_query("zip code weather city")
        assert "zipcod" in query.joined
        assert {t for t, _ in index.search(index.query(query), limit=10)} == {"a", "b", "c", "d"}
        # a large catalog: the query's words, and the joined word, in more than 30% of it are left out
        monkeypatch.setattr("bridge.search.query.COMMON_MIN_DOCS", 1)
        monkeypatch.setattr("bridge.search.query.COMMON_SHARE", 0.3)
        monkeypatch.setattr("bridge.search.query.MIN_QUERY_TERMS", 1)
        assert {t for t, _ in index.search(index.query(query), limit=10)} == {"d"}
    finally:
        index.close()
