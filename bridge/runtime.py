"""Wiring: one `Bridge` builds the store, catalog, surfaces, search index and invoker from a
config and owns their lifecycle. Frontends and the CLI hold a Bridge, nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bridge.catalog import Catalog
from bridge.config import BridgeConfig, ConfigError, load_config
from bridge.identity import Admission, Authenticator
from bridge.invoke import Invoker
from bridge.model import ToolSearchResult
from bridge.search import ToolSearch
from bridge.shared_state import SharedState
from bridge.sidecar import with_free_port
from bridge.store import StoreError, open_store
from bridge.supervisor import UpstreamSlot
from bridge.surface import Surface, Surfaces
from bridge.telemetry import Telemetry, configured_tracing, logs_endpoint
from bridge.upstream import Upstream, upstream_class

__all__ = [
    "GC_YOUNG_THRESHOLD",
    "LIVE_SERVER_KEYS",
    "Bridge",
    "collector_held",
    "reload_on_hangup",
    "search_index_path",
    "settle_gc",
]

log = logging.getLogger("bridge.runtime")

# Allocations between collections of the youngest generation (Python's default is 700): a served
# call allocates a few hundred short-lived objects, nearly all freed by reference counting,
# so collecting every 700 allocations only walks the call's live objects again and again.
GC_YOUNG_THRESHOLD = 20_000

# The `server` keys a reload applies: read at each request. The others built the listener, as
# `store` and `search` opened the store and the index: a running bridge keeps them until restarted.
LIVE_SERVER_KEYS = ("tokens", "oauth", "default_surface")
# The sections a running bridge keeps whole until restarted: each built something that lives as
# long as the process (the store, the index, the metrics, the log handler, the audit file).
RESTART_SECTIONS = ("store", "search", "telemetry", "logging", "audit")


class Bridge:
    """`index_lock_wait`: for a server, `search.lock_wait` (`ToolSearch`): while another process
    holds the on-disk search index, the bridge answers at once with an index of its own in
    memory, and looks often for that long whether the index is free to move there."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        extra_upstreams: list[Upstream] | None = None,
        index_lock_wait: float = 0.0,
    ) -> None:
        self.config = config
        store_path = config.store.path
        index_path = search_index_path(config)
        if index_path is not None:
            _index_folder(
                index_path, beside_store=not config.search.path
            )  # before the store is made: a bad path leaves nothing behind
        self.store = open_store(
            store_path if store_path == ":memory:" else config.resolve_path(store_path),
            config.store.url,
        )
        self.catalog = Catalog(self.store)
        for upstream_config in config.upstreams:
            self.catalog.add_upstream(
                upstream_class(upstream_config.kind)(with_free_port(upstream_config))
            )
        for upstream in extra_upstreams or []:
            self.catalog.add_upstream(upstream)
        self.surfaces = Surfaces(config.surfaces, self.catalog)
        self.search = ToolSearch(
            self.catalog,
            index_path,
            semantic=config.search.semantic,
            fold_alternatives=config.search.fold_alternatives,
            lock_wait=index_lock_wait,
        )
        audit, telemetry = config.audit, config.telemetry
        tracing = configured_tracing(
            telemetry.otlp_endpoint, telemetry.service_name, telemetry.sample_ratio
        )
        self.telemetry = Telemetry(
            tool_label=telemetry.tool_label,
            audit_path=config.resolve_path(audit.path) if audit.path else None,
            audit_max_bytes=audit.max_mb << 20,
            audit_keep=audit.keep,
            tracing=tracing,
            audit_otlp=logs_endpoint(audit.otlp_endpoint or telemetry.otlp_endpoint)
            if audit.otlp
            else None,
            service_name=telemetry.service_name,
        )
        metrics = self.telemetry.metrics
        metrics.watch_upstreams(lambda: [(s.health, s.calls) for s in self.catalog.slots.values()])
        # rate limits and the upstreams that act for the caller (token exchange)
        self.admission = Admission(on_limited=metrics.rate_limited)
        self.admission.user_tokens.store = self.store
        self.admission.update(
            config.rate_limits,
            config.upstream_exchanges,
            config.server.oauth,
            config.server.public_url,
        )
        self.invoker = Invoker(
            self.catalog, self.surfaces, self.store, config.invoke, self.telemetry, self.admission
        )
        self.identity = Authenticator()  # who each HTTP request's caller is (tokens, oauth)
        metrics.gauge(
            "bridge_store_writes_waiting",
            "Invocation log rows, versions and names waiting to be written to the store "
            "(all of them while its disk refuses writes)",
            lambda: self.store.waiting() + self.invoker.log_rows_waiting(),
        )
        # what replicas share through Redis (redis.url); None: one process keeps it in memory
        self.shared: SharedState | None = None
        if config.redis is not None:
            redis = config.redis
            self.shared = SharedState(
                redis.url,
                session_ttl=redis.session_ttl or config.server.mcp_session_idle_timeout,
                prefix=redis.key_prefix,
                timeout=redis.timeout,
            )
            link = self.shared.link
            self.admission.limiter.counters = self.shared.counters  # the replicas' buckets
            metrics.gauge(
                "bridge_redis_round_trips",
                "Round trips to Redis (a pipeline of commands is one) since the start",
                lambda: link.round_trips,
            )
            metrics.gauge(
                "bridge_redis_reachable",
                "1 while Redis answers, 0 while it cannot be reached",
                lambda: 1.0 if link.available else 0.0,
            )
        self._reloading = asyncio.Lock()
        self._reload_listeners: list[Callable[[], None]] = []
        self._started = asyncio.Event()
        self._listed = 0  # the index's ticket of every change the start made (`search_state`)
        self._kept_surfaces: dict[str, str] = {}  # surface -> who serves it (`keep_surface`)

    async def start(
        self,
        wait: bool = True,
        on_progress: Callable[[UpstreamSlot], None] | None = None,
        freeze_first: bool = False,
    ) -> None:
        """Start every upstream; with `wait`, until each has listed or failed its first attempt
        (those a reload adds or restarts meanwhile too), after which `started` is true.
        Meanwhile the cyclic garbage collector is held, and it runs once at the end: the catalog's
        records are nearly all the objects a large bridge has, and a full collection walks every
        one of them, so as a million tools were listed it ran three times, 10 to 12 s each
        (100,000 tools: three times, 2.7 s in all; held, once, 1.1 s). `freeze_first` (a server,
        which keeps what it has built for its whole life): what exists before the start is moved
        out of the collector's reach first, so that collection walks only what the start made."""
        with collector_held(freeze_first) if wait else contextlib.nullcontext():
            await self.catalog.start(wait=wait, on_progress=on_progress)
        if wait:
            # the catalog hands each change to the index as it makes it: every tool listed is in it
            self._listed = self.search.index.ticket()
            self._started.set()

    @property
    def started(self) -> bool:
        """Whether a `start(wait=True)` has ended: every upstream has listed or failed once."""
        return self._started.is_set()

    async def wait_started(self) -> None:
        await self._started.wait()

    def search_state(self) -> str:
        """`ready` once the start has ended and the search index has taken in every tool it
        listed, all searchable; `indexing` until then (a search may miss the tools the index has
        yet to take in, thousands of which take it seconds); `failing` while the index's commits
        fail (a disk refusing writes), its changes waiting for the next try. The semantic
        vectors are not waited for: see docs/search.md, *Readiness*."""
        if self.started and self.search.index.searchable(self._listed):
            return "ready"
        return "failing" if self.search.index.failing else "indexing"

    async def wait_indexed(self) -> str:
        """Wait, without blocking the event loop, until the start has ended and `search_state`
        is no longer `indexing`; answers it."""
        await self._started.wait()
        flush = self.search.index.flush
        # looked at again every 0.5 s: the commits may begin to fail meanwhile
        while self.search_state() == "indexing":
            if await asyncio.to_thread(flush, 0.5, self._listed):
                break
        return self.search_state()

    def starting(self) -> list[str]:
        """The upstreams the start still waits for (none once `started`: an upstream a later
        reload adds shows as `connecting`, and holds nothing)."""
        return [] if self.started else self.catalog.starting()

    async def reload(self, config: BridgeConfig) -> str:
        """Apply a new config to the running bridge, and return (and log) one line saying what
        changed. Upstreams are matched by name: one added is started (not waited for), one removed
        stopped and its tools taken out, one whose settings changed restarted with them (its tools
        kept meanwhile, with their ids and versions), one unchanged left alone. An upstream
        stopped refuses new calls at once and lets those in flight end first, for at most its old
        `timeout`; the rest of the config applies meanwhile. Surfaces, tokens,
        `oauth`, `default_surface` and `invoke` hold from the next request on; every other key of
        `server`, `store`, `search`, `telemetry`, `logging` and `audit` keeps its running value,
        with a warning that it needs a restart. Reloads run one at a time. A ConfigError (an upstream
        name the bridge already serves from elsewhere, a surface `keep_surface` named missing)
        changes nothing. A reload
        while the bridge starts applies at once: `start` then also waits for the upstreams it
        adds or restarts, and no longer for those it removes."""
        async with self._reloading:
            old = self.config
            before = {u.name: u for u in old.upstreams}
            after = {u.name: u for u in config.upstreams}
            gone = [
                (name, why)
                for name, why in self._kept_surfaces.items()
                if name not in config.surface_names()
            ]
            if gone:
                raise ConfigError(
                    config.source,
                    [
                        (
                            "surfaces",
                            f"no surface named {name!r}, which {why}",
                            f"define surface {name!r} again, or restart the bridge with another surface",
                        )
                        for name, why in gone
                    ],
                )
            clash = [
                (i, u.name)
                for i, u in enumerate(config.upstreams)
                if u.name not in before and u.name in self.catalog.slots
            ]
            if clash:
                raise ConfigError(
                    config.source,
                    [
                        (
                            f"upstreams[{i}].name",
                            f"the bridge already serves an upstream named {name!r} "
                            "that is not in its config",
                            "give this upstream another name",
                        )
                        for i, name in clash
                    ],
                )
            if starting := self.starting():
                log.warning(
                    "config reload while %d upstream(s) still start (%s): applied now; the start waits for the "
                    "upstreams it adds or restarts, and no longer for those it removes",
                    len(starting),
                    ", ".join(starting),
                )
            restart = _restart_keys(old, config)
            for key in restart:
                log.warning(
                    "config reload: %s changed; it takes effect when the bridge restarts (the running value is kept)",
                    key,
                )
            server = old.server.model_copy(
                update={key: getattr(config.server, key) for key in LIVE_SERVER_KEYS}
            )
            kept = {section: getattr(old, section) for section in (*RESTART_SECTIONS, "redis")}
            config = config.model_copy(update={"server": server, **kept})
            changed = [name for name in after if name in before and after[name] != before[name]]
            made = {
                name: upstream_class(after[name].kind)(with_free_port(after[name]))
                for name in after
                if name not in before or name in changed
            }
            removed = [name for name in before if name not in after]
            # stopped all at once: a stdio server may take its shutdown_timeout (2 s) to exit, and
            # 300 of them stopped one after another held the reload (and the next) for 10 minutes.
            # Each refuses new calls at once and lets those in flight end first, for at most its
            # `timeout` (a call's own limit); meanwhile the rest of the config applies.
            stopping: list[Awaitable[object]] = [
                self.catalog.remove_upstream(name, drain=before[name].timeout) for name in removed
            ]
            stopping += [
                self.catalog.replace_upstream(upstream, drain=before[name].timeout)
                for name, upstream in made.items()
                if name in changed
            ]
            stopped = asyncio.gather(*stopping, return_exceptions=True)
            await asyncio.sleep(0)  # each has refused new calls before anything else changes
            for name, upstream in made.items():
                if name not in changed:
                    self.catalog.add_upstream(upstream)
            await self.catalog.start(wait=False)
            surfaces = self.surfaces.update(config.surfaces)
            self.invoker.config = config.invoke
            self.admission.update(
                config.rate_limits,
                config.upstream_exchanges,
                config.server.oauth,
                config.server.public_url,
            )
            self.config = config
            for listener in list(self._reload_listeners):
                listener()
            failures = [r for r in await stopped if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
            await self.catalog.start(wait=False)
            said = {
                "added": [n for n in made if n not in changed],
                "removed": removed,
                "restarted": changed,
                "surfaces changed": surfaces,
                "needs a restart": restart,
            }
            summary = (
                "; ".join(f"{what}: {', '.join(names)}" for what, names in said.items() if names)
                or "nothing changed"
            )
            log.warning("config reloaded from %s: %s", config.source, summary)
            return summary

    def find_tools(self, query: str, *, surface: Surface, **options: Any) -> ToolSearchResult:
        """Tool search (`ToolSearch.search`) for a frontend's caller, counted in the metrics."""
        began = time.perf_counter()
        result = self.search.search(query, surface=surface, **options)
        self.telemetry.searched(surface.name, time.perf_counter() - began, bool(result.matches))
        return result

    def keep_surface(self, name: str, why: str) -> None:
        """A reload whose config no longer defines surface `name` is refused as a config error
        (nothing changes), saying `why` the bridge needs it."""
        self._kept_surfaces[name] = why

    def on_reload(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` at the end of each reload (frontends that keep something per surface
        look again); returns the function that stops it."""
        self._reload_listeners.append(listener)
        return lambda: self._reload_listeners.remove(listener)

    async def close(self) -> None:
        await self.catalog.close()
        await self.invoker.aclose()
        await self.identity.aclose()
        await self.admission.aclose()
        await self.telemetry.aclose()
        self.search.close()
        self.store.close()
        if self.shared is not None:
            await self.shared.aclose()

    async def __aenter__(self) -> Bridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextlib.contextmanager
def collector_held(freeze_first: bool = False) -> Iterator[None]:
    """The cyclic garbage collector held for the block, then run once (when it was on).
    `freeze_first`: what exists before the block is frozen (`gc.freeze`, without a collection),
    so that the run at the end walks only what the block made. In `bridge serve`, where requests
    wait for it, that run walked 147,000 objects at 600 tools, 110 to 250 ms; the modules, app
    and config frozen first, 36,000, 13 to 15 ms."""
    if freeze_first:
        gc.freeze()
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


def reload_on_hangup(bridge: Bridge, path: str) -> Callable[[], None]:
    """On SIGHUP, read the config file at `path` again and apply it (`Bridge.reload`). A SIGHUP
    during a reload is applied after it (several make one more reload). A config that does not
    load changes nothing: its error is logged on one line. Returns the function that stops
    listening (and a reload under way)."""
    loop = asyncio.get_running_loop()
    asked = asyncio.Event()

    async def reload_when_asked() -> None:
        while True:
            await asked.wait()
            asked.clear()
            try:
                await bridge.reload(await asyncio.to_thread(load_config, path))
            except ConfigError as exc:
                log.error("config reload: %s; nothing changed", exc.one_line())
            except Exception:  # a bug must not end the reloads, nor the server
                log.exception("config reload failed")

    task = loop.create_task(reload_when_asked(), name="config reload")
    try:
        loop.add_signal_handler(signal.SIGHUP, asked.set)
    except (NotImplementedError, RuntimeError, AttributeError):  # no SIGHUP here (Windows)
        task.cancel()
        return lambda: None

    def stop() -> None:
        loop.remove_signal_handler(signal.SIGHUP)
        task.cancel()

    return stop


def _restart_keys(old: BridgeConfig, new: BridgeConfig) -> list[str]:
    """The keys of `server` and the RESTART_SECTIONS a new config changes that a running bridge
    cannot take (all but LIVE_SERVER_KEYS), as `section.key`, and `redis` when it changed."""
    keys = []
    for section in ("server", *RESTART_SECTIONS):
        before, after = getattr(old, section), getattr(new, section)
        keys += [
            f"{section}.{key}"
            for key in type(before).model_fields
            if getattr(before, key) != getattr(after, key)
            and not (section == "server" and key in LIVE_SERVER_KEYS)
        ]
    if old.redis != new.redis:  # a section that may be absent: named whole
        keys.append("redis")
    return keys


def search_index_path(config: BridgeConfig) -> str | None:
    """The folder of the config's on-disk search index; None when the index is kept in memory."""
    if not config.search.persist or config.store.path == ":memory:":
        return None
    if config.search.path:
        return config.resolve_path(config.search.path)
    return str(Path(config.resolve_path(config.store.path)).with_suffix(".index"))


def _index_folder(path: str, beside_store: bool = False) -> None:
    """The folder the search index's folder goes in, made when missing; a path that names a
    file, or a folder that cannot be made, stops the bridge naming it and the fix. `beside_store`:
    the path is the store's with `.index` (no search.path), so the fix is the store's path."""
    if beside_store:
        fix = (
            "fix: set store.path to a file in a folder that can be made (the index goes beside it), "
            "or set search.path to a folder of its own"
        )
    else:
        fix = "fix: set search.path to a folder (it is created), or leave it out to keep the index beside the store"
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(f"{path}: the search index's folder is a file; {fix}")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"{path}: the search index's folder cannot be made ({exc.strerror or exc}); {fix}"
        ) from None
