"""What the two A2T wire formats (the IETF draft and the a2t dialect) share: the `x-agent-tool`
extension that carries a declaration's catalog facts to another bridge, the `x-tool-result`
envelope, the error-code vocabulary of error bodies, and the error raised for a malformed wire
document."""

from __future__ import annotations

import json
import math
from typing import Any, get_args

from bridge.model import (
    ErrorClass,
    SafetyHints,
    ToolDeclaration,
    ToolError,
    ToolResult,
    UpstreamResult,
)

__all__ = [
    "AGENT_TOOL_KEY",
    "ERROR_CLASSES",
    "TOOL_RESULT_KEY",
    "ExtensionFacts",
    "WireFormatError",
    "declaration_extension",
    "json_safe",
    "read_extension",
    "result_from_envelope",
    "tool_error_from_body",
]

AGENT_TOOL_KEY = "x-agent-tool"
TOOL_RESULT_KEY = "x-tool-result"
ERROR_CLASSES: frozenset[str] = frozenset(get_args(ErrorClass))


class WireFormatError(ValueError):
    """A wire document that does not have the documented shape. `pointer` is the JSON pointer
    (RFC 6901) of the offending value inside the document."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def declaration_extension(
    decl: ToolDeclaration,
    *,
    description: str | None = None,
    output_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The catalog facts of a declaration that neither wire format has a field for: enough for a
    federating bridge to keep the native mappings, safety facts and kind of the tool."""
    ext: dict[str, Any] = {
        "namespace": decl.namespace,
        "native_name": decl.native_name,
        "tool_kind": decl.tool_kind,
        "upstream_kind": decl.upstream_kind,
        "lifecycle": decl.lifecycle,
        "loading_state": decl.loading_state,
        "safety": decl.safety.to_json(),
        "external_mappings": decl.external_mappings,
    }
    for key, value in (
        ("title", decl.title),
        ("search_hint", decl.search_hint),
        ("description", description),
        ("output_schema", output_schema if output_schema is not None else decl.output_schema),
        ("annotations", decl.annotations or None),
        ("loading_reason", decl.loading_reason),
    ):
        if value is not None:
            ext[key] = value
    return ext


class ExtensionFacts:
    """The `x-agent-tool` object of a remote tool, read leniently: a field of the wrong type is
    ignored, never fatal (the extension is advisory)."""

    def __init__(self, raw: Any) -> None:
        self.raw: dict[str, Any] = raw if isinstance(raw, dict) else {}

    def _str(self, key: str) -> str | None:
        value = self.raw.get(key)
        return value if isinstance(value, str) and value else None

    @property
    def present(self) -> bool:
        return bool(self.raw)

    @property
    def title(self) -> str | None:
        return self._str("title")

    @property
    def description(self) -> str | None:
        return self._str("description")

    @property
    def search_hint(self) -> str | None:
        return self._str("search_hint")

    @property
    def tool_kind(self) -> str | None:
        return self._str("tool_kind")

    @property
    def tags(self) -> list[str]:
        value = self.raw.get("tags")
        return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []

    @property
    def output_schema(self) -> dict[str, Any] | None:
        value = self.raw.get("output_schema")
        return value if isinstance(value, dict) else None

    @property
    def annotations(self) -> dict[str, Any]:
        value = self.raw.get("annotations")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def external_mappings(self) -> list[dict[str, Any]]:
        value = self.raw.get("external_mappings")
        return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []

    @property
    def safety(self) -> SafetyHints | None:
        value = self.raw.get("safety")
        if not isinstance(value, dict):
            return None
        try:
            return SafetyHints.model_validate(value)
        except ValueError:
            return None

    def origin(self) -> dict[str, Any]:
        """What the federating side keeps of the remote catalog entry in its own mapping."""
        out: dict[str, Any] = {}
        for key in ("namespace", "native_name", "upstream_kind"):
            if self._str(key):
                out[f"upstream_{key}" if key != "upstream_kind" else key] = self.raw[key]
        if self.external_mappings:
            out["upstream_mappings"] = self.external_mappings
        return out


def read_extension(obj: dict[str, Any]) -> ExtensionFacts:
    return ExtensionFacts(obj.get(AGENT_TOOL_KEY))


def result_from_envelope(envelope: Any) -> UpstreamResult | None:
    """A remote bridge's `x-tool-result` as this bridge's upstream result (same content,
    structured content and error class), or None when it is not a usable envelope."""
    if not isinstance(envelope, dict):
        return None
    try:
        remote = ToolResult.model_validate(envelope)
    except ValueError:
        return None
    native: dict[str, Any] = {"result_id": remote.result_id, "invocation_id": remote.invocation_id}
    if remote.tool_id:
        native["tool_id"] = remote.tool_id
    if remote.native_ref:
        native["native_ref"] = remote.native_ref
    return UpstreamResult(
        content=remote.content,
        structured_content=remote.structured_content,
        is_error=remote.is_error,
        status=remote.status if remote.is_error else None,
        error=remote.error,
        native_ref=native,
        meta=remote.meta,
    )


def tool_error_from_body(body: Any, *, fallback_class: ErrorClass, message: str) -> ToolError:
    """The error of an error body (`{"error": {...}}`), keeping a known `error_class`; anything
    else becomes `fallback_class` with the remote code and message kept."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return ToolError(error_class=fallback_class, message=message)
    remote_class = err.get("error_class")
    remote_message = err.get("message") if isinstance(err.get("message"), str) else message
    retry_after = err.get("retry_after")
    fields: dict[str, Any] = {
        "message": remote_message,
        "error_code": err.get("error_code") if isinstance(err.get("error_code"), str) else None,
        "retry_after": float(retry_after) if isinstance(retry_after, (int, float)) else None,
        "details": err.get("details") if isinstance(err.get("details"), dict) else None,
    }
    if isinstance(remote_class, str) and remote_class in ERROR_CLASSES:
        recoverability = err.get("recoverability")
        try:
            return ToolError(
                error_class=remote_class,
                recoverability=recoverability or "not_recoverable",
                **fields,
            )
        except ValueError:
            return ToolError(error_class=remote_class, **fields)
    code = err.get("code") or err.get("error_code")
    fields["error_code"] = code if isinstance(code, str) else fields["error_code"]
    return ToolError(error_class=fallback_class, **fields)


def json_safe(value: Any) -> Any:
    """A copy of `value` that strict JSON can carry: NaN and infinities become null, anything else
    JSON has no type for becomes its string. The projections pass tool values through untouched;
    whoever serializes them applies this when strict serialization fails."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return json.loads(json.dumps(value, default=str))
