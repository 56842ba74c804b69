"""`kind: a2t`: a remote A2T REST server as an upstream, in either dialect. A capabilities document
at `/.well-known/a2t-capabilities.json` means the a2t dialect (its `endpoints` are followed, never
assumed); otherwise the IETF A2T draft at `{url}/tools`. The same translation code that renders
the bridge's own REST frontend parses the remote shapes, so one bridge federates another."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal
from urllib.parse import quote

from pydantic import Field, SecretStr, field_validator
from yarl import URL

from adapters.a2t.http import A2THttp, HTTPAnswer, RetryConfig, error_result_of, safe_url
from adapters.http.tls import configured_ca_file
from bridge.model import BridgeError, UpstreamResult, UpstreamTool
from bridge.translate import a2t as a2t_wire
from bridge.translate import ietf
from bridge.translate.wire import WireFormatError
from bridge.upstream import (
    CallContext,
    ConfigValueError,
    Upstream,
    UpstreamConfig,
    UpstreamEvent,
    off_loop_when,
)

__all__ = ["GENERATION_HEADER", "A2TConfig", "A2TUpstream"]

log = logging.getLogger("adapters.a2t")

GENERATION_HEADER = (
    "A2T-Catalog-Generation"  # a bridge's catalog generation (see docs/upstreams/a2t.md)
)
_RETRY_READ = frozenset({500, 502, 503, 504})
_RETRY_INVOKE = frozenset({500, 502, 503})
MAX_PASSES = 10  # a2t listings capped below their total: passes over the offsets at most
# A listing whose pages go on listing only tools it already listed does not end (a fresh cursor,
# or a total the server never reaches, over the same tools): it stops and keeps what it read,
# instead of reading max_pages pages of repeats (gigabytes, then "no answer"). The IETF draft's
# cursor pages never repeat a tool: STALE_PAGES such pages in a row stop it. An a2t server may
# list in a random order, where pages repeat tools by chance: it stops once pages in a row were
# that stale with odds below STALE_ODDS for a server whose `total` is true (each page of n
# tools, with `seen` of `total` read, repeats only by chance (seen / total) ** n).
STALE_PAGES = 3
STALE_ODDS = 1e-6


class _Stale(Exception):
    """An a2t listing's pages stopped listing new tools (`_collect`)."""


def _item_key(item: Any, key: str) -> Any:
    """What tells a listed item apart: its `key` when it has one, else the item as written."""
    value = item.get(key) if isinstance(item, dict) else None
    return value if isinstance(value, str | int) else json.dumps(item, sort_keys=True, default=str)


# A listing of this many records or more is read into tools on a worker thread: about 13 µs a
# record, so a larger one (another bridge's catalog of 100,000 tools: 1.3 s) would hold every call
# the bridge serves.
OFF_LOOP_TOOLS = 1000


class A2TConfig(UpstreamConfig):
    """`kind: a2t`: one A2T REST server."""

    kind: str = "a2t"
    url: str = Field(
        description="the server's root URL (IETF: where /tools is; a2t: where /.well-known is)"
    )
    dialect: Literal["auto", "ietf", "a2t"] = Field(
        default="auto", description="auto: a2t when a capabilities document exists"
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="extra headers sent with every request"
    )
    bearer_token: SecretStr | None = Field(
        default=None, description="sent as `Authorization: Bearer <token>`"
    )
    pins: dict[str, int] = Field(
        default_factory=dict, description="IETF: tool name or toolId -> the version to use"
    )
    wrap_body: bool = Field(default=False, description='a2t: send arguments as {"body": {...}}')
    page_limit: int = Field(default=500, ge=1, description="IETF: pageLimit asked for each page")
    list_limit: int = Field(default=10_000, ge=1, description="a2t: limit asked for a listing")
    max_pages: int = Field(default=10_000, ge=1, description="pages read at most in one listing")
    connect_timeout: float = Field(default=10.0, gt=0, description="seconds to open a connection")
    connection_limit: int | None = Field(
        default=None, ge=1, description="open connections at most (default: max_concurrency)"
    )
    verify_tls: bool = True
    ca_file: str | None = Field(
        default=None,
        description="PEM file of CA certificates the server's is checked against, beside the system's",
    )
    retries: RetryConfig = Field(default_factory=RetryConfig)
    max_response_bytes: int = Field(
        default=16 << 20, ge=1024, description="larger answers are refused"
    )

    _ca_file_readable = field_validator("ca_file")(configured_ca_file)

    def secrets(self) -> list[str]:
        token = self.bearer_token.get_secret_value() if self.bearer_token is not None else ""
        return [*super().secrets(), *self.headers.values(), token]

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ConfigValueError(
                f"`url` must start with http:// or https:// (got {value!r})",
                "write the server's root URL, e.g. http://127.0.0.1:9103",
            )
        return value


