"""MCP `resources/*` of the frontend over the upstreams' resources: `resources/list` and
`resources/templates/list` (what the caller's surface shows, paged), `resources/read` and
`resources/subscribe` / `unsubscribe` of a federated URI, routed to its upstream. A resource the
surface hides is answered as a missing one (-32002)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import SubscriptionsListenRequestParams, SubscriptionsListenResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from bridge.model import BridgeError
from bridge.serve.mcp_federated import FederatedItem
from bridge.serve.mcp_notices import FeatureNotices
from bridge.supervisor import UpstreamSlot
from bridge.surface import Surface
from bridge.translate.mcp import is_modern

__all__ = ["RESOURCE_NOT_FOUND", "ResourceHandlers", "mcp_error", "page_of", "resource_error"]

log = logging.getLogger("bridge.serve.mcp")

RESOURCE_NOT_FOUND = -32002  # MCP's code for a resource that does not exist
_CURSOR = re.compile(r"o[0-9]{1,12}")


def page_of(items: list[Any], cursor: str | None, size: int) -> tuple[list[Any], str | None]:
    """One page of `items` from the offset `cursor` names, and the next page's cursor."""
    offset = 0
    if cursor:
        if not _CURSOR.fullmatch(cursor):
            raise MCPError(
                INVALID_PARAMS,
                f"invalid cursor {cursor[:40]!r}: pass back the nextCursor of the previous page",
            )
        offset = int(cursor[1:])
    end = offset + size
    return items[offset:end], (f"o{end}" if end < len(items) else None)


def mcp_error(exc: BridgeError, what: str, not_found: int | None = None) -> MCPError:
    """A failed upstream request as the MCP error a client gets: `not_found` (when given) for
    a name or URI the upstream does not know, -32603 with the error class (and `retryAfter`
    when known) for any other failure."""
    data: dict[str, Any] = {"error_class": exc.error_class, "recoverability": exc.recoverability}
    if exc.retry_after is not None:
        data["retryAfter"] = exc.retry_after
    code = INTERNAL_ERROR
    if not_found is not None and exc.error_code in ("resource_not_found", "prompt_not_found"):
        code = not_found
    elif exc.error_class == "invalid_arguments":
        code = INVALID_PARAMS
    return MCPError(
        code, f"{what}: {exc.message}" if not exc.message.startswith(what) else exc.message, data
    )


class FeatureHandlers:
    """What the handlers of the federated features share: the notices (and their federated
    listings), the caller's surface of a request, and the page size."""

    def __init__(
        self,
        notices: FeatureNotices,
        surface_of: Callable[[ServerRequestContext[Any, Any]], Surface],
        page_size: int,
    ) -> None:
        self.federated = notices.federated
        self.notices = notices
        self.surface_of = surface_of
        self.page_size = page_size


