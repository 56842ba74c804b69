"""The bridge's records (Agent Tool v0.2.0 and the bridge's own extensions) and its error hierarchy.

Data only: pydantic models, enumerations and exceptions. No I/O, no imports of ours.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

__all__ = [
    "SCHEMA_VERSION",
    "TOOL_ID_NAMESPACE",
    "BlockedTool",
    "BridgeError",
    "DeferredToolRef",
    "ErrorClass",
    "InputContract",
    "Lifecycle",
    "LoadingState",
    "OutputContract",
    "Recoverability",
    "ResultPersistence",
    "SafetyHints",
    "Schema",
    "ToolDeclaration",
    "ToolError",
    "ToolInvocation",
    "ToolProgress",
    "ToolResult",
    "ToolSearchResult",
    "ToolSurface",
    "UpstreamHealth",
    "UpstreamResult",
    "UpstreamState",
    "UpstreamTool",
    "VersionRecord",
    "new_id",
    "now_iso",
    "object_shaped",
    "takes_objects",
    "tool_uuid",
    "validation_line",
]

SCHEMA_VERSION = "0.2.0"
# Fixed root of every tool_id: UUIDv5(TOOL_ID_NAMESPACE, "<namespace>\x1f<native id>").
TOOL_ID_NAMESPACE = uuid.UUID("5b0c6a3e-8f5d-5c52-9d6e-0a2f1b7c4d10")

ErrorClass = Literal[
    "unknown_tool",
    "invalid_arguments",
    "schema_validation_failed",
    "schema_not_loaded",
    "permission_denied",
    "approval_rejected",
    "policy_blocked",
    "hook_blocked",
    "capability_gap",
    "setup_required",
    "credential_missing",
    "sandbox_violation",
    "timeout",
    "rate_limited",
    "dependency_unavailable",
    "execution_failed",
    "partial_failure",
    "result_too_large",
    "result_redacted",
    "sibling_canceled",
    "streaming_fallback_discarded",
    "canceled",
]
Recoverability = Literal[
    "retry",
    "retry_later",
    "change_arguments",
    "change_arguments_or_policy",
    "load_schema_then_call",
    "provide_input",
    "setup",
    "not_recoverable",
]
LoadingState = Literal["loaded", "deferred", "discoverable", "pending_provider", "unavailable"]
Lifecycle = Literal[
    "draft", "available", "disabled", "requires_setup", "deferred", "deprecated", "retired"
]
FactSource = Literal["declared", "inferred", "default"]


_second: list[Any] = [None, ""]  # the last whole second formatted, and its text


def now_iso() -> str:
    """UTC timestamp in RFC 3339 form with millisecond precision (`2026-11-22T07:45:10.123Z`).
    Every call on the invocation path makes one; the date and time part is formatted once a
    second."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second[0] = second
    return f"{_second[1]}.{int((now - second) * 1000):03d}Z"


def takes_objects(schema: Any) -> bool:
    """Whether an input schema can accept a JSON object, in the shape every frontend requires of
    one: the arguments of every frontend (MCP, the A2T drafts) are objects, so a tool whose root
    `type` excludes them cannot be called; and MCP's listing (before 2026-07-28) refuses a whole
    page for one schema whose `properties` is no object of schemas or whose `required` is no
    list of names."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type", "object")
    return (kind == "object" or (isinstance(kind, list) and "object" in kind)) and object_shaped(
        schema
    )


def object_shaped(schema: dict[str, Any]) -> bool:
    """Whether an object schema's `properties` (if any) map names to schemas (objects or booleans)
    and its `required` (if any) lists names."""
    props, required = schema.get("properties"), schema.get("required")
    return (
        props is None
        or (isinstance(props, dict) and all(isinstance(p, dict | bool) for p in props.values()))
    ) and (
        required is None
        or (isinstance(required, list) and all(isinstance(r, str) for r in required))
    )


def validation_line(exc: ValidationError, skip: int = 0) -> str:
    """A ValidationError in one line, never the value: where its first fault is (less `skip`
    leading path parts), what it is, and how many more there are."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"][skip:])
    text = f"{where}: {first['msg']}" if where else first["msg"]
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    return text if len(text) <= 300 else text[:297] + "..."


