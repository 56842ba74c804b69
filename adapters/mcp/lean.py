"""A `tools/call` sent to an MCP server over streamable HTTP beside the SDK's client session: the
request is stamped by the session (`_meta` and headers of the era, as the SDK sends it), POSTed
over the session's pooled aiohttp connections (`adapters/mcp/wire.py`) with the session's
configured headers and timeouts, and its answer read as plain JSON, or from the event stream,
without the SDK's dispatcher, memory streams, JSON-RPC models and httpx2's request machinery.

What the session's HTTP care does with an answer is done alike: the answer is bounded to
`max_response_bytes` (its resumptions included), a 404 or 400 of the session is reported
(`answered`), a POST that gets no answer ends the session (`unanswered`), a server certificate
that fails its check is kept to be said (`failed`), and an event stream is read to its end
before its connection goes back to the pool. What the SDK's client does with the rest of such a
stream is done alike too: progress notifications of the request go to the call's progress
callback, other notifications to the session's own handlers (`deliver`), a stream that ends
without the answer after an event id is resumed with GETs naming it, and
`notifications/cancelled` is sent (handshake era) when the call is cancelled.

A server's request on the stream (`elicitation/create`, `sampling/createMessage`,
`roots/list`) is refused with the error the MCP spec asks of a client without the capability:
this path is taken only for a call whose caller cannot answer such a request (`CALLER_ASKS`
unset); a call whose caller can goes through the SDK's session, which routes the request to
that caller. Failures are raised as the SDK raises them (`MCPError` with the SDK's codes and
messages, httpx2's errors for a request without an answer), so the adapter classifies them
alike.
"""

from __future__ import annotations

import codecs
import itertools
import json
import logging
import re
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
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

from adapters.http.kept import KeptConnections, KeptResponse
from adapters.mcp.http import (
    DRAIN_BYTES,
    DRAIN_SECONDS,
    MAX_RESUMPTIONS,
    RESUMED_TOO_OFTEN,
    TOO_LARGE,
)
from adapters.mcp.wire import httpx_error

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
_RESUME_PAUSE_MS = 1000  # before a resumption when the server named no `retry` (the SDK's)
_IDS = itertools.count(1)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_KEPT = ("mcp-session-id", "mcp-protocol-version")  # what a notice POST carries of the headers
_NO_ANSWER = (aiohttp.ClientError, OSError, TimeoutError)  # a request's, as aiohttp raises them
_JSON = json.JSONEncoder(separators=(",", ":")).encode  # as json.dumps with those separators
_DECODE = json.JSONDecoder().decode  # as json.loads decodes text


# A response of the narrow client's or of aiohttp's: the same few members are read of both.
_Response = aiohttp.ClientResponse | KeptResponse


class _TooLarge(Exception):
    pass


class _Count:
    """Bytes of one call's answer read so far, over its POST and the GETs resuming it."""

    seen = 0