def _same_origin(document: str, endpoint: str, key: str) -> str:
    """An endpoint of the capabilities document, resolved against it, on the document's origin:
    the upstream's `headers` and `bearer_token` go with every request, as they would with a
    redirect, which is not followed either."""
    here, there = URL(document), URL(document).join(URL(endpoint))
    if (there.scheme, there.host, there.port) != (here.scheme, here.host, here.port):
        raise BridgeError(
            f"the capabilities document at {safe_url(document)} names `endpoints.{key}` on another origin "
            f"({safe_url(there)}); the upstream's headers and bearer_token go only to the origin of `url`: "
            "configure that server as its own upstream",
            error_class="setup_required",
            recoverability="setup",
        )
    return str(there)


class A2TUpstream(Upstream):
    kind = "a2t"
    config_model = A2TConfig
    config: A2TConfig

    def __init__(self, config: A2TConfig) -> None:
        super().__init__(config)
        headers = dict(config.headers)
        if config.bearer_token is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token.get_secret_value()}"
        self._http = A2THttp(
            headers=headers,
            connect_timeout=config.connect_timeout,
            connection_limit=config.connection_limit or config.max_concurrency,
            retries=config.retries,
            max_response_bytes=config.max_response_bytes,
            verify_tls=config.verify_tls,
            ca_file=config.ca_file,
            ca_path=config.resolve_path(config.ca_file) if config.ca_file else None,
        )
        self.base = config.url.rstrip("/")
        self.dialect: Literal["ietf", "a2t"] | None = None
        self.capabilities: a2t_wire.Capabilities | None = None
        self._tools_url = ""
        self._groups_url: str | None = None
        self._invoke_urls: dict[str, str] = {}  # IETF: toolId -> invocation URL (pinned or current)
        self._names: dict[str, str] = {}  # IETF: toolId -> the name an invocation carries
        self._by_group: dict[
            str, dict[str, UpstreamTool]
        ] = {}  # a2t: group id ("" for none) -> name -> tool
        self._dirty_groups: set[str] = set()
        self._generation: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._http.open()
        try:
            await self._detect()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self._http.close()
        self.dialect = None
        self._by_group.clear()
        self._dirty_groups.clear()
        self._generation = None

    async def health(self) -> dict[str, Any]:
        details: dict[str, Any] = {"url": safe_url(self.base), "dialect": self.dialect}
        if self.capabilities is not None:
            details["capabilities_version"] = self.capabilities.version
            details["tools_endpoint"] = safe_url(self._tools_url)
        return details

    async def _get(self, url: str, params: dict[str, Any] | None = None) -> HTTPAnswer:
        return await self._http.request(
            "GET", url, params=params, timeout=self.config.start_timeout, retry_statuses=_RETRY_READ
        )

    async def _detect(self) -> None:
        cfg = self.config
        if cfg.dialect != "ietf":
            found = await self._capabilities()
            if found is not None:
                caps, where = found
                self.dialect, self.capabilities = "a2t", caps
                self._tools_url = _same_origin(where, caps.tools, "tools")
                self._groups_url = (
                    _same_origin(where, caps.groups, "groups") if caps.groups else None
                )
                return
            if cfg.dialect == "a2t":
                raise BridgeError(
                    f"{safe_url(self.base)} has no a2t capabilities document at {a2t_wire.CAPABILITIES_PATH}",
                    error_class="dependency_unavailable",
                )
        self.dialect = "ietf"
        self._tools_url = f"{self.base}/tools"

    async def _capabilities(self) -> tuple[a2t_wire.Capabilities, str] | None:
        """The capabilities document under the URL, else at the origin's root; None when neither
        answers one (an IETF server)."""
        candidates = [self.base + a2t_wire.CAPABILITIES_PATH]
        origin = str(URL(self.base).origin()) if URL(self.base).is_absolute() else self.base
        if origin.rstrip("/") != self.base:
            candidates.append(origin.rstrip("/") + a2t_wire.CAPABILITIES_PATH)
        for url in candidates:
            answer = await self._get(url)
            if answer.ok and isinstance(answer.body, dict):
                try:
                    return a2t_wire.parse_capabilities(answer.body), url
                except WireFormatError as exc:
                    log.warning(
                        "upstream %s: ignoring the capabilities document at %s: %s",
                        self.name,
                        safe_url(url),
                        exc,
                    )
            elif answer.status in (401, 403):
                raise BridgeError(
                    f"{safe_url(url)} answered HTTP {answer.status}: check the upstream's credentials",
                    error_class="credential_missing",
                    recoverability="setup",
                )
        return None

    # ------------------------------------------------------------------ listing

    async def list_tools(self) -> list[UpstreamTool]:
        if self.dialect is None:
            await self._detect()
        return await (self._list_ietf() if self.dialect == "ietf" else self._list_a2t())

    def _stale(self, url: str, pages: int, tools: int) -> None:
        log.warning(
            "upstream %s: GET %s: its pages go on listing only tools already listed; the paging does not end, "
            "so the listing stops at page %d with the %d tools read",
            self.name,
            safe_url(url),
            pages,
            tools,
        )

    async def _pages(self, url: str) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        listed: set[Any] = set()  # the items' toolIds
        stale = 0
        for page in range(1, self.config.max_pages + 1):
            params: dict[str, Any] = {"pageLimit": self.config.page_limit}
            if cursor:
                params["pageCursor"] = cursor
            answer = await self._get(url, params)
            if (
                not answer.ok
                or not isinstance(answer.body, dict)
                or not isinstance(answer.body.get("items"), list)
            ):
                raise BridgeError(
                    f"GET {safe_url(url)} answered HTTP {answer.status} without an `items` page: {answer.snippet()}",
                    error_class="dependency_unavailable",
                )
            fresh = [
                item for item in answer.body["items"] if _item_key(item, "toolId") not in listed
            ]
            listed.update(_item_key(item, "toolId") for item in fresh)
            items.extend(fresh)
            stale = stale + 1 if answer.body["items"] and not fresh else 0
            if stale >= STALE_PAGES:
                self._stale(url, page, len(items))
                return items
            paging = found if isinstance(found := answer.body.get("paging"), dict) else {}
            cursor = found if isinstance(found := paging.get("next"), str) else None
            if not cursor:
                return items
            if cursor in seen:
                raise BridgeError(
                    f"GET {safe_url(url)} returned the same pageCursor twice",
                    error_class="dependency_unavailable",
                )
            seen.add(cursor)
        raise BridgeError(
            f"GET {safe_url(url)}: more than max_pages={self.config.max_pages} pages",
            error_class="dependency_unavailable",
        )

    def _parse_signatures(self, items: list[Any]) -> dict[str, UpstreamTool]:
        tools: dict[str, UpstreamTool] = {}
        for index, item in enumerate(items):
            try:
                tool = ietf.parse_signature(item, base_url=self.base)
            except WireFormatError as exc:
                log.warning(
                    "upstream %s: skipping tool %d of the listing: %s at %s",
                    self.name,
                    index,
                    exc.message,
                    exc.pointer or "/",
                )
                continue
            tools.setdefault(tool.native_id, tool)
        return tools

    async def _list_ietf(self) -> list[UpstreamTool]:
        items = await self._pages(self._tools_url)
        tools = await off_loop_when(len(items) >= OFF_LOOP_TOOLS, self._parse_signatures, items)
        invoke_urls: dict[str, str] = {}
        out: list[UpstreamTool] = []
        for tool_id, tool in tools.items():
            base = f"{self._tools_url}/{quote(tool_id, safe='')}"
            pin = self.config.pins.get(tool.name, self.config.pins.get(tool_id))
            if pin is not None:
                tool = await self._pinned(tool, pin, base)
                invoke_urls[tool_id] = f"{base}/versions/{pin}:invoke"
            else:
                invoke_urls[tool_id] = f"{base}:invoke"
            out.append(tool)
        self._invoke_urls = invoke_urls
        self._names = {t.native_id: t.name for t in out}
        return out

    async def _pinned(self, current: UpstreamTool, pin: int, base: str) -> UpstreamTool:
        """The pinned version's signature (what the designer tested), keeping the current version
        number in the mapping; a pin the server does not know blocks the tool."""
        if current.external_mapping.get("version") == pin:
            current.external_mapping["pinned"] = True
            return current
        answer = await self._get(f"{base}/versions/{pin}")
        if answer.ok:
            try:
                tool = ietf.parse_signature(answer.body, base_url=self.base)
                tool.external_mapping["current_version"] = current.external_mapping.get(
                    "current_version"
                )
                tool.external_mapping["pinned"] = True
                return tool
            except WireFormatError as exc:
                reason = f"version {pin} is malformed ({exc.message})"
        else:
            reason = f"GET {safe_url(base)}/versions/{pin} answered HTTP {answer.status}"
        log.warning(
            "upstream %s: tool %s is pinned to version %d, which cannot be used: %s",
            self.name,
            current.name,
            pin,
            reason,
        )
        current.blocked_reason = "setup_required"
        current.blocked_detail = f"pinned to version {pin}, which the server cannot give: {reason}"
        current.description = f"{current.description}\n\n(Pinned to version {pin}, which the server cannot give: {reason}.)".strip()
        return current

    async def _collect(self, url: str) -> list[dict[str, Any]]:
        """Every tool of an a2t listing: one page with limit ≥ total when the server allows it,
        de-duplicated by name (the reference returns them in random order)."""
        cap = self.capabilities.limits.get("max_tools_per_request") if self.capabilities else None
        limit = min(self.config.list_limit, cap) if cap else self.config.list_limit
        seen: dict[str, dict[str, Any]] = {}
        read: dict[str, float] = {"pages": 0, "odds": 1.0}

        async def page(offset: int, size: int) -> tuple[int, int | None, int]:
            answer = await self._get(url, {"offset": offset, "limit": size})
            if not answer.ok:
                raise BridgeError(
                    f"GET {safe_url(url)} answered HTTP {answer.status}: {answer.snippet()}",
                    error_class="dependency_unavailable",
                )
            items, total = a2t_wire.parse_listing(answer.body, "tools")
            before = len(seen)
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    seen.setdefault(item["name"], item)
            read["pages"] += 1
            if not items or len(seen) > before or not total:
                read["odds"] = 1.0
            else:  # the odds of so many pages in a row listing no new tool, were `total` true
                read["odds"] *= min(len(seen) / total, 1.0) ** len(items)
                if read["odds"] < STALE_ODDS:
                    self._stale(url, int(read["pages"]), len(seen))
                    raise _Stale
            if url == self._tools_url and answer.headers.get(GENERATION_HEADER):
                self._generation = answer.headers[GENERATION_HEADER]
            served = answer.body.get("limit") if isinstance(answer.body.get("limit"), int) else size
            return len(items), total, served or size

        count, total, served = await page(0, limit)
        if total is None or len(seen) >= total or count < served:
            return list(seen.values())
        try:
            if not cap and total > served:
                count, total, served = await page(0, total)
                if total is None or len(seen) >= total:
                    return list(seen.values())
            for _ in range(
                MAX_PASSES
            ):  # offset pages over a random order can skip: more passes fill the gaps
                offset = 0
                while (
                    total is not None
                    and offset < total
                    and self.config.max_pages > offset // max(served, 1)
                ):
                    count, total, served = await page(offset, served)
                    if count == 0:
                        break
                    offset += count
                if total is None or len(seen) >= total:
                    break
        except _Stale:
            pass
        return list(seen.values())

    def _parse_tools(self, raw: list[dict[str, Any]]) -> list[UpstreamTool]:
        tools = []
        for index, item in enumerate(raw):
            try:
                tools.append(a2t_wire.parse_tool(item, base_url=self.base))
            except WireFormatError as exc:
                log.warning("upstream %s: skipping tool %d: %s", self.name, index, exc.message)
        return tools

    def _store(self, tools: list[UpstreamTool]) -> None:
        for tool in tools:
            group = tool.external_mapping.get("group_id") or ""
            self._by_group.setdefault(group, {})[tool.native_id] = tool

    async def _list_a2t(self) -> list[UpstreamTool]:
        dirty, self._dirty_groups = self._dirty_groups, set()
        if dirty and self._by_group and self._groups_url:
            for group in sorted(dirty):
                url = f"{self._groups_url}/{quote(group, safe='')}/tools"
                try:
                    raw = await self._collect(url)
                except BridgeError:
                    answer = await self._get(url)
                    if answer.status != 404:
                        raise
                    raw = []  # the group is gone
                self._by_group.pop(group, None)
                self._store(await off_loop_when(len(raw) >= OFF_LOOP_TOOLS, self._parse_tools, raw))
        else:
            self._by_group = {}
            raw = await self._collect(self._tools_url)
            self._store(await off_loop_when(len(raw) >= OFF_LOOP_TOOLS, self._parse_tools, raw))
        merged: dict[str, UpstreamTool] = {}
        for group_tools in self._by_group.values():
            for name, tool in group_tools.items():
                merged.setdefault(name, tool)
        return list(merged.values())

    # ------------------------------------------------------------------ invocation

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        if self.dialect is None:
            raise BridgeError(
                f"upstream {self.name!r} is not connected",
                error_class="dependency_unavailable",
                retry_after=1.0,
            )
        if self.dialect == "ietf":
            url = (
                self._invoke_urls.get(native_id)
                or f"{self._tools_url}/{quote(native_id, safe='')}:invoke"
            )
            answer = await self._call(
                url, ietf.render_invocation(self._names.get(native_id, native_id), arguments), ctx
            )
            if not answer.ok:
                return error_result_of(answer, f"POST {safe_url(url)}")
            try:
                return ietf.parse_invocation_response(answer.body)
            except WireFormatError as exc:
                raise BridgeError(
                    f"POST {safe_url(url)}: {exc.message}", error_class="execution_failed"
                ) from None
        url = f"{self._tools_url}/{quote(native_id, safe='')}"
        answer = await self._call(
            url, {"body": arguments} if self.config.wrap_body else (arguments or {}), ctx
        )
        if not answer.ok:
            return error_result_of(answer, f"POST {safe_url(url)}")
        try:
            result, meta = a2t_wire.parse_execute(answer.body)
        except WireFormatError as exc:
            raise BridgeError(
                f"POST {safe_url(url)}: {exc.message}", error_class="execution_failed"
            ) from None
        if meta is not None:
            self._on_meta(meta)
        return result

    async def _call(self, url: str, body: Any, ctx: CallContext) -> HTTPAnswer:
        headers = ctx.request_headers()  # the caller's Authorization over the configured one
        if self._generation:
            headers[GENERATION_HEADER] = self._generation
        try:
            return await self._http.request(
                "POST",
                url,
                body=body,
                headers=headers,
                timeout=ctx.timeout,
                retry_statuses=_RETRY_INVOKE,
            )
        except BridgeError as exc:
            if (
                exc.error_class == "dependency_unavailable" and exc.recoverability != "setup"
            ):  # no answer at all: the server is gone
                self.emit(UpstreamEvent("unavailable", reason=exc.message))
            raise

    def _on_meta(self, meta: a2t_wire.Meta) -> None:
        if meta.type == "tools_added":
            tools = self._parse_tools(meta.tools)
            if tools:
                self._store(tools)
                self.emit(UpstreamEvent("tools_added", tools=tuple(tools)))
        elif meta.type == "group_refresh":
            self._dirty_groups.update(meta.group_ids)  # none named: the next listing is a full one
            self.emit(
                UpstreamEvent("tools_changed", reason="group_refresh: " + ", ".join(meta.group_ids))
            )
