"""The optional semantic stage of tool search: tool embeddings computed in the background and
kept in step with the catalog, the vector file beside the index reused across restarts, the
reranking of keyword candidates, and (when the `semantic` extra is installed) the bundled model
itself, loaded and run with the network unreachable."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bridge.catalog import Catalog
from bridge.config import BridgeConfig, SurfaceConfig
from bridge.search import embedding as embedding_module
from bridge.search.encoder import MiniLMEncoder, model_location
from bridge.search.onnxencoder import OnnxMiniLMEncoder, onnx_model_location
from bridge.search.semantic import SemanticStage, choose_encoder
from bridge.search.service import ToolSearch
from bridge.search.static import StaticEncoder, load_static
from bridge.search.tooltext import tool_text
from bridge.store import Store
from bridge.surface import Surface
from tests.conftest import ROOT
from tests.fakes import FakeUpstream, tool
from tests.search.support import WordsEncoder, one_upstream, relisted, started, three_tools


async def test_tools_are_embedded_once_and_follow_catalog_changes():
    enc = WordsEncoder()
    catalog, search, stage = await started(
        [FakeUpstream(name="a", tools=three_tools())], encoder=enc
    )
    try:
        assert stage.embedded == 3 and stage.missing == 0
        # an identical re-listing embeds nothing; a changed description embeds that tool alone
        catalog.apply_tools("a", three_tools())
        changed = three_tools()
        changed[2] = tool("forecast", description="Weather forecast for a town.")
        catalog.apply_tools("a", changed)
        assert await asyncio.to_thread(stage.flush, 10.0)
        assert stage.embedded == 4 and "Weather forecast for a town." in enc.encoded[-1]
        # a removed tool is forgotten; a whole upstream going empties it
        catalog.apply_tools("a", changed[:1])
        assert await asyncio.to_thread(stage.flush, 10.0)
        assert len(stage._keys) == 1
        catalog.apply_tools("a", [])
        assert await asyncio.to_thread(stage.flush, 10.0)
        assert stage._keys == {}
    finally:
        search.close()
        await catalog.close()


async def test_the_keyword_index_takes_in_a_change_before_the_stage_embeds_it():
    """The stage waits while the keyword index is behind (more than one change not yet
    committed): both hold the interpreter's lock, and what makes a tool searchable is the index."""
    catalog = one_upstream(three_tools())
    await catalog.start()
    search = ToolSearch(catalog, semantic="static")
    stage = search.semantic
    gate = threading.Event()
    try:
        assert stage.after is not None
        assert await search.wait_indexed() and await asyncio.to_thread(stage.flush, 10.0)
        # the index's writer held by a change of its own: one change not committed is let be
        search.index.submit(prepare=lambda: gate.wait(10.0) and None)
        stage.submit(list(catalog.slots["a"].tools.values()))
        assert await asyncio.to_thread(stage.flush, 10.0)
        # a second one (the catalog's, waiting behind it) is not
        catalog.apply_tools(
            "a", [*three_tools(), tool("tide_table", description="Tide times of a harbour.")]
        )
        assert not await asyncio.to_thread(
            stage.flush, 0.5
        )  # not embedded while the index is behind
        assert len(stage._keys) == 3  # the new tool not even taken in
        gate.set()
        assert await search.wait_indexed() and await asyncio.to_thread(stage.flush, 10.0)
        assert stage.missing == 0 and len(stage._keys) == 4
    finally:
        gate.set()
        search.close()
        await catalog.close()


def test_waiting_texts_stay_declarations_until_their_turn():
    """Of many changes queued, the stage takes in only so many texts ahead of its embeddings:
    the rest stay queued as declarations (texts of 100,000 tools held at once were 100 MB)."""
    held, release = threading.Event(), threading.Event()

    class Held(WordsEncoder):
        def encode(self, texts, max_tokens=128):
            held.set()
            release.wait(10.0)
            return super().encode(texts, max_tokens)

    catalog = one_upstream([])
    catalog.apply_tools(
        "a", [tool(f"t{i}", description=f"Tool number {i} of many.") for i in range(3000)]
    )
    decls = list(catalog.slots["a"].tools.values())
    stage = SemanticStage(Held())
    try:
        for start in range(0, 3000, 500):
            stage.submit(decls[start : start + 500])
        assert held.wait(10.0)  # the first batch is being embedded
        assert stage._todo_len <= embedding_module._AHEAD + 500 < 3000
        release.set()
        assert stage.flush(10.0) and stage.missing == 0 and stage.embedded == 3000
    finally:
        release.set()
        stage.close()


