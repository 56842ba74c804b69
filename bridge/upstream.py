"""The interface every upstream adapter implements, and the registry of upstream kinds.

An upstream is a transport to one vendor: the catalog starts it, lists its tools, calls them and
closes it, without ever knowing which protocol sits behind it.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import urllib.parse
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bridge.model import BridgeError, ToolProgress, UpstreamResult, UpstreamTool
from bridge.net import is_loopback

__all__ = [
    "CALLER_ASKS",
    "KINDS",
    "KIND_COMMANDS",
    "AskRefused",
    "Asker",
    "CallContext",
    "LaunchConfig",
    "Upstream",
    "UpstreamConfig",
    "UpstreamEvent",
    "kind_commands",
    "known_kinds",
    "off_loop_when",
    "register_kind",
    "upstream_class",
]

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,48}$"
T = TypeVar("T")


class LaunchConfig(BaseModel):
    """A process the bridge starts before connecting to an upstream (a local service on
    loopback, say) and stops when it closes. Readiness is the upstream answering."""

    model_config = ConfigDict(extra="forbid")

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class ConfigValueError(ValueError):
    """A validator's refusal that knows its fix: the config error then prints both."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


class UpstreamConfig(BaseModel):
    """Settings every upstream kind shares. Each adapter subclasses this with its own fields;
    unknown keys are errors, so a typo in a config never passes silently."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="namespace of the upstream's tools")
    kind: str
    enabled: bool = True
    timeout: float = Field(default=30.0, gt=0, description="seconds one call may take")
    start_timeout: float = Field(default=20.0, gt=0, description="seconds to connect and list")
    max_concurrency: int = Field(default=32, ge=1, description="calls in flight at once")
    refresh_interval: float | None = Field(
        default=None, gt=0, description="re-list every N seconds"
    )
    retry_initial: float = Field(default=0.5, gt=0, description="first reconnect delay, seconds")
    retry_max: float = Field(default=30.0, gt=0, description="longest reconnect delay, seconds")
    tags: list[str] = Field(default_factory=list, description="tags added to every tool")
    prefix: Literal["always", "never", "when_needed"] = Field(
        default="always",
        description="name tools (and prompts, resource URIs) with the upstream's name",
    )
    launch: LaunchConfig | None = Field(default=None, description="a local process to start first")
    base_dir: str = Field(
        default=".", exclude=True, description="set by the loader: relative paths start here"
    )
    acts_for_caller: bool = Field(
        default=False,
        exclude=True,
        description="set by the loader: calls carry the caller's own credential, obtained by the "
        "bridge (docs/identity.md), in place of the configured ones",
    )

    @model_validator(mode="after")
    def _retry_order(self) -> UpstreamConfig:
        if self.retry_initial > self.retry_max:
            raise ConfigValueError(
                f"retry_initial ({self.retry_initial:g} s) is longer than retry_max ({self.retry_max:g} s)",
                "make retry_initial the shorter: it is the first reconnect delay, retry_max the longest",
            )
        return self

    @model_validator(mode="after")
    def _port_zero_launched_on_loopback(self) -> UpstreamConfig:
        for key in self.port_zero_urls():
            url = getattr(self, key)
            if self.launch is None:
                raise ConfigValueError(
                    f"`{key}` names port 0 ({url}), which only an upstream with `launch:` may: "
                    "the bridge then picks a free port for the process it launches",
                    f"write the port the server listens on in `{key}`, or add `launch:`",
                )
            if not is_loopback(urllib.parse.urlsplit(url).hostname or ""):
                raise ConfigValueError(
                    f"`{key}` names port 0 ({url}) on a host that is not this machine's loopback: "
                    "the port is picked for the process the bridge launches here",
                    f"write `{key}` with 127.0.0.1 or localhost",
                )
        return self

    def port_zero_urls(self) -> list[str]:
        """The keys whose value is an http(s) URL naming port 0: with `launch:`, the port the
        bridge picks for the launched process (`bridge.sidecar.with_free_port`)."""
        return [key for key in type(self).model_fields if _names_port_zero(getattr(self, key))]

    def secrets(self) -> list[str]:
        """Configured values that must reach no caller, log line or error text: the environment
        given to the `launch` process here; each kind adds its own (tokens, keys, headers, the
        environment of the processes it runs)."""
        return list(self.launch.env.values()) if self.launch is not None else []

    def resolve_path(self, path: str) -> str:
        """A path from the config, relative to the config file's folder."""
        import os
        from pathlib import Path

        p = Path(os.path.expanduser(path))
        return str(p if p.is_absolute() else Path(self.base_dir) / p)


