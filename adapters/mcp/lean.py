"""A `tools/call` sent to an MCP server over streamable HTTP without the SDK's client session: the
request is stamped by the session (`_meta` and headers of the era, as the SDK sends it), POSTed
with the session's own HTTP client (so the answer bounds, the session's care and the pooled
aiohttp connections apply, as to every request of the session), and its answer read as plain
JSON, or from the event stream, without the SDK's JSON-RPC models and memory streams.

What the SDK's client does with the rest of such a stream is done here alike: progress
notifications of the request go to the call's progress callback, other notifications to the
session's own handlers (`deliver_notification`), a stream that ends without the answer after an
event id is resumed with GETs naming it, and `notifications/cancelled` is sent (handshake era)
when the call is cancelled. A server's request on the stream (`elicitation/create`,
`sampling/createMessage`, `roots/list`) is refused with the error the MCP spec asks of a client
without the capability: this path is taken only for a call whose caller cannot answer such a
request (`CALLER_ASKS` unset); a call whose caller can goes through the SDK's session, which
routes the request to that caller. Failures are raised as the SDK raises them (`MCPError` with
the SDK's codes and messages), so the adapter classifies them alike.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import MAX_RECONNECTION_ATTEMPTS
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorData,
)

__all__ = ["LeanCall"]

log = logging.getLogger("bridge.adapters.mcp")

Progress = Callable[[float, float | None, str | None], Awaitable[None]]
Deliver = Callable[[str, dict[str, Any] | None], Awaitable[None]]

# What a client without the capability answers a server's request (the SDK's words).
_REFUSED = {
    "elicitation/create": (INVALID_PARAMS, "Elicitation not supported"),
    "sampling/createMessage": (METHOD_NOT_FOUND, "Sampling not supported"),
    "roots/list": (METHOD_NOT_FOUND, "List roots not supported"),
}
_RESUME_PAUSE = 1.0  # seconds before a resumption when the server named no `retry`
_IDS = itertools.count(1)


class LeanCall:
    """One `tools/call` sent by `send` (see the module's docstring). `http` is the session's
    HTTP client, `url` the server's; `session_id` the HTTP session's id, if the server gave
    one; `stamp` the session's stamp of the era; `deliver(method, params)` hands a
    notification to the session's handlers; `refused(method)` is told of each request of the
    server refused; `unanswered(error)` of a POST that got no answer at all, which ends the
    session as it ends the SDK's; `max_event_size` bounds one event, as the SDK's client does."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        url: str,
        *,
        session_id: str | None,
        stamp: Callable[[dict[str, Any], dict[str, Any]], None],
        deliver: Deliver,
        refused: Callable[[str], None],
        unanswered: Callable[[Exception], None],
        max_event_size: int,
        modern: bool,
    ) -> None:
        self.http, self.url, self.session_id = http, url, session_id
        self.stamp, self.deliver, self.refused = stamp, deliver, refused
        self.unanswered = unanswered
        self.max_event_size = max_event_size
        self.modern = modern

    async def send(
        self,
        params: dict[str, Any],
        progress: Progress | None,
        trace: dict[str, str] | None,
        authorization: str | None,
    ) -> dict[str, Any]:
        """The result of `tools/call` with `params` (name, arguments, ...), as it came; an
        MCPError for an error the server answered, or one the SDK would make up. `trace`, the
        W3C trace context, goes in `params._meta` and the headers; `authorization`, the
        caller's own credential, in the headers only (as `sdk.send_raw` sends them)."""
        meta = trace or {}
        headers = dict(meta)
        if authorization is not None:
            headers["authorization"] = authorization
        request_id = f"bridge-{next(_IDS)}"  # never one of the SDK's integer ids
        data: dict[str, Any] = {"method": "tools/call", "params": params}
        opts: dict[str, Any] = {}
        self.stamp(data, opts)
        if meta or progress is not None:
            extra = data["params"].setdefault("_meta", {})
            extra.update(meta)
            if progress is not None:
                extra["progressToken"] = request_id
        sent = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **opts.get("headers", {}),
            **headers,
        }
        if self.session_id is not None:
            sent["mcp-session-id"] = self.session_id
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, **data}, separators=(",", ":"))
        try:
            return await self._post(request_id, body.encode(), sent, progress)
        except asyncio.CancelledError:
            if not self.modern:  # 2026-07-28: the POST closed is the cancellation
                # sent before the cancellation goes on, as the SDK's session sends it before the
                # session's next message: its POST is bounded by `ping_timeout` (NoticePosts)
                with anyio.CancelScope(shield=True):
                    await self._cancelled(request_id, sent)
            raise

    async def _post(
        self, request_id: str, body: bytes, headers: dict[str, str], progress: Progress | None
    ) -> dict[str, Any]:
        request = self.http.build_request("POST", self.url, content=body, headers=headers)
        try:
            response = await self.http.send(request, stream=True)
        except httpx2.TransportError as exc:
            self.unanswered(exc)
            raise
        try:
            status = response.status_code
            kind = response.headers.get("content-type", "").lower()
            if status == 202:
                raise MCPError(INVALID_REQUEST, "server answered a request with 202 Accepted")
            if 300 <= status < 400 or status >= 400:
                raise await _refusal(response, self.session_id is not None)
            if kind.startswith("application/json"):
                return _answer(await _read_json(response))
            if not kind.startswith("text/event-stream"):
                raise MCPError(INVALID_REQUEST, f"Unexpected content type: {kind}")
            return await self._events(request_id, response, headers, progress)
        finally:
            await response.aclose()

    async def _events(
        self,
        request_id: str,
        response: httpx2.Response,
        headers: dict[str, str],
        progress: Progress | None,
    ) -> dict[str, Any]:
        """The answer on the event stream of `response`, resumed while it ends without one, as
        the SDK resumes it: a stream that ended is resumed at once again, a resumption that
        failed at most `MAX_RECONNECTION_ATTEMPTS` times in a row."""
        last_id: str | None = None
        retry: int | None = None
        failures = 0
        events = True  # the stream read is an event stream (a POST's is, by its content type)
        while True:
            ended = False
            try:
                if response.status_code >= 400:
                    raise httpx2.HTTPStatusError(
                        f"HTTP {response.status_code}",
                        request=response.request,
                        response=response,
                    )
                async for event in httpx2.EventSource(response, max_event_size=self.max_event_size):
                    if event.id:
                        last_id = event.id
                    if event.retry is not None:
                        retry = event.retry
                    if event.event != "message" or not event.data:
                        continue
                    answer = await self._message(event.data, request_id, headers, progress)
                    if answer is not None:
                        return answer
                ended = True
            except httpx2.SSEError as exc:
                if events:
                    raise MCPError(CONNECTION_CLOSED, f"SSE stream failed: {exc}") from None
            except MCPError:
                raise
            except Exception as exc:
                log.debug("SSE stream ended: %s", exc)
            finally:
                await response.aclose()
            if last_id is None:
                raise MCPError(CONNECTION_CLOSED, "SSE stream ended without a response")
            failures = 0 if ended else failures + 1
            if failures >= MAX_RECONNECTION_ATTEMPTS:
                raise MCPError(
                    CONNECTION_CLOSED,
                    "SSE stream ended and reconnection attempts were exhausted",
                )
            await anyio.sleep((retry if retry is not None else _RESUME_PAUSE * 1000) / 1000)
            again = {k: v for k, v in headers.items() if k != "content-type"}
            again["last-event-id"] = last_id
            response = await self.http.send(
                self.http.build_request("GET", self.url, headers=again), stream=True
            )
            kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            events = kind == "text/event-stream"

    async def _message(
        self,
        data: str,
        request_id: str,
        headers: dict[str, str],
        progress: Progress | None,
    ) -> dict[str, Any] | None:
        """The answer if `data` is one (any response ends the POST's stream, as in the SDK);
        a notification or request of the server is handled and None returned."""
        try:
            message = json.loads(data)
        except ValueError as exc:
            raise MCPError(PARSE_ERROR, f"Failed to parse SSE message: {exc}") from None
        if not isinstance(message, dict):
            raise MCPError(PARSE_ERROR, "Failed to parse SSE message: not a JSON-RPC message")
        method = message.get("method")
        if not isinstance(method, str):
            return _answer(message)
        params = message.get("params")
        params = params if isinstance(params, dict) else None
        if "id" in message:
            await self._refuse(message["id"], method, headers)
        elif method == "notifications/progress":
            if progress is not None and params and params.get("progressToken") == request_id:
                await progress(
                    params.get("progress", 0), params.get("total"), params.get("message")
                )
        else:
            await self.deliver(method, params)
        return None

    async def _refuse(self, server_id: Any, method: str, headers: dict[str, str]) -> None:
        """Answer a server's request on the call's stream: `ping` with an empty result, anything
        else refused as by a client without the capability."""
        if method == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": server_id, "result": {}}
        else:
            self.refused(method)
            code, text = _REFUSED.get(method, (METHOD_NOT_FOUND, "Method not found"))
            error = {"code": code, "message": text, "data": method}
            reply = {"jsonrpc": "2.0", "id": server_id, "error": error}
        await self._post_notice(reply, headers)

    async def _cancelled(self, request_id: str, headers: dict[str, str]) -> None:
        """Tell a handshake-era server that the call was cancelled (best effort)."""
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the call was cancelled"},
        }
        try:
            await self._post_notice(notice, headers)
        except Exception as exc:
            log.debug("notifications/cancelled not delivered: %s", exc)

    async def _post_notice(self, message: dict[str, Any], headers: dict[str, str]) -> None:
        plain = {k: v for k, v in headers.items() if not k.startswith("mcp-") or k in _KEPT}
        response = await self.http.post(self.url, json=message, headers=plain)
        await response.aclose()


