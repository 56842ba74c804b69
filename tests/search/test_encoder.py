"""The full sentence model of the semantic stage (bridge.search.encoder), when the `semantic`
extra is installed: loaded and run with the network unreachable."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import numpy as np
import pytest

from bridge.config import SurfaceConfig
from bridge.search.encoder import MiniLMEncoder, WordPiece, model_location, pooled_parts
from bridge.search.onnxencoder import OnnxMiniLMEncoder, onnx_model_location
from bridge.search.service import ToolSearch
from bridge.search.static import STATIC_TABLE, StaticEncoder
from bridge.surface import Surface
from tests.fakes import tool
from tests.search.support import one_upstream

needs_model = pytest.mark.skipif(
    model_location() is None, reason="the semantic extra is not installed"
)
needs_onnx = pytest.mark.skipif(
    onnx_model_location() is None, reason="the semantic extra is not installed"
)


@pytest.fixture(scope="module")
def offline_encoder():
    """The model loaded while every attempt to open a network connection fails."""
    real_connect = socket.socket.connect

    def refuse(self, address):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise OSError("network disabled in this test")
        return real_connect(self, address)

    socket.socket.connect = refuse  # type: ignore[method-assign]
    try:
        location = model_location()
        assert location is not None
        yield MiniLMEncoder(location)
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]


@needs_model
def test_bundled_model_tokenizes_and_embeds_offline(offline_encoder):
    enc = offline_encoder
    assert enc.tokenizer.ids("Hello, world!", 128) == [101, 7592, 1010, 2088, 999, 102]
    assert enc.tokenizer.ids("Café getUserById", 128)[:3] == [101, 7668, 2131]
    vectors = enc.encode(
        [
            "read the contents of a file",
            "open a text document and return what it says",
            "book a flight to Paris",
        ]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


@needs_model
async def test_bundled_model_ranks_by_meaning(tmp_path):
    catalog = one_upstream(
        [
            tool("city_weather", description="Current weather conditions in a city."),
            tool("city_population", description="Number of people living in a city."),
            tool("trip_book", description="Reserve seats on an airline for a trip."),
        ]
    )
    search = ToolSearch(catalog, str(tmp_path / "bridge.index"), semantic=True)
    full = (MiniLMEncoder, OnnxMiniLMEncoder)  # (onnxruntime's when installed)
    assert search.semantic is not None and isinstance(search.semantic.encoder, full)
    # until the model has embedded a search's candidates, the static table reranks it
    assert search.fallback is not None and isinstance(search.fallback.encoder, StaticEncoder)
    assert {Path(stage.path).name for stage in search._stages} == {
        "bridge.index.vectors",
        "bridge.index.static.vectors",
    }
    await catalog.start()
    try:
        assert await search.wait_indexed()
        assert await asyncio.to_thread(search.semantic.flush, 60.0)
        surface = Surface(SurfaceConfig(name="default"), catalog)
        # both tools have the only keyword, "city"; the meaning decides
        assert (
            search.search("is it raining in the city", surface=surface).matches[0].name
            == "a__city_weather"
        )
        assert (
            search.search("how many inhabitants does the city have", surface=surface)
            .matches[0]
            .name
            == "a__city_population"
        )
        assert (
            search.search("book a flight to Paris", surface=surface).matches[0].name
            == "a__trip_book"
        )
    finally:
        search.close()
        await catalog.close()


class _Counted:
    """An encoder stand-in for `pooled_parts`: a part not found in the text is encoded alone."""

    def __init__(self) -> None:
        self.alone: list[str] = []

    def encode(self, texts, max_tokens=128):
        self.alone += texts
        return np.ones((len(texts), 8), np.float32)


def test_a_request_and_its_parts_are_read_from_one_run_of_the_model():
    with np.load(STATIC_TABLE, allow_pickle=False) as data:
        tokenizer = WordPiece([str(t) for t in data["vocab"]])
    rows = np.random.default_rng(7).normal(size=(len(tokenizer.vocab), 8)).astype(np.float32)
    runs: list[list[int]] = []

    def hidden(ids):  # each token's output its own row, whatever its context
        runs.append(ids)
        return rows[ids]

    def unit(v):
        return v / np.linalg.norm(v)

    text = "Find the airport closest to Boston. Also check what a flight to LAX costs."
    parts = ["Find the airport closest to Boston.", "check what a flight to LAX costs."]
    encoder = _Counted()
    vectors = pooled_parts(encoder, tokenizer, hidden, text, parts, 128)
    ids = tokenizer.ids(text, 128)
    assert runs == [ids] and not encoder.alone  # one run: the text's
    assert np.allclose(vectors[0], unit(rows[ids].mean(0)), atol=1e-6)
    for part, vector in zip(parts, vectors[1:], strict=True):
        assert np.allclose(vector, unit(rows[tokenizer.ids(part, 128)[1:-1]].mean(0)), atol=1e-6)
    # a part past the text's first tokens is encoded alone
    vectors = pooled_parts(encoder, tokenizer, hidden, text, [parts[0], parts[1]], 12)
    assert encoder.alone == [parts[1]] and np.allclose(vectors[2], unit(np.ones(8)))


@needs_onnx
def test_the_onnx_model_reads_the_parts_of_a_request_in_its_run():
    location = onnx_model_location()
    assert location is not None
    enc = OnnxMiniLMEncoder(location)
    text = "Make a supper reservation for two. Then send the weather forecast to Ann."
    parts = ["Make a supper reservation for two.", "send the weather forecast to Ann."]
    pooled, alone = enc.encode_parts(text, parts), enc.encode([text, *parts])
    assert pooled.shape == (3, 384) and float(pooled[0] @ alone[0]) > 0.999
    assert all(float(pooled[i] @ alone[i]) > 0.7 for i in (1, 2))
    assert float(pooled[1] @ alone[1]) > float(pooled[1] @ alone[2]) + 0.1