def test_tools_a_search_embedded_are_kept_for_the_next_and_handed_to_the_stage():
    """A cheap encoder embeds the candidates still waiting for the stage's thread as a search
    runs: the next search reuses those vectors, and the thread stores them rather than
    embedding the tools again. A changed tool (another declaration) is embedded again."""

    class Cheap(WordsEncoder):
        cheap = True

    enc, gate = Cheap(), threading.Event()
    catalog = one_upstream([])
    catalog.apply_tools("a", three_tools())
    decls = list(catalog.slots["a"].tools.values())
    stage = SemanticStage(enc, after=gate.wait)  # the thread held before it takes anything in
    try:
        stage.submit(decls)
        first = stage.vectors(decls)
        assert first is not None and len(enc.encoded) == 3
        again = stage.vectors(decls)
        assert again is not None and np.array_equal(again, first) and len(enc.encoded) == 3
        changed = decls[2].model_copy(update={"description": "Weather forecast for a town."})
        assert stage.vectors([changed]) is not None and len(enc.encoded) == 4
        gate.set()
        assert stage.flush(10.0) and stage.missing == 0
        # the thread embedded only the tool whose kept vector is of another declaration now
        assert stage.embedded == 1 and len(enc.encoded) == 5 and enc.encoded[-1] == enc.encoded[2]
        stored = stage.vectors(decls)
        assert stored is not None and np.array_equal(stored, first)
    finally:
        gate.set()
        stage.close()
    # every waiting tool embedded by a search: the thread embeds none, and `flush` still returns
    enc, gate = Cheap(), threading.Event()
    whole = SemanticStage(enc, after=gate.wait)
    try:
        whole.submit(decls)
        assert whole.vectors(decls) is not None
        gate.set()
        assert (
            whole.flush(10.0)
            and whole.missing == 0
            and whole.embedded == 0
            and len(enc.encoded) == 3
        )
    finally:
        gate.set()
        whole.close()


async def test_the_stage_steps_aside_while_a_search_runs():
    """The stage's thread embeds nothing while a search runs (both hold the interpreter's lock),
    for at most `Foreground.most` seconds per batch."""
    catalog = one_upstream(three_tools())
    await catalog.start()
    search = ToolSearch(catalog, semantic="static")
    stage = search.semantic
    try:
        assert (
            stage is not None
            and await search.wait_indexed()
            and await asyncio.to_thread(stage.flush, 10.0)
        )
        search.foreground.most = 10.0
        with search.foreground.running():
            catalog.apply_tools(
                "a", [*three_tools(), tool("tide_table", description="Tide times of a harbour.")]
            )
            assert await search.wait_indexed()  # the keyword index does not wait
            assert not await asyncio.to_thread(stage.flush, 0.3)
        assert (
            await asyncio.to_thread(stage.flush, 10.0)
            and stage.missing == 0
            and len(stage._keys) == 4
        )
    finally:
        search.close()
        await catalog.close()


async def test_vectors_beside_the_index_are_reused_after_a_restart(tmp_path):
    path = str(tmp_path / "bridge.index")
    catalog, search, stage = await started([FakeUpstream(name="a", tools=three_tools())], path)
    assert stage.embedded == 3
    search.close()
    await catalog.close()
    assert Path(path + ".vectors").stat().st_size > 3 * (16 + 2 * 64)

    enc = WordsEncoder()
    catalog, search, stage = await started([FakeUpstream(name="a", tools=three_tools())], path, enc)
    try:
        assert stage.embedded == 0 and enc.encoded == []  # every vector came from the file
        surface = Surface(SurfaceConfig(name="default"), catalog)
        assert search.search("weather for a city", surface=surface).matches[0].name == "a__forecast"
    finally:
        search.close()
        await catalog.close()


