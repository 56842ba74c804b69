"""Dense candidates of tool search (bridge.search.dense): tools drawn by meaning from the whole
catalog, so a request sharing no word with its tool finds it, per part of a request asking for
several things, following the catalog's changes."""

from __future__ import annotations

import asyncio
import re
import sys
import threading

import numpy as np
import pytest

from bridge.config import SurfaceConfig
from bridge.search import dense
from bridge.search.ann import AnnIndex
from bridge.search.onnxencoder import OnnxMiniLMEncoder, onnx_model_location
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool
from tests.search.support import WordsEncoder, started

# words an encoder of meaning would read alike: each stands for the word it maps to
SAME_MEANING = {
    "supper": "restaurant",
    "reservation": "book",
    "tomorrow": "forecast",
    "rainfall": "weather",
}


class MeaningEncoder(WordsEncoder):
    """WordsEncoder with a few words read as others (as a model reads *supper* near *restaurant*)."""

    name = "test-meaning"

    def encode(self, texts, max_tokens=128):
        return super().encode(
            [
                re.sub(r"[a-z]+", lambda m: SAME_MEANING.get(m.group(0), m.group(0)), t.lower())
                for t in texts
            ],
            max_tokens,
        )


def desk():
    return [
        tool("book_table", description="Book a table at a restaurant."),
        tool("weather_forecast", description="Get the weather forecast for a city."),
        tool("send_mail", description="Send an email message to someone."),
        tool("read_file", description="Read a text file from disk."),
        tool("list_repositories", description="List the repositories of an organization."),
    ]


@pytest.fixture
async def desk_search():
    catalog, search, stage = await started(
        [FakeUpstream(name="desk", tools=desk())], encoder=MeaningEncoder()
    )
    yield catalog, search, stage, Surface(SurfaceConfig(name="default"), catalog)
    search.close()
    await catalog.close()


def names(search, surface, query, **kw):
    return [m.name for m in search.search(query, surface=surface, **kw).matches]


async def test_a_request_naming_no_word_of_its_tool_finds_it(desk_search):
    _, search, _, surface = desk_search
    search.dense_candidates = 0  # keywords alone: not a word in common
    assert names(search, surface, "supper reservation") == []
    search.dense_candidates = 3
    assert names(search, surface, "supper reservation")[0] == "desk__book_table"
    # a request near no tool draws nothing (the cosine floor): no match, as before
    assert names(search, surface, "zebra quantum") == []
    # the filters and the surface hold for tools drawn by meaning too
    assert names(search, surface, "supper reservation", namespace="other") == []


async def test_past_the_exact_limit_the_approximate_index_draws_and_follows(
    desk_search, monkeypatch
):
    """Past the exact limit the nearest tools come from the approximate index, which draws what
    the exact product does and follows the tools added and removed."""
    catalog, search, stage, surface = desk_search
    exact = names(search, surface, "supper reservation")
    monkeypatch.setattr(dense.DenseIndex, "exact_limit", 4)  # five tools embedded
    search.__dict__.pop("_dense_indexes")  # a new index, built past the limit
    index = search._dense_index(stage)
    index.current(wait=True)  # a first search does not wait for it
    assert names(search, surface, "supper reservation") == exact
    assert index._ann is not None and len(index._ann) == 5
    catalog.apply_tools(
        "desk", [*desk()[1:], tool("order_pizza", description="Order a pizza from a restaurant.")]
    )
    assert await search.wait_indexed() and await asyncio.to_thread(stage.flush, 10.0)
    index.current(wait=True)  # updated on a thread of its own
    index.current(wait=True)  # (and once more, should an update have begun before the change)
    assert names(search, surface, "supper") == ["desk__order_pizza"]
    assert len(index._ann) == 5 and index._ann._ids


async def test_a_first_search_never_waits_for_the_approximate_index(desk_search, monkeypatch):
    """The approximate index of a large catalog takes minutes to build: a first search answers
    meanwhile, drawing what the graph holds so far, and the tools drawn once it is built."""
    _, search, stage, surface = desk_search
    monkeypatch.setattr(dense.DenseIndex, "exact_limit", 4)
    adding, go_on = threading.Event(), threading.Event()
    update = AnnIndex.update

    def held(ann, ids, vectors, gone):  # the build held before it adds its first tool
        adding.set()
        go_on.wait(30.0)
        update(ann, ids, vectors, gone)

    def drawn():
        return names(search, surface, "supper reservation")

    monkeypatch.setattr(AnnIndex, "update", held)
    try:  # answered while the build is held
        assert await asyncio.wait_for(asyncio.to_thread(drawn), 5.0) == []
        assert adding.wait(10.0)
        assert await asyncio.wait_for(asyncio.to_thread(drawn), 5.0) == []
    finally:
        go_on.set()
    search._dense_index(stage).current(wait=True)
    assert names(search, surface, "supper reservation")[0] == "desk__book_table"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_first_build_that_fails_part_way_is_begun_again_whole(desk_search, monkeypatch):
    _, search, stage, surface = desk_search
    monkeypatch.setattr(dense.DenseIndex, "exact_limit", 4)
    update, calls = AnnIndex.update, []

    def failing_once(ann, ids, vectors, gone):  # the first build dies after two tools
        calls.append(len(ids))
        if len(calls) == 1:
            update(ann, ids[:2], vectors[:2], gone)
            raise MemoryError
        update(ann, ids, vectors, gone)

    monkeypatch.setattr(AnnIndex, "update", failing_once)
    index = search._dense_index(stage)
    index.current(wait=True)
    index.current(wait=True)
    assert calls == [5, 5] and len(index._ann) == 5
    assert names(search, surface, "supper reservation")[0] == "desk__book_table"


