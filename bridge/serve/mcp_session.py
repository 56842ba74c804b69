"""What each MCP caller is listed, and the change notices the MCP frontend sends.

A surface lists its loaded tools (those of reachable upstreams) plus, whenever anything is
deferred, the `search_tools` and `call_tool` meta tools. A handshake-era session also lists the
deferred tools it loaded through search. When the catalog changes, the notifier recomputes each
listing after a short debounce and tells only the callers whose listing changed: handshake-era
sessions with `notifications/tools/list_changed` on their connection, 2026-07-28 callers through
the `subscriptions/listen` streams of their surface. With Redis (`redis.url`), a change is also
published to the other replicas, and a change another replica published is told to the callers
whose streams this one holds (`remote_change`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from bridge.catalog import CatalogChange
from bridge.model import ToolDeclaration
from bridge.runtime import Bridge
from bridge.shared_state import Notice, SessionRecord, SharedStateUnavailable
from bridge.surface import Surface

__all__ = ["ChangeNotifier", "Listing", "SessionState", "listing_for"]

log = logging.getLogger("bridge.serve.mcp")


@dataclass
class SessionState:
    """One handshake-era connection: its surface, the deferred tools it loaded through search
    (oldest first), its connection (the SDK's, for notices sent outside any request) and, when
    replicas share sessions, its id (the key of its record in Redis)."""

    surface: str
    loaded: OrderedDict[str, None] = field(default_factory=OrderedDict)
    connection: Any = None
    fingerprint: str | None = None
    session_id: str | None = None

    async def tell_list_changed(self) -> None:
        """`notifications/tools/list_changed` on the session's stream (lost when none is open,
        as MCP allows)."""
        if self.connection is None:
            return
        try:
            await self.connection.notify("notifications/tools/list_changed", None)
        except Exception as exc:
            log.debug("list_changed notice not delivered: %s", exc)


@dataclass(frozen=True)
class Listing:
    """What `tools/list` returns to one caller, in order: meta tools first, then the surface's
    loaded tools by name, then the tools the session loaded through search, by name."""

    meta_tools: bool
    tools: list[ToolDeclaration]

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha1(b"meta" if self.meta_tools else b"plain")
        for decl in self.tools:
            digest.update(f"\x1f{decl.name}\x1e{decl.signature_digest}\x1e{decl.version}".encode())
        return digest.hexdigest()

    def __len__(self) -> int:
        return len(self.tools) + (2 if self.meta_tools else 0)


def _reachable(decls: Iterable[ToolDeclaration]) -> list[ToolDeclaration]:
    # Tools of an upstream that is down stay in the catalog (and in search) but leave tools/list,
    # so clients see them go and come back with the upstream.
    return [d for d in decls if d.loading_state == "loaded"]


def listing_for(surface: Surface, state: SessionState | None) -> Listing:
    tools = _reachable(surface.loaded())
    if state is not None and state.loaded:
        extra = []
        for tool_id in state.loaded:
            decl = surface.catalog.get(tool_id)
            if decl is not None and surface.place(decl).state == "deferred":
                extra.append(decl)
        tools += sorted(_reachable(extra), key=lambda d: d.name)
    return Listing(meta_tools=surface.counts()["deferred"] > 0, tools=tools)


class ChangeNotifier:
    """Session states of handshake-era connections, subscription buses per surface, and the
    debounced catalog watcher that sends list-changed notices."""

    def __init__(
        self, bridge: Bridge, *, debounce: float = 0.1, session_load_limit: int = 256
    ) -> None:
        self.bridge = bridge
        # the upstreams the changes of this burst concern (None: all), told to the other replicas
        self._changed: set[str] | None = set()
        self.debounce = debounce
        self.session_load_limit = session_load_limit
        # keyed by the SDK's per-connection object; an entry goes when its connection closes
        self._states: weakref.WeakKeyDictionary[Any, SessionState] = weakref.WeakKeyDictionary()
        self._buses: dict[str, InMemorySubscriptionBus] = {}
        self._listen: dict[str, ListenHandler] = {}
        self._surface_prints: dict[str, str] = {}
        self._follow_surfaces()
        self._handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._unsubscribe = bridge.catalog.subscribe(self._on_change)
        self._unsubscribe_reload = bridge.on_reload(self._on_reload)

    def _follow_surfaces(self) -> None:
        """A bus for each surface the bridge has; those of surfaces gone are closed (their
        listen streams end)."""
        names = self.bridge.surfaces.names()
        for name in [n for n in self._buses if n not in names]:
            self._listen.pop(name).close()
            del self._buses[name]
            self._surface_prints.pop(name, None)
        for name in [n for n in names if n not in self._buses]:
            self._buses[name] = bus = InMemorySubscriptionBus()
            self._listen[name] = ListenHandler(bus)
            surface = self.bridge.surfaces.get(name)
            assert surface is not None
            self._surface_prints[name] = listing_for(surface, None).fingerprint

    def _on_reload(self) -> None:
        """A reload may have changed surfaces: every listing is looked at again, as after a
        catalog change, and the callers whose listing changed are told."""
        self._follow_surfaces()
        self._on_change(None)

    # ------------------------------------------------------------------ sessions

    def state_for(self, connection: Any, surface: Surface, record: Any = None) -> SessionState:
        """The state of a handshake-era connection, created on its first request; `record`, the
        session's record as Redis had it at the start of the request (replicas sharing
        sessions), is what it loaded on any replica."""
        state = self._states.get(connection)
        if state is None or state.surface != surface.name:
            state = self._hold(connection, SessionState(surface=surface.name))
        if isinstance(record, SessionRecord):
            state.session_id = record.session_id
            state.loaded = OrderedDict.fromkeys(record.loaded)
        return state

    def adopt(self, connection: Any, record: SessionRecord) -> SessionState:
        """The state of a connection taken up from its record in Redis (opened on another
        replica): known from the start, so that changes reach its stream here."""
        state = SessionState(
            surface=record.surface,
            loaded=OrderedDict.fromkeys(record.loaded),
            session_id=record.session_id,
        )
        return self._hold(connection, state)

    def _hold(self, connection: Any, state: SessionState) -> SessionState:
        state.connection = connection
        self._states[connection] = state
        exit_stack = getattr(connection, "exit_stack", None)
        if exit_stack is not None:
            exit_stack.callback(self._forget, weakref.ref(connection))
        return state

    def _forget(self, ref: weakref.ref[Any]) -> None:
        connection = ref()
        if connection is not None:
            self._states.pop(connection, None)

    async def load(self, state: SessionState, decls: Iterable[ToolDeclaration]) -> bool | None:
        """Add deferred tools to a session's listing; True when the listing grew. The oldest
        loads drop out beyond `session_load_limit`. A session shared through Redis is added to
        there, for every replica: None when Redis cannot be reached (nothing was added)."""
        shared = self.bridge.shared
        if shared is not None and state.session_id is not None:
            ids = [decl.tool_id for decl in decls]
            before = state.loaded
            try:
                loaded = await shared.sessions.load(state.session_id, ids, self.session_load_limit)
            except SharedStateUnavailable:
                return None
            state.loaded = OrderedDict.fromkeys(loaded)
            return any(i in state.loaded and i not in before for i in ids)
        grew = False
        for decl in decls:
            if decl.tool_id in state.loaded:
                state.loaded.move_to_end(decl.tool_id)
            else:
                state.loaded[decl.tool_id] = None
                grew = True
        while len(state.loaded) > self.session_load_limit:
            state.loaded.popitem(last=False)
        return grew

    @property
    def session_count(self) -> int:
        return len(self._states)

    # ------------------------------------------------------------------ subscriptions (2026-07-28)

    def listen_handler(self, surface: str) -> ListenHandler:
        return self._listen[surface]

    def bus(self, surface: str) -> InMemorySubscriptionBus:
        """The change events of one surface (what its listen streams carry)."""
        return self._buses[surface]

    # ------------------------------------------------------------------ catalog changes

    def _on_change(self, change: CatalogChange | None) -> None:
        if self._changed is not None:
            if change is None or change.upstream is None:
                self._changed = None
            else:
                self._changed.add(change.upstream)
        # the first change of a burst schedules one recompute; later ones ride along with it
        if self._closed or self._handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a change applied outside any loop has nobody to tell yet
            return
        self._handle = loop.call_later(self.debounce, self._start_flush)

    def _start_flush(self) -> None:
        self._handle = None
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Recompute every listing now and notify the callers whose listing changed."""
        surfaces = self.bridge.surfaces
        base: dict[str, str] = {}
        changed_surfaces = []
        for name, bus in self._buses.items():
            surface = surfaces.get(name)
            if surface is None:
                continue
            base[name] = fingerprint = listing_for(surface, None).fingerprint
            if fingerprint != self._surface_prints.get(name):
                self._surface_prints[name] = fingerprint
                changed_surfaces.append(name)
                await bus.publish(ToolsListChanged())
        for state in list(self._states.values()):
            surface = surfaces.get(state.surface)
            if surface is None or state.connection is None:
                continue
            current = (
                listing_for(surface, state).fingerprint if state.loaded else base.get(state.surface)
            )
            if current == state.fingerprint:
                continue
            state.fingerprint = current
            await state.tell_list_changed()
        changed, self._changed = self._changed, set()
        shared = self.bridge.shared
        if shared is not None and (changed_surfaces or changed is None or changed):
            upstreams = None if changed is None else sorted(changed)
            notice = {"kind": "catalog", "surfaces": changed_surfaces, "upstreams": upstreams}
            await shared.link.publish(notice)

    async def remote_change(self, notice: Notice) -> None:
        """Another replica's catalog changed: its surfaces' listen streams here get an event, and
        the sessions here on those surfaces, or that loaded a tool of the upstreams it names,
        `notifications/tools/list_changed` (their next listing may come from that replica)."""
        named = notice.get("surfaces")
        surfaces = {s for s in named if isinstance(s, str)} if isinstance(named, list) else set()
        named = notice.get("upstreams")
        upstreams = set(named) if isinstance(named, list) else None  # None: every upstream
        for name in surfaces & self._buses.keys():
            await self._buses[name].publish(ToolsListChanged())
        catalog = self.bridge.catalog
        for state in list(self._states.values()):
            concerned = state.surface in surfaces
            if not concerned and state.loaded:
                loaded = [catalog.get(tool_id) for tool_id in state.loaded]
                concerned = upstreams is None or any(
                    d is not None and d.namespace in upstreams for d in loaded
                )
            if concerned:
                state.fingerprint = None
                await state.tell_list_changed()

    def end_listening(self) -> None:
        """End every open listen stream (2026-07-28 era) gracefully: the bridge is stopping."""
        for handler in self._listen.values():
            handler.close()

    async def aclose(self) -> None:
        self._closed = True
        self._unsubscribe()
        self._unsubscribe_reload()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        for handler in self._listen.values():
            handler.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
