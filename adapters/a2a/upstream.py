"""The A2A upstream: a peer agent, found through its agent card, whose every skill is a tool.

A call sends one message to the agent over the card's preferred transport that a2a-sdk speaks
(JSON-RPC or HTTP+JSON, protocol 1.0 or 0.3). A reply message is the result; a task is followed
to a terminal state by streaming when the agent streams (status updates become progress) or by
polling, within the call's timeout. A task that needs input comes back as a `needs_input`
result carrying its task and context ids; a cancelled call cancels the agent's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.types import CancelTaskRequest, GetTaskRequest
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError
from pydantic import ValidationError

from adapters.a2a.agent import Agent
from adapters.a2a.asking import answered_by_caller
from adapters.a2a.card import (
    CardFetch,
    CardSource,
    RedactingFilter,
    bind_credentials,
    chosen_interface,
    spoken_card,
)
from adapters.a2a.config import A2AConfig
from adapters.a2a.failures import CallFailures, first_fault
from adapters.a2a.mapping import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    TaskTracker,
    agent_tool_id,
    build_request,
    result_from_tracker,
    tools_from_card,
)
from adapters.a2a.transport import (
    BoundedTransport,
    cut_off,
    on_new_connection,
    proxy_mounts,
    reused_dropped,
)
from adapters.http.proxy import loopback_direct
from adapters.http.tls import added_cas, system_cas
from bridge.masking import masked
from bridge.model import BridgeError, UpstreamResult, UpstreamTool
from bridge.upstream import CallContext, Upstream, UpstreamConfig, UpstreamEvent

__all__ = ["A2AUpstream"]

log = logging.getLogger("adapters.a2a")

TRANSPORTS = ("JSONRPC", "HTTP+JSON")
QUESTIONS_KEPT = 4096  # tasks whose question (needs_input) is remembered, to tell an answer's stale snapshot from a new ask


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[Any]) -> AsyncIterator[AsyncIterator[Any]]:
    """`stream`, closed on the way out when it can be (the SDK's streams are async generators,
    declared as iterators): a call cut short ends its HTTP stream at once."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