async def test_a_vector_file_with_damaged_records_is_computed_again(tmp_path, caplog):
    # a flipped byte in a stored vector gave null scores, impossible cosines and wrong rankings,
    # silently and at every restart (vectors are keyed by their text, never computed again)
    path = str(tmp_path / "bridge.index")
    catalog, search, stage = await started([FakeUpstream(name="a", tools=three_tools())], path)
    search.close()
    await catalog.close()
    file = Path(path + ".vectors")
    raw = bytearray(file.read_bytes())
    raw[-40:-38] = b"\xff\x7f"  # a float16 NaN in the last record's values
    file.write_bytes(bytes(raw))

    enc = WordsEncoder()
    catalog, search, stage = await started([FakeUpstream(name="a", tools=three_tools())], path, enc)
    try:
        assert stage.embedded == 3 and "1 damaged record(s)" in caplog.text  # all computed again
        surface = Surface(SurfaceConfig(name="default"), catalog)
        best = search.search("weather for a city", surface=surface).matches[0]
        assert best.name == "a__forecast" and best.score is not None
    finally:
        search.close()
        await catalog.close()


def listed_twice(tmp_path: Path) -> tuple[str, Catalog, SemanticStage]:
    """The path of a vector file in `tmp_path`, a catalog of one upstream of 1,200 tools, and a
    stage keeping its vectors in that file, which has embedded two listings of every tool."""
    path = str(tmp_path / "x.vectors")
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="a"))
    stage = SemanticStage(WordsEncoder(), path)
    try:
        for number in (1, 2):
            stage.submit(relisted(catalog, number))
            assert stage.flush(30.0)
    except BaseException:
        stage.close()
        raise
    return path, catalog, stage


def test_the_vector_file_is_compacted_once_most_of_its_rows_belong_to_no_tool(tmp_path):
    # rows of texts no tool has any more (tools changed or removed) are dropped from memory and
    # from the file once they outnumber the live rows by more than 1,000 over half
    path, catalog, stage = listed_twice(tmp_path)
    try:
        assert stage._count == 2400  # 1,200 live rows and 1,200 dropped: not yet
        stage.submit(relisted(catalog, 3))
        assert stage.flush(30.0)
        assert stage._count == 1200  # 2,400 dropped: compacted to the live rows
        assert sorted(stage._rows.values()) == list(range(1200))
        decls = list(catalog.slots["a"].tools.values())
        assert np.allclose(
            stage.vectors(decls), WordsEncoder().encode([tool_text(d) for d in decls]), atol=1e-2
        )
    finally:
        stage.close()
    reopened = SemanticStage(WordsEncoder(), path)
    try:
        assert reopened._count == 1200  # the file was rewritten with the live rows alone
    finally:
        reopened.close()
    removed = SemanticStage(WordsEncoder(), path)
    try:
        removed.submit(decls)
        assert removed.flush(30.0) and removed.embedded == 0
        removed.submit(deletes=[d.tool_id for d in decls[:1101]])
        removed.submit(
            [decls[0].model_copy(update={"description": "a new text"})]
        )  # embeds: then looks again
        assert removed.flush(30.0)
        assert (
            removed._count == 1201
        )  # opened on a file: its rows are kept until the stage is settled
        removed.settle()
        assert removed.flush(30.0)
        assert removed._count == 100  # 1,101 of 1,201 rows no tool's: compacted
    finally:
        removed.close()