def _names_port_zero(value: object) -> bool:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        return False
    try:
        return urllib.parse.urlsplit(value).port == 0
    except ValueError:  # no port, or one out of range: the adapter's own checks say so
        return False


@dataclass(frozen=True)
class UpstreamEvent:
    """What an adapter tells the catalog between calls.

    - `tools_changed`: the tool list may differ; the catalog re-lists and applies the difference.
    - `unavailable`: the connection is gone (process exited, server away); the catalog marks the
      tools unavailable with `reason` and reconnects with backoff.
    - `tools_added`: `tools` are new and can be merged without a full re-list.
    - `launch_exited` (the catalog's own): the process launched for the upstream ended; the
      catalog connects again, and marks the upstream unavailable only if it no longer answers.
    """

    kind: Literal["tools_changed", "unavailable", "tools_added", "launch_exited"]
    reason: str | None = None
    tools: tuple[UpstreamTool, ...] = ()


ProgressSink = Callable[[ToolProgress], Awaitable[None]]
# Puts a server's request made during a call (`elicitation/create`, `sampling/createMessage`:
# the method and its params) to the client that made the call, and answers its result.
Asker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
# The Asker of the call running in this context, set by a frontend whose caller can answer.
CALLER_ASKS: ContextVar[Asker | None] = ContextVar("caller_asks", default=None)


class AskRefused(Exception):
    """The caller's client refused, or cannot take, a request put to it: the JSON-RPC error to
    answer the upstream with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class CallContext:
    """Per-call facts handed to `Upstream.invoke`. Cancellation is asyncio's: the pipeline cancels
    the task running `invoke`, and the adapter forwards the cancel upstream where the protocol can."""

    invocation_id: str
    timeout: float
    progress_sink: ProgressSink | None = None
    version: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # the timeout is the operator's invoke.default_timeout, which overrides an adapter's own
    # per-command limits too (ATIP command_timeouts): the adapter then uses `timeout` as it is
    timeout_fixed: bool = False
    # the W3C trace context the adapter passes on (HTTP headers, MCP `_meta`, an ATIP command's
    # TRACEPARENT): the bridge's span of this upstream call when it traces, else the caller's
    traceparent: str | None = None
    tracestate: str | None = None
    # the caller's own credential for this upstream (`Bearer …`, a token the identity provider
    # exchanged for the caller's): sent as the call's Authorization header, in place of the
    # upstream's configured credential, by the HTTP kinds that take it (docs/identity.md)
    authorization: str | None = field(default=None, repr=False)
    _sequence: int = 0

    def trace_headers(self) -> dict[str, str]:
        """`traceparent` and `tracestate` as HTTP headers (or MCP `_meta` keys); empty without."""
        if self.traceparent is None:
            return {}
        if self.tracestate is None:
            return {"traceparent": self.traceparent}
        return {"traceparent": self.traceparent, "tracestate": self.tracestate}

    def request_headers(self) -> dict[str, str]:
        """The headers an HTTP request of this call carries: the trace context, and the
        caller's `Authorization` when the bridge obtained one for it."""
        headers = self.trace_headers()
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        return headers

    async def report_progress(
        self,
        message: str | None = None,
        *,
        percent: float | None = None,
        current_step: int | None = None,
        total_steps: int | None = None,
        task_id: str | None = None,
    ) -> None:
        if self.progress_sink is None:
            return
        self._sequence += 1
        await self.progress_sink(
            ToolProgress(
                invocation_id=self.invocation_id,
                sequence=self._sequence,
                message=message,
                percent=percent,
                current_step=current_step,
                total_steps=total_steps,
                task_id=task_id,
            )
        )