class A2AUpstream(CallFailures, Upstream):
    kind: ClassVar[str] = "a2a"
    config_model: ClassVar[type[UpstreamConfig]] = A2AConfig
    config: A2AConfig

    def __init__(self, config: A2AConfig) -> None:
        super().__init__(config)
        self._http: httpx.AsyncClient | None = None
        self._source: CardSource | None = None
        self._agent: Agent | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._cancels: set[asyncio.Task[None]] = set()
        self._log_filter: RedactingFilter | None = None
        self._lost = False
        self._questions: OrderedDict[str, int] = (
            OrderedDict()
        )  # task id -> status timestamp (ns) of its question given back

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.close()
        cfg = self.config
        connect = min(10.0, cfg.start_timeout)
        tls = (
            added_cas(cfg.resolve_path(cfg.ca_file), cfg.ca_file) if cfg.ca_file else system_cas()
        )  # the card's fetches and the calls
        direct = BoundedTransport(cfg.max_response_bytes, tls)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.timeout, connect=connect),
            follow_redirects=False,
            headers={"User-Agent": "a2t-bridge", "Accept-Encoding": "identity"},
            transport=direct,
            mounts=loopback_direct(proxy_mounts(cfg.max_response_bytes, tls), direct),
        )
        secrets = cfg.auth.secrets()
        if secrets:
            self._log_filter = RedactingFilter(secrets)
            logging.getLogger("httpx").addFilter(self._log_filter)
        self._source = CardSource(
            self._http,
            card_url=cfg.card_url,
            base_url=cfg.base_url,
            timeout=cfg.start_timeout,
            ca_file=cfg.ca_file,
        )
        try:
            fetched = await self._source.fetch()
            assert fetched is not None
            self._agent = self._install(fetched)
        except BridgeError as exc:
            raise BridgeError(
                self._redact(exc.message),
                error_class=exc.error_class,
                recoverability=exc.recoverability,
                details=exc.details,
            ) from None
        self._lost = False
        agent = self._agent
        log.info(
            "agent %s: card %s, %d tools, %s %s at %s%s",
            agent.card.name,
            agent.card_url,
            len(agent.tools),
            agent.interface.protocol_binding if agent.interface else "?",
            agent.interface.protocol_version if agent.interface else "?",
            agent.interface.url if agent.interface else "?",
            ", streaming" if agent.streaming else "",
        )
        if agent.credentials.blocked:
            log.warning("agent %s: %s", agent.card.name, agent.credentials.blocked)
        for override in agent.credentials.overrides:
            log.warning("agent %s: %s", agent.card.name, override)
        if cfg.card_refresh_interval:
            self._refresher = asyncio.create_task(
                self._refresh_card(cfg.card_refresh_interval), name=f"a2a-card:{self.name}"
            )

    def _install(self, fetched: CardFetch) -> Agent:
        """A client and tool list for a freshly fetched card."""
        assert self._http is not None
        cfg, card = self.config, fetched.card
        bindings = (
            list(TRANSPORTS)
            if cfg.transport == "auto"
            else [cfg.transport, *(t for t in TRANSPORTS if t != cfg.transport)]
        )
        streaming = cfg.streaming and card.capabilities.streaming
        factory = ClientFactory(
            ClientConfig(
                streaming=streaming,
                httpx_client=self._http,
                supported_protocol_bindings=bindings,
                use_client_preference=cfg.transport != "auto",
            )
        )
        try:
            client = factory.create(spoken_card(card))
        except ValueError:
            offered = ", ".join(
                f"{i.protocol_binding} at {i.url}" for i in card.supported_interfaces
            )
            said = (
                f"offers no transport the bridge speaks ({', '.join(TRANSPORTS)}); offered: {offered}"
                if offered
                else "names no address to call: its card has no `url` (protocol 0.3) or `supportedInterfaces` (1.0)"
            )
            raise BridgeError(
                f"agent {card.name!r} {said}",
                error_class="capability_gap",
                recoverability="setup",
                details={"reachable": True},
            ) from None
        interface = chosen_interface(card, bindings, cfg.transport != "auto")
        credentials = bind_credentials(card, cfg.auth, cfg.configured_origins(), fetched.order)
        if interface is not None:
            credentials.check_interface(interface.url, interface.protocol_binding)
        self._http.auth = credentials
        tools = tools_from_card(card, fetched.url)
        if credentials.withheld or (credentials.missing and not cfg.acts_for_caller):
            # surfaces block these (reason credential_missing) until the config gives the values,
            # or lets them go to the card's interface
            for tool in tools:
                tool.blocked_reason, tool.blocked_detail = "credential_missing", credentials.blocked
        return Agent(
            card=card,
            card_url=fetched.url,
            client=client,
            tools=tools,
            skill_ids=frozenset(s.id for s in card.skills if s.id),
            # the agent as a whole when no skill can be named (none, or none with an id), as listed
            whole_agent_tool=None if any(s.id for s in card.skills) else agent_tool_id(card),
            streaming=streaming,
            interface=interface,
            credentials=credentials,
        )

    async def _refresh_card(self, interval: float) -> None:
        """Re-fetch the card on the interval; a changed skill list reaches the catalog as
        `tools_changed`, an agent that took no connection as `unavailable`. A card that answers
        too late (past start_timeout), badly, or over a certificate that fails its check keeps
        the last card, and the refresh is tried again at the next interval: the failure is
        warned once, its repeats logged at INFO until a refresh succeeds."""
        assert self._source is not None
        warned: str | None = None
        while True:
            await asyncio.sleep(interval)
            try:
                fetched = await self._source.fetch(revalidate=True)
                if fetched is None:
                    warned = None
                    continue
                previous = self._agent
                agent = self._install(fetched)
            except BridgeError as exc:
                reason = self._redact(exc.message)
                if exc.details and exc.details.get("reachable") is False:
                    self._connection_lost(reason)
                    return
                repeated, warned = reason == warned, reason
                log.log(
                    logging.INFO if repeated else logging.WARNING,
                    "agent card refresh for %s failed, keeping the last card: %s "
                    "(refreshed again in %gs%s)",
                    self.name,
                    reason,
                    interval,
                    "" if repeated else "; the same failure again is logged at INFO",
                )
                continue
            warned = None
            self._agent = agent
            if previous is None or [t.to_json() for t in previous.tools] != [
                t.to_json() for t in agent.tools
            ]:
                log.info("agent card of %s changed its skills", self.name)
                self.emit(UpstreamEvent("tools_changed", reason="agent card changed"))

    async def close(self) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None and refresher is not asyncio.current_task():
            refresher.cancel()
            with contextlib.suppress(BaseException):
                await refresher
        if self._cancels:
            # cancel requests already on their way get their chance to reach the agent
            await asyncio.wait(list(self._cancels), timeout=self.config.cancel_timeout)
        agent, self._agent = self._agent, None
        if agent is not None:
            with contextlib.suppress(Exception):
                await agent.client.close()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
        if self._log_filter is not None:
            logging.getLogger("httpx").removeFilter(self._log_filter)
            self._log_filter = None
        self._source = None

    async def list_tools(self) -> list[UpstreamTool]:
        if self._agent is None:
            raise BridgeError(
                f"agent {self.name!r} is not connected",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            )
        return list(self._agent.tools)

    async def health(self) -> dict[str, Any]:
        agent = self._agent
        if agent is None:
            return {}
        return {
            "card_url": agent.card_url,
            "agent": agent.card.name,
            "agent_version": agent.card.version,
            "transport": agent.interface.protocol_binding if agent.interface else None,
            "protocol_version": agent.interface.protocol_version if agent.interface else None,
            "interface_url": agent.interface.url if agent.interface else None,
            "streaming": agent.streaming,
            "skills": len(agent.card.skills),
            "auth_schemes": list(agent.credentials.schemes),
            "credentials_missing": agent.credentials.missing,
            "credential_origins": agent.credentials.receiving_origins(),
            "credentials_withheld": agent.credentials.withheld,
            "credential_overrides": list(agent.credentials.overrides),
        }

    # ------------------------------------------------------------------ calls

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        agent = self._agent
        if agent is None:
            raise BridgeError(
                f"agent {self.name!r} is not connected",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            )
        if native_id in agent.skill_ids:
            skill_id: str | None = native_id
        elif native_id == agent.whole_agent_tool:
            skill_id = None
        else:
            raise BridgeError(
                f"agent {agent.card.name!r} no longer offers the skill {native_id!r}",
                error_class="unknown_tool",
            )
        # a call carrying the caller's own credential needs none of the configured ones
        blocked = agent.credentials.withheld if ctx.authorization else agent.credentials.blocked
        if blocked:
            raise BridgeError(
                blocked,
                error_class="credential_missing",
                recoverability="setup",
                status="denied",
            )
        request = build_request(arguments, skill_id)
        message = request.message
        tracker = TaskTracker(
            sent_message_id=message.message_id,
            question_at=self._questions.get(message.task_id),
            sent_at=time.time_ns(),
        )
        ref = {
            "source": "a2a",
            "agent_card_url": agent.card_url,
            "agent_skill_id": skill_id,
            "message_id": message.message_id,
        }
        # HTTP headers of every request of the call (its polls too): the W3C trace context, and
        # the caller's own credential where the bridge obtained one for it
        call = ClientCallContext(
            timeout=ctx.timeout, service_parameters=ctx.request_headers() or None
        )
        try:
            if not agent.streaming:
                request.configuration.return_immediately = True  # follow the task by polling
            try:
                async with _closing(agent.client.send_message(request, context=call)) as events:
                    async for event in events:
                        await self._progress(ctx, tracker, tracker.apply(event))
                        if tracker.settled:
                            break
            except (A2AError, httpx.HTTPError) as exc:
                if not (agent.streaming and tracker.task_id and cut_off(exc)):
                    raise
                # the agent named its task, then the stream broke off (a proxy cutting a long
                # stream, say): the task goes on at the agent, and is polled from here
                log.info(
                    "agent %s: the stream of task %s broke off (%s); polling the task",
                    self.name,
                    tracker.task_id,
                    type(exc).__name__,
                )
            polls = 0
            while not tracker.settled:
                # quick tasks are picked up quickly; long ones are polled every poll_interval
                await asyncio.sleep(min(self.config.poll_interval, 0.02 * 2**polls))
                polls += 1
                await self._poll_once(agent, tracker, ctx, call)
        except asyncio.CancelledError:
            if tracker.task_id and tracker.state not in TERMINAL_STATES:
                await self._cancel_task(agent, tracker.task_id, call.service_parameters)
            raise
        except (A2AError, httpx.HTTPError) as exc:
            stream_unbegun = (
                agent.streaming
                and tracker.task is None
                and cut_off(exc)
                and not reused_dropped(exc)
            )
            if stream_unbegun and message.task_id:
                unknown = await self._unknown_task(agent, message.task_id, call)
                if unknown is not None:
                    raise unknown from None
            raise await self._call_failed(
                agent, exc, tracker, stream_unbegun=stream_unbegun
            ) from None
        except (
            ValidationError,
            ParseError,
            DecodeError,
        ) as exc:  # read by the SDK into no A2A shape
            raise BridgeError(
                f"agent {self.name!r} answered in a shape A2A does not have: {first_fault(exc)}",
                error_class="execution_failed",
                details={"task_id": tracker.task_id} if tracker.task_id else None,
            ) from None
        self._remember_question(tracker)
        result = result_from_tracker(tracker, ref)

        async def reply(text: str, task_id: str, context_id: str) -> UpstreamResult:
            answer = {"message": text, "task_id": task_id, "context_id": context_id}
            return await self.invoke(native_id, answer, ctx)

        return await answered_by_caller(result, reply)

    def _remember_question(self, tracker: TaskTracker) -> None:
        """The status timestamp of a question given back (`needs_input`), by task id: the snapshot
        an answer to it may be met with is told from a question asked again by it (the last
        QUESTIONS_KEPT)."""
        task = tracker.task
        if (
            tracker.message is not None
            or task is None
            or tracker.state not in INTERRUPTED_STATES
            or not task.status.HasField("timestamp")
        ):
            return
        self._questions[task.id] = task.status.timestamp.ToNanoseconds()
        self._questions.move_to_end(task.id)
        while len(self._questions) > QUESTIONS_KEPT:
            self._questions.popitem(last=False)

    async def _progress(self, ctx: CallContext, tracker: TaskTracker, lines: list[str]) -> None:
        for line in lines:
            await ctx.report_progress(line, task_id=tracker.task_id)

    async def _poll_once(
        self, agent: Agent, tracker: TaskTracker, ctx: CallContext, call: ClientCallContext
    ) -> None:
        if tracker.task_id is None:
            raise BridgeError(
                "the agent ended the exchange without a task or a reply",
                error_class="execution_failed",
            )
        try:
            task = await agent.client.get_task(GetTaskRequest(id=tracker.task_id), context=call)
        except (A2AError, httpx.HTTPError) as exc:
            if not reused_dropped(exc):
                raise
            # a JSON-RPC `GetTask` is a POST, not sent again by the transport; reading a task is safe
            # to repeat, on a new connection: another kept one may be closing too
            log.info(
                "agent %s: a kept-alive connection dropped under the poll of task %s; asking again",
                self.name,
                tracker.task_id,
            )
            with on_new_connection():
                task = await agent.client.get_task(GetTaskRequest(id=tracker.task_id), context=call)
        await self._progress(ctx, tracker, tracker.replace(task))

    async def _unknown_task(
        self, agent: Agent, task_id: str, call: ClientCallContext
    ) -> BridgeError | None:
        """The error for a `task_id` the agent does not know, asked with `GetTask`: an a2a-sdk 0.3
        agent refuses it on an HTTP+JSON stream by closing the stream it has begun, which reads
        as the agent gone."""
        try:
            await agent.client.get_task(GetTaskRequest(id=task_id), context=call)
        except (A2AError, httpx.HTTPError) as exc:
            if cut_off(exc):  # not an answer: the card tells whether the agent is there
                return None
            error = self._call_error(exc, TaskTracker())
            return error if error.error_class == "invalid_arguments" else None
        return None

    def _redact(self, text: str) -> str:
        return masked(text, self.config.auth.secrets())

    def _connection_lost(self, reason: str) -> None:
        """Tell the catalog once per connection; it closes and reconnects with backoff."""
        if not self._lost:
            self._lost = True
            self.emit(UpstreamEvent("unavailable", reason=reason))

    async def _cancel_task(
        self, agent: Agent, task_id: str, headers: dict[str, str] | None = None
    ) -> None:
        """Tell the agent to cancel, with the call's `headers` (the caller's own credential);
        wait for it (bounded) even though this call is being cancelled."""

        async def send() -> None:
            request, context = (
                CancelTaskRequest(id=task_id),
                ClientCallContext(timeout=self.config.cancel_timeout, service_parameters=headers),
            )
            try:
                try:
                    await agent.client.cancel_task(request, context=context)
                except (A2AError, httpx.HTTPError) as exc:
                    if not reused_dropped(exc):
                        raise
                    # a kept-alive connection the agent closed as the cancel was sent on it: asking
                    # twice to cancel a task is harmless, and the task would otherwise run on
                    with on_new_connection():
                        await agent.client.cancel_task(request, context=context)
                log.info("agent %s: canceled task %s", self.name, task_id)
            except Exception as exc:
                log.info(
                    "agent %s: cancel of task %s failed: %s",
                    self.name,
                    task_id,
                    self._redact(str(exc) or type(exc).__name__),
                )

        task = asyncio.create_task(send(), name=f"a2a-cancel:{task_id}")
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(self.config.cancel_timeout):
                await asyncio.shield(task)