async def test_a_restart_keeps_the_vectors_of_upstreams_not_listed_yet(tmp_path):
    # after a restart the catalog fills as upstreams list again: a vector whose tool is not
    # listed yet is kept (not dropped by a compaction, then computed again) until none is pending
    path = str(tmp_path / "bridge.index")

    def edition(catalog, name: str, count: int, edition: int = 1) -> list:
        return [
            tool(f"{name}{i}", description=f"Tool {i} of {name} edition {edition}.")
            for i in range(count)
        ]

    def bridge():
        catalog = Catalog(Store())
        catalog.add_upstream(FakeUpstream(name="small"))
        catalog.add_upstream(FakeUpstream(name="large"))
        return catalog, ToolSearch(catalog, path, semantic="static")

    catalog, search = bridge()
    try:
        catalog.apply_tools("small", edition(catalog, "small", 100))
        catalog.apply_tools("large", edition(catalog, "large", 1500))
        assert (
            await search.wait_indexed()
            and search.semantic is not None
            and search.semantic.flush(30.0)
        )
        assert search.semantic.embedded == 1600
    finally:
        search.close()
    catalog, search = bridge()
    stage = search.semantic
    try:
        assert stage is not None and stage._count == 1600
        catalog.apply_tools(
            "small", edition(catalog, "small", 100, edition=2)
        )  # 100 new texts embedded, then a look
        assert stage.flush(30.0) and stage._count == 1700  # the large upstream's rows are kept
        catalog.apply_tools("large", edition(catalog, "large", 1500))
        assert stage.flush(30.0)
        assert stage.embedded == 100  # the large upstream's tools were not embedded again
        catalog.apply_tools("large", [])
        catalog.apply_tools("small", edition(catalog, "small", 100, edition=3))
        assert stage.flush(30.0)
        assert stage._count == 100  # settled: the rows of no tool are compacted away
    finally:
        search.close()


def test_the_stage_copies_its_vectors_without_holding_its_lock():
    """The searches and the catalog's listener take the stage's lock: the vectors are copied
    before it is taken, when they grow (256 MB over a million tools, for which a change of the
    catalog waited 0.5 s) and when they are compacted to the live rows."""
    catalog = one_upstream([])

    held_while_copying: list[bool] = []

    class Watched(np.ndarray):
        def __getitem__(self, item):
            if not isinstance(item, int):  # a copy reading the rows it keeps (not one row stored)
                held_while_copying.append(stage._lock._is_owned())
            return super().__getitem__(item)

    stage = SemanticStage(WordsEncoder())
    stage._lock = (
        threading.RLock()
    )  # (nothing submitted yet: the thread holds neither) one that knows its owner
    stage._cond = threading.Condition(stage._lock)
    try:
        stage._vectors = stage._vectors.view(Watched)
        stage.submit(relisted(catalog, 1))
        assert stage.flush(30.0) and stage._count == 1200
        assert held_while_copying and not any(held_while_copying)  # the first growth's copy
        stage.submit(relisted(catalog, 2))
        assert stage.flush(30.0) and stage._count == 2400
        stage._vectors, held_while_copying[:] = stage._vectors.view(Watched), []
        stage.submit(relisted(catalog, 3))
        assert stage.flush(30.0) and stage._count == 1200  # compacted to the live rows
        assert held_while_copying and not any(held_while_copying)
        decls = list(catalog.slots["a"].tools.values())
        assert np.allclose(
            stage.vectors(decls), WordsEncoder().encode([tool_text(d) for d in decls]), atol=1e-2
        )
    finally:
        stage.close()


def test_a_torn_record_or_another_model_is_recovered(tmp_path):
    path = str(tmp_path / "x.vectors")
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="a", tools=three_tools()))
    catalog.apply_tools("a", three_tools())
    decls = list(catalog.slots["a"].tools.values())
    stage = SemanticStage(WordsEncoder(), path)
    stage.submit(decls)
    assert stage.flush(10.0)
    stage.close()
    with open(path, "ab") as fh:
        fh.write(b"\x01" * 20)  # a crash in the middle of an append
    stage = SemanticStage(WordsEncoder(), path)
    assert stage._count == 3
    stage.close()

    class OtherModel(WordsEncoder):
        name = "another-model"

    enc = OtherModel()
    stage = SemanticStage(enc, path)
    stage.submit(decls)
    assert stage.flush(10.0)
    assert stage.embedded == 3  # vectors of another model are never mixed in
    stage.close()


