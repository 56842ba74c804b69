"""Dense candidates of a free-text search: the tools nearest the request in meaning, over every
embedded tool's vector, added to the keyword candidates the ranking stages read. A request that
names no word of its tool (*book me a table for two tonight* for `reserve_restaurant`) still has
it among the candidates, where the semantic stage's mix of keyword score and cosine ranks it.

A request of several parts (bridge.search.analysis.query_parts) has candidates drawn for each
part as well, so the tools of one ask do not take every place of another's."""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from bridge.model import ToolDeclaration
from bridge.search.analysis import AnalyzedQuery
from bridge.search.embedding import ToolEmbeddings
from bridge.search.semantic import SemanticStage
from bridge.surface import Surface

if TYPE_CHECKING:
    from bridge.search.ann import AnnIndex

__all__ = ["DENSE_CANDIDATES", "DenseCandidates", "DenseIndex"]

log = logging.getLogger("bridge.search")

# Tools drawn by meaning for the request, and again for each of its parts, that the keyword
# candidates do not hold already (bench/search_quality.py, docs/search.md: Dense candidates).
DENSE_CANDIDATES = 10
# The parts of a request drawn for, at most (each costs a query embedding).
DENSE_PARTS = 5
# A tool drawn by meaning has at least this cosine with the request (or the part): a request
# of no known word, or for no tool here, draws nothing, and its answer says so.
DENSE_FLOOR = 0.25
# Up to this many embedded tools the nearest are found exactly, by a product with every vector
# (at 20,000 tools of 384 dimensions a few milliseconds); past it, by an approximate index
# (bridge.search.ann), whose answers agree with the exact product's on nearly every tool drawn.
DENSE_EXACT_LIMIT = 20_000
_INDEXES_LOCK = threading.Lock()  # around a search's first look for its stage's index


