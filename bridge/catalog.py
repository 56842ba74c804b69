"""The federated catalog: every upstream's tools merged under namespaces with stable ids and
names, versioned, kept in step with the upstreams (re-listing, outages, reconnects with backoff),
and announced to listeners as change events."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import hashlib
import logging
import os
import random
import re
import resource
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bridge.model import (
    SCHEMA_VERSION,
    BridgeError,
    InputContract,
    OutputContract,
    ToolDeclaration,
    UpstreamHealth,
    UpstreamTool,
    has_surrogates,
    health_version,
    now_iso,
    takes_objects,
    tool_uuid,
    without_surrogates,
)
from bridge.sidecar import Sidecar
from bridge.store import Store
from bridge.upstream import Upstream, UpstreamEvent
from bridge.versions import Signed, UnencodableText, VersionRegistry, sign

__all__ = ["Catalog", "CatalogChange", "UpstreamSlot", "exposed_name", "NAME_SEPARATOR", "MAX_NAME", "UNSUPPORTED_INPUT"]

# The blocked reason of a tool whose input schema cannot accept an object (`{"type": "string"}`):
# every frontend passes arguments as an object, so no caller could reach it.
UNSUPPORTED_INPUT = "unsupported_input_schema"

log = logging.getLogger("bridge.catalog")
T = TypeVar("T")

NAME_SEPARATOR = "__"
MAX_NAME = 64
# Longest tool description kept (characters). Real ones run to a few thousand; a longer one (a
# whole manual, or a runaway upstream) would be sent in every listing and indexed whole, so it is
# cut here, with a warning, and ends in "…".
MAX_DESCRIPTION_CHARS = 32_768
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
# A listing of this many tools or more is declared on a worker thread (`Catalog._take`): about
# 40 µs a tool, so a smaller one holds the event loop under 10 ms.
OFF_LOOP_TOOLS = 200
# Tools of a listing declared, signed and versioned together (`Catalog._prepare`).
SIGN_BATCH = 1000
# The states of an upstream that is not pending (`Catalog.pending_providers`).
_SETTLED = frozenset({"ready", "disabled"})
# Debounce of change notices: a burst of list_changed notices costs one re-list.
DEBOUNCE_SECONDS = 0.05
# The ids of the tools each recent change touched, kept for `changed_since` (a surface then
# places again only those, not a million tools after each change): up to JOURNAL_IDS ids in all
# (800 KB); a change of more tools is kept as "many" (look at every tool).
JOURNAL_IDS = 100_000


# pydantic gives every record a set of the names of the fields it was given: 2.2 KB for a
# declaration, a third of its memory. `_declare` gives every field, so its declarations share one
# set of them (pydantic adds a field's name to it when the field is assigned: already there).
_DECLARED_FIELDS = set(ToolDeclaration.model_fields)
_CONTRACT_FIELDS = {"model_input_schema"}


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def exposed_name(namespace: str, native_name: str) -> str:
    """`<namespace>__<native name>` cleaned to `^[A-Za-z0-9_.-]{1,64}$`; a longer name keeps its
    head and gets a short hash of the whole, so distinct long names stay distinct."""
    raw = f"{namespace}{NAME_SEPARATOR}{native_name}"
    name = _INVALID.sub("_", raw).strip("_") or _short_hash(raw)
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 9].rstrip("_.-") + "_" + _short_hash(raw)
    return name


def _suffixed(base: str, tool_id: str, attempt: int = 0) -> str:
    tag = _short_hash(f"{tool_id}:{attempt}")
    return base[: MAX_NAME - 9].rstrip("_.-") + "_" + tag


@dataclass
class CatalogChange:
    """One step of the catalog. `upstream` is the namespace it concerns (None for several)."""

    upstream: str | None
    added: list[ToolDeclaration] = field(default_factory=list)
    updated: list[ToolDeclaration] = field(default_factory=list)
    removed: list[ToolDeclaration] = field(default_factory=list)
    state_changed: bool = False

    @property
    def empty(self) -> bool:
        return not (self.added or self.updated or self.removed or self.state_changed)


@dataclass
class UpstreamSlot:
    """An upstream and everything the catalog keeps for it."""

    upstream: Upstream
    health: UpstreamHealth
    tools: dict[str, ToolDeclaration] = field(default_factory=dict)  # native_id -> declaration
    semaphore: asyncio.Semaphore | None = None
    events: asyncio.Queue[UpstreamEvent] | None = None
    task: asyncio.Task[None] | None = None
    first_attempt: asyncio.Event = field(default_factory=asyncio.Event)
    retry_at: float | None = None
    sidecar: Sidecar | None = None
    unicode_warned: set[str] = field(default_factory=set)  # native ids whose bad text was reported
    long_warned: set[str] = field(default_factory=set)  # native ids whose cut description was reported
    failure_warned: str | None = None  # the reason of the failed attempts warned about since the last success
    needs_setup: bool = False  # the last attempt failed as no retry can cure (recoverability setup: a certificate, a proxy)
    stopping: str | None = None  # why new calls are refused while the calls in flight end (`Catalog._stop`)
    calls: int = 0  # calls in flight (`calling`)
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # set while no call is in flight
    phase: str | None = None  # what the catalog does with a large listing it takes (`_take`)

    def __post_init__(self) -> None:
        self.idle.set()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Count a call in flight, so that stopping the upstream can let it end first."""
        self.calls += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.calls -= 1
            if not self.calls:
                self.idle.set()

    @property
    def name(self) -> str:
        return self.upstream.name

    def retry_after(self) -> float | None:
        if self.retry_at is None:
            return None
        return max(0.0, round(self.retry_at - asyncio.get_running_loop().time(), 3))