async def test_rerank_mixes_keyword_and_cosine_and_waits_for_embeddings():
    catalog, search, stage = await started([FakeUpstream(name="a", tools=three_tools())])
    surface = Surface(SurfaceConfig(name="default"), catalog)
    try:
        result = search.search("send a text message by email", surface=surface)
        assert result.matches[0].name == "a__send_mail"
        scores = [m.score for m in result.matches]
        assert scores == sorted(scores, reverse=True) and all(s <= 1.0 for s in scores)
        decls = {d.name: d for d in catalog.slots["a"].tools.values()}
        ranked = [(decls["a__read_file"], 5.0), (decls["a__send_mail"], 4.0)]
        order = stage.rerank("email message", ranked)
        assert order is not None and order[0][0].name == "a__send_mail"
        # a candidate without its embedding yet: keyword order is kept
        unknown = decls["a__forecast"].model_copy(update={"tool_id": "not-embedded"})
        assert stage.rerank("email message", [*ranked, (unknown, 1.0)]) is None
        # select: is not reranked
        assert search.search("select:a__forecast", surface=surface).matches[0].score == 1.0
    finally:
        search.close()
        await catalog.close()


def test_tool_text_has_name_words_description_and_parameters():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="a"))
    catalog.apply_tools(
        "a",
        [
            tool(
                "getUserById",
                description="Fetch one user.",
                props={"userId": {"type": "string", "description": "the user's id"}},
            )
        ],
    )
    decl = next(iter(catalog.slots["a"].tools.values()))
    assert tool_text(decl) == "get user by id: Fetch one user. Parameters: user id (the user's id)"


def test_config_switch():
    assert BridgeConfig().search.semantic == "auto"
    assert BridgeConfig.model_validate({"search": {"semantic": False}}).search.semantic == "off"
    assert BridgeConfig.model_validate({"search": {"semantic": True}}).search.semantic == "auto"
    assert (
        BridgeConfig.model_validate({"search": {"semantic": "static"}}).search.semantic == "static"
    )
    with pytest.raises(ValidationError, match="'auto', 'model', 'static' or 'off'"):
        BridgeConfig.model_validate({"search": {"semantic": "fast"}})
    catalog = Catalog(Store())
    for off in (False, "off"):
        search = ToolSearch(catalog, semantic=off)
        assert search.semantic is None
        search.close()
    search = ToolSearch(catalog, semantic="static")
    assert search.semantic is not None and isinstance(search.semantic.encoder, StaticEncoder)
    search.close()
    best = (
        OnnxMiniLMEncoder
        if onnx_model_location()
        else MiniLMEncoder
        if model_location()
        else StaticEncoder
    )
    assert isinstance(choose_encoder("auto"), best)


class HeldEncoder(WordsEncoder):
    """WordsEncoder that embeds nothing until `release` is set: a slow full model."""

    name = "test-held"

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def encode(self, texts, max_tokens=128):
        self.release.wait(30)
        return super().encode(texts, max_tokens)


async def test_the_static_table_reranks_until_the_full_model_has_embedded():
    """`auto` with the full model installed: a search whose candidates the model has not embedded
    yet is reranked by the static table (not left in keyword order)."""
    catalog = one_upstream(
        [
            tool("drop_user", description="Remove a user account."),
            tool("rmdir", description="Remove an empty directory from the file system."),
        ]
    )
    await catalog.start()
    search = ToolSearch(catalog, semantic=False)
    held = HeldEncoder()
    search.semantic, search.fallback = SemanticStage(held), SemanticStage(load_static())
    for stage in search._stages:
        stage.submit(list(catalog.slots["a"].tools.values()))
    surface = Surface(SurfaceConfig(name="default"), catalog)
    try:
        assert await search.wait_indexed()
        query = "remove the old subfolder"  # (*folder* would find *directory* by keywords too: related words)
        before = search.search(query, surface=surface).matches
        assert before[0].name == "a__rmdir" and not held.encoded  # by the static table
        held.release.set()
        assert await asyncio.to_thread(search.semantic.flush, 10.0)
        after = search.search(query, surface=surface).matches
        assert held.encoded and [m.score for m in after] != [
            m.score for m in before
        ]  # by the model now
    finally:
        held.release.set()
        search.close()
        await catalog.close()


