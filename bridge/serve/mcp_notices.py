"""The notices of MCP upstreams about their resources, prompts and logs, handed on to the bridge's
MCP clients, and the resource subscriptions that ask for some of them.

A handshake-era client is told on its session: `notifications/resources/updated` for a URI it
subscribed to, the resources' and prompts' `list_changed` once it has asked for either, and
`notifications/message` once it has set a logging level (at that level or above). A 2026-07-28
client is told through the `subscriptions/listen` streams of its surface, which carry only what
each stream asked for. Each upstream is subscribed to a URI while any client follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
)
from mcp.shared.exceptions import MCPDeprecationWarning

from bridge.model import BridgeError
from bridge.runtime import Bridge
from bridge.serve.mcp_federated import Federated, FederatedItem, namespaced_uri
from bridge.serve.mcp_sdk import session_connection
from bridge.supervisor import UpstreamSlot
from bridge.surface import Surface
from bridge.translate.mcp import is_modern

__all__ = ["LOG_LEVELS", "FeatureClient", "FeatureNotices"]

log = logging.getLogger("bridge.serve.mcp")

# the upstream notices replicas sharing sessions hand to each other
RELAYED = frozenset(["notifications/resources/updated", "notifications/message"])
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass
class FeatureClient:
    """A handshake-era connection that asked for resources, prompts or logs."""

    surface: str
    session: Any
    subscriptions: set[str] = field(default_factory=set)  # exposed URIs
    log_level: str | None = None


class FeatureNotices:
    """Upstream notices to clients, and the upstream subscriptions clients' ones need."""

    def __init__(
        self,
        bridge: Bridge,
        bus: Callable[[str], InMemorySubscriptionBus],
        surfaces: Callable[[str], Surface | None],
    ) -> None:
        self.federated = Federated(bridge, self.on_notice)
        self._buses = bus
        self._surface = surfaces
        self._clients: weakref.WeakKeyDictionary[Any, FeatureClient] = weakref.WeakKeyDictionary()
        # (upstream, its URI) -> the exposed URIs clients follow it by, one count per follower
        self._followed: dict[tuple[str, str], Counter[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # told each resource update and log message of an upstream, with the exposed URIs the
        # update concerns (replicas sharing sessions hand them to each other)
        self.relay: Callable[[str, str, dict[str, Any], list[str]], None] | None = None

    # ------------------------------------------------------------------ clients

    def client(self, ctx: ServerRequestContext[Any, Any], surface: Surface) -> FeatureClient | None:
        """The state of a handshake-era connection (None on 2026-07-28), made on first use."""
        if is_modern(ctx.protocol_version):
            return None
        connection = session_connection(ctx.session)
        if connection is None:
            return None
        client = self._clients.get(connection)
        if client is None or client.surface != surface.name:
            if client is not None:
                self._drop(client)
            client = self._clients[connection] = FeatureClient(surface.name, ctx.session)
            exit_stack = getattr(connection, "exit_stack", None)
            if exit_stack is not None:
                exit_stack.callback(self._gone, weakref.ref(connection))
        client.session = ctx.session
        return client

    def _gone(self, ref: weakref.ref[Any]) -> None:
        connection = ref()
        client = self._clients.pop(connection, None) if connection is not None else None
        if client is not None:
            self._drop(client)

    def _drop(self, client: FeatureClient) -> None:
        """A client gone: what it followed is followed one client less."""
        for uri in list(client.subscriptions):
            self._spawn(self.unfollow_exposed(uri))
        client.subscriptions.clear()

    # ------------------------------------------------------------------ subscriptions

    async def follow(self, slot: UpstreamSlot, native: str, exposed: str) -> None:
        """One more follower of `exposed` (`native` of `slot`): the upstream is subscribed on the
        first. Raises the upstream's BridgeError when it refuses."""
        key = (slot.name, native)
        counts = self._followed.get(key)
        if counts is None:
            upstream: Any = slot.upstream
            await self.federated.call(
                slot, "resources/subscribe", lambda: upstream.subscribe_resource(native, True)
            )
            counts = self._followed.setdefault(key, Counter())
        counts[exposed] += 1

    async def unfollow(self, slot_name: str, native: str, exposed: str) -> None:
        key = (slot_name, native)
        counts = self._followed.get(key)
        if counts is None or counts[exposed] <= 0:
            return
        counts[exposed] -= 1
        if counts[exposed] <= 0:
            del counts[exposed]
        if counts:
            return
        del self._followed[key]
        slot = self.federated.bridge.catalog.slots.get(slot_name)
        if slot is None or slot.health.state != "ready":
            return
        upstream: Any = slot.upstream
        try:
            await self.federated.call(
                slot, "resources/unsubscribe", lambda: upstream.subscribe_resource(native, False)
            )
        except BridgeError as exc:
            log.info(
                "mcp upstream %s: resources/unsubscribe %s: %s",
                slot_name,
                native[:200],
                exc.message,
            )

    async def unfollow_exposed(self, exposed: str) -> None:
        for (upstream, native), counts in list(self._followed.items()):
            if exposed in counts:
                await self.unfollow(upstream, native, exposed)
                return

    # ------------------------------------------------------------------ upstream notices

    def on_notice(self, upstream: str, method: str, params: dict[str, Any]) -> None:
        """An upstream's notice (called on the adapter's task): handed on in a task of its own."""
        if method == "notifications/resources/list_changed":
            self.federated.forget(upstream, ("resources", "templates"))
        elif method == "notifications/prompts/list_changed":
            self.federated.forget(upstream, ("prompts",))
        elif self.relay is not None and method in RELAYED:
            native = str(params.get("uri", ""))
            self.relay(upstream, method, params, sorted(self._followed.get((upstream, native), ())))
        self._spawn(self._deliver(upstream, method, params))

    def _spawn(self, work: Any) -> None:
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:
            work.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _shows_upstream(self, surface: Surface | None, upstream: str) -> bool:
        if surface is None:
            return False
        probe = FederatedItem(upstream, "", namespaced_uri(upstream, ""), {})
        return self.federated.shows(surface, probe, "resources")

    async def _deliver(self, upstream: str, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/resources/updated":
            await self._updated(upstream, str(params.get("uri", "")))
            return
        surfaces = {
            name
            for name in self._surface_names()
            if self._shows_upstream(self._surface(name), upstream)
        }
        if method == "notifications/message":
            await self._log(upstream, params, surfaces)
            return
        event = ResourcesListChanged() if "resources" in method else PromptsListChanged()
        for name in surfaces:
            bus = self._bus(name)
            if bus is not None:
                await bus.publish(event)
        for client in list(self._clients.values()):
            if client.surface in surfaces:
                with contextlib.suppress(Exception):
                    if isinstance(event, ResourcesListChanged):
                        await client.session.send_resource_list_changed()
                    else:
                        await client.session.send_prompt_list_changed()

    def _bus(self, surface: str) -> InMemorySubscriptionBus | None:
        """The change events of a surface's listen streams (none for a surface gone)."""
        try:
            return self._buses(surface)
        except KeyError:
            return None

    def local_client(self, connection: Any) -> FeatureClient | None:
        return self._clients.get(connection)

    def surfaces_showing(self, upstream: str) -> set[str]:
        """The surfaces that show `upstream`'s resources, prompts and logs."""
        return {
            n for n in self._surface_names() if self._shows_upstream(self._surface(n), upstream)
        }

    def _surface_names(self) -> list[str]:
        return list(self.federated.bridge.surfaces.names())

    async def _updated(self, upstream: str, native: str) -> None:
        exposed = set(self._followed.get((upstream, native), ()))
        if not exposed:
            return
        for name in self._surface_names():
            bus = self._bus(name)
            if bus is not None and self._shows_upstream(self._surface(name), upstream):
                for uri in exposed:
                    await bus.publish(ResourceUpdated(uri=uri))
        for client in list(self._clients.values()):
            for uri in exposed & client.subscriptions:
                with contextlib.suppress(Exception):
                    await client.session.send_resource_updated(uri)

    async def _log(self, upstream: str, params: dict[str, Any], surfaces: set[str]) -> None:
        """A log message of an upstream, to each client of a surface showing it that set a
        level at or below the message's; its logger names the upstream."""
        level = params.get("level")
        if level not in LOG_LEVELS:
            return
        logger = params.get("logger")
        logger = f"{upstream}/{logger}" if logger else upstream
        for client in list(self._clients.values()):
            wanted = client.log_level
            if wanted is None or client.surface not in surfaces:
                continue
            if LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
                continue
            with contextlib.suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # the handshake era has it
                await client.session.send_log_message(level, params.get("data"), logger)

    def lowest_log_level(self) -> str | None:
        """The most talkative level a client set, or None when none did."""
        levels = [c.log_level for c in self._clients.values() if c.log_level is not None]
        return min(levels, key=LOG_LEVELS.index) if levels else None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
