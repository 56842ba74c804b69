"""The invocation pipeline: resolve → validate → permit → execute → map → persist → log.

Every outcome, success or failure, leaves as a `ToolResult` envelope; the only exception that
escapes is the caller's own cancellation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.arguments import SchemaValidators, invalid_arguments, refuse_unsendable
from bridge.catalog import Catalog
from bridge.config import InvokeConfig
from bridge.deadline import Deadline
from bridge.envelopes import error_result, status_of
from bridge.identity import Admission, Identity
from bridge.masking import masked_value
from bridge.model import (
    BridgeError,
    ResultPersistence,
    ToolDeclaration,
    ToolError,
    ToolResult,
    UpstreamResult,
    new_id,
    now_iso,
)
from bridge.policy import blocked_error, check_permission, unknown_tool
from bridge.resource_links import ResourceLinks
from bridge.store import StoreFull, StoreInterface, StoreUnavailable
from bridge.surface import Surface, Surfaces
from bridge.telemetry import CallOrigin, Telemetry
from bridge.text import has_surrogates, text_of, without_surrogates
from bridge.upstream import CallContext, ProgressSink

if TYPE_CHECKING:
    from bridge.telemetry import CallTrace

__all__ = ["Invoker"]

log = logging.getLogger("bridge.invoke")
T = TypeVar("T", ToolResult, UpstreamResult)

# how json.dumps writes a lone surrogate: an escape that is not one half of a pair (an emoji)
_LONE_ESCAPE = re.compile(
    r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}"
)


def _size_of(result: UpstreamResult) -> tuple[int, bool]:
    """Characters of the result's payload, and whether its text may hold a lone surrogate (which
    no frontend can encode: see `without_surrogates`)."""
    size, suspect = 0, False
    for block in result.content:
        text = block["text"] if "text" in block else None  # noqa: SIM401 (no method call)
        if type(text) is str and len(block) == 2 and "type" in block:  # its text is all it has
            size += len(text)
            suspect = suspect or (not text.isascii() and has_surrogates(text))
            continue
        for key in ("text", "data", "blob"):
            value = block.get(key)
            if isinstance(value, str):
                size += len(value)
                suspect = suspect or has_surrogates(value)
        resource = block.get("resource")
        if isinstance(resource, dict):
            size += len(resource.get("text") or "") + len(resource.get("blob") or "")
            suspect = suspect or has_surrogates(str(resource.get("text") or ""))
    if result.structured_content is not None:
        dumped = _SIZED(result.structured_content)  # ASCII: a surrogate shows as \udXXX
        size += len(dumped)
        suspect = suspect or ("\\ud" in dumped and _LONE_ESCAPE.search(dumped) is not None)
    if result.error is not None:
        suspect = suspect or has_surrogates(result.error.message)
    return size, suspect


_SIZED = json.JSONEncoder(default=str).encode  # as json.dumps(value, default=str) writes it
_MAX_VERSION = 2**63 - 1  # what an SQLite INTEGER holds
_PERMITTED_KEPT = 4096


class _Call:
    """What telemetry follows of one call: where it came from, its trace (when tracing), and the
    upstream's part in seconds, from the moment it holds a concurrency slot to its answer or
    failure (None while the call has not reached the upstream); and the caller's own
    `authorization` for an upstream that acts for it (a token exchanged for the caller's)."""

    __slots__ = ("authorization", "origin", "trace", "upstream_seconds")
    authorization: str | None
    upstream_seconds: float | None

    def __init__(self, origin: CallOrigin | None, trace: CallTrace | None) -> None:
        self.origin = origin
        self.trace = trace
        self.upstream_seconds = None
        self.authorization = None


class Invoker:
    """Runs calls through the pipeline against a catalog, surfaces and store."""

    def __init__(
        self,
        catalog: Catalog,
        surfaces: Surfaces,
        store: StoreInterface,
        config: InvokeConfig | None = None,
        telemetry: Telemetry | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.catalog = catalog
        self.admission: Admission = admission or Admission()
        self.surfaces = surfaces
        self.store = store
        self.config = config or InvokeConfig()
        self.telemetry = telemetry or Telemetry()
        self.validators = SchemaValidators()
        self.resource_links = ResourceLinks(
            catalog
        )  # the links results gave, read back through their upstream
        # the tools each surface was found to let run, by the name a call gave, until the
        # catalog changes (a reload of a surface's rules makes another Surface)
        self._permitted: dict[tuple[Surface, str], ToolDeclaration] = {}
        self._permitted_generation = -1
        self._log_rows: list[tuple[Any, ...]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Future[None]] = set()

    # ----------------------------------------------------------------- public API

    async def invoke(
        self,
        ref: str,
        arguments: Any,
        *,
        version: int | None = None,
        surface: str | Surface | None = None,
        progress: ProgressSink | None = None,
        invocation_id: str | None = None,
        meta: dict[str, Any] | None = None,
        origin: CallOrigin | None = None,
        identity: Identity | None = None,
    ) -> ToolResult:
        """Run one call through the pipeline. `origin` says which frontend and caller it came
        from, with the caller's trace context (telemetry and the audit stream record it);
        `identity`, who the caller is, for its rate limits and token exchanges."""
        invocation_id = invocation_id or new_id("inv")
        started = time.perf_counter()
        telemetry = self.telemetry
        call = _Call(origin, telemetry.call_begun(ref, origin))
        created_at = now_iso()
        decl: ToolDeclaration | None = None
        surface_obj = surface if isinstance(surface, Surface) else self.surfaces.get(surface)
        config = self.config  # a call ends with the settings it began with (a reload swaps them)
        try:
            if surface_obj is None:
                raise BridgeError(
                    f"no surface named {surface!r}", error_class="policy_blocked", status="denied"
                )
            generation = self.catalog.generation
            if self._permitted_generation != generation:
                self._permitted.clear()
                self._permitted_generation = generation
            decl = self._permitted.get((surface_obj, ref))
            permitted = decl is not None
            if decl is None:
                decl = self._resolve(ref, surface_obj)
            schema, version = self._schema_for(decl, version)
            if call.trace is not None:  # else nothing to tell the tracer
                telemetry.call_resolved(call.trace, decl, version, surface_obj.name, invocation_id)
            refuse_unsendable(arguments)
            self._validate(decl, version, schema, arguments)
            if not permitted:
                check_permission(decl, surface_obj)
                if len(self._permitted) >= _PERMITTED_KEPT:
                    self._permitted.clear()
                self._permitted[(surface_obj, ref)] = decl
            if self.admission.active:
                call.authorization = await self.admission.admit(decl, surface_obj.name, identity)
            result = await self._execute(
                decl, arguments, invocation_id, progress, meta or {}, config, call
            )
            if result.is_error:
                result = self._masked(decl, result, call)
            self.resource_links.remember(surface_obj.name, decl.upstream, result.content)
            envelope, size = self._map(decl, version, invocation_id, result, config)
            if size > config.inline_result_limit:
                with telemetry.stage(call.trace, "persist"):
                    await self._persist(envelope, size, surface_obj.name, config)
        except BridgeError as exc:
            envelope = error_result(exc, invocation_id=invocation_id, decl=decl, version=version)
            envelope = self._masked(decl, envelope, call)
            if has_surrogates(exc.message):  # an upstream's text quoted in the message
                envelope = without_surrogates(envelope)
        except asyncio.CancelledError:
            self._log(
                invocation_id,
                decl,
                version,
                surface_obj,
                "canceled",
                "canceled",
                created_at,
                started,
                call,
            )
            raise
        except Exception as exc:  # an adapter bug: reported as a result, logged with its traceback
            log.exception("tool %s failed", ref)
            envelope = self._masked(
                decl,
                error_result(
                    BridgeError(f"{type(exc).__name__}: {exc}", error_class="execution_failed"),
                    invocation_id=invocation_id,
                    decl=decl,
                    version=version,
                ),
                call,
            )
        refused = envelope.error is not None and envelope.error.error_class == "credential_missing"
        if refused and call.authorization is not None and decl is not None:
            # the upstream refused the token obtained for the caller: it is not used again
            await self.admission.refused(decl.upstream, identity, call.authorization)
        envelope.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        self._log(
            invocation_id,
            decl,
            version,
            surface_obj,
            envelope.status,
            envelope.error.error_class if envelope.error else None,
            created_at,
            started,
            call,
        )
        return envelope

    def get_persisted(
        self, ref: str, surface: str | Surface | None = None, *, away_as_none: bool = False
    ) -> tuple[str, bytes] | None:
        """(media type, payload) of a persisted large result; with `surface`, only one a call
        through that surface made (a result stored before surfaces were kept with it: any). A
        token's caller never reads another surface's results, as it never sees its tools. A
        store whose database is away raises StoreUnavailable (a BridgeError naming the store;
        None with `away_as_none`)."""
        try:
            found = self.store.get_result(ref)
        except StoreUnavailable:
            if away_as_none:
                return None
            raise
        if found is None:
            return None
        media_type, payload, made_by = found
        name = surface.name if isinstance(surface, Surface) else surface
        if name is not None and made_by is not None and made_by != name:
            return None
        return media_type, payload

    async def aclose(self) -> None:
        if self._flush_handle:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        self.flush_log()

    def log_rows_waiting(self) -> int:
        """Invocation log rows not yet handed to the store (written every 0.25 s, or at 512)."""
        return len(self._log_rows)

    def flush_log(self) -> None:
        rows, self._log_rows = self._log_rows, []
        self.store.log_invocations(rows, self.config.log_keep)

    # ----------------------------------------------------------------- steps

    def _masked(self, decl: ToolDeclaration | None, failure: T, call: _Call) -> T:
        """`failure` (an error envelope, or an upstream's error result) with the secret values of
        the tool's upstream masked in all it says: an upstream may quote what it was given (an
        environment value in a tool's error text, a key in a stack trace), whatever its kind."""
        slot = self.catalog.slots.get(decl.upstream) if decl is not None else None
        if slot is None:
            return failure
        hidden = slot.upstream.secrets()
        if call.authorization is not None:  # a token exchanged for the caller, and its client's
            hidden = hidden + self.admission.secrets(slot.name, call.authorization)
        return masked_value(failure, hidden)

    def _resolve(self, ref: str, surface: Surface) -> ToolDeclaration:
        decl = surface.resolve(ref)
        if decl is None:
            raise unknown_tool(ref, self.catalog)
        placement = surface.place(decl)
        if placement.state == "blocked":
            raise blocked_error(decl, placement.reason or "policy_blocked")
        return decl

    def _schema_for(self, decl: ToolDeclaration, version: int | None) -> tuple[dict[str, Any], int]:
        """The input schema to validate against: the current one, or a pinned version's."""
        if version is None or version == decl.version:
            return decl.input_schema, decl.version
        record = self.catalog.versions.get(decl, version)
        if record is None:
            raise BridgeError(
                f"tool {decl.name!r} has no version {version} (current is {decl.version})",
                error_class="unknown_tool",  # as REST's GET of that version says it
                error_code="unknown_version",
                recoverability="change_arguments",
            )
        return record.signature.get("input_schema") or {}, version

    def _validate(
        self, decl: ToolDeclaration, version: int, schema: dict[str, Any], arguments: Any
    ) -> None:
        errors = self.validators.errors((decl.tool_id, version), schema, arguments)
        if errors:
            raise invalid_arguments(f"{decl.name!r} v{version}", errors)
        if version != decl.version:
            # A pinned call must also be servable by what the upstream offers now.
            current = self.validators.errors(
                (decl.tool_id, decl.version), decl.input_schema, arguments
            )
            if current:
                broke = self.catalog.versions.breaking_since(decl, version)
                raise BridgeError(
                    f"version {version} of {decl.name!r} can no longer be served: the upstream now offers "
                    f"version {decl.version}"
                    + (f" (breaking change at version {broke})" if broke else "")
                    + f", which rejects these arguments: {current[0]['path']}: {current[0]['message']}",
                    error_class="capability_gap",
                    error_code="pinned_version_unservable",
                    recoverability="change_arguments",
                    details={
                        "pinned_version": version,
                        "current_version": decl.version,
                        "errors": current,
                    },
                )

    async def _execute(
        self,
        decl: ToolDeclaration,
        arguments: dict[str, Any],
        invocation_id: str,
        progress: ProgressSink | None,
        meta: dict[str, Any],
        config: InvokeConfig,
        call: _Call,
    ) -> UpstreamResult:
        slot = self.catalog.require_ready(decl)
        timeout = config.default_timeout or decl.timeout or slot.upstream.config.timeout
        ctx = CallContext(
            invocation_id=invocation_id,
            timeout=timeout,
            progress_sink=progress,
            version=decl.version,
            meta=meta,
            timeout_fixed=config.default_timeout is not None,
        )
        if call.origin is not None:  # passed on as it came, unless the bridge traces the call
            ctx.traceparent, ctx.tracestate = call.origin.traceparent, call.origin.tracestate
        ctx.authorization = call.authorization
        assert slot.semaphore is not None
        try:
            with Deadline(timeout):
                async with slot.semaphore:
                    with slot:  # counted in flight (`UpstreamSlot.calling`)
                        began = time.perf_counter()
                        try:
                            if call.trace is None:  # untraced: no span, the context as it came
                                return await slot.upstream.invoke(decl.native_id, arguments, ctx)
                            with self.telemetry.upstream_call(
                                call.trace, decl.upstream, slot.upstream.kind, decl.native_name
                            ) as parent:
                                if parent is not None:  # the upstream's call: its span's child
                                    ctx.traceparent, ctx.tracestate = parent
                                return await slot.upstream.invoke(decl.native_id, arguments, ctx)
                        finally:
                            call.upstream_seconds = time.perf_counter() - began
        except TimeoutError:
            raise BridgeError(
                f"{decl.name!r} did not answer within {timeout:g}s",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
            ) from None

    def _map(
        self,
        decl: ToolDeclaration,
        version: int,
        invocation_id: str,
        result: UpstreamResult,
        config: InvokeConfig,
    ) -> tuple[ToolResult, int]:
        """The result envelope of an upstream's answer, and the answer's size in characters."""
        size, suspect = _size_of(result)
        if suspect:
            result = without_surrogates(result)
        if result.is_error:
            error = result.error or ToolError(
                error_class="execution_failed",
                message=text_of(result.content) or "the upstream reported an error",
                recoverability="not_recoverable",
            )
            envelope = ToolResult(
                result_id=new_id("res"),
                invocation_id=invocation_id,
                tool_id=decl.tool_id,
                tool_name=decl.name,
                version=version,
                status=result.status or status_of(error.error_class),
                is_error=True,
                content=result.content
                or [{"type": "text", "text": f"{error.error_class}: {error.message}"}],
                structured_content=result.structured_content,
                error=error,
                native_ref=result.native_ref,
                meta=result.meta,
            )
        else:
            envelope = ToolResult(
                result_id=new_id("res"),
                invocation_id=invocation_id,
                tool_id=decl.tool_id,
                tool_name=decl.name,
                version=version,
                status=result.status or "succeeded",
                content=result.content,
                structured_content=result.structured_content,
                native_ref=result.native_ref,
                meta=result.meta,
            )
        if size > config.max_result_chars:
            raise BridgeError(
                f"the result of {decl.name!r} has {size} characters, over max_result_chars={config.max_result_chars}",
                error_class="result_too_large",
                recoverability="change_arguments",
                status="too_large",
            )
        return envelope, size

    async def _persist(
        self, envelope: ToolResult, size: int, surface: str, config: InvokeConfig
    ) -> None:
        """Keep a preview inline; the whole payload goes to the store behind a ref, readable
        through the surface whose call made it (`get_persisted`). The payload is made and
        written on a worker thread: a large one (and the oldest results dropped with it, a
        transaction of many megabytes) stalled every call on the event loop meanwhile. A store
        whose disk refuses the payload leaves the result inline, whole: it is answered, not kept."""
        ref = new_id("blob")

        def write() -> int:
            payload = json.dumps(
                {"content": envelope.content, "structured_content": envelope.structured_content},
                default=str,
            ).encode()
            self.store.put_result(
                ref,
                envelope.invocation_id,
                "application/json",
                payload,
                surface,
                keep=config.results_keep,
                keep_bytes=config.results_keep_mb << 20,
            )
            return len(payload)

        try:
            stored = await asyncio.to_thread(write)
        except (
            StoreFull
        ):  # a full disk (the store said so once): the caller gets the result whole, inline
            return
        preview_source = text_of(envelope.content) or json.dumps(
            envelope.structured_content, default=str
        )
        preview = preview_source[: config.preview_chars]
        decision = ResultPersistence(
            decision_id=new_id("persist"),
            invocation_id=envelope.invocation_id,
            result_id=envelope.result_id,
            threshold={"max_inline_chars": config.inline_result_limit},
            original_size_bytes=stored,
            preview_size_bytes=len(preview.encode()),
            persisted_ref={
                "uri": f"bridge://results/{ref}",
                "ref": ref,
                "media_type": "application/json",
            },
        )
        envelope.content = [
            {
                "type": "text",
                "text": f"Result of {size} characters exceeds the inline limit of {config.inline_result_limit}; "
                f"the full result is stored at bridge://results/{ref}. Preview:\n{preview}",
            },
            {
                "type": "resource_link",
                "uri": f"bridge://results/{ref}",
                "name": ref,
                "mimeType": "application/json",
                "size": stored,
            },
        ]
        envelope.structured_content = None
        envelope.persisted = decision
        envelope.persistence_refs = [decision.decision_id]

    # ----------------------------------------------------------------- invocation log

    def _log(
        self,
        invocation_id: str,
        decl: ToolDeclaration | None,
        version: int | None,
        surface: Surface | None,
        status: str,
        error_class: str | None,
        created_at: str,
        started: float,
        call: _Call | None = None,
    ) -> None:
        seconds = time.perf_counter() - started
        duration = round(seconds * 1000, 3)
        origin = call.origin if call else None
        self.telemetry.call_ended(
            invocation_id,
            decl,
            version,
            surface.name if surface else "",
            status,
            error_class,
            created_at,
            seconds,
            call.upstream_seconds if call else None,
            origin,
            call.trace if call else None,
        )
        self._log_rows.append(
            (
                invocation_id,
                decl.tool_id if decl else None,
                decl.name if decl else None,
                version
                if version is None or 0 < version <= _MAX_VERSION
                else None,  # a caller's wild number
                surface.name if surface else None,
                status,
                error_class,
                created_at,
                duration,
                origin.subject if origin else None,
                origin.client_id if origin else None,
            )
        )
        if self._flush_handle is None:
            self._schedule_flush(0.25)
        elif (
            len(self._log_rows) == 512
        ):  # once: the timer is moved to now, not again for every row after
            self._schedule_flush(0)

    def _schedule_flush(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush_log()
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()

        def flush() -> None:
            self._flush_handle = None
            rows, self._log_rows = self._log_rows, []
            future = loop.run_in_executor(
                None, self.store.log_invocations, rows, self.config.log_keep
            )
            self._flushes.add(future)
            future.add_done_callback(self._flushes.discard)

        self._flush_handle = loop.call_later(delay, flush)