def test_a_long_query_leans_on_keywords_with_the_static_table(static):
    """A sum of many tokens' vectors says less: the cosine's whole weight up to 12 words, 0.3 up
    to 25, none past that; an encoder without bounds (the full model's case) keeps it whole."""
    stage = SemanticStage(static)
    try:
        assert stage.weight_for("remove the old folder") == pytest.approx(0.7)
        assert stage.weight_for(" ".join(["word"] * 12)) == pytest.approx(0.7)
        assert stage.weight_for(" ".join(["word"] * 13)) == pytest.approx(0.3)
        assert stage.weight_for(" ".join(["word"] * 25)) == pytest.approx(0.3)
        assert stage.weight_for(" ".join(["word"] * 26)) == 0.0
    finally:
        stage.close()
    words = SemanticStage(WordsEncoder())
    try:
        assert words.weight_for(" ".join(["word"] * 60)) == pytest.approx(0.7)
    finally:
        words.close()


async def test_a_long_request_keeps_the_keyword_order_with_the_static_table():
    """Past 25 words the static table reranks nothing: the request's keywords order it, as with
    `semantic: off`; a short request is still reranked by meaning."""
    catalog = one_upstream(
        [
            tool("drop_user", description="Remove a user account."),
            tool("rmdir", description="Remove an empty directory from the file system."),
            tool("send_mail", description="Send an email message."),
        ]
    )
    await catalog.start()
    surface = Surface(SurfaceConfig(name="default"), catalog)
    keyword = ToolSearch(catalog, semantic="off")
    search = ToolSearch(catalog, semantic="static")
    try:
        assert await keyword.wait_indexed() and await search.wait_indexed()
        short = "remove the old subfolder"
        assert search.search(short, surface=surface).matches[0].name == "a__rmdir"
        long = (
            "The laptop has been filling up for months with things from projects that ended long "
            "ago and nobody opens them any more, so today I would like you to remove the old "
            "subfolder"
        )
        assert len(long.split()) > 25
        names = [m.name for m in search.search(long, surface=surface).matches]
        assert names == [m.name for m in keyword.search(long, surface=surface).matches]
        assert names[0] == "a__drop_user"
    finally:
        search.close()
        keyword.close()
        await catalog.close()


async def test_static_stage_reranks_by_meaning_at_once(tmp_path):
    """With the shipped table (the default without the `semantic` extra) the meaning decides
    among keyword candidates, and a search right after a change is already reranked: the
    candidates waiting for their vectors are embedded while it runs."""
    listed = [
        tool("drop_user", description="Remove a user account."),
        tool("rmdir", description="Remove an empty directory from the file system."),
        tool("send_mail", description="Send an email message."),
    ]
    catalog = one_upstream(listed)
    await catalog.start()
    surface = Surface(SurfaceConfig(name="default"), catalog)
    keyword = ToolSearch(catalog, semantic="off")
    search = ToolSearch(catalog, str(tmp_path / "bridge.index"), semantic="static")
    try:
        assert await keyword.wait_indexed() and await search.wait_indexed()
        query = "remove the old subfolder"  # (*folder* would find *directory* by keywords too: related words)
        assert keyword.search(query, surface=surface).matches[0].name == "a__drop_user"
        assert search.search(query, surface=surface).matches[0].name == "a__rmdir"
        # a tool added now: searchable and reranked before the stage's thread embeds it
        stage = search.semantic
        assert stage is not None
        catalog.apply_tools(
            "a", [*listed, tool("delete_folder", description="Delete a folder and its contents.")]
        )
        assert await search.wait_indexed()
        ranked = [
            (d, 1.0)
            for d in catalog.slots["a"].tools.values()
            if d.native_name in ("delete_folder", "send_mail")
        ]
        unknown = ranked[0][0].model_copy(update={"tool_id": "never-submitted"})
        order = stage.rerank("erase a folder", [*ranked, (unknown, 1.0)])
        assert order is not None and order[0][0].native_name == "delete_folder"
    finally:
        search.close()
        keyword.close()
        await catalog.close()