class Catalog:
    """The merged catalog. Lookups are dictionary reads; changes come from the upstream
    supervisors (one asyncio task per upstream) or from `apply_tools`."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()
        self.versions = VersionRegistry(self.store)
        self.slots: dict[str, UpstreamSlot] = {}
        self._by_id: dict[str, ToolDeclaration] = {}
        self._by_name: dict[str, str] = {}  # exposed name or alias -> tool_id
        self._kinds: Counter[str] = Counter()  # tool_kind -> its tools
        self._assigned = self.store.assigned_names()
        self._listeners: list[Callable[[CatalogChange], None]] = []
        self.generation = 0
        self._journal: deque[tuple[int, tuple[str, ...] | None]] = deque()  # (generation, ids it touched)
        self._journal_ids = 0
        self._closed = False
        self._off_loop_jobs: set[asyncio.Future[Any]] = set()  # `_off_loop`
        self._pending_count = 0  # upstreams whose state is not settled (`has_pending`)
        self._pending: tuple[tuple[int, int], list[str]] = ((-1, -1), [])  # (key, names): pending_providers

    # ---------------------------------------------------------------- upstream management

    def add_upstream(self, upstream: Upstream) -> UpstreamSlot:
        """Take an upstream in; `start` starts it (on a started catalog too: it starts the
        upstreams not started yet)."""
        if upstream.name in self.slots:
            raise ValueError(f"two upstreams are named {upstream.name!r}")
        return self._slot_for(upstream)

    def _slot_for(self, upstream: Upstream) -> UpstreamSlot:
        """A new slot for `upstream`, in the place of the slot of its name if there is one."""
        slot = UpstreamSlot(
            upstream=upstream,
            health=UpstreamHealth(name=upstream.name, kind=upstream.kind or type(upstream).__name__),
            semaphore=asyncio.Semaphore(upstream.config.max_concurrency),
        )
        if upstream.config.launch is not None:
            slot.sidecar = Sidecar(upstream.name, upstream.config.launch, upstream.config.base_dir,
                                   on_exit=lambda reason: self._launch_exited(slot, reason))
        self.slots[upstream.name] = slot
        self._state_moved(None, slot.health.state)
        slot.health._on_state = self._state_moved
        upstream.subscribe(lambda event, slot=slot: self._on_event(slot, event))
        return slot

    async def remove_upstream(self, name: str, drain: float = 0.0) -> None:
        """Stop an upstream (its supervisor, its connection, its launched process) and take its
        tools out of the catalog, announced as removed. Their versions and names stay in the
        store: the upstream added again gets them back. With `drain`, the tools leave at once and
        new calls are refused, while the calls in flight get up to `drain` seconds to end."""
        slot = self.slots[name]
        if drain > 0:
            slot.stopping = "removed from the config"
            self._drop_tools(slot)
        await self._stop(name, drain)
        if slot.tools:
            self._drop_tools(slot)
        del self.slots[name]

    async def replace_upstream(self, upstream: Upstream, drain: float = 0.0) -> UpstreamSlot:
        """Restart an upstream with new settings: the one of its name is stopped and `upstream`
        takes its place (`start` starts it). Meanwhile its tools stay in the catalog, unavailable
        as during a reconnect; listed again unchanged, each keeps its id, name and version. An
        upstream no longer enabled keeps none. With `drain`, new calls are refused at once, while
        the calls in flight get up to `drain` seconds to end before the old one stops."""
        current = self.slots[upstream.name]
        if drain > 0 and current.tools:
            current.stopping = "restarting with new settings"
            self._mark(current, "connecting", current.stopping)
        old = await self._stop(upstream.name, drain)
        slot = self._slot_for(upstream)
        slot.tools = old.tools
        if not upstream.config.enabled:
            self._drop_tools(slot)
        elif slot.tools:
            slot.health.tool_count = len(slot.tools)
            self._mark(slot, "connecting", "restarting with new settings")
        return slot

    async def _stop(self, name: str, drain: float = 0.0) -> UpstreamSlot:
        """Stop one upstream's supervisor, connection and launched process, after the calls in
        flight have ended or `drain` seconds have passed (those still running then end with the
        connection); its slot is left in place, and no longer counted among the pending ones."""
        slot = self.slots[name]
        slot.stopping = slot.stopping or "stopping"
        if drain > 0 and slot.calls:
            log.info("upstream %s: waiting up to %gs for %d call(s) in flight", name, drain, slot.calls)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain):
                    await slot.idle.wait()
            if slot.calls:
                log.warning("upstream %s: %d call(s) still in flight after %gs are ended", name, slot.calls, drain)
        if slot.task is not None:
            slot.task.cancel()
            with contextlib.suppress(BaseException):
                await slot.task
        if self._off_loop_jobs:  # a listing it was declaring reads its tools until it ends
            await asyncio.gather(*self._off_loop_jobs, return_exceptions=True)
        with contextlib.suppress(Exception):
            await slot.upstream.close()
        if slot.sidecar is not None:
            await slot.sidecar.stop()
        slot.health._on_state = None
        slot.first_attempt.set()  # a start waiting for it goes on without it
        self._state_moved(slot.health.state, "disabled")
        self._pending = ((-1, -1), [])
        return slot

    def _drop_tools(self, slot: UpstreamSlot) -> None:
        removed = list(slot.tools.values())
        slot.tools = {}
        slot.health.tool_count = 0
        for decl in removed:
            self._forget(decl)
        self._emit(CatalogChange(upstream=slot.name, removed=removed, state_changed=True))

    async def start(self, wait: bool = True, on_progress: Callable[[UpstreamSlot], None] | None = None) -> None:
        """Start every upstream concurrently. With `wait`, return once each has either listed its
        tools or failed its first attempt (bounded by its `start_timeout`); a slow upstream delays
        only its own tools, never the others'."""
        for slot in self.slots.values():
            if slot.task is None and slot.upstream.config.enabled:
                slot.events = asyncio.Queue()
                slot.task = asyncio.create_task(self._supervise(slot), name=f"upstream:{slot.name}")
            elif not slot.upstream.config.enabled:
                slot.health.state = "disabled"
                slot.first_attempt.set()
        if not wait:
            return

        async def wait_first(slot: UpstreamSlot) -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(slot.upstream.config.start_timeout + 1):
                    await slot.first_attempt.wait()
            if on_progress:
                on_progress(slot)

        # the upstreams a reload adds or restarts meanwhile are waited for too; one it removes
        # or restarts is no longer waited for (`_stop` ends its first attempt)
        waited: dict[int, UpstreamSlot] = {}  # by id, each held so that no new slot takes its id
        while fresh := [s for s in self.slots.values() if id(s) not in waited]:
            waited.update((id(s), s) for s in fresh)
            await asyncio.gather(*(wait_first(s) for s in fresh))

    def starting(self) -> list[str]:
        """The enabled upstreams whose first attempt (connect and list) has not ended yet, in the
        order they were added."""
        return [s.name for s in self.slots.values()
                if s.upstream.config.enabled and s.stopping is None and not s.first_attempt.is_set()]

    def still_starting(self, ref: str) -> str:
        """What the answer for a name the catalog does not have adds while upstreams are on
        their first attempt ("" when none is): the one whose namespace the name starts with,
        else every one (the first 5). Told by the name alone, so that a tool hidden from the
        caller is answered as a missing one."""
        starting = self.starting()
        if not starting:
            return ""
        named = [name for name in starting if ref.startswith(name + NAME_SEPARATOR)]
        if named:
            return f"; upstream {max(named, key=len)!r} is still starting, and has not listed its tools yet"
        more = f" and {len(starting) - 5} more" if len(starting) > 5 else ""
        return f"; still starting, their tools not listed yet: {', '.join(starting[:5])}{more}"

    async def close(self) -> None:
        self._closed = True
        tasks = [s.task for s in self.slots.values() if s.task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._off_loop_jobs:  # what a cancelled task left on a worker thread ends first
            await asyncio.gather(*self._off_loop_jobs, return_exceptions=True)

        async def stop(slot: UpstreamSlot) -> None:
            with contextlib.suppress(Exception):
                await slot.upstream.close()
            if slot.sidecar is not None:
                await slot.sidecar.stop()

        # all at once: a stdio server may take its shutdown_timeout (2 s) to exit, and 300 of
        # them closed one after another held a SIGTERM'd bridge for 10 minutes
        failures = [r for r in await asyncio.gather(*(stop(s) for s in self.slots.values()), return_exceptions=True) if r is not None]
        if failures:
            raise failures[0]

    async def __aenter__(self) -> Catalog:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _on_event(self, slot: UpstreamSlot, event: UpstreamEvent) -> None:
        if slot.events is not None:
            slot.events.put_nowait(event)

    def _backoff(self, slot: UpstreamSlot, attempt: int) -> float:
        cfg = slot.upstream.config
        delay = min(cfg.retry_max, cfg.retry_initial * (2**attempt))
        return delay * (0.5 + random.random() / 2)  # jitter: replicas do not retry in step

    async def _connect(self, slot: UpstreamSlot) -> None:
        """Start and list until it works, with exponential backoff and jitter between attempts."""
        up, cfg = slot.upstream, slot.upstream.config
        loop = asyncio.get_running_loop()
        attempt = 0
        launched_at: float | None = None
        while True:
            slot.health.state = "connecting" if attempt == 0 else slot.health.state
            slot.health.attempts += 1
            try:
                if slot.sidecar is not None and not slot.sidecar.running:
                    launched_at = None
                    await slot.sidecar.start()  # a command that cannot start is a failed attempt
                    launched_at = loop.time()
                async with asyncio.timeout(cfg.start_timeout):
                    await up.start()
                    tools = await up.list_tools()
                # events queued while (re)connecting are stale: the listing just made covers them
                while slot.events is not None and not slot.events.empty():
                    slot.events.get_nowait()
                with contextlib.suppress(Exception):
                    slot.health.details = dict(await up.health())
                await self._take(slot, tools)  # a listing it cannot take is a failed attempt too
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - every failure is reported, none escapes
                # a start still busy names what it was doing (`mapping 22,361 operations`)
                busy = f" (still {up.phase})" if up.phase else ""
                reason = _reason(exc, f"no answer within start_timeout={cfg.start_timeout}s{busy}")
                if note := _out_of_files(exc):
                    reason = f"{reason} ({note})"
                with contextlib.suppress(Exception):
                    await up.close()
                exited = slot.sidecar.describe_exit() if slot.sidecar else None
                warming = launched_at is not None and exited is None and loop.time() - launched_at < cfg.start_timeout
                if warming:
                    # a process we just launched is still coming up: poll it briskly, report nothing yet
                    await self._wait_or_event(slot, min(0.1 * (1.5**attempt), 1.0))
                    attempt += 1
                    continue
                reason = f"{reason} ({exited})" if exited else reason
                delay = self._backoff(slot, attempt)
                attempt += 1
                slot.retry_at = loop.time() + delay
                slot.needs_setup = _needs_setup(exc)
                self._mark(slot, "failed" if not slot.tools else "unavailable", reason, next_retry=delay)
                slot.first_attempt.set()
                # a reason warned once; its repeats at INFO: 60 broken upstreams otherwise wrote
                # 130 warnings a minute, for as long as they stayed broken
                repeated = reason == slot.failure_warned
                slot.failure_warned = reason
                log.log(logging.INFO if repeated else logging.WARNING, "upstream %s failed: %s (retry in %.1fs%s)", slot.name, reason, delay,
                        "" if repeated else "; the same failure again is logged at INFO")
                await self._wait_or_event(slot, delay)
                continue
            slot.retry_at = None
            slot.failure_warned = None
            slot.needs_setup = False
            slot.first_attempt.set()
            return

    async def _wait_or_event(self, slot: UpstreamSlot, delay: float) -> None:
        """Sleep the backoff delay; drop events meanwhile (a reconnect lists everything anyway)."""
        assert slot.events is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        while (remaining := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await slot.events.get()

    def _launch_exited(self, slot: UpstreamSlot, reason: str) -> None:
        """The process launched for an upstream ended on its own, while the upstream was ready:
        the supervisor connects again at once (not at the next failed call); an upstream that no
        longer answers is marked unavailable with the exit's reason and reconnects, which
        launches the process again. While connecting, the attempt reads the exit itself."""
        if slot.events is not None and not self._closed and slot.health.state == "ready":
            slot.events.put_nowait(UpstreamEvent("launch_exited", reason=reason))

    async def _supervise(self, slot: UpstreamSlot) -> None:
        assert slot.events is not None
        up, cfg = slot.upstream, slot.upstream.config
        while not self._closed:
            await self._connect(slot)
            while True:
                try:
                    async with asyncio.timeout(cfg.refresh_interval):
                        event = await slot.events.get()
                except TimeoutError:
                    event = UpstreamEvent("tools_changed", reason="refresh interval")
                if event.kind == "tools_added":
                    try:
                        await self._take(slot, added=list(event.tools))
                    except Exception:  # noqa: BLE001 - the supervisor outlives a bad notice
                        log.exception("upstream %s: tools it added could not be taken in", slot.name)
                    continue
                if event.kind == "launch_exited":
                    if await self._still_answers(slot):
                        # another process serves the address (a second bridge on the same config,
                        # or one left from before): launching again would only fail, once a second
                        log.warning("upstream %s: %s, but the upstream still answers (another process serves it); "
                                    "it is launched again once it stops answering", slot.name, event.reason)
                        continue
                    event = UpstreamEvent("unavailable", reason=event.reason)
                if event.kind == "unavailable":
                    self._mark(slot, "unavailable", event.reason or "connection lost")
                    with contextlib.suppress(Exception):
                        await up.close()
                    break
                # tools_changed: let a burst settle, then re-list once
                await asyncio.sleep(DEBOUNCE_SECONDS)
                while not slot.events.empty():
                    pending = slot.events.get_nowait()
                    if pending.kind == "unavailable":
                        slot.events.put_nowait(pending)
                        break
                try:
                    async with asyncio.timeout(cfg.start_timeout):
                        tools = await up.list_tools()
                    await self._take(slot, tools)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # noqa: BLE001
                    self._mark(slot, "unavailable", _reason(exc, "re-list timed out"))
                    with contextlib.suppress(Exception):
                        await up.close()
                    break

    async def _still_answers(self, slot: UpstreamSlot) -> bool:
        """Whether the upstream answers a new connection (its start: a health probe, a card, the
        capabilities document) within its start_timeout."""
        up = slot.upstream
        try:
            with contextlib.suppress(Exception):
                await up.close()
            async with asyncio.timeout(up.config.start_timeout):
                await up.start()
            return True
        except asyncio.CancelledError:
            raise
        except BaseException:  # noqa: BLE001 - any failure is an answer of no
            return False

    def _mark(self, slot: UpstreamSlot, state: str, reason: str, next_retry: float | None = None) -> None:
        """An upstream went down: its tools stay listed, marked with the reason."""
        slot.health.state = state  # type: ignore[assignment]
        slot.health.reason = reason
        slot.health.next_retry_in = next_retry
        loading = "unavailable"
        updated = []
        for decl in slot.tools.values():
            if decl.loading_state != loading or decl.loading_reason != reason:
                decl.loading_state = loading
                decl.loading_reason = reason
                updated.append(decl)
        self._emit(CatalogChange(upstream=slot.name, updated=updated, state_changed=True))

    # ---------------------------------------------------------------- merging

    def apply_tools(self, upstream_name: str, tools: list[UpstreamTool]) -> CatalogChange:
        """Replace an upstream's tool set (what a listing does). Public for tests and benches."""
        return self._apply(self.slots[upstream_name], tools, ready=True)

    async def take_tools(self, upstream_name: str, tools: list[UpstreamTool]) -> CatalogChange:
        """`apply_tools` as a listing is taken while serving: a large one is declared off the
        event loop (`_take`). Public for tests and benches."""
        return await self._take(self.slots[upstream_name], tools)

    def _declare(self, slot: UpstreamSlot, tool: UpstreamTool) -> ToolDeclaration:
        """The declaration of one upstream tool (validated construction: with pydantic-core it is
        several times faster than `model_construct`, which this hot path must avoid)."""
        namespace = slot.name
        output = OutputContract(output_schema=tool.output_schema) if tool.output_schema else None
        contract = InputContract(model_input_schema=tool.input_schema)
        object.__setattr__(contract, "__pydantic_fields_set__", _CONTRACT_FIELDS)
        decl = ToolDeclaration(
            schema_version=SCHEMA_VERSION,
            tool_id=tool_uuid(namespace, tool.native_id),
            namespace=namespace,
            name="",
            aliases=[],
            title=tool.title,
            description=tool.description if len(tool.description) <= MAX_DESCRIPTION_CHARS else _cut_description(slot, tool),
            search_hint=tool.search_hint,
            lifecycle=tool.lifecycle,
            tool_kind=tool.tool_kind,
            capability_refs=None,
            input_contract=contract,
            output_contract=output,
            external_mappings=[_mapping(slot, tool)],
            annotations=dict(tool.annotations),
            upstream=namespace,
            upstream_kind=slot.upstream.kind,
            native_id=tool.native_id,
            native_name=tool.name,
            tags=_tags(slot, tool),
            safety=tool.safety,
            version=1,
            signature_digest="",
            loading_state="loaded",
            loading_reason=None,
            blocked_reason=_blocked_reason(tool),
            blocked_detail=tool.blocked_detail,
            timeout=tool.timeout,
        )
        object.__setattr__(decl, "__pydantic_fields_set__", _DECLARED_FIELDS)
        return decl

    def _name(self, decl: ToolDeclaration) -> str:
        """A tool keeps the name it was given before (store); else the clean base name; else the
        base name with a suffix derived from its id (deterministic, whatever the order)."""
        taken = self._by_name
        previous = self._assigned.get(decl.tool_id)
        if previous and taken.get(previous, decl.tool_id) == decl.tool_id:
            return previous
        base = exposed_name(decl.namespace, decl.native_name)
        if taken.get(base, decl.tool_id) == decl.tool_id:
            return base
        attempt = 0
        while True:
            candidate = _suffixed(base, decl.tool_id, attempt)
            if taken.get(candidate, decl.tool_id) == decl.tool_id:
                return candidate
            attempt += 1

    def _apply(self, slot: UpstreamSlot, tools: list[UpstreamTool] | None, ready: bool, *,
               added: list[UpstreamTool] | None = None) -> CatalogChange:
        """Take a listing (or the tools announced, `added`) at once, on the calling thread
        (`apply_tools`, and small listings)."""
        with _collector_paused(len(tools if tools is not None else added or ())):
            change, names = self._commit(slot, *self._prepare(slot, tools, added), ready)
            self.store.save_names(names)
            return change

    async def _take(self, slot: UpstreamSlot, tools: list[UpstreamTool] | None = None, *,
                    added: list[UpstreamTool] | None = None) -> CatalogChange:
        """Take an upstream's listing (`tools`), or the tools it announced (`added`) merged into
        its current ones. A large one is declared and signed on a worker thread, and only merged
        on the event loop: declaring 100,000 tools held the loop, and every call it serves,
        for 3.6 s, even when none of them had changed (under 25 ms now: bench/bench_catalog.py)."""
        size = len(tools if tools is not None else added or ())  # the tools to compare, and declare if changed
        if size < OFF_LOOP_TOOLS:
            return self._apply(slot, tools, ready=True, added=added)
        with _collector_paused(size):
            slot.phase = f"declaring and versioning {size:,} tools"
            try:
                prepared = await self._off_loop(self._prepare, slot, tools, added)
            finally:
                slot.phase = None
            change, names = self._commit(slot, *prepared, ready=True)
        if names:  # kept for the next start; meanwhile the catalog has them
            await self._off_loop(self.store.save_names, names)
        return change

    async def _off_loop(self, func: Callable[..., T], *args: Any) -> T:
        """`func(*args)` on a worker thread, run to its end even when the task awaiting it is
        cancelled (a listing's versions and names are not left half written); `close` waits
        for it."""
        job = asyncio.ensure_future(asyncio.to_thread(func, *args))
        self._off_loop_jobs.add(job)
        job.add_done_callback(self._off_loop_jobs.discard)
        return await asyncio.shield(job)

    def _prepare(self, slot: UpstreamSlot, tools: list[UpstreamTool] | None,
                 added: list[UpstreamTool] | None = None) -> tuple[set[str], list[ToolDeclaration]]:
        """The native ids listed, and the declarations (sorted by native id) of its tools that
        are new or changed, versioned: work that reads nothing the event loop changes meanwhile
        (the slot's tools change only when this upstream's listing is merged, which waits for
        this). With `added` instead of `tools`, the upstream's current tools stay as they are."""
        seen: dict[str, UpstreamTool] = {}
        for tool in tools if tools is not None else added or []:
            if has_surrogates(tool.native_id):  # cleaned before it is a key, so each listing finds it again
                tool = _cleaned(slot, tool)
            seen.setdefault(tool.native_id, tool)  # a native id listed twice counts once
        listed = set(seen) if tools is not None else {*slot.tools, *seen}
        # a tool listed as it was keeps its declaration (and version) without being declared
        # again: re-listing 100,000 unchanged tools took 4.1 s when each was declared and signed
        # to be compared, about 0.5 s now (bench/bench_catalog.py)
        # named in the order of their ids, those whose id is their name first: of two OpenAPI
        # operations given one operationId, the one it routes to keeps the clean name (the
        # other, whose id is its method and path, gets a suffix)
        order = sorted((n for n, tool in seen.items() if not _listed_as(slot, tool, slot.tools.get(n))),
                       key=lambda n: (seen[n].name != n, n))
        # declared, signed and versioned a batch at a time: the canonical text of every signature
        # of a listing, held at once, was Microsoft Graph beta's 217 MB (and the process kept it)
        changed: list[ToolDeclaration] = []
        for start in range(0, len(order), SIGN_BATCH):
            changed.extend(self._versioned(slot, seen, order[start:start + SIGN_BATCH]))
        return listed, changed

    def _versioned(self, slot: UpstreamSlot, seen: dict[str, UpstreamTool], order: list[str]) -> list[ToolDeclaration]:
        """The declarations of the tools `order` names that are new or changed, their versions
        written to the store."""
        fresh = [self._declare(slot, seen[n]) for n in order]
        try:
            signed = sign(fresh)
        except UnencodableText as exc:
            for i in exc.indices:
                fresh[i] = self._declare(slot, _cleaned(slot, seen[order[i]]))
            signed = sign(fresh)
        # a declaration equal to the one the tool has (its text cleaned as before) changes nothing;
        # those made again are let go here, one at a time (100,000 let go at once, as the lists
        # died, held the event loop 0.2 s)
        changed: list[ToolDeclaration] = []
        changed_signed: list[Signed] = []
        while fresh:
            decl, signature = fresh.pop(), signed.pop()
            old = slot.tools.get(decl.native_id)
            if old is not None and old.loading_state == "loaded" and _declared_facts(old) == _declared_facts(decl):
                continue
            changed.append(decl)
            changed_signed.append(signature)
        changed.reverse()
        changed_signed.reverse()
        # their versions, in the store before the catalog shows them (only this upstream's
        # listings change its tools' versions, and they are taken one after the other)
        self.versions.assign(changed, changed_signed)
        return changed

    def _commit(self, slot: UpstreamSlot, seen: set[str], changed: list[ToolDeclaration],
                ready: bool) -> tuple[CatalogChange, list[tuple[str, str, str, str]]]:
        """Merge prepared declarations (those new or changed, versioned) into the catalog: names,
        maps, change event; `seen` is every native id listed. Returns the change and the names
        given, for the store."""
        change = CatalogChange(upstream=slot.name, state_changed=ready and slot.health.state != "ready")
        if ready:
            slot.health.state = "ready"
            slot.health.reason = None
            slot.health.next_retry_in = None
            slot.health.last_ok = now_iso()
        for native_id in [n for n in slot.tools if n not in seen]:
            decl = slot.tools.pop(native_id)
            self._forget(decl)
            change.removed.append(decl)
        new_names: list[tuple[str, str, str, str]] = []
        for decl in changed:
            old = slot.tools.get(decl.native_id)
            if old is not None:
                decl.name, decl.aliases = old.name, old.aliases
                change.updated.append(decl)
                self._kinds[old.tool_kind] -= 1
            else:
                decl.name = self._name(decl)
                if self._assigned.get(decl.tool_id) != decl.name:
                    self._assigned[decl.tool_id] = decl.name
                    new_names.append((decl.namespace, decl.tool_id, decl.name, decl.native_id))
                change.added.append(decl)
            slot.tools[decl.native_id] = decl
            self._by_id[decl.tool_id] = decl
            self._kinds[decl.tool_kind] += 1
            self._by_name[decl.name] = decl.tool_id
            for alias in decl.aliases:
                self._by_name.setdefault(alias, decl.tool_id)
        slot.health.tool_count = len(slot.tools)
        self._emit(change)
        return change, new_names

    def _forget(self, decl: ToolDeclaration) -> None:
        if self._by_id.pop(decl.tool_id, None) is not None:
            self._kinds[decl.tool_kind] -= 1
        for name in (decl.name, *decl.aliases):
            if self._by_name.get(name) == decl.tool_id:
                del self._by_name[name]

    def _emit(self, change: CatalogChange) -> None:
        if change.empty:
            return
        self.generation += 1
        touched = [d.tool_id for d in (*change.added, *change.updated, *change.removed)]
        ids = tuple(touched) if len(touched) <= JOURNAL_IDS else None
        self._journal.append((self.generation, ids))
        self._journal_ids += len(ids or ())
        while self._journal_ids > JOURNAL_IDS or len(self._journal) > JOURNAL_IDS:  # changes of no tool count too
            self._journal_ids -= len(self._journal.popleft()[1] or ())
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a listener's bug must not stop the catalog
                log.exception("catalog listener failed")

    def subscribe(self, listener: Callable[[CatalogChange], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ---------------------------------------------------------------- lookups

    def get(self, tool_id: str) -> ToolDeclaration | None:
        return self._by_id.get(tool_id)

    def resolve(self, ref: str) -> ToolDeclaration | None:
        """By exposed name, alias or tool_id (a UUID, in either case: `A1B2…` is `a1b2…`)."""
        tool_id = self._by_name.get(ref, ref)
        found = self._by_id.get(tool_id)
        if found is None and len(ref) == 36 and not ref.islower():
            found = self._by_id.get(ref.lower())
        return found

    def declarations(self) -> Iterable[ToolDeclaration]:
        return self._by_id.values()

    def kinds(self) -> list[str]:
        """The `tool_kind`s of the catalog's tools, sorted."""
        return sorted(kind for kind, count in self._kinds.items() if count > 0)

    def changed_since(self, generation: int) -> set[str] | None:
        """The ids of the tools added, updated or removed after `generation`; None when that is
        not known (too long ago, or too many tools): look at every tool then."""
        if generation < 0 or generation > self.generation:
            return None
        ids: set[str] = set()
        if generation == self.generation:
            return ids
        if not self._journal or self._journal[0][0] > generation + 1:
            return None
        for at, touched in reversed(self._journal):
            if at <= generation:
                break
            if touched is None:
                return None
            ids.update(touched)
        return ids

    def __len__(self) -> int:
        return len(self._by_id)

    def slot(self, upstream: str) -> UpstreamSlot:
        return self.slots[upstream]

    def health(self) -> list[UpstreamHealth]:
        """Each upstream's health; one still connecting gives what its start is doing as the
        reason when that takes a while (`mapping 22,361 operations`, then `declaring and
        versioning 22,361 tools`), so a start of a minute is not taken for a hang."""
        for slot in self.slots.values():
            phase = slot.phase or slot.upstream.phase
            if phase is not None and slot.health.state == "connecting":
                slot.health.reason = phase
        return [s.health for s in self.slots.values()]

    def _state_moved(self, old: str | None, new: str) -> None:
        """An upstream's state changed (UpstreamHealth tells): the count of those pending follows."""
        self._pending_count += (new not in _SETTLED) - (old is not None and old not in _SETTLED)

    def has_pending(self) -> bool:
        """Whether `pending_providers` would name an upstream, without looking at each: asked
        after every change (ToolSearch), looking made a start over N upstreams take N² steps
        (1.4 s for 1,562 upstreams)."""
        return self._pending_count > 0

    def pending_providers(self) -> list[str]:
        """The upstreams still connecting or down, in the order they were added. Kept until an
        upstream's state changes or one is added: every search answers it."""
        key = (health_version(), len(self.slots))
        if self._pending[0] != key:
            self._pending = (key, [s.name for s in self.slots.values() if s.health.state not in _SETTLED])
        return list(self._pending[1])

    def require_ready(self, decl: ToolDeclaration) -> UpstreamSlot:
        """The slot to call a tool through, or a `dependency_unavailable` error with retry_after."""
        slot = self.slots.get(decl.upstream)
        if slot is None:
            raise BridgeError(f"upstream {decl.upstream!r} is not configured", error_class="unknown_tool")
        if slot.stopping is not None:
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.stopping}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=1.0,
            )
        if slot.health.state != "ready" and slot.needs_setup:
            # the catalog still tries again (the configuration may be fixed meanwhile), the caller should not
            raise BridgeError(f"upstream {slot.name!r} is {slot.health.state}: {slot.health.reason}",
                              error_class="dependency_unavailable", recoverability="setup")
        if slot.health.state != "ready":
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.health.state}: {slot.health.reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=slot.retry_after() or 1.0,
            )
        return slot


@contextlib.contextmanager
def _collector_paused(tools: int) -> Iterator[None]:
    """Building many long-lived objects triggers full cyclic-GC passes over the whole catalog
    again and again; nothing built for a listing is cyclic, so collection waits until the end."""
    pause = tools > 2000 and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause:
            gc.enable()


def _cut_description(slot: UpstreamSlot, tool: UpstreamTool) -> str:
    """The first MAX_DESCRIPTION_CHARS characters of a longer description, said once a tool."""
    if tool.native_id not in slot.long_warned:
        slot.long_warned.add(tool.native_id)
        log.warning("upstream %s: tool %r has a description of %d characters; it is cut to %d", slot.name, tool.name,
                    len(tool.description), MAX_DESCRIPTION_CHARS)
    return _cut(tool.description)


def _cut(description: str) -> str:
    return description if len(description) <= MAX_DESCRIPTION_CHARS else description[: MAX_DESCRIPTION_CHARS - 1] + "…"


def _declared_facts(decl: ToolDeclaration) -> tuple[Any, ...]:
    """What a declaration took from its upstream's tool (`Catalog._declare`): equal facts, the
    same declaration but for the names, versions and loading state the catalog gives it."""
    return (decl.native_name, decl.description, decl.title, decl.tool_kind, decl.input_schema, decl.output_schema,
            decl.safety, decl.tags, decl.search_hint, decl.external_mappings, decl.annotations, decl.lifecycle,
            decl.blocked_reason, decl.blocked_detail, decl.timeout)


def _listed_as(slot: UpstreamSlot, tool: UpstreamTool, decl: ToolDeclaration | None) -> bool:
    """Whether `decl`, loaded, is the declaration `Catalog._declare` makes of `tool` (its
    `_declared_facts` equal), told without making one: a few comparisons instead of a
    declaration and its signature."""
    if decl is None or decl.loading_state != "loaded":
        return False
    return _declared_facts(decl) == (
        tool.name, _cut(tool.description), tool.title, tool.tool_kind, tool.input_schema, tool.output_schema or None,
        tool.safety, _tags(slot, tool), tool.search_hint, [_mapping(slot, tool)], tool.annotations, tool.lifecycle,
        _blocked_reason(tool), tool.blocked_detail, tool.timeout)


def _tags(slot: UpstreamSlot, tool: UpstreamTool) -> list[str]:
    """A tool's tags and then its upstream's own, each once."""
    extra = slot.upstream.config.tags
    return list(dict.fromkeys([*tool.tags, *extra])) if extra else list(tool.tags)


def _mapping(slot: UpstreamSlot, tool: UpstreamTool) -> dict[str, Any]:
    """A tool's external mapping, naming its upstream's kind as `source` when it names none."""
    mapping = dict(tool.external_mapping)
    mapping.setdefault("source", slot.upstream.kind)
    return mapping


def _blocked_reason(tool: UpstreamTool) -> str | None:
    """The upstream's reason, or UNSUPPORTED_INPUT for a tool whose input cannot be an object."""
    return tool.blocked_reason or (None if takes_objects(tool.input_schema) else UNSUPPORTED_INPUT)


def _cleaned(slot: UpstreamSlot, tool: UpstreamTool) -> UpstreamTool:
    """The tool with its lone surrogates replaced (see `without_surrogates`), said once a tool."""
    cleaned: UpstreamTool = without_surrogates(tool)
    if cleaned.native_id not in slot.unicode_warned:
        slot.unicode_warned.add(cleaned.native_id)
        log.warning("upstream %s: tool %r has text that is not valid Unicode (a lone surrogate escape); "
                    "it is listed with U+FFFD in its place", slot.name, cleaned.name)
    return cleaned


def _reason(exc: BaseException, timeout_text: str) -> str:
    if isinstance(exc, TimeoutError):
        return timeout_text
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _reason(inner, timeout_text)
    text = str(exc) or type(exc).__name__
    return text if len(text) < 500 else text[:497] + "..."



def _needs_setup(exc: BaseException) -> bool:
    """Whether a failed attempt said only a change of configuration cures it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, BridgeError) and exc.recoverability == "setup"


def _out_of_files(exc: BaseException) -> str | None:
    """What to do when an attempt failed as the process ran out of file descriptors: said by
    EMFILE, or, as uvloop answers the spawns after the first EMFILE with `[Errno -1] Unknown
    error -1`, by an OSError while four fifths of the limit or more are open (when the failure is
    handled, the attempts that failed with it may have given some back)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        in_use = len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))
    except OSError as listing:  # the listing takes a descriptor too
        in_use = soft if listing.errno == errno.EMFILE else 0
    seen: set[int] = set()
    emfile = oserror = False
    while exc is not None and id(exc) not in seen and not emfile:
        seen.add(id(exc))
        oserror = oserror or isinstance(exc, OSError)
        emfile = isinstance(exc, OSError) and exc.errno == errno.EMFILE
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    if not emfile and (not oserror or soft == resource.RLIM_INFINITY or in_use < soft * 0.8):
        return None
    return (f"the bridge is out of file descriptors: {in_use} open, its limit (ulimit -n) is {soft}; "
            "raise the limit where it is started (`ulimit -n 65536`, LimitNOFILE= in a systemd unit), or serve fewer upstreams")
