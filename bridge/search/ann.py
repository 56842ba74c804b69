"""The approximate nearest-neighbour index of the dense candidates (bridge.search.dense) past
the exact limit: an HNSW graph of hnswlib over every embedded tool's vector, kept in step with
the tools whose vectors change, searched in place of the exact product over every vector."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import hnswlib
import numpy as np

__all__ = ["AnnIndex"]

# The graph's links per node, and the candidates it weighs when adding and when searching.
# Measured on 100,000 synthetic tools (bench/search_dense_scale.py): the 20 nearest it answers
# hold 0.93 of the exact product's, in about half a millisecond at the median.
LINKS = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 64
# Tools added in one call: the map from the graph's labels to tool ids is changed between
# chunks, so a search draws the tools added so far, and runs alongside each (hnswlib lets go of
# the interpreter's lock while it adds).
_CHUNK = 2048
# Threads adding a chunk. A build's time is hnswlib's own search of the graph for each tool's
# links (no Python per tool): two threads use both cores of an idle machine, and take two shares
# of a busy one.
THREADS = max(1, min(2, os.cpu_count() or 1))
# Places reserved past those needed when the graph grows: tools added after a build of a million
# take no resize (a copy of the whole graph while searches wait). Places never written to take
# little resident memory.
_SLACK = 8


class AnnIndex:
    """Tools' unit vectors in an HNSW graph, each under an integer label. `update` adds, replaces
    and removes tools (one thread at a time: the dense index's builder); `nearest` may run on any
    thread meanwhile, and answers only tools the map names. A removed tool's place in the graph
    is taken by the next tool added."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self._graph = hnswlib.Index(space="ip", dim=dim)
        self._graph.init_index(
            max_elements=capacity,
            ef_construction=EXPANSION_ADD,
            M=LINKS,
            allow_replace_deleted=True,
        )
        self._graph.set_ef(EXPANSION_SEARCH)
        self._labels: dict[str, int] = {}  # tool id -> its label in the graph
        self._ids: dict[int, str] = {}  # label -> tool id
        self._deleted = 0  # places of removed tools, taken by the next tools added
        self._next = 0
        self._lock = threading.Lock()  # around the two maps and a resize of the graph

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def memory_bytes(self) -> int:
        """About what the graph holds in memory: float32 vectors and the links of each place."""
        places = self._graph.get_current_count()
        return places * (4 * self._graph.dim + 4 * 2 * LINKS + 16)

    def update(self, ids: Sequence[str], vectors: np.ndarray, gone: Sequence[str]) -> None:
        """Add the tools `ids` with their `vectors` (one row each, replacing a tool's vector it
        has) and remove the tools `gone`."""
        with self._lock:
            stale = [self._labels.pop(t) for t in [*gone, *ids] if t in self._labels]
            for label in stale:
                del self._ids[label]
        for label in stale:
            self._graph.mark_deleted(label)
        self._deleted += len(stale)
        # every place needed, reserved at once (removed tools' places are taken first)
        need = self._graph.get_current_count() + max(0, len(ids) - self._deleted)
        if need > self._graph.get_max_elements():
            with self._lock:  # a resize runs alone
                self._graph.resize_index(need + need // _SLACK)
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            labels = list(range(self._next, self._next + len(chunk)))  # a label is never reused
            self._next += len(chunk)
            self._deleted -= min(len(chunk), self._deleted)
            self._graph.add_items(
                vectors[start : start + len(chunk)],
                labels,
                num_threads=THREADS,
                replace_deleted=True,
            )
            with self._lock:
                for label, tool_id in zip(labels, chunk, strict=True):
                    self._labels[tool_id] = label
                    self._ids[label] = tool_id

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """About the `k` tools of the greatest cosine with `query` (a unit vector), best first."""
        with self._lock:
            k = min(k, len(self._labels))
            if k <= 0:
                return []
            try:
                labels, distances = self._graph.knn_query(query.astype(np.float32), k=k)
            except RuntimeError:  # fewer than k reachable past the removed places
                return []
            found = [
                (self._ids[label], 1.0 - float(distance))
                for label, distance in zip(labels[0].tolist(), distances[0].tolist(), strict=True)
                if label in self._ids
            ]
        return found