async def test_searches_with_long_words_keep_none_of_them(static):
    """A word longer than any word piece (a hash or a blob pasted into a request) reads as one
    unknown token and is not kept: every search's own long word stayed in the tokenizer's cache
    of 65,536 words, up to 8 KB each (half a gigabyte for a server answering such searches)."""
    catalog = one_upstream(three_tools())
    await catalog.start()
    surface = Surface(SurfaceConfig(name="default"), catalog)
    search = ToolSearch(catalog, semantic="static")
    try:
        assert await search.wait_indexed()
        search.search("read the file", surface=surface)
        kept = static.tokenizer._word.cache_info().currsize
        for n in range(200):
            found = search.search(f"read the file {n:03d}{'f' * 4000}", surface=surface)
            assert found.matches[0].name == "a__read_file"
        assert static.tokenizer._word.cache_info().currsize == kept
        unknown = static.tokenizer.vocab["[UNK]"]
        assert static.tokenizer.ids("read " + "f" * 4000, 128) == [101, 3191, unknown, 102]
    finally:
        search.close()
        await catalog.close()


VECTORS_ON_A_FULL_DISK = """
import logging, os, resource, sys
from bridge.catalog import Catalog
from bridge.search.semantic import SemanticStage
from bridge.store import Store
from tests.fakes import FakeUpstream
from tests.search.support import WordsEncoder, relisted

logging.basicConfig(level=logging.WARNING, format="%(message)s")
path = sys.argv[1]
catalog = Catalog(Store())
catalog.add_upstream(FakeUpstream(name="a"))
stage = SemanticStage(WordsEncoder(), path)
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.RLIM_INFINITY))  # 1,200 records of 144 bytes pass it
stage.submit(relisted(catalog, 1))
assert stage.flush(30.0) and stage._count == 1200  # every vector, in memory
stage.close()
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(os.path.getsize(path))
reopened = SemanticStage(WordsEncoder(), path)
print(reopened._count)
reopened.close()
"""


def test_vectors_a_full_disk_refuses_are_warned_once_and_leave_the_file_of_whole_records(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "x.vectors"
    done = subprocess.run(
        [sys.executable, "-c", VECTORS_ON_A_FULL_DISK, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    size, reopened = (int(line) for line in done.stdout.split())
    header = size - reopened * (16 + 2 * WordsEncoder.dim)
    assert (
        size <= 50_000 and 0 < header < 100 and 0 < reopened < 1200
    )  # the records written whole, read back at their place
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1 and "semantic vectors cannot be written to" in warnings[0], (
        done.stderr
    )


def test_a_compaction_the_disk_refuses_keeps_the_file_as_it_was_and_the_stage_embedding(
    tmp_path, caplog
):
    path, catalog, stage = listed_twice(tmp_path)
    try:
        (
            tmp_path / "x.vectors.tmp"
        ).mkdir()  # where the compacted file is written: refused, as a full disk would
        stage.submit(relisted(catalog, 3))
        assert stage.flush(30.0)
        assert "cannot be compacted" in caplog.text
        stage.submit(
            relisted(catalog, 4)
        )  # still embedded (the error ended the stage's thread: flush timed out)
        assert stage.flush(30.0) and stage.missing == 0
    finally:
        stage.close()
    encoder = WordsEncoder()
    reopened = SemanticStage(encoder, path)
    try:
        assert reopened._count == 4800  # every record appended, uncompacted, each read at its place
        decls = list(catalog.slots["a"].tools.values())
        reopened.submit(decls)
        assert (
            reopened.flush(30.0) and encoder.encoded == []
        )  # the tools' vectors read, none computed again
        assert np.allclose(
            reopened.vectors(decls), WordsEncoder().encode([tool_text(d) for d in decls]), atol=1e-2
        )
    finally:
        reopened.close()
