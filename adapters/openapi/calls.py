"""An OpenAPI upstream's calls: one operation's HTTP request built, its credentials added (an
OAuth2 token the server no longer accepts fetched anew, once), sent with redirects followed here
so that credentials reach only their own origin, retried with backoff when the operation is
idempotent, and its answer read into a result."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from yarl import URL

from adapters.http.body import read_body
from adapters.openapi.auth import Credentials
from adapters.openapi.auth_tls import certificate_failure
from adapters.openapi.config import OpenAPIConfig
from adapters.openapi.params import RequestParts, build_request
from adapters.openapi.records import Operation
from adapters.openapi.response import error_result, success_result
from bridge.model import BridgeError, UpstreamResult
from bridge.translate.http import retry_after_seconds
from bridge.upstream import CallContext, UpstreamEvent

__all__ = ["MAX_REDIRECTS", "OperationCalls"]

log = logging.getLogger("adapters.openapi")


class OperationCalls:
    """The calls side of `OpenAPIUpstream` (a mixin: the upstream holds the session, the mapped
    operations and the credentials)."""

    name: str
    config: OpenAPIConfig
    emit: Callable[[UpstreamEvent], None]
    _session: aiohttp.ClientSession | None
    _loaded: Any
    _credentials: Credentials | None
    _operations: dict[str, Operation]

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        session, loaded, credentials = self._session, self._loaded, self._credentials
        if session is None or loaded is None or credentials is None:
            raise BridgeError(
                f"upstream {self.name!r} is not started",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            )
        op = self._operations.get(native_id)
        if op is None:
            raise BridgeError(
                f"upstream {self.name!r} has no operation {native_id!r}",
                error_class="unknown_tool",
                recoverability="change_arguments",
            )
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ctx.timeout
        # the caller's own credential (a token exchanged for it) replaces the configured ones
        bound = (
            [] if ctx.authorization else credentials.choose(op.security, f"{op.method} {op.path}")
        )
        redactor = credentials.redactor
        attempt = 0
        refreshed = False
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _timeout(op, ctx.timeout)
            if (
                session.closed
            ):  # closed while this call waited to retry: the upstream is reconnecting
                raise BridgeError(
                    f"upstream {self.name!r} is not connected (it is reconnecting)",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    retry_after=1.0,
                )
            parts = build_request(op, arguments)
            parts.default_headers(cfg.headers)
            for name, value in ctx.trace_headers().items():  # W3C trace context, over any other
                parts.set_header(name, value)
            plain = parts.header_items()
            used = await credentials.apply(parts, bound, session, remaining)
            if ctx.authorization is not None:
                parts.set_header("Authorization", ctx.authorization)
            secret = {k.lower() for k, v in parts.header_items().items() if plain.get(k) != v}
            try:
                status, reason, headers, payload, charset = await self._send(
                    session, op, parts, secret, remaining
                )
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                if isinstance(exc, aiohttp.ServerTimeoutError):
                    raise _timeout(op, ctx.timeout) from None
                if (failure := certificate_failure(exc, self.config.ca_file)) is not None:
                    # a setup problem, not an outage: not retried, the upstream not marked unavailable
                    raise BridgeError(
                        f"{op.method} {op.path}: {failure}",
                        error_class="dependency_unavailable",
                        recoverability="setup",
                    ) from None
                delay = self._retry_delay(op, attempt, None, deadline - loop.time())
                what = redactor.text(
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                )
                if delay is not None:
                    attempt += 1
                    await ctx.report_progress(
                        f"retrying after a connection error ({attempt}/{cfg.retries.count})"
                    )
                    await asyncio.sleep(delay)
                    continue
                if cfg.health_path is not None or cfg.launch is not None:
                    self.emit(
                        UpstreamEvent("unavailable", reason=f"server does not answer: {what}")
                    )
                raise BridgeError(
                    f"{op.method} {op.path}: the server cannot be reached ({what})",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                ) from None
            except TimeoutError:
                raise _timeout(op, ctx.timeout) from None
            except (
                aiohttp.ClientError
            ) as exc:  # bad URL, too many redirects ...: the text may hold a query secret
                what = redactor.text(f"{type(exc).__name__}: {exc}")
                raise BridgeError(
                    f"{op.method} {op.path} failed: {what}", error_class="execution_failed"
                ) from None
            if status == 401 and used and not refreshed:
                # an OAuth2 token the server no longer accepts: fetch a new one and send once more
                for token, value in used:
                    token.invalidate(value)
                refreshed = True
                continue
            if status >= 500:
                wait = retry_after_seconds(headers.get("retry-after")) if status == 503 else None
                delay = self._retry_delay(op, attempt, wait, deadline - loop.time())
                if delay is not None:
                    attempt += 1
                    await ctx.report_progress(
                        f"retrying after HTTP {status} ({attempt}/{cfg.retries.count})"
                    )
                    await asyncio.sleep(delay)
                    continue
            if status < 400:
                return success_result(
                    op,
                    status,
                    reason,
                    headers,
                    payload,
                    charset,
                    self.name,
                    ctx.invocation_id,
                    redactor,
                )
            log.info("%s %s %s -> HTTP %s", self.name, op.method, op.path, status)
            return error_result(op, status, reason, headers, payload, charset, redactor)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        op: Operation,
        parts: RequestParts,
        secret: set[str],
        timeout: float,
    ) -> tuple[int, str, Mapping[str, str], bytes, str | None]:
        """Send one request, following redirects here rather than in aiohttp: the credentials
        (the `secret` headers, cookies, Authorization) go only to the origin they were
        configured for, and so do the configured `headers`. A redirect to another origin (a
        download on a CDN, say) is followed without them; a 303, or a 301/302 answering a POST,
        continues as a GET without the body."""
        cfg = self.config
        method, url, data = op.method, URL(parts.full_url(), encoded=True), parts.data
        headers = parts.header_items()  # the configured `headers` among them
        secret = secret | {k.lower() for k in cfg.headers}
        origin = url.origin()
        for _ in range(MAX_REDIRECTS + 1):
            # a client certificate, like the other credentials, is presented to the API's origin alone
            tls = parts.tls if parts.tls is not None and url.origin() == origin else True
            async with session.request(
                method,
                url,
                headers=headers,
                data=data,
                allow_redirects=False,
                ssl=tls,
                # without it aiohttp labels a POST, PUT or PATCH that has no body application/octet-stream
                skip_auto_headers=("Content-Type",) if data is None else None,
                timeout=aiohttp.ClientTimeout(
                    total=timeout, connect=min(cfg.connect_timeout, timeout)
                ),
            ) as response:
                location = response.headers.get("Location")
                if response.status not in _REDIRECTS or not location:
                    payload = await read_body(
                        response, cfg.max_response_bytes, f"{op.method} {op.path}"
                    )
                    return (
                        response.status,
                        response.reason or "",
                        response.headers,
                        payload,
                        response.charset,
                    )
                status = response.status
            url = _redirect_target(op, url, location, status)
            if url.origin() != origin:
                headers = {
                    k: v
                    for k, v in headers.items()
                    if k.lower() not in secret and k.lower() not in _ORIGIN_BOUND
                }
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, data = "GET", None
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        raise BridgeError(
            f"{op.method} {op.path}: more than {MAX_REDIRECTS} redirects",
            error_class="execution_failed",
        )

    def _retry_delay(
        self, op: Operation, attempt: int, retry_after: float | None, remaining: float
    ) -> float | None:
        """Seconds to wait before the next attempt, or None when this answer is final."""
        retries = self.config.retries
        if not op.idempotent or attempt >= retries.count:
            return None
        if retry_after is not None:
            delay = retry_after
            if delay > retries.max_retry_after:
                return None
        else:
            delay = min(retries.max_backoff, retries.backoff * (2**attempt)) * (
                0.5 + random.random() / 2
            )
        return delay if delay < remaining else None


MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# headers that belong to the origin they were sent to, whatever the configured credentials are
_ORIGIN_BOUND = frozenset({"authorization", "cookie", "proxy-authorization"})


def _redirect_target(op: Operation, url: URL, location: str, status: int) -> URL:
    """Where a redirect from `url` leads, or a refusal when that is no http(s) URL with a host
    (`file:///etc/passwd`, `mailto:`, a Location that is not a URL): the bridge is an HTTP
    client of the API, and follows it nowhere else."""
    try:
        target = url.join(URL(location))
    except ValueError:
        target = None
    if target is None or target.scheme not in ("http", "https") or not target.host:
        shown = location if len(location) <= 200 else location[:197] + "..."
        raise BridgeError(
            f"{op.method} {op.path}: the server redirected (HTTP {status}) to "
            f"{shown!r}, which is not an http(s) URL; it was not followed",
            error_class="execution_failed",
            error_code="redirect_refused",
            details={"status": status, "location": shown},
        )
    return target


def _timeout(op: Operation, seconds: float) -> BridgeError:
    return BridgeError(
        f"{op.method} {op.path} did not answer within {seconds:g}s",
        error_class="timeout",
        recoverability="retry",
        status="timed_out",
    )