class Upstream(abc.ABC):
    """One upstream connection.

    Lifecycle: `start()` connects (raises on failure), `list_tools()` may be called any number of
    times while started, `invoke()` calls one tool, `close()` releases everything and may be
    followed by another `start()` (the catalog reconnects that way). Implementations raise
    `bridge.model.BridgeError` for failures that have an error class (an upstream that is down
    raises it with `error_class="dependency_unavailable"`); any other exception is reported by the
    pipeline as `execution_failed`.
    """

    kind: ClassVar[str] = ""
    config_model: ClassVar[type[UpstreamConfig]] = UpstreamConfig
    # whether `read_resource` reads what the links in this kind's results name
    reads_resources: ClassVar[bool] = False
    _phase: str | None = None

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self._listeners: list[Callable[[UpstreamEvent], None]] = []

    @property
    def phase(self) -> str | None:
        """What a start that takes a while is doing now (`mapping 22,361 operations`), or None:
        the catalog gives it as the reason of an upstream still connecting, and of a
        start_timeout. An adapter sets it, or computes it in `_current_phase`."""
        return self._current_phase()

    @phase.setter
    def phase(self, value: str | None) -> None:
        self._phase = value

    def _current_phase(self) -> str | None:
        return self._phase

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect. Raise on failure with a message a user can act on."""

    @abc.abstractmethod
    async def list_tools(self) -> list[UpstreamTool]:
        """Every tool the upstream offers now (the adapter pages through the whole list)."""

    @abc.abstractmethod
    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        """Call one tool with already-validated arguments."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections, processes and tasks. Safe to call twice."""

    async def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """The contents of the resource at `uri`, which a result of this upstream linked: each
        `{uri, mimeType?, text}` or `{uri, mimeType?, blob}` (base64), as MCP's `resources/read`
        answers. Only kinds with `reads_resources` implement it."""
        raise BridgeError(
            f"upstream {self.name!r} ({self.kind}) serves no resources",
            error_class="capability_gap",
        )

    async def health(self) -> dict[str, Any]:
        """Kind-specific details for health reports (negotiated version, pid, ...)."""
        return {}

    def secrets(self) -> list[str]:
        """The secret values this upstream was given (its config's, and any it fetched since,
        such as access tokens): the pipeline masks them in every error it answers for a call."""
        return self.config.secrets()

    def subscribe(self, listener: Callable[[UpstreamEvent], None]) -> None:
        self._listeners.append(listener)

    def emit(self, event: UpstreamEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    async def __aenter__(self) -> Upstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# kind -> "module:Class"; imported on first use so a kind's dependencies load only when configured.
KINDS: dict[str, str | type[Upstream]] = {
    "mcp": "adapters.mcp.upstream:MCPUpstream",
    "openapi": "adapters.openapi.upstream:OpenAPIUpstream",
    "a2a": "adapters.a2a.upstream:A2AUpstream",
    "atip": "adapters.atip.upstream:ATIPUpstream",
    "a2t": "adapters.a2t.upstream:A2TUpstream",
}


def register_kind(kind: str, target: str | type[Upstream]) -> None:
    KINDS[kind] = target


def known_kinds() -> list[str]:
    return sorted(KINDS)


# kind -> the module of its `bridge <kind> ...` commands. Such a module has
# `add_commands(parser, parents)`, which adds its subcommands to `bridge <kind>`'s parser, and
# `async run(args) -> int`; it reads no config file.
KIND_COMMANDS: dict[str, str] = {"atip": "adapters.atip.cli"}


def kind_commands() -> dict[str, Any]:
    """The command module of each kind that has `bridge <kind>` commands, imported."""
    return {kind: importlib.import_module(module) for kind, module in KIND_COMMANDS.items()}


def upstream_class(kind: str) -> type[Upstream]:
    """The adapter class of a kind. Raises KeyError for an unknown kind and ImportError when the
    kind's module cannot be loaded."""
    target = KINDS[kind]
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module_name), attr)
        KINDS[kind] = target
    return target


async def off_loop_when(large: bool, func: Callable[..., T], *args: Any) -> T:
    """`func(*args)`, on a worker thread when `large`: an adapter's work over a whole listing
    (checking or converting each tool), which on the event loop would hold every call the bridge
    serves meanwhile. Only for work that reads and changes nothing the event loop does."""
    return await asyncio.to_thread(func, *args) if large else func(*args)