class DenseIndex:
    """Every embedded tool's unit vector of one `ToolEmbeddings`, searched for the nearest to a
    request. Up to `exact_limit` tools: one float32 matrix searched exactly (a matrix product),
    built again whole once the embeddings changed (`ToolEmbeddings.generation`). Past it: an
    approximate index (`AnnIndex`), built once whole and then kept in step with the tools whose
    vectors changed (`ToolEmbeddings.changes`), so 1,000 tools added or removed are drawn within
    a second over a million. Builds and updates run on a thread of their own: a search reads
    what was last built and never waits for it."""

    exact_limit = DENSE_EXACT_LIMIT

    def __init__(self, embeddings: ToolEmbeddings) -> None:
        self.embeddings = embeddings
        self._ids: list[str] = []
        self._matrix = np.zeros((0, embeddings.encoder.dim), np.float32)
        self._ann: AnnIndex | None = None
        self._built = -1
        self._building: threading.Thread | None = None
        self._lock = threading.Lock()

    def _build(self) -> None:
        try:
            ann = self._ann
            # in step with the tools changed since the last update (a first build that failed
            # part way is begun again whole)
            if ann is not None and self._built >= 0:
                generation, ids, matrix, gone = self.embeddings.changes()
                ann.update(ids, matrix, gone)
                with self._lock:
                    self._built = generation
            elif self.embeddings.tools > self.exact_limit and _ann_installed():
                # the approximate index, whole
                from bridge.search.ann import AnnIndex

                generation, ids, matrix = self.embeddings.every_vector(follow=True)
                ann = AnnIndex(self.embeddings.encoder.dim)
                if self._built < 0:  # nothing built yet: searches draw what is added so far
                    with self._lock:
                        self._ann = ann
                ann.update(ids, matrix, [])
                del matrix
                with self._lock:
                    self._ann, self._built = ann, generation
                    self._ids, self._matrix = [], self._matrix[:0]
            else:
                generation, ids, matrix = self.embeddings.every_vector()
                with self._lock:
                    self._ids, self._matrix, self._built = ids, matrix, generation
        finally:
            with self._lock:
                self._building = None

    def current(self, wait: bool = False) -> int:
        """How many tools a search draws from as last built; a build (or an update) is started
        when the embeddings changed since, and with `wait` waited for (a test). A first search
        waits for the first build of the exact matrix (milliseconds), never for the approximate
        index's: that draws the tools added so far (a million take minutes)."""
        with self._lock:
            building = self._building
            if building is None and self._built != self.embeddings.generation:
                building = self._building = threading.Thread(
                    target=self._build, name="search-dense", daemon=True
                )
                building.start()
            first = self._built < 0 and self._ann is None
        if building is not None and (wait or (first and not self._approximate())):
            building.join()
        with self._lock:
            return len(self._ann) if self._ann is not None else len(self._ids)

    def _approximate(self) -> bool:
        """Whether a build now is of the approximate index."""
        return self._ann is not None or (
            self.embeddings.tools > self.exact_limit and _ann_installed()
        )

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` tools of the greatest cosine with `query` (a unit vector), best first: exact
        up to `exact_limit` tools, approximate past it."""
        with self._lock:
            ids, matrix, ann = self._ids, self._matrix, self._ann
        if ann is not None:  # the graph's candidates, scored by their own vectors
            ids, matrix = self.embeddings.vectors_of(
                [tool_id for tool_id, _ in ann.nearest(query, k)]
            )
        if not ids or k <= 0:
            return []
        scores = matrix @ query.astype(np.float32)
        k = min(k, len(ids))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(ids[i], float(scores[i])) for i in top]


@functools.cache
def _ann_installed() -> bool:
    """Whether the approximate index's library is there (the `semantic` extra brings it); without
    it the nearest are found exactly at any size, which is said once."""
    try:
        import hnswlib  # noqa: F401
    except ImportError:
        log.warning(
            "search: hnswlib is not installed, so dense candidates are found exactly past %d "
            "tools (slower); install the bridge's `semantic` extra",
            DENSE_EXACT_LIMIT,
        )
        return False
    return True


class DenseCandidates:
    """Mixed into `ToolSearch`: the dense candidates added to a page of keyword candidates.
    `dense_candidates` tools are drawn for the request and for each part (0: none); with the
    static table (a sum of token vectors, which draws poorly from a whole catalog) only when
    `dense_static` is set."""

    dense_candidates = DENSE_CANDIDATES
    dense_static = False

    semantic: SemanticStage | None

    def _shown_hit(
        self, tool_id: str, surface: Surface, filters: dict[str, Any]
    ) -> ToolDeclaration | None:
        raise NotImplementedError  # RankingStages'

    def _dense_index(self, stage: SemanticStage) -> DenseIndex:
        with _INDEXES_LOCK:
            indexes: dict[int, DenseIndex] = self.__dict__.setdefault("_dense_indexes", {})
            index = indexes.get(id(stage))
            if index is None:
                index = indexes[id(stage)] = DenseIndex(stage)
            return index

    def _dense_added(
        self,
        analyzed: AnalyzedQuery,
        ranked: list[tuple[ToolDeclaration, float]],
        parts: list[AnalyzedQuery],
        surface: Surface,
        filters: dict[str, Any],
    ) -> list[tuple[ToolDeclaration, float]]:
        """`ranked` and after it, with a keyword score of 0, the tools nearest in meaning to the
        request and to each of its parts that it does not hold, shown on the surface and passing
        the filters."""
        stage = self.semantic
        k = self.dense_candidates
        if stage is None or k <= 0 or (stage.encoder.cheap and not self.dense_static):
            return ranked
        index = self._dense_index(stage)
        if not index.current():  # (nothing embedded: no query embedded either)
            return ranked
        have = {decl.tool_id for decl, _ in ranked}
        added: list[tuple[ToolDeclaration, float]] = []
        asked = stage.query_vectors(analyzed.text, [part.text for part in parts[:DENSE_PARTS]])
        for vector in asked:
            taken = 0
            # a few more than k: some may be held already, hidden here or filtered out
            for tool_id, cosine in index.nearest(vector, 2 * k):
                if taken >= k or cosine < DENSE_FLOOR:
                    break
                if tool_id in have:
                    taken += 1
                    continue
                decl = self._shown_hit(tool_id, surface, filters)
                if decl is not None:
                    have.add(tool_id)
                    added.append((decl, 0.0))
                    taken += 1
        return ranked + added
