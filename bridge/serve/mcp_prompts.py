"""MCP `prompts/*`, `completion/complete` and `logging/setLevel` of the frontend over the
upstreams: the prompts the caller's surface shows (paged), a prompt got from its upstream, a
completion sent to the upstream owning the prompt or resource template it completes, and a
logging level passed to every upstream that logs. A prompt the surface hides is answered as a
missing one (-32602, as for a name no upstream has)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from bridge.model import BridgeError
from bridge.serve.mcp_notices import LOG_LEVELS
from bridge.serve.mcp_resources import FeatureHandlers, mcp_error, page_of, valid_items

__all__ = ["PromptHandlers"]

log = logging.getLogger("bridge.serve.mcp")


class PromptHandlers(FeatureHandlers):
    """The `prompts/*`, `completion/complete` and `logging/setLevel` handlers."""

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        surface = self.surface_of(ctx)
        self.notices.client(ctx, surface)
        items = await self.federated.listing(surface, "prompts")
        page, cursor = page_of(items, params.cursor if params else None, self.page_size)
        prompts = valid_items(types.Prompt, page, "prompt")
        return types.ListPromptsResult(prompts=prompts, next_cursor=cursor)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        surface = self.surface_of(ctx)
        found = await self.federated.prompt(surface, params.name)
        if found is None:
            raise MCPError(
                INVALID_PARAMS,
                f"no prompt named {params.name[:100]!r}",
                {"name": params.name[:200]},
            )
        slot, native = found
        upstream: Any = slot.upstream
        arguments = params.arguments
        try:
            wire = await self.federated.call(
                slot, "prompts/get", lambda: upstream.get_prompt(native, arguments)
            )
        except BridgeError as exc:
            raise mcp_error(exc, f"prompts/get {params.name[:200]}", INVALID_PARAMS) from None
        return types.GetPromptResult.model_validate(wire, by_name=False)

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """Completion of a prompt's or template's argument, by the upstream that owns it."""
        surface = self.surface_of(ctx)
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            found = await self.federated.prompt(surface, ref.name)
            what = f"prompt {ref.name[:100]!r}"
        else:
            found = await self.federated.template(surface, ref.uri)
            what = f"resource template {ref.uri[:100]!r}"
        if found is None:
            raise MCPError(INVALID_PARAMS, f"no {what} to complete")
        slot, native = found
        if "completions" not in slot.upstream.feature_set():  # type: ignore[attr-defined]
            return types.CompleteResult(completion=types.Completion(values=[], has_more=False))
        wire_ref: dict[str, Any] = (
            {"type": "ref/prompt", "name": native}
            if isinstance(ref, types.PromptReference)
            else {"type": "ref/resource", "uri": native}
        )
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context is not None else None
        upstream: Any = slot.upstream
        try:
            wire = await self.federated.call(
                slot, "completion/complete", lambda: upstream.complete(wire_ref, argument, context)
            )
        except BridgeError as exc:
            raise mcp_error(exc, f"completion/complete of {what}") from None
        return types.CompleteResult.model_validate(wire, by_name=False)

    async def set_logging_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """The caller's level (the log messages it is sent, at that level or above), passed to
        every upstream that logs: each then sends what the most talkative client wants."""
        surface = self.surface_of(ctx)
        client = self.notices.client(ctx, surface)
        level = str(params.level)
        if level not in LOG_LEVELS:
            raise MCPError(
                INVALID_PARAMS,
                f"unknown logging level {level[:20]!r}; one of {', '.join(LOG_LEVELS)}",
            )
        if client is not None:
            client.log_level = level
        wanted = self.notices.lowest_log_level() or level
        slots = self.federated.slots("logging")

        async def one(slot: Any) -> None:
            try:
                await self.federated.call(
                    slot, "logging/setLevel", lambda: slot.upstream.set_logging_level(wanted)
                )
            except BridgeError as exc:
                log.info(
                    "mcp upstream %s: logging/setLevel not passed on: %s", slot.name, exc.message
                )

        await asyncio.gather(*(one(slot) for slot in slots))
        return types.EmptyResult()
