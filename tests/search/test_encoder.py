"""The full sentence model of the semantic stage (bridge.search.encoder), when the `semantic`
extra is installed: loaded and run with the network unreachable."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import numpy as np
import pytest

from bridge.config import SurfaceConfig
from bridge.search.encoder import MiniLMEncoder, model_location
from bridge.search.onnxencoder import OnnxMiniLMEncoder
from bridge.search.service import ToolSearch
from bridge.search.static import StaticEncoder
from bridge.surface import Surface
from tests.fakes import tool
from tests.search.support import one_upstream

needs_model = pytest.mark.skipif(
    model_location() is None, reason="the semantic extra is not installed"
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
