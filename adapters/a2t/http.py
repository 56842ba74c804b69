"""The HTTP side of an `a2t` upstream: one pooled aiohttp session, JSON requests with a response
size cap, retries of 5xx answers and connection failures with backoff (honouring Retry-After
within the call's time budget; a server certificate that fails its check is not retried), and
the error class of an HTTP failure. URLs in messages never carry credentials."""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from yarl import URL

from adapters.http.body import read_body
from adapters.http.proxy import proxied_session
from adapters.http.tls import added_cas, ca_file_trust, certificate_failure
from bridge.model import BridgeError, ErrorClass, ToolError, UpstreamResult
from bridge.translate.http import retry_after_seconds
from bridge.translate.wire import TOOL_RESULT_KEY, result_from_envelope, tool_error_from_body

__all__ = ["A2THttp", "HTTPAnswer", "RetryConfig", "class_of_status", "error_result_of", "safe_url"]

USER_AGENT = "a2t-bridge (a2t upstream)"


class RetryConfig(BaseModel):
    """Retries after a 5xx answer or a connection failure (the draft asks executors to retry 5xx
    before reporting). A 504 answer to an invocation is not retried: that time is already spent."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(default=2, ge=0, le=10, description="retries after the first attempt")
    backoff: float = Field(
        default=0.25, ge=0, description="first delay in seconds; doubles each retry"
    )
    max_backoff: float = Field(default=5.0, ge=0, description="longest delay between attempts")
    max_retry_after: float = Field(
        default=10.0, ge=0, description="longest Retry-After waited for before retrying"
    )


def safe_url(url: str | URL) -> str:
    """The URL without user info, query or fragment: fit for messages and logs."""
    parsed = URL(str(url))
    try:
        return str(parsed.with_user(None).with_query(None).with_fragment(None))
    except ValueError:
        return str(url).split("?")[0]


def class_of_status(status: int) -> ErrorClass:
    if status in (400, 405, 406, 411, 413, 414, 415, 422):
        return "invalid_arguments"
    if status == 401:
        return "credential_missing"
    if status == 403:
        return "permission_denied"
    if status in (404, 410):
        return "unknown_tool"
    if status in (408, 504):
        return "timeout"
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "dependency_unavailable"
    return "execution_failed"


@dataclass
class HTTPAnswer:
    status: int
    body: Any  # parsed JSON, or the text when the body is not JSON, or None when empty
    text: str
    retry_after: float | None
    headers: Mapping[str, str]  # case-insensitive (the answer's own)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def snippet(self) -> str:
        text = " ".join(self.text.split())
        return text[:300] + ("…" if len(text) > 300 else "")


def error_result_of(answer: HTTPAnswer, what: str) -> UpstreamResult:
    """A non-2xx answer as an error result: a remote bridge's envelope or structured error body is
    kept (same error class); anything else is classified by its status."""
    if isinstance(answer.body, dict):
        remote = result_from_envelope(answer.body.get(TOOL_RESULT_KEY))
        if remote is not None and remote.is_error:
            if (
                remote.error is not None
                and remote.error.retry_after is None
                and answer.retry_after is not None
            ):
                remote.error.retry_after = answer.retry_after
            return remote
    message = f"{what} answered HTTP {answer.status}" + (
        f": {answer.snippet()}" if answer.text else ""
    )
    if 300 <= answer.status < 400 and answer.headers.get("Location"):
        message = (
            f"{what} answered HTTP {answer.status}, a redirect to {safe_url(answer.headers['Location'])}, which is "
            "not followed (the upstream's headers and credentials would go with it): configure that URL instead"
        )
    error: ToolError = tool_error_from_body(
        answer.body, fallback_class=class_of_status(answer.status), message=message
    )
    if error.retry_after is None:
        error.retry_after = answer.retry_after
    if (
        error.error_class in ("dependency_unavailable", "rate_limited")
        and error.recoverability == "not_recoverable"
    ):
        error.recoverability = "retry_later"
    return UpstreamResult(
        is_error=True,
        error=error,
        content=[{"type": "text", "text": f"{error.error_class}: {error.message}"}],
        native_ref={"http_status": answer.status},
    )


class A2THttp:
    """One pooled session to one server."""

    def __init__(
        self,
        *,
        headers: dict[str, str],
        connect_timeout: float,
        connection_limit: int,
        retries: RetryConfig,
        max_response_bytes: int,
        verify_tls: bool = True,
        ca_file: str | None = None,
        ca_path: str | None = None,
    ) -> None:
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
        self.connect_timeout = connect_timeout
        self.connection_limit = connection_limit
        self.retries = retries
        self.max_response_bytes = max_response_bytes
        self.verify_tls = verify_tls
        self.ca_file, self.ca_path = ca_file, ca_path  # as written (for messages), and resolved
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        if self._session is None or self._session.closed:
            tls: ssl.SSLContext | bool = self.verify_tls
            if self.verify_tls and self.ca_path:
                tls = added_cas(self.ca_path, self.ca_file or self.ca_path)
            connector = aiohttp.TCPConnector(
                limit=self.connection_limit, keepalive_timeout=15, ssl=tls
            )
            self._session = proxied_session(
                connector=connector, headers=self.headers, cookie_jar=aiohttp.DummyCookieJar()
            )

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def _once(
        self,
        method: str,
        url: str,
        *,
        body: Any,
        params: dict[str, Any] | None,
        headers: dict[str, str] | None,
        timeout: float,
    ) -> HTTPAnswer:
        if (
            self._session is None
        ):  # closed: not started yet, or reconnecting while this call waited to retry
            raise BridgeError(
                f"{method} {safe_url(url)}: the upstream is not connected (it is reconnecting)",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=1.0,
            )
        data = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
        request_headers = (
            {"Content-Type": "application/json", **(headers or {})} if data is not None else headers
        )
        async with self._session.request(
            method,
            url,
            data=data,
            params=params,
            headers=request_headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout, connect=self.connect_timeout),
        ) as response:
            raw = await read_body(
                response, self.max_response_bytes, lambda: f"{method} {safe_url(url)}"
            )
            text = raw.decode(response.charset or "utf-8", errors="replace")
            parsed: Any = None
            if text and not text.isspace():
                try:
                    parsed = json.loads(text)
                except (
                    ValueError,
                    RecursionError,
                ):  # not JSON, or nested past the reader: the answer as text
                    parsed = text
            return HTTPAnswer(
                response.status,
                parsed,
                text,
                retry_after_seconds(response.headers.get("Retry-After")),
                response.headers,
            )

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float,
        retry_statuses: frozenset[int],
    ) -> HTTPAnswer:
        """Send one request, retrying `retry_statuses` answers and connection failures while the
        time budget `timeout` allows. Raises BridgeError (`dependency_unavailable` or `timeout`)
        when no answer came, at once (recoverability `setup`) for a server certificate that fails
        its check or a server that speaks no TLS; returns the last answer otherwise."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempt = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BridgeError(
                    f"{method} {safe_url(url)} did not answer within {timeout:g}s",
                    error_class="timeout",
                    recoverability="retry",
                )
            failure: BridgeError | None = None
            answer: HTTPAnswer | None = None
            try:
                answer = await self._once(
                    method, url, body=body, params=params, headers=headers, timeout=remaining
                )
            except TimeoutError:
                raise BridgeError(
                    f"{method} {safe_url(url)} did not answer within {timeout:g}s",
                    error_class="timeout",
                    recoverability="retry",
                ) from None
            except aiohttp.ClientConnectionError as exc:
                if (
                    refused := certificate_failure(
                        exc, trust=ca_file_trust(self.ca_file), address="url"
                    )
                ) is not None:
                    # a setup problem, not an outage: every attempt fails alike, and the server is not down
                    raise BridgeError(
                        f"{method} {safe_url(url)}: {refused}",
                        error_class="dependency_unavailable",
                        recoverability="setup",
                    ) from None
                failure = BridgeError(
                    f"{safe_url(url)} is unreachable: {type(exc).__name__}: {exc}",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    retry_after=1.0,
                )
            except aiohttp.ClientError as exc:
                failure = BridgeError(
                    f"{method} {safe_url(url)} failed: {type(exc).__name__}",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    retry_after=1.0,
                )
            if answer is not None and answer.status not in retry_statuses:
                return answer
            if attempt >= self.retries.count:
                if failure is not None:
                    raise failure
                assert answer is not None
                return answer
            wait = min(self.retries.max_backoff, self.retries.backoff * (2**attempt)) * (
                0.75 + random.random() / 2
            )
            if answer is not None and answer.retry_after is not None:
                if answer.retry_after > self.retries.max_retry_after:
                    return answer
                wait = max(wait, answer.retry_after)
            if loop.time() + wait >= deadline - 0.05:
                if failure is not None:
                    raise failure
                assert answer is not None
                return answer
            attempt += 1
            await asyncio.sleep(wait)
