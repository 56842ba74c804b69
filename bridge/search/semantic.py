"""The semantic stage of tool search: the best keyword (BM25) candidates of a query are
reranked by mixing their keyword score with the cosine similarity of a sentence embedding of
the query and of each tool (the tools' embeddings: bridge.search.embedding).

The encoder is bridge.search.encoder's (a model shipped inside an installed package; nothing is
downloaded) or the static table shipped with the bridge. Without one the stage is simply absent
and search ranks by keywords alone."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from bridge.model import ToolDeclaration
from bridge.search.analysis import meaning_text
from bridge.search.embedding import ToolEmbeddings
from bridge.search.encoder import Encoder, load_encoder
from bridge.search.onnxencoder import load_onnx_encoder
from bridge.search.static import load_static
from bridge.search.vectorfile import vector_path

__all__ = ["CANDIDATES", "QUERY_TOKENS", "WEIGHT", "SemanticStage", "choose_encoder"]

log = logging.getLogger("bridge.search")

# Keyword candidates reranked, and the weight of the cosine similarity against the keyword score
# divided by the best candidate's. Measured on the development set (bench/search_quality.py):
# the weight was chosen among 0.3, 0.5, 0.7 and reciprocal-rank fusion on one half of the
# requests, and gains the same on the other half (+3.2 points recall@5 and nDCG@10).
CANDIDATES = 50
WEIGHT = 0.7
# Tokens embedded of a query (a longer query is embedded by its beginning); of a tool's text,
# the encoder's `tool_tokens`.
QUERY_TOKENS = 128
_QUERY_CACHE = 256


def choose_encoder(kind: str) -> Encoder | None:
    """`model`: the full sentence model (installed by the `semantic` extra); `static`: the
    token table shipped with the bridge (bridge.search.static); `auto`: the model when it is
    installed, else the table; `off`: none. None also when the chosen one cannot be loaded."""
    if kind == "off":
        return None
    if kind in ("auto", "model"):
        encoder = load_onnx_encoder() or load_encoder()
        if encoder is not None:
            return encoder
        if kind == "model":
            log.warning(
                "search.semantic is `model` but no package shipping the model is installed "
                "(pip install 'a2t-bridge[semantic]'); ranking by keywords only"
            )
            return None
    return load_static()


class SemanticStage(ToolEmbeddings):
    """The tools' embeddings (`ToolEmbeddings`) and the reranking of keyword candidates with
    them: `weight` is the cosine's weight against the keyword score."""

    def __init__(
        self,
        encoder: Encoder,
        path: str | None = None,
        *,
        weight: float = WEIGHT,
        after: Callable[[float], bool] | None = None,
        seed: str | None = None,
    ) -> None:
        self.weight = weight
        self._query_vectors: dict[str, np.ndarray] = {}  # the last queries' embeddings
        super().__init__(encoder, path, after=after, seed=seed)

    @classmethod
    def open(
        cls,
        index_path: str | None,
        encoder: str = "auto",
        *,
        after: Callable[[float], bool] | None = None,
        seed: str | None = None,
    ) -> SemanticStage | None:
        """The stage with its vectors beside `index_path`, by `encoder` (see `choose_encoder`);
        None when there is none to use. Without `index_path` (in memory), `seed`: the index
        folder whose vector file another process writes, read as it is now (`_seed`)."""
        chosen = choose_encoder(encoder)
        if chosen is None:
            return None

        def beside(index: str | None) -> str | None:
            return vector_path(index, static=chosen.cheap) if index else None

        return cls(chosen, beside(index_path), after=after, seed=beside(seed))

    def query_vector(self, query: str) -> np.ndarray:
        """The query's unit vector, of its `meaning_text` (the last _QUERY_CACHE queries' are kept)."""
        vector = self._query_vectors.get(query)
        if vector is None:
            vector = self.encoder.encode([meaning_text(query)], QUERY_TOKENS)[0]
            self._keep_query_vector(query, vector)
        return vector

    def _keep_query_vector(self, key: str, vector: np.ndarray) -> None:
        """Keep `vector` under `key`, the oldest kept going past _QUERY_CACHE."""
        if len(self._query_vectors) >= _QUERY_CACHE:
            self._query_vectors.pop(next(iter(self._query_vectors)), None)
        self._query_vectors[key] = vector

    def query_vectors(self, query: str, parts: Sequence[str]) -> np.ndarray:
        """The unit vectors of a request and of its `parts` (pieces of it, kept beside the
        request's as `query_vector`'s are): one run of a model gives them all (`encode_parts`),
        a part's being its tokens' share of the request's outputs."""
        keys = [query, *(f"{query}\x00{part}" for part in parts)]
        found = [self._query_vectors.get(key) for key in keys]
        if all(vector is not None for vector in found):
            return np.stack([vector for vector in found if vector is not None])
        texts = [meaning_text(part) for part in parts]
        vectors = self.encoder.encode_parts(meaning_text(query), texts, QUERY_TOKENS)
        for key, vector in zip(keys, vectors, strict=True):
            self._keep_query_vector(key, vector)
        return vectors

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The texts' unit vectors, embedded now (for a cheap encoder: texts that are no tool's
        own, such as a tool's words without its API's shared text; the caller keeps them)."""
        return self.encoder.encode(list(texts), self.encoder.tool_tokens).astype(np.float32)

    def weight_for(self, query: str) -> float:
        """The cosine's weight for this query: `weight` times the share of the encoder's
        `shares_by_words` for the query's number of words, 0 past its last bound (the encoder
        then reranks nothing: a sum of many tokens' vectors says less about what is asked than
        the keywords, matched by the rarest words, do)."""
        shares = self.encoder.shares_by_words
        if not shares:
            return self.weight
        words = len(query.split())
        return next((self.weight * share for bound, share in shares if words <= bound), 0.0)

    def rerank(
        self, query: str, ranked: Sequence[tuple[ToolDeclaration, float]]
    ) -> list[tuple[ToolDeclaration, float]] | None:
        """The candidates reordered by (1 - weight) * score / best score + weight * cosine, best
        first, with that mixed score; None when a candidate has no embedding yet."""
        if not ranked or not query.strip():
            return None
        tools = self.vectors([decl for decl, _ in ranked])
        if tools is None:
            return None
        order, mixed = self.mix(query, ranked, tools)
        return [(ranked[i][0], float(mixed[i])) for i in order]

    def mix(
        self, query: str, ranked: Sequence[tuple[ToolDeclaration, float]], tools: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`rerank` over the candidates' vectors (`vectors`): the new order (indexes into
        `ranked`, best first) and each candidate's mixed score."""
        q = self.query_vector(query)
        cosine = tools @ q
        best = max(score for _, score in ranked)
        keyword = np.array([score for _, score in ranked], np.float32) / (best if best > 0 else 1.0)
        weight = self.weight_for(query)
        mixed = (1.0 - weight) * keyword + weight * cosine
        return np.argsort(-mixed, kind="stable"), mixed
