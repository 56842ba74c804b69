"""Resource links in upstream results, and reading them back through the upstream that gave them.

A call's result may name resources its upstream serves: a `resource_link` block, or an embedded
resource's URI. For the last `KEPT` of them, `ResourceLinks` remembers which upstream gave it
through which surface, and forwards a read of that URI by a caller of that surface to that
upstream (MCP `resources/read`). Nothing else is forwarded: a URI no result gave, one another
surface's call gave, or one whose upstream the surface no longer shows reads as not found.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from bridge.catalog import Catalog
from bridge.model import BridgeError
from bridge.surface import Surface
from bridge.text import quoted
from bridge.upstream import Upstream

__all__ = ["KEPT", "MAX_URI", "ResourceLinks", "links_in"]

KEPT = 4096  # links remembered (surface and URI), the least recently given or read dropped first
MAX_URI = 2048  # characters: a longer URI is not remembered (nor readable through the bridge)
OWN_SCHEME = "bridge://"  # the bridge's own stored results, read by the frontends themselves
_LINKING = frozenset({"resource_link", "resource"})  # the kinds of blocks that may link one


def links_in(content: list[dict[str, Any]]) -> Iterator[str]:
    """The URIs a result's content blocks link: `resource_link` blocks and embedded resources."""
    for block in content:
        kind = block.get("type")
        if kind == "resource_link":
            uri = block.get("uri")
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            uri = block["resource"].get("uri")
        else:
            continue
        if isinstance(uri, str) and uri and len(uri) <= MAX_URI and not uri.startswith(OWN_SCHEME):
            yield uri


class ResourceLinks:
    """Which upstream gave which resource link through which surface, the last `kept` of them."""

    def __init__(self, catalog: Catalog, kept: int = KEPT) -> None:
        self.catalog = catalog
        self.kept = kept
        self._given: OrderedDict[tuple[str, str], Upstream] = (
            OrderedDict()
        )  # (surface, uri) -> the upstream

    def __len__(self) -> int:
        return len(self._given)

    def remember(self, surface: str, upstream_name: str, content: list[dict[str, Any]]) -> None:
        """Note the links in `content`, a result `upstream_name` gave a call through `surface`."""
        for block in content:
            if block.get("type") in _LINKING:
                break
        else:  # no block links anything, as in most results
            return
        slot = self.catalog.slots.get(upstream_name)
        if slot is None or not slot.upstream.reads_resources:
            return
        for uri in links_in(content):
            key = (surface, uri)
            self._given[key] = slot.upstream
            self._given.move_to_end(key)
        while len(self._given) > self.kept:
            self._given.popitem(last=False)

    async def read(self, uri: str, surface: Surface) -> list[dict[str, Any]]:
        """The contents of `uri` from the upstream that linked it in a result on `surface`.
        Raises BridgeError: `resource_not_found` (invalid_arguments) for a URI no result on the
        surface linked (or one of an upstream the surface no longer shows, or since replaced),
        `dependency_unavailable` for an upstream that is down, the upstream's own errors."""
        key = (surface.name, uri)
        upstream = self._given.get(key)
        slot = self.catalog.slots.get(upstream.name) if upstream is not None else None
        if (
            upstream is None
            or slot is None
            or slot.upstream is not upstream
            or not self._shows(surface, slot.tools.values())
        ):
            raise BridgeError(
                f"no resource {quoted(uri)} was linked by a result on this surface (the last {self.kept} links are kept)",
                error_class="invalid_arguments",
                error_code="resource_not_found",
                recoverability="change_arguments",
            )
        self._given.move_to_end(key)
        if slot.stopping is not None or slot.health.state != "ready":
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.stopping or slot.health.state}: {slot.health.reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=slot.retry_after() or 1.0,
            )
        timeout = upstream.config.timeout
        assert slot.semaphore is not None
        try:
            async with asyncio.timeout(timeout):
                async with slot.semaphore:
                    with slot.calling():
                        return await upstream.read_resource(uri)
        except TimeoutError:
            raise BridgeError(
                f"upstream {slot.name!r} did not answer resources/read within {timeout:g}s",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
            ) from None

    @staticmethod
    def _shows(surface: Surface, tools: Any) -> bool:
        """Whether `surface` shows any of an upstream's tools (a surface blocking them all hides
        the upstream, and its resources with it)."""
        return any(surface.visible(decl) for decl in tools)