_KEPT = ("mcp-session-id", "mcp-protocol-version")


def _answer(message: Any) -> dict[str, Any]:
    """The result of a JSON-RPC response; an MCPError for an error response."""
    if not isinstance(message, dict):
        raise MCPError(PARSE_ERROR, "Failed to parse JSON response: not a JSON-RPC message")
    if "result" in message and isinstance(message["result"], dict):
        result: dict[str, Any] = message["result"]
        return result
    error = message.get("error")
    if isinstance(error, dict):
        raise MCPError.from_error_data(ErrorData.model_validate(error))
    raise MCPError(PARSE_ERROR, "Failed to parse JSON response: no result and no error")


async def _read_json(response: httpx2.Response) -> Any:
    try:
        return json.loads(await response.aread())
    except (httpx2.StreamError, ValueError) as exc:
        raise MCPError(PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None


async def _refusal(response: httpx2.Response, in_session: bool) -> MCPError:
    """The SDK's error for a POST answered with a redirect or an HTTP error."""
    status = response.status_code
    if status < 400:
        where = response.headers.get("location", "")
        return MCPError(
            INVALID_REQUEST,
            f"the server answered HTTP {status} redirecting to {where!r}; not followed",
        )
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        try:
            error = json.loads(await response.aread()).get("error")
            if isinstance(error, dict):
                return MCPError.from_error_data(ErrorData.model_validate(error))
        except (httpx2.StreamError, ValueError, AttributeError):
            pass
    if status == 404:
        if in_session:
            return MCPError(INVALID_REQUEST, "Session terminated")
        return MCPError(METHOD_NOT_FOUND, "Not Found")
    return MCPError(INTERNAL_ERROR, "Server returned an error response")
