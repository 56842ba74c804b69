"""What an MCP upstream serves besides tools: resources, resource templates, prompts, completion
and logging, and the notices about them (`notifications/resources/updated`, the resources' and
prompts' `list_changed`, `notifications/message`).

A mixin of `MCPUpstream`: each method sends one request on the upstream's session and answers
the result as its wire JSON (camelCase keys), so that the bridge's MCP frontend hands it on
without knowing the adapter's types. Failures are `BridgeError`s with the classes the tool calls
have. The notices go to `notice_sink`, which the frontend sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import mcp.types as types
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bridge.masking import masked
from bridge.model import BridgeError

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["FEATURE_NOTICES", "ServerFeatures"]

log = logging.getLogger("bridge.adapters.mcp")

# The server notices handed to `notice_sink` (their method names).
FEATURE_NOTICES = (
    "notifications/resources/updated",
    "notifications/resources/list_changed",
    "notifications/prompts/list_changed",
    "notifications/message",
)
_RESOURCE_NOT_FOUND = -32002  # resources/read of an unknown URI, before 2026-07-28
_MAX_PAGES = 1000  # pages of one listing followed at most (a server whose cursor loops ends here)

NoticeSink = Callable[[str, str, dict[str, Any]], None]  # (upstream, method, params)


def _wire(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class ServerFeatures:
    """Resources, prompts, completion and logging of an MCP upstream's session."""

    serves_features: ClassVar[bool] = True
    name: str
    config: Any
    protocol_version: str | None
    notice_sink: NoticeSink | None = None
    # the resource URIs a 2026-07-28 session's listen stream follows, and the wish to re-open it
    _listen_uris: set[str]
    _relisten: asyncio.Event
    _listened: set[str]  # the URIs of the stream open now
    _listen_opened: asyncio.Event  # set when a stream is acknowledged

    def _init_features(self) -> None:
        self._listen_uris, self._listened = set(), set()
        self._relisten, self._listen_opened = asyncio.Event(), asyncio.Event()

    # provided by MCPUpstream
    def _session(self) -> Client:
        raise NotImplementedError

    async def _settled(self, exc: BaseException, what: str) -> BridgeError:
        raise NotImplementedError

    def feature_set(self) -> set[str]:
        """What the server declared: among `resources`, `subscribe`, `prompts`, `completions`,
        `logging`; empty while not connected."""
        client = getattr(self, "_client", None)
        if client is None:
            return set()
        caps = client.server_capabilities
        found = {
            key
            for key in ("resources", "prompts", "completions", "logging")
            if getattr(caps, key, None) is not None
        }
        if (
            caps.resources is not None
            and caps.resources.subscribe
            and self.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            found.add("subscribe")
        return found

    async def _listing(self, method: str, key: str) -> list[dict[str, Any]]:
        client = self._session()
        send = {
            "resources/list": client.list_resources,
            "resources/templates/list": client.list_resource_templates,
            "prompts/list": client.list_prompts,
        }[method]
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                page = await send(cursor=cursor, cache_mode="refresh")
                items += [_wire(item) for item in getattr(page, key)]
                cursor = page.next_cursor
                if not cursor:
                    break
        except Exception as exc:
            raise await self._settled(exc, method) from None
        return items

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every resource the server lists (all pages), as the wire has them."""
        return await self._listing("resources/list", "resources")

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        return await self._listing("resources/templates/list", "resource_templates")

    async def list_prompts(self) -> list[dict[str, Any]]:
        return await self._listing("prompts/list", "prompts")

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> dict[str, Any]:
        """`prompts/get`; a prompt the server does not know is `invalid_arguments` with
        error code `prompt_not_found`."""
        client = self._session()
        what = f"prompts/get {name[:200]}"
        return _wire(
            await self._asked(what, client.get_prompt(name, arguments), "prompt_not_found")
        )

    async def complete(
        self, ref: dict[str, Any], argument: dict[str, str], context: dict[str, str] | None
    ) -> dict[str, Any]:
        """`completion/complete` for a prompt's or a resource template's argument; `ref` as the
        wire has it, with the upstream's own name or template."""
        client = self._session()

        async def send() -> Any:
            reference: types.PromptReference | types.ResourceTemplateReference
            if ref.get("type") == "ref/prompt":
                reference = types.PromptReference.model_validate(ref, by_name=False)
            else:
                reference = types.ResourceTemplateReference.model_validate(ref, by_name=False)
            return await client.complete(reference, argument, context)

        return _wire(await self._asked("completion/complete", send(), "completion_refused"))

    async def subscribe_resource(self, uri: str, subscribe: bool = True) -> None:
        """`resources/subscribe` (or unsubscribe) of `uri` on a handshake-era session; on a
        2026-07-28 one, the URI joins (or leaves) those the listen stream follows, which is
        opened again with them."""
        client = self._session()
        if self.protocol_version in MODERN_PROTOCOL_VERSIONS:
            uris = self._listen_uris
            if (uri in uris) == subscribe:
                return
            uris.add(uri) if subscribe else uris.discard(uri)
            self._relisten.set()
            # followed once a stream naming it is acknowledged (bounded: the stream may be down)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.ping_timeout):
                    while subscribe and uri in self._listen_uris and uri not in self._listened:
                        opened = self._listen_opened = asyncio.Event()
                        await opened.wait()
            return
        what = f"resources/{'subscribe' if subscribe else 'unsubscribe'} {uri[:200]}"

        async def send() -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                if subscribe:
                    await client.subscribe_resource(uri)
                else:
                    await client.unsubscribe_resource(uri)

        not_found = (_RESOURCE_NOT_FOUND, types.INVALID_PARAMS)
        await self._asked(what, send(), "resource_not_found", not_found)

    async def set_logging_level(self, level: str) -> None:
        """`logging/setLevel` on a handshake-era session (the 2026-07-28 era has no logging)."""
        client = self._session()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level(level)  # type: ignore[arg-type]
        except Exception as exc:
            raise await self._settled(exc, f"logging/setLevel {level[:20]}") from None

    async def _asked(
        self,
        what: str,
        sent: Awaitable[Any],
        refusal: str,
        refused: tuple[int, ...] = (types.INVALID_PARAMS,),
    ) -> Any:
        """The answer to a request `sent` to the server. Raises BridgeError: `invalid_arguments`
        with error code `refusal` for a JSON-RPC error of a code in `refused`, else the error
        the failure settles to (`what` names the request in its message)."""
        try:
            return await sent
        except Exception as exc:
            if isinstance(exc, MCPError) and exc.code in refused:
                raise self._refused(what, exc, refusal) from None
            raise await self._settled(exc, what) from None

    def _refused(self, what: str, exc: MCPError, code: str) -> BridgeError:
        text = masked(exc.message, self.config.secrets())
        return BridgeError(
            f"{what}: {text}",
            error_class="invalid_arguments",
            error_code=code,
            recoverability="change_arguments",
            native_error_ref={"source": "mcp", "code": exc.code, "message": text},
        )

    def _feature_notice(self, message: Any) -> bool:
        """Hand a notice about resources, prompts or a log message to `notice_sink`; True when
        `message` was one."""
        if isinstance(message, types.ResourceUpdatedNotification):
            self._tell("notifications/resources/updated", {"uri": str(message.params.uri)})
        elif isinstance(message, types.ResourceListChangedNotification):
            self._tell("notifications/resources/list_changed", {})
        elif isinstance(message, types.PromptListChangedNotification):
            self._tell("notifications/prompts/list_changed", {})
        else:
            return False
        return True

    async def _listen_stream(
        self, client: Client, tools_changed: Callable[[], None], opened: Callable[[], None]
    ) -> bool:
        """Follow one `subscriptions/listen` stream (2026-07-28): tool changes go to
        `tools_changed`, the others to `notice_sink`; `opened` is called once it is
        acknowledged. True when it was left to be opened again
        with other resource URIs, False when the server ended it."""
        relisten = self._relisten = asyncio.Event()
        uris = sorted(self._listen_uris)
        asked_again = False
        try:
            async with client.listen(
                tools_list_changed=True,
                prompts_list_changed=True,
                resources_list_changed=True,
                resource_subscriptions=uris,
            ) as events:
                self._listened = set(uris)
                self._listen_opened.set()
                opened()
                async with anyio.create_task_group() as tasks:

                    async def watch() -> None:
                        nonlocal asked_again
                        await relisten.wait()
                        asked_again = True
                        tasks.cancel_scope.cancel()

                    tasks.start_soon(watch)
                    async for event in events:
                        if isinstance(event, ToolsListChanged):
                            tools_changed()
                        else:
                            self._listen_event(event)
                    tasks.cancel_scope.cancel()
        finally:
            self._listened = set()
        return asked_again

    def _listen_event(self, event: Any) -> bool:
        """The same for an event of a 2026-07-28 `subscriptions/listen` stream."""
        if isinstance(event, ResourceUpdated):
            self._tell("notifications/resources/updated", {"uri": event.uri})
        elif isinstance(event, ResourcesListChanged):
            self._tell("notifications/resources/list_changed", {})
        elif isinstance(event, PromptsListChanged):
            self._tell("notifications/prompts/list_changed", {})
        else:
            return False
        return True

    def _log_notice(self, params: types.LoggingMessageNotificationParams) -> None:
        self._tell("notifications/message", _wire(params))

    def _tell(self, method: str, params: dict[str, Any]) -> None:
        sink = self.notice_sink
        if sink is None:
            return
        try:
            sink(self.name, method, params)
        except Exception:  # the frontend's bug must not end the upstream's session
            log.exception("mcp upstream %s: %s not handed on", self.name, method)
