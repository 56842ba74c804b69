"""HTTP responses of an OpenAPI upstream as results: JSON becomes structured content, text a text
block, anything else a resource with its media type and size; a non-2xx answer becomes an error
result carrying the status, the problem body (RFC 7807 / RFC 9457 when given), an error class,
recoverability and `Retry-After`."""

from __future__ import annotations

import base64
import json
from typing import Any

from adapters.openapi.auth import Redactor
from adapters.openapi.records import Operation, body_kind
from bridge.model import BridgeError, ErrorClass, Recoverability, ToolError, UpstreamResult
from bridge.translate.http import retry_after_seconds

__all__ = ["KEPT_HEADERS", "classify_status", "error_result", "success_result"]

# Response headers worth passing on (pagination, caching, rate limits); never cookies or credentials.
KEPT_HEADERS = (
    "content-type",
    "content-length",
    "location",
    "link",
    "etag",
    "last-modified",
    "retry-after",
    "x-request-id",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
)


def classify_status(status: int) -> tuple[ErrorClass, Recoverability]:
    if status in (400, 405, 406, 411, 413, 414, 415, 416, 422):
        return "invalid_arguments", "change_arguments"
    if status == 401:
        return "credential_missing", "setup"
    if status in (403, 407):
        return "permission_denied", "not_recoverable"
    if status in (404, 409, 410, 412):
        return "execution_failed", "change_arguments"
    if status in (408, 504):
        return "timeout", "retry"
    if status == 429:
        return "rate_limited", "retry_later"
    if status in (502, 503):
        return "dependency_unavailable", "retry_later"
    if status >= 500:
        return "execution_failed", "retry"
    return "execution_failed", "not_recoverable"


def _headers(headers: Any) -> dict[str, str]:
    return {k: headers[k] for k in KEPT_HEADERS if k in headers}


def _decode(payload: bytes, charset: str | None) -> str:
    try:
        return payload.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError):
        return payload.decode("utf-8", errors="replace")


def _media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower() or "application/octet-stream"


def success_result(
    op: Operation,
    status: int,
    reason: str,
    headers: Any,
    payload: bytes,
    charset: str | None,
    upstream: str,
    invocation_id: str,
    redactor: Redactor,
) -> UpstreamResult:
    media_type = _media_type(headers.get("content-type", ""))
    meta = {"http": {"status": status, "headers": redactor.scrub(_headers(headers))}}
    native_ref = {
        "method": op.method,
        "path": op.path,
        "operation_id": op.operation_id,
        "status": status,
    }
    if not payload:
        text = f"HTTP {status} {reason}".rstrip()
        return UpstreamResult(
            content=[{"type": "text", "text": text}], meta=meta, native_ref=native_ref
        )
    kind = body_kind(media_type) if media_type != "*/*" else "binary"
    if kind == "json":
        try:
            value = json.loads(_decode(payload, charset))
        except ValueError:
            kind = "text"
        except RecursionError:  # about a thousand levels
            raise BridgeError(
                f"HTTP {status}: the answer's JSON nests too deep to read",
                error_class="execution_failed",
            ) from None
        else:
            value = redactor.scrub(value)
            structured = (
                {"result": value} if op.wrap_result or not isinstance(value, dict) else value
            )
            text = json.dumps(value, ensure_ascii=False)
            return UpstreamResult(
                content=[{"type": "text", "text": text}],
                structured_content=structured,
                meta=meta,
                native_ref=native_ref,
            )
    if kind == "text" or media_type.startswith("text/"):
        return UpstreamResult(
            content=[{"type": "text", "text": redactor.text(_decode(payload, charset))}],
            meta=meta,
            native_ref=native_ref,
        )
    uri = f"openapi://{upstream}/{op.native_id.replace(' ', '%20')}/{invocation_id}"
    resource = {"uri": uri, "mimeType": media_type, "blob": base64.b64encode(payload).decode()}
    return UpstreamResult(
        content=[
            {"type": "text", "text": f"binary response: {media_type}, {len(payload)} bytes"},
            {"type": "resource", "resource": resource, "_meta": {"size": len(payload)}},
        ],
        structured_content={"media_type": media_type, "size": len(payload), "uri": uri},
        meta=meta,
        native_ref=native_ref,
    )


def error_result(
    op: Operation,
    status: int,
    reason: str,
    headers: Any,
    payload: bytes,
    charset: str | None,
    redactor: Redactor,
) -> UpstreamResult:
    """A non-2xx answer as an error result; the problem body rides in `details.problem`."""
    error_class, recoverability = classify_status(status)
    media_type = _media_type(headers.get("content-type", ""))
    problem: Any = None
    if payload:
        text = _decode(payload[:65536], charset)
        if body_kind(media_type) == "json":
            try:
                problem = json.loads(text)
            except (ValueError, RecursionError):
                problem = text
        else:
            problem = text
    problem = redactor.scrub(problem)
    summary = ""
    error_code = f"http_{status}"
    if isinstance(problem, dict):
        parts = [
            str(problem[k]) for k in ("title", "detail") if isinstance(problem.get(k), (str, int))
        ]
        if not parts and isinstance(problem.get("message"), str):
            parts = [problem["message"]]
        if not parts and isinstance(problem.get("error"), str):
            parts = [problem["error"]]
        summary = ": ".join(dict.fromkeys(parts))
        if isinstance(problem.get("type"), str) and problem["type"] not in ("about:blank", ""):
            error_code = problem["type"]
    elif isinstance(problem, str):
        summary = problem.strip().splitlines()[0][:300] if problem.strip() else ""
    retry_after = retry_after_seconds(headers.get("retry-after")) if status in (429, 503) else None
    message = f"{op.method} {op.path} answered HTTP {status} {reason}".rstrip()
    if summary:
        message += f": {summary[:500]}"
    message = redactor.text(message)
    details: dict[str, Any] = {"http_status": status}
    if problem is not None:
        details["problem"] = problem
    error = ToolError(
        error_class=error_class,
        message=message,
        error_code=error_code,
        recoverability=recoverability,
        retry_after=retry_after,
        details=details,
        native_error_ref={
            "method": op.method,
            "path": op.path,
            "operation_id": op.operation_id,
            "status": status,
        },
    )
    content = [
        {
            "type": "text",
            "text": f"{error_class}: {message}"
            + (f" (retry after {retry_after:g}s)" if retry_after is not None else ""),
        }
    ]
    return UpstreamResult(
        content=content,
        structured_content=problem if isinstance(problem, dict) else None,
        is_error=True,
        error=error,
        meta={"http": {"status": status, "headers": redactor.scrub(_headers(headers))}},
    )