class ResourceHandlers(FeatureHandlers):
    """The `resources/*` handlers over the federated resources."""

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        surface = self.surface_of(ctx)
        self.notices.client(ctx, surface)
        items = await self.federated.listing(surface, "resources")
        page, cursor = page_of(items, params.cursor if params else None, self.page_size)
        return types.ListResourcesResult(
            resources=valid_items(types.Resource, page, "resource"), next_cursor=cursor
        )

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        surface = self.surface_of(ctx)
        self.notices.client(ctx, surface)
        items = await self.federated.listing(surface, "templates")
        page, cursor = page_of(items, params.cursor if params else None, self.page_size)
        return types.ListResourceTemplatesResult(
            resource_templates=valid_items(types.ResourceTemplate, page, "resource template"),
            next_cursor=cursor,
        )

    async def route(self, surface: Surface, uri: str) -> tuple[UpstreamSlot, str] | None:
        """The upstream serving `uri` on `surface`, and its own URI; None for a URI no upstream
        shown there serves."""
        return await self.federated.resource(surface, uri)

    async def read(self, found: tuple[UpstreamSlot, str], uri: str) -> types.ReadResourceResult:
        """The contents of `uri` from its upstream, each content's URI the one the client gave
        (or, for an entry of another URI, that URI as the client would know it)."""
        slot, native = found
        upstream: Any = slot.upstream
        try:
            contents = await self.federated.call(
                slot, "resources/read", lambda: upstream.read_resource(native)
            )
        except BridgeError as exc:
            raise mcp_error(exc, f"resources/read {uri[:200]}", RESOURCE_NOT_FOUND) from None
        head = uri[: len(uri) - len(native)] if uri.endswith(native) else ""
        for content in contents:
            if isinstance(content, dict) and isinstance(content.get("uri"), str):
                content["uri"] = uri if content["uri"] == native else head + content["uri"]
        return _contents(uri, contents)

    async def read_linked(self, uri: str, surface: Surface) -> types.ReadResourceResult:
        """A resource an upstream linked in a result on `surface` (`ResourceLinks`), or an MCP
        error: -32002 for one no result on this surface linked (or that its upstream no longer
        has), -32603 with the error class, and `retryAfter` when known, for any other failure
        (the upstream down, say)."""
        try:
            contents = await self.federated.bridge.invoker.resource_links.read(uri, surface)
        except BridgeError as exc:
            raise resource_error(uri, exc) from None
        return _contents(uri, contents)

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """Follow a resource's updates: its upstream is subscribed while any client follows it."""
        uri = str(params.uri)
        surface = self.surface_of(ctx)
        client = self.notices.client(ctx, surface)
        found = await self.route(surface, uri)
        if found is None:
            raise MCPError(
                RESOURCE_NOT_FOUND, f"no resource {uri[:100]!r} on this bridge", {"uri": uri[:200]}
            )
        if client is not None and uri in client.subscriptions:
            return types.EmptyResult()
        slot, native = found
        if "subscribe" not in getattr(
            slot.upstream, "feature_set", lambda: set()
        )() and not _modern(slot):
            raise MCPError(
                INVALID_PARAMS,
                f"the upstream of {uri[:100]!r} does not serve resource subscriptions",
                {"uri": uri[:200]},
            )
        try:
            await self.notices.follow(slot, native, uri)
        except BridgeError as exc:
            raise mcp_error(exc, f"resources/subscribe {uri[:200]}", RESOURCE_NOT_FOUND) from None
        if client is not None:
            client.subscriptions.add(uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        surface = self.surface_of(ctx)
        client = self.notices.client(ctx, surface)
        if client is not None and uri in client.subscriptions:
            client.subscriptions.discard(uri)
            await self.notices.unfollow_exposed(uri)
        return types.EmptyResult()

    async def listen(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: SubscriptionsListenRequestParams,
        handler: Callable[..., Any],
    ) -> SubscriptionsListenResult:
        """A 2026-07-28 listen stream: the resources it names are followed upstream while it
        stays open (a URI no upstream shown serves is followed by nobody, as the spec allows)."""
        surface = self.surface_of(ctx)
        followed: list[tuple[str, str, str]] = []
        try:
            for uri in (params.notifications.resource_subscriptions or ())[:256]:
                found = await self.route(surface, uri)
                if found is None:
                    continue
                slot, native = found
                try:
                    await self.notices.follow(slot, native, uri)
                except BridgeError as exc:
                    log.info("listen: %s not followed: %s", uri[:200], exc.message)
                    continue
                followed.append((slot.name, native, uri))
            result: SubscriptionsListenResult = await handler(ctx, params)
            return result
        finally:
            for upstream, native, uri in followed:
                await self.notices.unfollow(upstream, native, uri)


def _modern(slot: UpstreamSlot) -> bool:
    version = getattr(slot.upstream, "protocol_version", None)
    return bool(version) and is_modern(version)


def valid_items(model: Any, items: list[FederatedItem], what: str) -> list[Any]:
    """The items the SDK's model accepts (an upstream's odd entry, a `what`, is left out, logged)."""
    out = []
    for item in items:
        try:
            out.append(model.model_validate(item.wire, by_name=False))
        except ValueError as exc:
            log.warning(
                "mcp upstream %s: %s %s left out of the listing: %s",
                item.upstream,
                what,
                item.native[:200],
                exc,
            )
    return out


def _contents(uri: str, contents: Any) -> types.ReadResourceResult:
    """An upstream's contents of `uri` as the SDK's result, or -32603 when they are not valid."""
    try:
        return types.ReadResourceResult.model_validate({"contents": contents}, by_name=False)
    except ValueError as exc:
        log.warning(
            "resources/read %s: the upstream's contents are not valid MCP: %s", uri[:200], exc
        )
        raise MCPError(
            INTERNAL_ERROR,
            f"the upstream's contents of {uri[:100]!r} are not valid MCP resource contents",
        ) from None


def resource_error(uri: str, exc: BridgeError) -> MCPError:
    """-32002 for a resource not found, else -32603 with the error class and `retryAfter`."""
    data: dict[str, Any] = {
        "uri": uri[:200],
        "error_class": exc.error_class,
        "recoverability": exc.recoverability,
    }
    if exc.retry_after is not None:
        data["retryAfter"] = exc.retry_after
    code = RESOURCE_NOT_FOUND if exc.error_code == "resource_not_found" else INTERNAL_ERROR
    return MCPError(code, exc.message, data)
