"""Error envelopes: the one place a failure becomes a `ToolResult`, its status and recoverability
following its error class."""

from __future__ import annotations

from bridge.model import BridgeError, ToolDeclaration, ToolError, ToolResult, new_id

__all__ = ["error_result", "status_of"]

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
    status = (
        status
        or _STATUS.get(err.error_class)
        or (error.status if isinstance(error, BridgeError) else "failed")
    )
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


def status_of(error_class: str) -> str:
    """The result status of an error class (`failed` for one the vocabulary does not name)."""
    return _STATUS.get(error_class, "failed")
