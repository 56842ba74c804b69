"""The supervision of upstreams: one slot per upstream, its start with retries and backoff, its
launched process, the re-listing of its tools on a change notice or the refresh interval, its
outages and reconnects, its calls in flight, and its health. What a listing changes in the
merged catalog is the catalog's (`bridge.catalog.Catalog`, which builds on this)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import random
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from bridge.call_slots import CallSlots
from bridge.model import (
    BridgeError,
    ToolDeclaration,
    UpstreamHealth,
    UpstreamState,
    UpstreamTool,
    health_version,
)
from bridge.sidecar import Sidecar
from bridge.upstream import Upstream, UpstreamEvent

__all__ = ["DEBOUNCE_SECONDS", "NAME_SEPARATOR", "UpstreamSlot", "UpstreamSupervisor"]

log = logging.getLogger("bridge.catalog")

NAME_SEPARATOR = "__"
# The states of an upstream that is not pending (`UpstreamSupervisor.pending_providers`).
_SETTLED = frozenset({"ready", "disabled"})
# Debounce of change notices: a burst of list_changed notices costs one re-list.
DEBOUNCE_SECONDS = 0.05


@dataclass
class UpstreamSlot:
    """An upstream and everything the catalog keeps for it."""

    upstream: Upstream
    health: UpstreamHealth
    tools: dict[str, ToolDeclaration] = field(default_factory=dict)  # native_id -> declaration
    semaphore: CallSlots | None = None
    events: asyncio.Queue[UpstreamEvent] | None = None
    task: asyncio.Task[None] | None = None
    first_attempt: asyncio.Event = field(default_factory=asyncio.Event)
    retry_at: float | None = None
    sidecar: Sidecar | None = None
    unicode_warned: set[str] = field(default_factory=set)  # native ids whose bad text was reported
    long_warned: set[str] = field(
        default_factory=set
    )  # native ids whose cut description was reported
    failure_warned: str | None = (
        None  # the reason of the failed attempts warned about since the last success
    )
    needs_setup: bool = False  # the last attempt failed as no retry can cure (recoverability setup: a certificate, a proxy)
    stopping: str | None = None  # why new calls are refused while the calls in flight end (`_stop`)
    calls: int = 0  # calls in flight (`calling`)
    # set when the last call in flight ends, made by whoever waits for it (`_stop`)
    idle: asyncio.Event | None = None
    phase: str | None = None  # what the catalog does with a large listing it takes (`_take`)

    def calling(self) -> UpstreamSlot:
        """Count a call in flight for a `with` block, so that stopping the upstream can let it
        end first. The slot is its own context manager: a call enters and leaves it with no
        generator and no event to clear."""
        return self

    def __enter__(self) -> None:
        self.calls += 1

    def __exit__(self, *exc_info: object) -> None:
        self.calls -= 1
        if not self.calls and self.idle is not None:
            self.idle.set()

    @property
    def name(self) -> str:
        return self.upstream.name

    def retry_after(self) -> float | None:
        if self.retry_at is None:
            return None
        return max(0.0, round(self.retry_at - asyncio.get_running_loop().time(), 3))


class UpstreamSupervisor:
    """The upstreams of a catalog, each supervised by an asyncio task of its own. A subclass
    merges what they list: `_take` (a listing or announced tools), `_drop_tools` (an upstream's
    tools leave) and `_mark` (an upstream went down: its tools stay, marked)."""

    def __init__(self) -> None:
        self.slots: dict[str, UpstreamSlot] = {}
        self._closed = False
        self._off_loop_jobs: set[asyncio.Future[Any]] = (
            set()
        )  # listings declared on a worker thread
        self._pending_count = 0  # upstreams whose state is not settled (`has_pending`)
        self._pending: tuple[tuple[int, int], list[str]] = (
            (-1, -1),
            [],
        )  # (key, names): pending_providers

    async def _take(
        self,
        slot: UpstreamSlot,
        tools: list[UpstreamTool] | None = None,
        *,
        added: list[UpstreamTool] | None = None,
    ) -> Any:
        raise NotImplementedError

    def _drop_tools(self, slot: UpstreamSlot) -> None:
        raise NotImplementedError

    def _mark(
        self, slot: UpstreamSlot, state: UpstreamState, reason: str, next_retry: float | None = None
    ) -> None:
        raise NotImplementedError

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
            health=UpstreamHealth(
                name=upstream.name, kind=upstream.kind or type(upstream).__name__
            ),
            semaphore=CallSlots(upstream.config.max_concurrency),
        )
        if upstream.config.launch is not None:
            slot.sidecar = Sidecar(
                upstream.name,
                upstream.config.launch,
                upstream.config.base_dir,
                on_exit=lambda reason: self._launch_exited(slot, reason),
            )
        self.slots[upstream.name] = slot
        self._state_moved(None, slot.health.state)
        slot.health._on_state = self._state_moved
        upstream.subscribe(functools.partial(self._on_event, slot))
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
            log.info(
                "upstream %s: waiting up to %gs for %d call(s) in flight", name, drain, slot.calls
            )
            if slot.idle is None or slot.idle.is_set():  # else another stop waits on it too
                slot.idle = asyncio.Event()
            idle = slot.idle
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(drain):
                    await idle.wait()
            if slot.calls:
                log.warning(
                    "upstream %s: %d call(s) still in flight after %gs are ended",
                    name,
                    slot.calls,
                    drain,
                )
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

    async def start(
        self, wait: bool = True, on_progress: Callable[[UpstreamSlot], None] | None = None
    ) -> None:
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
        return [
            s.name
            for s in self.slots.values()
            if s.upstream.config.enabled and s.stopping is None and not s.first_attempt.is_set()
        ]

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
        failures = [
            r
            for r in await asyncio.gather(
                *(stop(s) for s in self.slots.values()), return_exceptions=True
            )
            if r is not None
        ]
        if failures:
            raise failures[0]

    async def __aenter__(self) -> Self:
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
            except BaseException as exc:
                # a start still busy names what it was doing (`mapping 22,361 operations`)
                busy = f" (still {up.phase})" if up.phase else ""
                reason = _reason(exc, f"no answer within start_timeout={cfg.start_timeout}s{busy}")
                if note := _out_of_files(exc):
                    reason = f"{reason} ({note})"
                with contextlib.suppress(Exception):
                    await up.close()
                exited = slot.sidecar.describe_exit() if slot.sidecar else None
                warming = (
                    launched_at is not None
                    and exited is None
                    and loop.time() - launched_at < cfg.start_timeout
                )
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
                self._mark(
                    slot, "failed" if not slot.tools else "unavailable", reason, next_retry=delay
                )
                slot.first_attempt.set()
                # a reason warned once; its repeats at INFO: 60 broken upstreams otherwise wrote
                # 130 warnings a minute, for as long as they stayed broken
                repeated = reason == slot.failure_warned
                slot.failure_warned = reason
                log.log(
                    logging.INFO if repeated else logging.WARNING,
                    "upstream %s failed: %s (retry in %.1fs%s)",
                    slot.name,
                    reason,
                    delay,
                    "" if repeated else "; the same failure again is logged at INFO",
                )
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
                    except Exception:
                        log.exception(
                            "upstream %s: tools it added could not be taken in", slot.name
                        )
                    continue
                if event.kind == "launch_exited":
                    if await self._still_answers(slot):
                        # another process serves the address (a second bridge on the same config,
                        # or one left from before): launching again would only fail, once a second
                        log.warning(
                            "upstream %s: %s, but the upstream still answers (another process serves it); "
                            "it is launched again once it stops answering",
                            slot.name,
                            event.reason,
                        )
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
                except BaseException as exc:
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
        except BaseException:
            return False

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
            self._pending = (
                key,
                [s.name for s in self.slots.values() if s.health.state not in _SETTLED],
            )
        return list(self._pending[1])

    def require_ready(self, decl: ToolDeclaration) -> UpstreamSlot:
        """The slot to call a tool through, or a `dependency_unavailable` error with retry_after."""
        slot = self.slots.get(decl.upstream)
        if slot is None:
            raise BridgeError(
                f"upstream {decl.upstream!r} is not configured", error_class="unknown_tool"
            )
        if slot.stopping is not None:
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.stopping}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=1.0,
            )
        if slot.health.state != "ready" and slot.needs_setup:
            # the catalog still tries again (the configuration may be fixed meanwhile), the caller should not
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.health.state}: {slot.health.reason}",
                error_class="dependency_unavailable",
                recoverability="setup",
            )
        if slot.health.state != "ready":
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.health.state}: {slot.health.reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=slot.retry_after() or 1.0,
            )
        return slot


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
    return (
        f"the bridge is out of file descriptors: {in_use} open, its limit (ulimit -n) is {soft}; "
        "raise the limit where it is started (`ulimit -n 65536`, LimitNOFILE= in a systemd unit), or serve fewer upstreams"
    )