class LeanCall:
    """The `tools/call`s of one HTTP session, each sent by `send` (see the module's docstring).
    `session` is the aiohttp session of the upstream's pooled connections and `http` its SDK's
    HTTP client (for the rare POSTs that carry no request, bounded as the SDK's are); `url` the
    server's; `headers` the configured ones; `timeout` the session's; `session_id` the HTTP
    session's id, if the server gave one; `stamp` the session's stamp of the era; `limit` and
    `what` the answer's bound and the server's name in errors. `deliver(method, params)` hands a
    notification to the session's handlers; `refused(method)` is told of each request of the
    server refused; `answered(status)` of a 404 or 400 to the session; `failed(error)` and
    `unanswered(error)` of a request without an answer."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        http: httpx2.AsyncClient,
        url: str,
        *,
        kept: KeptConnections | None = None,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        session_id: str | None,
        stamp: Callable[[dict[str, Any], dict[str, Any]], None],
        limit: int,
        what: Callable[[], str],
        modern: bool,
        deliver: Deliver,
        refused: Callable[[str], None],
        answered: Callable[[int], None],
        failed: Callable[[Exception], None],
        unanswered: Callable[[Exception], None],
    ) -> None:
        self.session, self.http, self.url, self.kept = session, http, url, kept
        self.headers = {key.lower(): value for key, value in headers.items()}
        self.timeout, self.session_id, self.stamp = timeout, session_id, stamp
        self.limit, self.what, self.modern = limit, what, modern
        self.deliver, self.refused, self.answered = deliver, refused, answered
        self.failed, self.unanswered = failed, unanswered
        # what every call's headers begin with
        self._headers = {
            **self.headers,
            "accept": "application/json, text/event-stream",
            "accept-encoding": "identity",
            "content-type": "application/json",
        }

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
        caller's own credential, in the headers only (replacing a configured one)."""
        request_id = f"bridge-{next(_IDS)}"  # never one of the SDK's integer ids
        data: dict[str, Any] = {"method": "tools/call", "params": params}
        opts: dict[str, Any] = {}
        self.stamp(data, opts)
        if trace or progress is not None:
            meta = data["params"].setdefault("_meta", {})
            meta.update(trace or {})
            if progress is not None:
                meta["progressToken"] = request_id
        headers = self._headers.copy()
        for key, value in opts.get("headers", {}).items():
            headers[key.lower()] = value
        if trace:
            headers.update(trace)
        if authorization is not None:
            headers["authorization"] = authorization
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        body = _JSON({"jsonrpc": "2.0", "id": request_id, **data})
        try:
            return await self._post(request_id, body.encode(), headers, progress, _Count())
        except anyio.get_cancelled_exc_class():
            if not self.modern:  # 2026-07-28: the POST closed is the cancellation
                # sent before the cancellation goes on, as the SDK's session sends it before the
                # session's next message: its POST is bounded by `ping_timeout` (NoticePosts)
                with anyio.CancelScope(shield=True):
                    await self._cancelled(request_id, headers)
            raise

    async def _request(
        self, method: str, headers: dict[str, str], body: bytes | None = None
    ) -> _Response:
        """The response to `method` over the aiohttp session: every GET, and a POST where there
        are no kept connections (`_post` sends it over them, which answer alike)."""
        try:
            return await self.session.request(
                method,
                self.url,
                data=body,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=False,
            )
        except _NO_ANSWER as exc:
            error = self._no_answer(exc, method)
            raise error from error.__cause__

    def _no_answer(self, exc: BaseException, method: str) -> Exception:
        """A request's failure to be answered as httpx2 raises it, said to the session."""
        error = httpx_error(exc, method, self.url, connecting=True)
        assert isinstance(error, Exception)
        self.failed(error)
        if method == "POST":
            self.unanswered(error)
        return error

    async def _post(
        self,
        request_id: str,
        body: bytes,
        headers: dict[str, str],
        progress: Progress | None,
        count: _Count,
    ) -> dict[str, Any]:
        kept = self.kept
        if kept is None:
            response = await self._request("POST", headers, body)
        else:  # over the kept connections, failing as `_request` fails
            try:
                response = await kept.request("POST", headers, body)
            except _NO_ANSWER as exc:
                error = self._no_answer(exc, "POST")
                raise error from error.__cause__
        events = False  # an event stream, which `_events` closes
        try:
            status = response.status
            if self.session_id is not None and status in (400, 404):
                self.answered(status)
            if status == 202:
                raise MCPError(INVALID_REQUEST, "server answered a request with 202 Accepted")
            if status >= 300:
                raise await self._refusal(response, count)
            kind = response.headers.get("content-type", "").lower()
            if kind.startswith("application/json"):
                return _answer(await self._json(response, count))
            if not kind.startswith("text/event-stream"):
                raise MCPError(INVALID_REQUEST, f"Unexpected content type: {kind}")
            events = True
            return await self._events(request_id, response, headers, progress, count)
        finally:
            if not events:
                _let_go(response)

    async def _json(self, response: _Response, count: _Count) -> Any:
        """The JSON body of `response`, read within the bound."""
        try:
            body = await self._body(response, count)
        except _TooLarge:
            raise MCPError(
                PARSE_ERROR, f"Failed to parse JSON response: {self.what()} {TOO_LARGE}{self.limit}"
            ) from None
        except _NO_ANSWER as exc:
            error = httpx_error(exc, "POST", self.url, connecting=False)
            raise error from error.__cause__
        try:
            if body[:2] == b'{"':  # UTF-8, as json.loads finds it, read without finding it
                return _DECODE(body.decode("utf-8", "surrogatepass"))
            return json.loads(body)
        except ValueError as exc:
            raise MCPError(PARSE_ERROR, f"Failed to parse JSON response: {exc}") from None

    async def _body(self, response: _Response, count: _Count) -> bytes:
        """The whole body of `response`, decoded, counted toward the answer's bound."""
        inflate = self._inflater_of(response, count)
        content = response.content
        chunks = []
        while chunk := await content.readany():
            chunks.append(self._counted(chunk, inflate, count))
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _counted(self, chunk: bytes, inflate: Any, count: _Count) -> bytes:
        """`chunk` of a body, decoded (`inflate`: see `_inflater_of`) and counted toward the
        answer's bound."""
        if inflate is not None:
            chunk = inflate.decompress(chunk)
        count.seen += len(chunk)
        if count.seen > self.limit:
            raise _TooLarge
        return chunk

    def _inflater_of(self, response: _Response, count: _Count) -> Any:
        """The decompressor of the body of `response` (None for one sent as it is), once its
        declared length is found within the answer's bound. Its bytes are then read as they
        come (`readany`: b"" at the end), decoded, each counted toward the bound."""
        length = response.headers.get("content-length", "")
        if length.isdigit() and count.seen + int(length) > self.limit:
            raise _TooLarge
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        return None if coding == "identity" else _inflater(coding)

    async def _events(
        self,
        request_id: str,
        response: _Response,
        headers: dict[str, str],
        progress: Progress | None,
        count: _Count,
    ) -> dict[str, Any]:
        """The answer on the event stream of `response`, resumed while it ends without one, as
        the SDK resumes it: a stream that ended is resumed at once again, a resumption that
        failed at most `MAX_RECONNECTION_ATTEMPTS` times in a row."""
        parser = _EventParser()
        failures = resumptions = 0
        while True:
            ended = False
            try:
                if response.status >= 400:
                    raise ValueError(f"a resumption answered HTTP {response.status}")
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if kind.lower() != "text/event-stream":
                    raise ValueError(f"a resumption answered {kind or 'no content type'}")
                text = codecs.getincrementaldecoder("utf-8")(errors="replace")
                inflate = self._inflater_of(response, count)
                content = response.content
                while chunk := await content.readany():
                    chunk = self._counted(chunk, inflate, count)
                    for event, data in parser.feed(text.decode(chunk)):
                        if event != "message" or not data:
                            continue
                        answer = await self._message(data, request_id, headers, progress)
                        if answer is not None:
                            await _drain(response)
                            return answer
                ended = True
            except _TooLarge:
                raise MCPError(
                    CONNECTION_CLOSED, f"SSE stream failed: {self.what()} {TOO_LARGE}{self.limit}"
                ) from None
            except MCPError:
                raise
            except Exception as exc:
                log.debug("SSE stream ended: %s", exc)
            finally:
                _let_go(response)
            if parser.last_id is None:
                raise MCPError(CONNECTION_CLOSED, "SSE stream ended without a response")
            failures = 0 if ended else failures + 1
            if failures >= MAX_RECONNECTION_ATTEMPTS:
                raise MCPError(
                    CONNECTION_CLOSED, "SSE stream ended and reconnection attempts were exhausted"
                )
            retry = parser.retry if parser.retry is not None else _RESUME_PAUSE_MS
            await anyio.sleep(retry / 1000)
            again = {k: v for k, v in headers.items() if k != "content-type"}
            again["last-event-id"] = parser.last_id
            response = await self._request("GET", again)
            resumptions += 1
            if resumptions > MAX_RESUMPTIONS:  # refused before a byte of it is read
                _let_go(response)
                raise MCPError(
                    CONNECTION_CLOSED,
                    f"SSE stream failed: {self.what()} ended the event stream of one answer "
                    f"{MAX_RESUMPTIONS} {RESUMED_TOO_OFTEN}; it is not resumed again",
                )

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
            # as json.loads reads text (which refuses a leading BOM with its own words)
            message = json.loads(data) if data.startswith("\ufeff") else _DECODE(data)
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
        """POST what carries no request with the SDK's HTTP client, whose notice POSTs are
        bounded (adapters/mcp/notices.py)."""
        plain = {k: v for k, v in headers.items() if not k.startswith("mcp-") or k in _KEPT}
        plain.pop("accept-encoding", None)
        response = await self.http.post(self.url, json=message, headers=plain)
        await response.aclose()

    async def _refusal(self, response: _Response, count: _Count) -> MCPError:
        """The SDK's error for a POST answered with a redirect or an HTTP error."""
        status = response.status
        if status < 400:
            where = response.headers.get("location", "")
            return MCPError(
                INVALID_REQUEST,
                f"the server answered HTTP {status} redirecting to {where!r}; not followed",
            )
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            try:
                error = (await self._json(response, count)).get("error")
                if isinstance(error, dict):
                    return MCPError.from_error_data(ErrorData.model_validate(error))
            except (MCPError, httpx2.HTTPError, ValueError, AttributeError):
                pass
        if status == 404:
            if self.session_id is not None:
                return MCPError(INVALID_REQUEST, "Session terminated")
            return MCPError(METHOD_NOT_FOUND, "Not Found")
        return MCPError(INTERNAL_ERROR, "Server returned an error response")


