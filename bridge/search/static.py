"""The default encoder of the semantic search stage: a static token table distilled from
all-MiniLM-L6-v2, shipped inside this package (`bridge/search/data/minilm-static.npz`).

Each of the model's 30,522 WordPiece tokens was run through the full model alone
(`[CLS] token [SEP]`), and the token's own output kept: a vector that carries what the model
reads into that token. The vectors are centred, reduced to their main directions (PCA),
weighted down for the most frequent tokens, and stored as int8 rows with one scale each. A
text's vector is the normalized sum of its tokens' rows: microseconds, where the full model
takes tens of milliseconds a text.

The table, and the related words of query expansion drawn from it
(`bridge/search/data/minilm-related.npz`, read by `bridge.search.analysis.related_words`), are
made by `tools/distill_search_table.py` at the repository's root, outside the installed package."""

from __future__ import annotations

import hashlib
import logging
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bridge.search.encoder import Encoder, WordPiece

__all__ = ["STATIC_TABLE", "StaticEncoder", "load_static"]

log = logging.getLogger("bridge.search")

STATIC_TABLE = Path(__file__).with_name("data") / "minilm-static.npz"


class StaticEncoder(Encoder):
    """Text vectors as the normalized sum of their WordPiece tokens' rows in a static table.
    Cheap enough to embed a search's candidates while it runs (`cheap`). Thread-safe."""

    cheap = True
    tool_tokens = 512
    # A sum of many tokens' vectors says less of what is asked: the whole weight up to 12 words,
    # 3/7 of it (0.3) up to 25, and past that the keywords' order. Chosen on both development
    # sets (docs/search.md, Meaning): the whole weight always gains 1.7 points of recall@5 on
    # the BFCL set and loses 3.5 on the second, whose requests are long tasks; these bounds keep
    # 0.8 of the gain and turn the loss into a gain of 0.1 (bench/search_quality.py).
    shares_by_words = ((12, 1.0), (25, 3 / 7))
    # same-named pairs on the development set: 95% above 0.79; random pairs 95% below 0.69
    same_tool_cosine = 0.75

    def __init__(self, path: Path | str = STATIC_TABLE) -> None:
        with np.load(path, allow_pickle=False) as data:
            rows, scales = data["vectors"], data["scales"]
            vocab = data["vocab"].tolist()  # Python strings
            source = str(data["source"])
        vectors = rows.astype(np.float32)
        vectors *= scales.astype(np.float32)[:, None]
        self.table = vectors
        self.tokenizer = WordPiece(vocab)
        self.dim = int(vectors.shape[1])
        # the name says which table made a stored vector (bridge.search.embedding): a digest of
        # its stored int8 rows and scales, a quarter of the bytes of the float32 table they make
        digest = hashlib.blake2b(rows, digest_size=6)
        digest.update(scales)
        self.name = f"static:{source}:{self.dim}:{digest.hexdigest()}"

    def encode(self, texts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            ids = self.tokenizer.ids(text, max(3, max_tokens))[1:-1]  # without [CLS] and [SEP]
            if ids:
                out[i] = self.table[ids].sum(0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)


_lock = threading.Lock()
_loaded: dict[str, StaticEncoder | None] = {}


def load_static(path: Path | str = STATIC_TABLE) -> StaticEncoder | None:
    """The shipped table's encoder, loaded once per process; None when the file cannot be read."""
    key = str(path)
    with _lock:
        if key not in _loaded:
            encoder = None
            try:
                encoder = StaticEncoder(path)
            except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
                log.warning(
                    "semantic search table %s cannot be loaded (%s); ranking by keywords only",
                    path,
                    exc,
                )
            _loaded[key] = encoder
        return _loaded[key]
