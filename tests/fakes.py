"""An in-test upstream: one more implementation of the Upstream interface, over real asyncio."""

from __future__ import annotations

import asyncio
from typing import Any

from bridge.model import BridgeError, SafetyHints, UpstreamResult, UpstreamTool
from bridge.upstream import CallContext, Upstream, UpstreamConfig, UpstreamEvent


class FakeConfig(UpstreamConfig):
    kind: str = "fake"
    fail_start: str | None = None
    start_delay: float = 0.0
    secret: str | None = None  # a credential the upstream is given (a token, say)

    def secrets(self) -> list[str]:
        return [*super().secrets(), *([self.secret] if self.secret else [])]


def tool(
    name: str,
    *,
    props: dict[str, Any] | None = None,
    required: list[str] | None = None,
    destructive: bool | None = None,
    read_only: bool = False,
    **extra: Any,
) -> UpstreamTool:
    sources = {}
    if destructive is not None:
        sources["destructive"] = "declared"
    return UpstreamTool(
        native_id=extra.pop("native_id", name),
        name=name,
        description=extra.pop("description", f"The {name} tool."),
        input_schema={
            "type": "object",
            "properties": props or {"text": {"type": "string"}},
            "required": required or [],
        },
        safety=SafetyHints(destructive=bool(destructive), read_only=read_only, sources=sources),
        **extra,
    )


class FakeUpstream(Upstream):
    """Tools and behaviour set by the test; calls run as real tasks that can block or fail."""

    kind = "fake"
    config_model = FakeConfig

    def __init__(
        self, config: FakeConfig | None = None, tools: list[UpstreamTool] | None = None, **kw: Any
    ) -> None:
        super().__init__(config or FakeConfig(name=kw.pop("name", "fake"), **kw))
        self.tools = tools or [tool("echo")]
        self.started = 0
        self.closed = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.gate: asyncio.Event | None = None  # when set, calls wait for it
        self.result: UpstreamResult | None = None
        self.raise_error: BaseException | None = None
        self.start_gate: asyncio.Event | None = None
        self.close_gate: asyncio.Event | None = None  # when set, closing waits for it

    async def start(self) -> None:
        self.started += 1
        if self.start_gate is not None:
            await self.start_gate.wait()
        if self.config.start_delay:
            await asyncio.sleep(self.config.start_delay)
        if self.config.fail_start:
            raise ConnectionError(self.config.fail_start)

    async def list_tools(self) -> list[UpstreamTool]:
        return list(self.tools)

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        self.calls.append((native_id, arguments))
        await ctx.report_progress("working", percent=50)
        if self.gate is not None:
            await self.gate.wait()
        if self.raise_error is not None:
            raise self.raise_error
        if self.result is not None:
            return self.result
        return UpstreamResult(
            content=[{"type": "text", "text": str(arguments.get("text", ""))}],
            structured_content={"echo": arguments},
        )

    async def close(self) -> None:
        self.closed += 1
        if self.close_gate is not None:
            await self.close_gate.wait()

    def change_tools(self, tools: list[UpstreamTool]) -> None:
        self.tools = tools
        self.emit(UpstreamEvent("tools_changed"))

    def drop(self, reason: str) -> None:
        self.emit(UpstreamEvent("unavailable", reason=reason))


__all__ = ["BridgeError", "FakeConfig", "FakeUpstream", "tool"]