class _EventParser:
    """Server-sent events as they come in text chunks: (event type, data) of each event, and the
    last event id and `retry` the stream gave."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.retry: int | None = None
        self._rest = ""
        self._cr = False  # the last chunk ended in CR, whose LF may open the next one
        self._event = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self._cr and text.startswith("\n"):
            text = text[1:]
        if text:
            self._cr = text.endswith("\r")
        lines = _LINE_BREAK.split(self._rest + text)
        self._rest = lines.pop()
        events = []
        for line in lines:
            if not line:
                if self._data:
                    events.append((self._event or "message", "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id" and "\0" not in value:
                self.last_id = value
            elif field == "retry" and value.isdigit():
                self.retry = int(value)
        return events


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


def _inflater(coding: str) -> Any:
    """A decompressor of a body the server compressed although asked not to."""
    if coding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(wbits=47)  # gzip or zlib, told from the header
    raise MCPError(PARSE_ERROR, f"Failed to parse the response: content-encoding {coding!r}")


async def _drain(response: _Response) -> None:
    """Let go of an event stream whose answer is in once it is read to its end (`DRAIN_BYTES`
    and `DRAIN_SECONDS` at most), which the server writes right after the answer, so that its
    connection goes back to the pool."""
    if isinstance(response, KeptResponse):  # read to its end without waiting here
        response.release_when_read(DRAIN_BYTES, DRAIN_SECONDS)
        return
    content = response.content
    if not content.at_eof():
        with anyio.move_on_after(DRAIN_SECONDS):
            drained = 0
            async for chunk in content.iter_any():
                drained += len(chunk)
                if drained > DRAIN_BYTES:
                    break
    _let_go(response)


def _let_go(response: _Response) -> None:
    """Give a response's connection back to the pool if its body was read to its end, else
    drop it."""
    if response.content.at_eof():
        response.release()
    else:
        response.close()
