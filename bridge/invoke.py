"""The invocation pipeline: resolve → validate → permit → execute → map → persist → log.

Every outcome, success or failure, leaves as a `ToolResult` envelope; the only exception that
escapes is the caller's own cancellation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import referencing.exceptions
from cachetools import LRUCache

from bridge.catalog import Catalog
from bridge.config import InvokeConfig
from bridge.model import (
    QUOTED_CHARS,
    BridgeError,
    ResultPersistence,
    ToolDeclaration,
    ToolError,
    ToolResult,
    UpstreamResult,
    has_surrogates,
    new_id,
    now_iso,
    quoted,
    without_surrogates,
)
from bridge.policy import blocked_error, check_permission
from bridge.resource_links import ResourceLinks
from bridge.schema_check import QuickCheck, compile_quick_check
from bridge.store import Store, StoreFull
from bridge.surface import Surface, Surfaces
from bridge.upstream import CallContext, ProgressSink

__all__ = ["Invoker", "SchemaValidators", "error_result", "schema_errors", "invalid_arguments"]

log = logging.getLogger("bridge.invoke")

# error class -> result status (Agent Tool result status vocabulary)
_STATUS = {
    "unknown_tool": "rejected",
    "invalid_arguments": "rejected",
    "schema_validation_failed": "rejected",
    "schema_not_loaded": "rejected",
    "capability_gap": "rejected",
    "permission_denied": "denied",
    "policy_blocked": "denied",
    "credential_missing": "denied",
    "setup_required": "denied",
    "timeout": "timed_out",
    "canceled": "canceled",
    "result_too_large": "too_large",
}
_RECOVERABILITY = {
    "unknown_tool": "change_arguments",
    "invalid_arguments": "change_arguments",
    "schema_not_loaded": "load_schema_then_call",
    "timeout": "retry",
    "rate_limited": "retry_later",
    "dependency_unavailable": "retry_later",
}


class SchemaValidators:
    """The one cache of compiled JSON-schema validators, keyed by (tool_id, version): each a
    `jsonschema` validator and, for a plain schema, the quick check that accepts most valid
    arguments without it (bridge/schema_check.py)."""

    def __init__(self, size: int = 4096) -> None:
        self._cache: LRUCache[tuple[str, int], tuple[jsonschema.protocols.Validator, QuickCheck | None]] = LRUCache(maxsize=size)
        self._unusable: set[tuple[str, int]] = set()  # schemas jsonschema could not apply (said once each)

    def _entry(self, key: tuple[str, int], schema: dict[str, Any]) -> tuple[jsonschema.protocols.Validator, QuickCheck | None]:
        entry = self._cache.get(key)
        if entry is None:
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError:
                cls = jsonschema.Draft202012Validator  # a sloppy upstream schema still validates what it can
            try:
                quick = compile_quick_check(schema)
            except (TypeError, ValueError, AttributeError, LookupError, RecursionError):  # a schema in no shape it reads
                quick = None
            entry = self._cache[key] = (cls(schema), quick)
        return entry

    def errors(self, key: tuple[str, int], schema: dict[str, Any], arguments: Any) -> list[dict[str, str]]:
        validator, quick = self._entry(key, schema)
        if quick is not None and quick(arguments):
            return []
        try:
            return schema_errors(validator, arguments)
        except (jsonschema.exceptions.UnknownType, referencing.exceptions.Unresolvable, TypeError, ValueError,
                LookupError, RecursionError, AttributeError, re.error) as exc:
            # an upstream schema jsonschema cannot apply ({"type": "bogus"}, `required` holding
            # objects, a dangling $ref, `properties` a list, a `pattern` that is no regular
            # expression): the bridge cannot judge the arguments, the upstream will
            if key not in self._unusable:
                self._unusable.add(key)
                log.warning("tool %s v%d: its input schema cannot be applied (%s: %s); arguments go to the upstream "
                            "unchecked", key[0], key[1], type(exc).__name__, str(exc).splitlines()[0][:200])
            return []


def schema_errors(validator: jsonschema.protocols.Validator, arguments: Any, limit: int = 20) -> list[dict[str, str]]:
    """Up to `limit` validation errors of `arguments`, in the order of where they are, each as
    `{path (JSON pointer), message}`."""
    found = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    return [{"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": _error_message(e)} for e in found[:limit]]




def _as_written(value: Any) -> str:
    """`value` as jsonschema's messages write it (Python's repr), but with JSON's words for
    what Python spells otherwise: `null`, `true`, `false`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_as_written(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_as_written(k)}: {_as_written(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _error_message(error: jsonschema.ValidationError) -> str:
    """The validator's message with the offending value shown by its beginning: a 1 MB string
    that is too long is not sent back in full (twice: in the message and in the details). A
    value holding null, true or false is written so (a caller sent JSON, not Python: `None is
    not of type 'number'` puzzled them)."""
    message, shown = error.message, repr(error.instance)
    for value, python in ((error.instance, shown), (error.validator_value, None)):
        if value is None or isinstance(value, bool | list | dict):
            python = python or repr(value)
            if len(python) <= QUOTED_CHARS and python in message and python != (written := _as_written(value)):
                message = message.replace(python, written)
    if len(shown) > QUOTED_CHARS and shown in message:
        size = f"{len(error.instance)} characters" if isinstance(error.instance, str) else f"{len(shown)} characters as written"
        message = message.replace(shown, f"{shown[:QUOTED_CHARS]}… ({size})")
    return message


# Arguments nested deeper than this are refused before anything reads them (`refuse_unsendable`):
# no tool's input needs as many, and what walks them is recursive: the schema validators, the
# adapters' encoders (the A2A SDK's stops at 100 levels of its own, and a Python reader near 1,000).
MAX_ARGUMENT_DEPTH = 64


def _unsendable(message: str, pointer: str) -> BridgeError:
    return BridgeError(f"{message} at {pointer or 'the top'}", error_class="invalid_arguments", recoverability="change_arguments",
                       status="rejected", details={"errors": [{"path": pointer, "message": message}]})


def refuse_unsendable(arguments: Any) -> None:
    """Arguments JSON cannot carry on to an upstream, as an invalid_arguments error naming where,
    before anything runs: NaN and ±Infinity (the JSON readers of the MCP SDK and of Python accept
    them); text that is not Unicode, a lone surrogate escape such as `\\ud800` (Python reads it
    into a string no UTF-8 writer takes: an upstream's session would fail on it, and every call
    sharing it); and nesting deeper than MAX_ARGUMENT_DEPTH levels."""
    try:
        text = json.dumps(arguments, allow_nan=False, ensure_ascii=False, default=str)
    except RecursionError:
        text = None  # deeper than the encoder goes: found by the walk below
    except ValueError:
        raise _unsendable("the arguments hold NaN or Infinity, which JSON cannot carry; send a finite number or null",
                          _first_at(arguments, lambda v, _: isinstance(v, float) and not math.isfinite(v)) or "") from None
    if text is not None and not text.isascii() and has_surrogates(text):
        pointer = _first_at(arguments, lambda v, _: isinstance(v, str) and has_surrogates(v)) or ""
        raise _unsendable("the arguments hold text that is not valid Unicode (a lone surrogate escape); send the text as "
                          "UTF-8, or escape a character outside the Basic Multilingual Plane as a pair", without_surrogates(pointer))
    # nesting needs as many brackets as levels: most arguments are told apart without a walk
    if text is None or text.count("{") + text.count("[") > MAX_ARGUMENT_DEPTH:
        pointer = _first_at(arguments, lambda v, depth: depth > MAX_ARGUMENT_DEPTH and isinstance(v, dict | list))
        if pointer is not None:
            raise _unsendable(f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels; send flatter arguments", pointer)


def pointer_token(key: Any) -> str:
    """An object key as one step of a JSON pointer (RFC 6901: `~` and `/` escaped)."""
    return str(key).replace("~", "~0").replace("/", "~1")


def _first_at(value: Any, found: Callable[[Any, int], bool]) -> str | None:
    """The JSON pointer of the first value, or object key, in `value` (depth first, in order) for
    which `found(it, depth)` holds, the arguments object at depth 1; None if none. A pointer may
    hold a key's lone surrogate."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, pointer, depth = stack.pop()
        if found(item, depth):
            return pointer
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                step = f"{pointer}/{pointer_token(key)}"
                if found(key, depth + 1):
                    return step
                children.append((child, step, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend((child, f"{pointer}/{i}", depth + 1) for i, child in reversed(list(enumerate(item))))
    return None


def invalid_arguments(what: str, errors: list[dict[str, str]]) -> BridgeError:
    """The one `invalid_arguments` error for schema violations: the first five in the message,
    all of them (up to the limit) in the details."""
    listing = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
    return BridgeError(
        f"arguments do not match the input schema of {what}: {listing}",
        error_class="invalid_arguments",
        recoverability="change_arguments",
        details={"errors": errors},
    )


def error_result(
    error: BridgeError | ToolError,
    *,
    invocation_id: str,
    decl: ToolDeclaration | None = None,
    version: int | None = None,
    status: str | None = None,
) -> ToolResult:
    """The one place error envelopes are built."""
    err = error.to_error() if isinstance(error, BridgeError) else error
    if isinstance(error, BridgeError) and error.recoverability == "not_recoverable":
        err.recoverability = _RECOVERABILITY.get(err.error_class, "not_recoverable")  # type: ignore[assignment]
    status = status or _STATUS.get(err.error_class) or (error.status if isinstance(error, BridgeError) else "failed")
    text = f"{err.error_class}: {err.message}"
    if err.retry_after is not None:
        text += f" (retry after {err.retry_after:g}s)"
    return ToolResult(
        result_id=new_id("res"),
        invocation_id=invocation_id,
        tool_id=decl.tool_id if decl else None,
        tool_name=decl.name if decl else None,
        version=version,
        status=status,
        is_error=True,
        content=[{"type": "text", "text": text}],
        error=err,
    )


# how json.dumps writes a lone surrogate: an escape that is not one half of a pair (an emoji)
_LONE_ESCAPE = re.compile(r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}")


def _size_of(result: UpstreamResult) -> tuple[int, bool]:
    """Characters of the result's payload, and whether its text may hold a lone surrogate (which
    no frontend can encode: see `without_surrogates`)."""
    size, suspect = 0, False
    for block in result.content:
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
        dumped = json.dumps(result.structured_content, default=str)  # ASCII: a surrogate shows as \udXXX
        size += len(dumped)
        suspect = suspect or ("\\ud" in dumped and _LONE_ESCAPE.search(dumped) is not None)
    if result.error is not None:
        suspect = suspect or has_surrogates(result.error.message)
    return size, suspect


_MAX_VERSION = 2**63 - 1  # what an SQLite INTEGER holds


class Invoker:
    """Runs calls through the pipeline against a catalog, surfaces and store."""

    def __init__(
        self,
        catalog: Catalog,
        surfaces: Surfaces,
        store: Store,
        config: InvokeConfig | None = None,
    ) -> None:
        self.catalog = catalog
        self.surfaces = surfaces
        self.store = store
        self.config = config or InvokeConfig()
        self.validators = SchemaValidators()
        self.resource_links = ResourceLinks(catalog)  # the links results gave, read back through their upstream
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
    ) -> ToolResult:
        invocation_id = invocation_id or new_id("inv")
        started = time.perf_counter()
        created_at = now_iso()
        decl: ToolDeclaration | None = None
        surface_obj = surface if isinstance(surface, Surface) else self.surfaces.get(surface)
        config = self.config  # a call ends with the settings it began with (a reload swaps them)
        try:
            if surface_obj is None:
                raise BridgeError(f"no surface named {surface!r}", error_class="policy_blocked", status="denied")
            decl = self._resolve(ref, surface_obj)
            schema, version = self._schema_for(decl, version)
            refuse_unsendable(arguments)
            self._validate(decl, version, schema, arguments)
            check_permission(decl, surface_obj)
            result = await self._execute(decl, arguments, invocation_id, progress, meta or {}, config)
            self.resource_links.remember(surface_obj.name, decl.upstream, result.content)
            envelope, size = self._map(decl, version, invocation_id, result, config)
            if size > config.inline_result_limit:
                await self._persist(envelope, size, surface_obj.name, config)
        except BridgeError as exc:
            envelope = error_result(exc, invocation_id=invocation_id, decl=decl, version=version)
            if has_surrogates(exc.message):  # an upstream's text quoted in the message
                envelope = without_surrogates(envelope)
        except asyncio.CancelledError:
            self._log(invocation_id, decl, version, surface_obj, "canceled", "canceled", created_at, started)
            raise
        except Exception as exc:  # an adapter bug: reported as a result, logged with its traceback
            log.exception("tool %s failed", ref)
            envelope = error_result(
                BridgeError(f"{type(exc).__name__}: {exc}", error_class="execution_failed"),
                invocation_id=invocation_id,
                decl=decl,
                version=version,
            )
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
        )
        return envelope

    def get_persisted(self, ref: str, surface: str | Surface | None = None) -> tuple[str, bytes] | None:
        """(media type, payload) of a persisted large result; with `surface`, only one a call
        through that surface made (a result stored before surfaces were kept with it: any). A
        token's caller never reads another surface's results, as it never sees its tools."""
        found = self.store.get_result(ref)
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

    def flush_log(self) -> None:
        rows, self._log_rows = self._log_rows, []
        self.store.log_invocations(rows, self.config.log_keep)

    # ----------------------------------------------------------------- steps

    def _resolve(self, ref: str, surface: Surface) -> ToolDeclaration:
        decl = self.catalog.resolve(ref)
        if decl is None:
            raise BridgeError(f"no tool named {quoted(ref)}; search the catalog for the right name{self.catalog.still_starting(ref)}",
                              error_class="unknown_tool")
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

    def _validate(self, decl: ToolDeclaration, version: int, schema: dict[str, Any], arguments: Any) -> None:
        errors = self.validators.errors((decl.tool_id, version), schema, arguments)
        if errors:
            raise invalid_arguments(f"{decl.name!r} v{version}", errors)
        if version != decl.version:
            # A pinned call must also be servable by what the upstream offers now.
            current = self.validators.errors((decl.tool_id, decl.version), decl.input_schema, arguments)
            if current:
                broke = self.catalog.versions.breaking_since(decl, version)
                raise BridgeError(
                    f"version {version} of {decl.name!r} can no longer be served: the upstream now offers "
                    f"version {decl.version}" + (f" (breaking change at version {broke})" if broke else "")
                    + f", which rejects these arguments: {current[0]['path']}: {current[0]['message']}",
                    error_class="capability_gap",
                    error_code="pinned_version_unservable",
                    recoverability="change_arguments",
                    details={"pinned_version": version, "current_version": decl.version, "errors": current},
                )

    async def _execute(
        self,
        decl: ToolDeclaration,
        arguments: dict[str, Any],
        invocation_id: str,
        progress: ProgressSink | None,
        meta: dict[str, Any],
        config: InvokeConfig,
    ) -> UpstreamResult:
        slot = self.catalog.require_ready(decl)
        timeout = config.default_timeout or decl.timeout or slot.upstream.config.timeout
        ctx = CallContext(invocation_id=invocation_id, timeout=timeout, progress_sink=progress, version=decl.version, meta=meta,
                          timeout_fixed=config.default_timeout is not None)
        assert slot.semaphore is not None
        try:
            async with asyncio.timeout(timeout):
                async with slot.semaphore:
                    with slot.calling():
                        return await slot.upstream.invoke(decl.native_id, arguments, ctx)
        except TimeoutError:
            raise BridgeError(
                f"{decl.name!r} did not answer within {timeout:g}s",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
            ) from None

    def _map(self, decl: ToolDeclaration, version: int, invocation_id: str, result: UpstreamResult,
             config: InvokeConfig) -> tuple[ToolResult, int]:
        """The result envelope of an upstream's answer, and the answer's size in characters."""
        size, suspect = _size_of(result)
        if suspect:
            result = without_surrogates(result)
        if result.is_error:
            error = result.error or ToolError(
                error_class="execution_failed",
                message=_first_text(result) or "the upstream reported an error",
                recoverability="not_recoverable",
            )
            envelope = ToolResult(
                result_id=new_id("res"),
                invocation_id=invocation_id,
                tool_id=decl.tool_id,
                tool_name=decl.name,
                version=version,
                status=result.status or _STATUS.get(error.error_class, "failed"),
                is_error=True,
                content=result.content or [{"type": "text", "text": f"{error.error_class}: {error.message}"}],
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

    async def _persist(self, envelope: ToolResult, size: int, surface: str, config: InvokeConfig) -> None:
        """Keep a preview inline; the whole payload goes to the store behind a ref, readable
        through the surface whose call made it (`get_persisted`). The payload is made and
        written on a worker thread: a large one (and the oldest results dropped with it, a
        transaction of many megabytes) stalled every call on the event loop meanwhile. A store
        whose disk refuses the payload leaves the result inline, whole: it is answered, not kept."""
        ref = new_id("blob")

        def write() -> int:
            payload = json.dumps({"content": envelope.content, "structured_content": envelope.structured_content}, default=str).encode()
            self.store.put_result(ref, envelope.invocation_id, "application/json", payload, surface, keep=config.results_keep,
                                  keep_bytes=config.results_keep_mb << 20)
            return len(payload)

        try:
            stored = await asyncio.to_thread(write)
        except StoreFull:  # a full disk (the store said so once): the caller gets the result whole, inline
            return
        preview_source = _first_text_blocks(envelope.content) or json.dumps(envelope.structured_content, default=str)
        preview = preview_source[: config.preview_chars]
        decision = ResultPersistence(
            decision_id=new_id("persist"),
            invocation_id=envelope.invocation_id,
            result_id=envelope.result_id,
            threshold={"max_inline_chars": config.inline_result_limit},
            original_size_bytes=stored,
            preview_size_bytes=len(preview.encode()),
            persisted_ref={"uri": f"bridge://results/{ref}", "ref": ref, "media_type": "application/json"},
        )
        envelope.content = [
            {
                "type": "text",
                "text": f"Result of {size} characters exceeds the inline limit of {config.inline_result_limit}; "
                f"the full result is stored at bridge://results/{ref}. Preview:\n{preview}",
            },
            {"type": "resource_link", "uri": f"bridge://results/{ref}", "name": ref, "mimeType": "application/json", "size": stored},
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
    ) -> None:
        duration = round((time.perf_counter() - started) * 1000, 3)
        self._log_rows.append(
            (
                invocation_id,
                decl.tool_id if decl else None,
                decl.name if decl else None,
                version if version is None or 0 < version <= _MAX_VERSION else None,  # a caller's wild number
                surface.name if surface else None,
                status,
                error_class,
                created_at,
                duration,
            )
        )
        if self._flush_handle is None:
            self._schedule_flush(0.25)
        elif len(self._log_rows) == 512:  # once: the timer is moved to now, not again for every row after
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
            future = loop.run_in_executor(None, self.store.log_invocations, rows, self.config.log_keep)
            self._flushes.add(future)
            future.add_done_callback(self._flushes.discard)

        self._flush_handle = loop.call_later(delay, flush)


def _first_text(result: UpstreamResult) -> str:
    return _first_text_blocks(result.content)


def _first_text_blocks(content: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str))