async def test_without_the_approximate_index_library_the_nearest_are_found_exactly(
    desk_search, monkeypatch, caplog
):
    """Without hnswlib (the `semantic` extra brings it) a catalog past the exact limit is still
    drawn from, exactly, and the log says what to install."""
    _, search, stage, surface = desk_search
    exact = names(search, surface, "supper reservation")
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # its import fails
    dense._ann_installed.cache_clear()
    monkeypatch.setattr(dense.DenseIndex, "exact_limit", 4)
    search.__dict__.pop("_dense_indexes")
    try:
        assert names(search, surface, "supper reservation") == exact
        assert search._dense_index(stage)._ann is None
        assert "install the bridge's `semantic` extra" in caplog.text
    finally:
        dense._ann_installed.cache_clear()


def test_the_approximate_index_agrees_with_the_exact_product():
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((2000, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = [f"t{i}" for i in range(2000)]
    ann = AnnIndex(48)
    ann.update(ids, vectors, [])
    queries = vectors[:50] + 0.3 * rng.standard_normal((50, 48)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    agree = first = 0
    for q in queries:
        order = np.argsort(-(vectors @ q))
        exact = {ids[i] for i in order[:10]}
        found = ann.nearest(q, 10)
        agree += len(exact & {tool_id for tool_id, _ in found})
        first += ids[order[0]] in {tool_id for tool_id, _ in found}
        cosines = [cosine for _, cosine in found]
        assert cosines == sorted(cosines, reverse=True)
        assert abs(cosines[0] - float(vectors[ids.index(found[0][0])] @ q)) < 0.02
    assert first == 50 and agree >= 0.9 * 500  # random vectors: the hardest to draw from
    # a removed tool is never drawn; an added one, and one whose vector changed, are
    ann.update(["new", "t1"], np.stack([vectors[0], vectors[2]]), ["t0"])
    assert ann.nearest(vectors[0], 2)[0][0] == "new"
    assert "t0" not in {tool_id for tool_id, _ in ann.nearest(vectors[0], 20)}
    assert {tool_id for tool_id, _ in ann.nearest(vectors[2], 2)} == {"t1", "t2"}
    assert len(ann) == 2000


def test_the_graph_grows_once_for_a_build_and_keeps_room_for_more():
    """A build reserves its places at once, with room past them: tools added after it take no
    resize of the graph (a copy of it while searches wait)."""
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((2300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ann = AnnIndex(16)
    resizes = []
    ann._graph = Resizes(ann._graph, resizes)
    ann.update([f"t{i}" for i in range(2000)], vectors[:2000], [])
    assert resizes == [2250]
    ann.update(
        [f"t{i}" for i in range(2000, 2200)], vectors[2000:2200], [f"t{i}" for i in range(50)]
    )
    assert resizes == [2250] and len(ann) == 2150
    assert ann.nearest(vectors[2100], 1)[0][0] == "t2100"


class Resizes:
    """An hnswlib graph whose resizes are counted."""

    def __init__(self, graph, resizes):
        self.graph, self.resizes = graph, resizes

    def resize_index(self, places):
        self.resizes.append(places)
        self.graph.resize_index(places)

    def __getattr__(self, name):
        return getattr(self.graph, name)


async def test_each_part_of_a_request_draws_its_own_tools(desk_search):
    _, search, _, surface = desk_search
    search.dense_candidates = 1
    found = names(
        search, surface, "Make a supper reservation. Then send the rainfall tomorrow to Ann."
    )
    assert {"desk__book_table", "desk__weather_forecast"} <= set(found[:3])


async def test_a_request_and_its_parts_are_embedded_together_once(desk_search):
    _, search, stage, surface = desk_search
    asked = []
    encode_parts = stage.encoder.encode_parts

    def counted(text, parts, max_tokens=128):
        asked.append((text, list(parts)))
        return encode_parts(text, parts, max_tokens)

    stage.encoder.encode_parts = counted
    query = "Make a supper reservation. Then send the rainfall tomorrow to Ann."
    first = names(search, surface, query)
    assert len(asked) == 1 and len(asked[0][1]) == 2  # the request and its two parts
    assert names(search, surface, query) == first and len(asked) == 1  # kept


async def test_tools_added_and_removed_are_drawn_once_embedded(desk_search):
    catalog, search, stage, surface = desk_search
    assert "desk__book_table" in names(search, surface, "supper reservation")
    catalog.apply_tools(
        "desk", [*desk()[1:], tool("order_pizza", description="Order a pizza from a restaurant.")]
    )
    assert await search.wait_indexed() and await asyncio.to_thread(stage.flush, 10.0)
    index = search._dense_index(stage)
    index.current(wait=True)  # the matrix a search reads is built again on a thread of its own
    index.current(wait=True)  # (and once more, should a build have begun before the change)
    assert names(search, surface, "supper") == ["desk__order_pizza"]


needs_onnx = pytest.mark.skipif(
    onnx_model_location() is None, reason="the semantic extra is not installed"
)


@needs_onnx
def test_the_onnx_model_embeds_by_meaning():
    location = onnx_model_location()
    assert location is not None
    enc = OnnxMiniLMEncoder(location)
    vectors = enc.encode(
        ["book a table at a restaurant", "reserve dinner for two", "delete a git branch"]
    )
    assert vectors.shape == (3, 384) and np.allclose(
        np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4
    )
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
