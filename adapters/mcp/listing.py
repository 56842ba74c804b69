"""An MCP upstream's listing: the whole `tools/list` cursor loop, each page checked tool by tool
with the SDK's types (a tool they reject is skipped and said, the others kept), and the tools
converted to the bridge's records."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import mcp.types as types
from mcp import Client
from mcp_types import methods as mcp_methods
from pydantic import ValidationError

from adapters.mcp.config import MCPConfig
from adapters.mcp.notices import NoticePosts
from adapters.mcp.sdk import absorb_tool_listing, send_raw
from bridge.model import BridgeError, UpstreamTool, validation_line
from bridge.translate.mcp import tool_from_mcp
from bridge.upstream import off_loop_when

__all__ = ["OFF_LOOP_TOOLS", "ToolListing", "check_result"]

log = logging.getLogger("bridge.adapters.mcp")

# A tools/list page of this many tools or more is checked, and a listing of as many converted, on a
# worker thread: both cost about 80 µs a tool, and on the event loop a listing of 20,000 tools
# would hold every call the bridge serves for over a second (bench/bench_mcp_upstream.py).
OFF_LOOP_TOOLS = 100


class ToolListing:
    """The listing side of `MCPUpstream` (a mixin: the upstream holds the session)."""

    name: str
    config: MCPConfig
    protocol_version: str | None
    skipped_tools: dict[str, str]
    _session_listed: bool
    _notices: NoticePosts | None

    def _session(self) -> Client:
        raise NotImplementedError

    def _listing_begun(self) -> None:
        raise NotImplementedError

    async def _settled(self, exc: BaseException, what: str) -> BridgeError:
        raise NotImplementedError

    async def list_tools(self) -> list[UpstreamTool]:
        client = self._session()
        self._listing_begun()
        tools: list[types.Tool] = []
        skipped: dict[str, str] = {}
        cursor: str | None = None
        seen: set[str] = set()
        for number in range(self.config.max_pages):
            try:
                raw = await send_raw(
                    client,
                    types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor)),
                )
                page, cursor = await off_loop_when(
                    _entries(raw) >= OFF_LOOP_TOOLS, self._tools_page, raw, number, skipped
                )
                listing = types.ListToolsResult(tools=page, next_cursor=cursor)
                page = absorb_tool_listing(client, listing, complete=number == 0 and not cursor)
            except Exception as exc:
                raise await self._settled(exc, "tools/list") from None
            tools.extend(page)
            if not cursor:
                break
            if cursor in seen:
                raise BridgeError(
                    f"MCP upstream {self.name!r} repeated the tools/list cursor {cursor!r}",
                    error_class="execution_failed",
                )
            seen.add(cursor)
        else:
            log.warning(
                "mcp upstream %s: tools/list still had pages after max_pages=%d",
                self.name,
                self.config.max_pages,
            )
        tools = _named_once(tools, skipped)
        if skipped != self.skipped_tools:  # said once, not at every re-list
            for name, why in skipped.items():
                log.warning("mcp upstream %s: skipped tool %r: %s", self.name, name, why)
        self.skipped_tools = skipped
        self._session_listed = True
        if self._notices is not None:
            self._notices.bound = self.config.ping_timeout
        return await off_loop_when(len(tools) >= OFF_LOOP_TOOLS, self._converted, tools)

    def _converted(self, tools: list[types.Tool]) -> list[UpstreamTool]:
        return [
            tool_from_mcp(
                tool.model_dump(by_alias=True, exclude_none=True, mode="json"),
                server_id=self.name,
                protocol_version=self.protocol_version,
            )
            for tool in tools
        ]

    def _tools_page(
        self, raw: dict[str, Any], number: int, skipped: dict[str, str]
    ) -> tuple[list[types.Tool], str | None]:
        """One tools/list page checked tool by tool with the SDK's types for the negotiated
        version: a tool they reject goes to `skipped` (its name and why), the others are kept."""
        version = self.protocol_version or types.LATEST_PROTOCOL_VERSION
        entries = raw.get("tools")
        head = {key: value for key, value in raw.items() if key != "tools"}
        if not isinstance(entries, list):
            check_result("tools/list", version, raw)  # the SDK's own words for what is wrong
            raise TypeError("the tools/list result has no list of tools")
        check_result(
            "tools/list", version, {**head, "tools": []}
        )  # the page itself: cursor, cache hints
        cursor = head.get("nextCursor")
        tools: list[types.Tool] = []
        for index, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, dict) else None
            label = name if isinstance(name, str) else f"#{index + 1} of page {number + 1}"
            try:
                check_result("tools/list", version, {**head, "tools": [entry]})
            except ValidationError as exc:
                skipped[label] = validation_line(exc, skip=2)  # the path starts tools.0
                continue
            try:
                tools.append(types.Tool.model_validate(entry, by_name=False))
            except ValidationError as exc:
                skipped[label] = validation_line(exc)
        return tools, cursor if isinstance(cursor, str) else None


def _entries(raw: dict[str, Any]) -> int:
    tools = raw.get("tools")
    return len(tools) if isinstance(tools, list) else 0


def check_result(method: str, version: str, data: dict[str, Any]) -> None:
    """Check `data` against the SDK's table of `method` results at `version`, as
    `ClientSession.send_request` does (raises pydantic's ValidationError)."""
    # a KeyError: the SDK has no table for it at this version, so nothing to check against
    with contextlib.suppress(KeyError):
        mcp_methods.validate_server_result(method, version, data)


def _named_once(tools: list[types.Tool], skipped: dict[str, str]) -> list[types.Tool]:
    """The tools of a listing with a name, each name once (the first kept): a tool is called by
    its name, so a nameless one cannot be, and a second of a name would never be."""
    kept: dict[str, types.Tool] = {}
    for index, tool in enumerate(tools):
        if not tool.name.strip():
            skipped[f"#{index + 1} of the listing"] = "a tool needs a name"
        elif tool.name in kept:
            skipped[tool.name] = "another tool of the listing has this name (the first is kept)"
        else:
            kept[tool.name] = tool
    return list(kept.values())
