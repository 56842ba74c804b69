"""Wiring: one `Bridge` builds the store, catalog, surfaces, search index and invoker from a
config and owns their lifecycle. Frontends and the CLI hold a Bridge, nothing else."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from bridge.catalog import Catalog, UpstreamSlot
from bridge.config import BridgeConfig
from bridge.invoke import Invoker
from bridge.search import ToolSearch
from bridge.store import Store, StoreError
from bridge.surface import Surfaces
from bridge.upstream import Upstream, upstream_class

__all__ = ["Bridge", "GC_YOUNG_THRESHOLD", "collector_held", "settle_gc"]

# Allocations between collections of the youngest generation (Python's default is 700): a served
# call allocates a few hundred short-lived objects, nearly all freed by reference counting,
# so collecting every 700 allocations only walks the call's live objects again and again.
GC_YOUNG_THRESHOLD = 20_000


class Bridge:
    def __init__(self, config: BridgeConfig, *, extra_upstreams: list[Upstream] | None = None) -> None:
        self.config = config
        store_path = config.store.path
        index_path = None
        if config.search.persist and store_path != ":memory:":
            index_path = config.resolve_path(config.search.path) if config.search.path else str(
                Path(config.resolve_path(store_path)).with_suffix(".index")
            )
            _index_folder(index_path, beside_store=not config.search.path)  # before the store is made: a bad path leaves nothing behind
        self.store = Store(store_path if store_path == ":memory:" else config.resolve_path(store_path))
        self.catalog = Catalog(self.store)
        for upstream_config in config.upstreams:
            self.catalog.add_upstream(upstream_class(upstream_config.kind)(upstream_config))
        for upstream in extra_upstreams or []:
            self.catalog.add_upstream(upstream)
        self.surfaces = Surfaces(config.surfaces, self.catalog)
        self.search = ToolSearch(self.catalog, index_path, semantic=config.search.semantic,
                                 fold_alternatives=config.search.fold_alternatives)
        self.invoker = Invoker(self.catalog, self.surfaces, self.store, config.invoke)

    async def start(self, wait: bool = True, on_progress: Callable[[UpstreamSlot], None] | None = None) -> None:
        """Start every upstream; with `wait`, until each has listed or failed its first attempt.
        Meanwhile the cyclic garbage collector is held, and it runs once at the end: the catalog's
        records are nearly all the objects a large bridge has, and a full collection walks every
        one of them, so as a million tools were listed it ran three times, 10 to 12 s each
        (100,000 tools: three times, 2.7 s in all; held, once, 1.1 s)."""
        with collector_held() if wait else contextlib.nullcontext():
            await self.catalog.start(wait=wait, on_progress=on_progress)

    async def close(self) -> None:
        await self.catalog.close()
        await self.invoker.aclose()
        self.search.close()
        self.store.close()

    async def __aenter__(self) -> Bridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """The cyclic garbage collector held for the block, then run once (when it was on)."""
    held = gc.isenabled()
    if held:
        gc.disable()
    try:
        yield
    finally:
        if held:
            gc.collect()
            gc.enable()


def settle_gc(collected: bool = False) -> None:
    """Once a server has started: what it built so far (modules, catalog, index, schemas) is
    moved out of the collector's reach, and young collections run less often. Measured on the
    REST invoke path (bench/bench_rest_invoke.py, 64 clients): full collections went from 65–90
    ms pauses, which stalled every call in flight, to 1–3 ms, and the collector's share of the
    CPU per call from about 50 µs to a few. `collected`: a full collection has just run (as
    `Bridge.start` ends with one), so the young generations alone are collected first."""
    gc.collect(1 if collected else 2)
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_YOUNG_THRESHOLD), gen1, gen2)


def _index_folder(path: str, beside_store: bool = False) -> None:
    """The folder the search index's folder goes in, made when missing; a path that names a
    file, or a folder that cannot be made, stops the bridge naming it and the fix. `beside_store`:
    the path is the store's with `.index` (no search.path), so the fix is the store's path."""
    if beside_store:
        fix = ("fix: set store.path to a file in a folder that can be made (the index goes beside it), "
               "or set search.path to a folder of its own")
    else:
        fix = "fix: set search.path to a folder (it is created), or leave it out to keep the index beside the store"
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(f"{path}: the search index's folder is a file; {fix}")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{path}: the search index's folder cannot be made ({exc.strerror or exc}); {fix}") from None