def new_id(prefix: str) -> str:
    """`prefix_` and 32 random hex digits (128 bits, as a UUID4 has)."""
    return f"{prefix}_{os.urandom(16).hex()}"


_TOOL_ID_PREFIX = TOOL_ID_NAMESPACE.bytes


def tool_uuid(namespace: str, native_id: str) -> str:
    """The stable tool_id of a native tool: the same on every restart and every replica.
    Equal to `str(uuid.uuid5(TOOL_ID_NAMESPACE, namespace + "\x1f" + native_id))`, computed
    without building UUID objects (catalogs of 100k tools call this on every listing)."""
    digest = bytearray(
        hashlib.sha1(_TOOL_ID_PREFIX + f"{namespace}\x1f{native_id}".encode()).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _held(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A schema given as a dict of string keys is held as that very object, not copied (pydantic
    copies a `dict` field's top level): tools that answer one schema then share it, and so do
    their declarations (Microsoft Graph v1.0's 7,444 output schemas are 922 distinct ones)."""
    if type(value) is dict and all(type(key) is str for key in value):
        return value
    return handler(value)


# A JSON Schema in a record. It may be shared by many records (and its parts by many schemas):
# it is never changed in place once given to one; whoever needs it altered alters a copy.
Schema = Annotated[dict[str, Any], WrapValidator(_held)]


class _Record(BaseModel):
    """Records keep unknown fields (the Agent Tool schemas are open) and serialize without Nones."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)


class SafetyHints(_Record):
    """Safety facts of a tool. `sources` says, for each fact, whether the upstream declared it,
    the bridge inferred it (from HTTP semantics, say) or it is the fail-safe default.
    Only declared facts deny on their own (see bridge.policy)."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = True
    reversible: bool | None = None
    billable: bool = False
    requires_user_interaction: bool = False
    sources: dict[str, FactSource] = Field(default_factory=dict)

    def source_of(self, fact: str) -> FactSource:
        return self.sources.get(fact, "default")


class InputContract(_Record):
    """Input contract. Agent Tool examples use both `schema` and `model_input_schema`; both are
    read, only `model_input_schema` is written."""

    model_input_schema: Schema = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _accept_schema_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model_input_schema" not in data and "schema" in data:
            data = dict(data)
            data["model_input_schema"] = data.pop("schema")
        return data


class OutputContract(_Record):
    output_schema: Schema | None = None
    content_types: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _accept_schema_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "output_schema" not in data and "schema" in data:
            data = dict(data)
            data["output_schema"] = data.pop("schema")
        return data


class UpstreamTool(_Record):
    """What an adapter reports for one native tool, before the catalog names and versions it.

    `native_id` is the routing key inside the upstream (unique there, stable across listings);
    `name` is the native name the exposed name is built from.
    """

    native_id: str
    name: str
    description: str = ""
    title: str | None = None
    tool_kind: str = "function"
    input_schema: Schema = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: Schema | None = None
    safety: SafetyHints = Field(default_factory=SafetyHints)
    tags: list[str] = Field(default_factory=list)
    search_hint: str | None = None
    external_mapping: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] = Field(default_factory=dict)
    lifecycle: Lifecycle = "available"
    blocked_reason: str | None = None
    blocked_detail: str | None = (
        None  # what the reason stands for and how to lift it (no secret values)
    )
    timeout: float | None = None  # seconds; overrides the upstream's call timeout for this tool


class ToolDeclaration(_Record):
    """Agent Tool `tool_declaration` plus the bridge's catalog facts (upstream, version,
    loading state, safety hints), which ride as extra fields the open schema allows."""

    schema_version: str = SCHEMA_VERSION
    tool_id: str
    namespace: str
    name: str
    aliases: list[str] = Field(default_factory=list)
    search_hint: str | None = None
    title: str | None = None
    description: str = ""
    lifecycle: Lifecycle = "available"
    tool_kind: str = "function"
    capability_refs: list[str] | None = None
    input_contract: InputContract = Field(default_factory=InputContract)
    output_contract: OutputContract | None = None
    external_mappings: list[dict[str, Any]] = Field(default_factory=list)
    annotations: dict[str, Any] = Field(default_factory=dict)
    # bridge extensions
    upstream: str = ""
    upstream_kind: str = ""
    native_id: str = ""
    native_name: str = ""
    tags: list[str] = Field(default_factory=list)
    safety: SafetyHints = Field(default_factory=SafetyHints)
    version: int = 1
    signature_digest: str = ""
    loading_state: LoadingState = "loaded"
    loading_reason: str | None = None
    blocked_reason: str | None = None
    blocked_detail: str | None = None
    timeout: float | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.input_contract.model_input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.output_contract.output_schema if self.output_contract else None


class DeferredToolRef(_Record):
    """Agent Tool `deferred_tool_ref`; search matches add `score`, `alternatives` and, when asked,
    `input_schema`."""

    schema_version: str = SCHEMA_VERSION
    tool_id: str
    name: str
    namespace: str | None = None
    search_hint: str | None = None
    description: str | None = None
    source: str | None = None
    schema_visibility: Literal["loaded", "deferred", "internal", "native_ref"] | None = None
    loading_state: LoadingState = "deferred"
    reason: str | None = None
    pending_provider_or_server: str | None = None
    native_ref: dict[str, Any] | None = None
    score: float | None = None
    # search matches: other upstreams' tools of the same native name and a similar meaning
    # (tool_id, name, namespace), the first 20; `alternatives_total` counts them when more
    alternatives: list[dict[str, Any]] | None = None
    alternatives_total: int | None = None
    input_schema: Schema | None = None


class BlockedTool(_Record):
    tool_id: str
    name: str
    reason: str
    detail: str | None = None


class ToolSurface(_Record):
    """Agent Tool `tool_surface`: what one consumer sees."""

    schema_version: str = SCHEMA_VERSION
    surface_id: str
    scope: str = "session"
    created_at: str = Field(default_factory=now_iso)
    producer: str = "bridge"
    loaded_tools: list[str] = Field(default_factory=list)
    deferred_tools: list[DeferredToolRef] = Field(default_factory=list)
    blocked_tools: list[BlockedTool] = Field(default_factory=list)
    selection_policy: dict[str, Any] = Field(default_factory=dict)
    surface_reason: str | None = None


class ToolError(_Record):
    error_class: ErrorClass
    message: str
    error_code: str | None = None
    recoverability: Recoverability = "not_recoverable"
    retry_after: float | None = None
    native_error_ref: dict[str, Any] | None = None
    details: dict[str, Any] | None = None

    @field_validator("retry_after")
    @classmethod
    def _a_delay_one_can_wait(cls, value: float | None) -> float | None:
        return value if value is None or math.isfinite(value) else None  # inf or nan: unknown


class ToolProgress(_Record):
    schema_version: str = SCHEMA_VERSION
    progress_id: str = Field(default_factory=lambda: new_id("prog"))
    invocation_id: str
    sequence: int
    status: str = "running"
    message: str | None = None
    percent: float | None = None
    current_step: int | None = None
    total_steps: int | None = None
    task_id: str | None = None
    timestamp: str = Field(default_factory=now_iso)


class ToolInvocation(_Record):
    schema_version: str = SCHEMA_VERSION
    invocation_id: str
    tool_id: str
    tool_name: str = ""
    version: int | None = None
    surface_id: str | None = None
    status: str = "planned"
    created_at: str = Field(default_factory=now_iso)
    started_at: str | None = None
    ended_at: str | None = None
    duration_ms: float | None = None
    error_class: str | None = None


class ResultPersistence(_Record):
    schema_version: str = SCHEMA_VERSION
    decision_id: str
    invocation_id: str
    result_id: str | None = None
    strategy: str = "preview_and_persist"
    threshold: dict[str, Any] = Field(default_factory=dict)
    original_size_bytes: int = 0
    preview_size_bytes: int = 0
    persisted_ref: dict[str, Any] = Field(default_factory=dict)
    reason: str = "result_exceeded_inline_limit"
    created_at: str = Field(default_factory=now_iso)


class UpstreamResult(_Record):
    """What an adapter returns for one call: content blocks in MCP shapes
    (text, image, audio, resource_link, resource), structured content, and native ids.
    An adapter reports a failed call either as `is_error` with `error`, or by raising BridgeError."""

    content: list[dict[str, Any]] = Field(default_factory=list)
    structured_content: Any = None
    is_error: bool = False
    status: str | None = None  # e.g. "needs_input"; default derived from is_error
    error: ToolError | None = None
    native_ref: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class ToolResult(_Record):
    """Agent Tool `tool_result` envelope: the one shape every frontend renders."""

    schema_version: str = SCHEMA_VERSION
    result_id: str
    invocation_id: str
    tool_id: str | None = None
    tool_name: str | None = None
    version: int | None = None
    status: str
    is_error: bool = False
    content: list[dict[str, Any]] = Field(default_factory=list)
    structured_content: Any = None
    error: ToolError | None = None
    persistence_refs: list[str] | None = None
    persisted: ResultPersistence | None = None
    native_ref: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    created_at: str = Field(default_factory=now_iso)
    duration_ms: float | None = None


class ToolSearchResult(_Record):
    schema_version: str = SCHEMA_VERSION
    query: str
    query_type: Literal["select", "keyword"]
    matches: list[DeferredToolRef] = Field(default_factory=list)
    total_deferred_tools: int = 0
    pending_providers: list[str] = Field(default_factory=list)
    missing_names: list[str] = Field(default_factory=list)
    next_action: str = "load_schema_then_call"
    hint: str | None = None
    # a free-text search no tool matched: the tools nearest to it in meaning (bridge.search)
    suggestions: list[DeferredToolRef] | None = None


UpstreamState = Literal["connecting", "ready", "degraded", "unavailable", "failed", "disabled"]


# Each change of an upstream's state takes the next number (`health_version`), so a reader can
# keep what it derives from every upstream's state (Catalog.pending_providers) until one changes.
_STATE_CHANGES = itertools.count(1)
_health_version = 0


def health_version() -> int:
    """The number of the last change of any upstream's state (0: none yet)."""
    return _health_version


class UpstreamHealth(_Record):
    name: str
    kind: str
    state: UpstreamState = "connecting"
    reason: str | None = None
    tool_count: int = 0
    last_ok: str | None = None
    attempts: int = 0
    next_retry_in: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    # told (old state, new state) of each change of state: the catalog's count of upstreams pending
    _on_state: Callable[[str | None, str], None] | None = PrivateAttr(default=None)

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.state if name == "state" else None
        super().__setattr__(name, value)
        if name == "state":
            global _health_version
            _health_version = next(_STATE_CHANGES)
            if self._on_state is not None:
                self._on_state(old, value)


class VersionRecord(_Record):
    tool_id: str
    version: int
    digest: str
    compatibility: Literal["initial", "compatible", "breaking"]
    created_at: str
    signature: dict[str, Any]


class BridgeError(Exception):
    """The one exception family inside the bridge. It carries everything a result envelope
    needs, so the pipeline turns any of them into an error result without guessing."""

    default_class: ErrorClass = "execution_failed"
    default_recoverability: Recoverability = "not_recoverable"
    default_status = "failed"

    def __init__(
        self,
        message: str,
        *,
        error_class: ErrorClass | None = None,
        recoverability: Recoverability | None = None,
        retry_after: float | None = None,
        status: str | None = None,
        details: dict[str, Any] | None = None,
        native_error_ref: dict[str, Any] | None = None,
        error_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_class: ErrorClass = error_class or self.default_class
        self.recoverability: Recoverability = recoverability or self.default_recoverability
        self.retry_after = retry_after
        self.status = status or self.default_status
        self.details = details
        self.native_error_ref = native_error_ref
        self.error_code = error_code

    def to_error(self) -> ToolError:
        return ToolError(
            error_class=self.error_class,
            message=self.message,
            error_code=self.error_code,
            recoverability=self.recoverability,
            retry_after=self.retry_after,
            details=self.details,
            native_error_ref=self.native_error_ref,
        )
