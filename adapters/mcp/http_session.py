"""The care of an MCP upstream's streamable HTTP session: answers bounded in size, the session id
learnt from `initialize`, a session the server forgot (404, or 400 and a failed probe) replaced,
notifications the server never answers counted, a GET stream the SDK gave up on renewed, a server
certificate that fails its check kept to be said, and the session ended with a DELETE."""

from __future__ import annotations

import asyncio
import logging

import anyio
import httpx2
from mcp.client.streamable_http import MAX_RECONNECTION_ATTEMPTS

from adapters.http.tls import ca_file_trust, certificate_failure, server_of
from adapters.mcp.config import MCPConfig
from adapters.mcp.http import bound_answer
from adapters.mcp.notices import NoticePosts
from bridge.masking import masked

__all__ = ["HTTPSessionCare"]

log = logging.getLogger("bridge.adapters.mcp")

# A session whose GET stream of server messages the SDK gave up on is replaced: at once the first
# time, then after pauses doubling from the first to the longest, while the streams of the
# sessions that follow are given up on within the longest pause of their start.
_RENEW_RETRY = (5.0, 300.0)
_SESSION_HEADERS = (
    "mcp-session-id",
    "mcp-protocol-version",
)  # what names an HTTP session to its server


class HTTPSessionCare:
    """The HTTP session side of `MCPUpstream` (a mixin: the upstream holds the state)."""

    name: str
    config: MCPConfig
    lost_notifications: dict[str, int]
    _http_session: dict[str, str]
    _session_forgotten: bool
    _closing: bool
    _doubt: asyncio.Future[None] | None
    _probe_now: asyncio.Event
    _wake: asyncio.Event
    _lost_reason: str | None
    _notices: NoticePosts | None
    _session_listed: bool
    _certificate: str | None
    _connected_at: float
    _stream_renewals: int
    _renew_timer: asyncio.TimerHandle | None

    def _tools_changed(self, reason: str) -> None:
        raise NotImplementedError

    async def _on_http_response(self, response: httpx2.Response) -> None:
        """A server that restarted, or ended the session, answers the session's requests with 404,
        after which MCP has the client open a new session: the session is over at once (its
        request was not run), and the upstream connects again. Servers built on the TypeScript
        SDK's example answer 400 instead, which a request the server found wrong gets too: a
        liveness probe is sent now, and the request that got the 400 waits for its verdict
        (`_settled`), so that it fails as `dependency_unavailable` when the session is gone.

        Every answer is first bounded to `max_response_bytes` (adapters/mcp/http.py). The session
        is known from the `initialize` answer that opens it, so that a start failing right after
        it (a protocol version or a result the SDK refuses) still ends it (`_end_http_session`)."""
        bound_answer(response, self.config.max_response_bytes, self.config.display_url())
        request = response.request
        if request.method == "DELETE":
            return
        if "mcp-session-id" not in request.headers:
            # the initialize request is the one POST that names neither a session nor a protocol version
            opened = response.headers.get("mcp-session-id")
            if (
                opened
                and request.method == "POST"
                and "mcp-protocol-version" not in request.headers
                and response.is_success
            ):
                self._http_session = {"mcp-session-id": opened}
            return
        self._http_session = {
            name: request.headers[name] for name in _SESSION_HEADERS if name in request.headers
        }
        self._session_answered(response.status_code)

    def _session_answered(self, status: int) -> None:
        """A request naming the session was answered with HTTP `status`: a 404 ends the session,
        a 400 asks for a liveness probe (see `_on_http_response`)."""
        if self._closing or status not in (400, 404):
            return
        if status == 400:
            if self._doubt is None:
                self._doubt = asyncio.get_running_loop().create_future()
            self._probe_now.set()
            return
        self._session_forgotten = True
        if not self._wake.is_set():
            self._lost_reason = f"{self.config.display_url()} answered HTTP 404 for the session: the server ended it or restarted"
            self._wake.set()

    def _notice_lost(self, method: str, bound: float, error: Exception | None) -> None:
        """The server did not answer, within `bound` seconds, the POST of a notification (or of
        an answer to its own request), or the POST failed (`error`); the session went on without
        it. Said once per method at WARNING, again at INFO, and counted in `health()`."""
        seen = self.lost_notifications.get(method, 0)
        self.lost_notifications[method] = seen + 1
        url = self.config.display_url()
        if error is None:
            what = f"{url} did not answer the POST of {method} within {bound:g}s"
        else:
            failure = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            what = (
                f"the POST of {method} to {url} failed ({masked(failure, self.config.secrets())})"
            )
        log.log(
            logging.INFO if seen else logging.WARNING,
            "mcp upstream %s: %s; it was abandoned (counted lost) and the session goes on%s",
            self.name,
            what,
            "" if seen else "; the next ones lost are logged at INFO",
        )

    def _current_phase(self) -> str | None:
        """What a start over HTTP that takes a while waits for: the answer to a notification's
        POST (`notifications/initialized`), or, that one lost, the listing. The catalog gives it as
        the reason of an upstream still connecting, and of a start_timeout."""
        notices = self._notices
        if notices is None or self._session_listed:
            return None
        waiting = sorted(set(notices.waiting.values()))
        if waiting:
            return f"waiting for {self.config.display_url()} to answer the POST of {', '.join(waiting)}"
        if notices.lost:
            return f"listing the tools; {self.config.display_url()} did not answer the POST of {', '.join(sorted(notices.lost))}"
        return None

    def _on_http_error(self, exc: Exception) -> None:
        """A request without an answer: a server certificate that fails its check is kept, so that
        the calls the lost session fails say so (the SDK fails them as a closed connection)."""
        if (failure := self._certificate_failure(exc)) is not None:
            self._certificate = failure

    def _certificate_failure(self, exc: BaseException) -> str | None:
        """`<url>: the certificate of host:port cannot be verified (...): <fix>`, or None."""
        failure = certificate_failure(
            exc,
            trust=ca_file_trust(self.config.ca_file),
            address="url",
            server=server_of(self.config.url or ""),
            verify_tls=False,
        )
        return f"{self.config.display_url()}: {failure}" if failure is not None else None

    def _get_stream_given_up(self, why: str) -> None:
        """The SDK stopped re-opening the session's GET stream, on which the server's change
        notices come: the session is replaced by a new one (whose listing catches what was
        missed), at once the first time; when the streams of the sessions that follow fail as
        soon, after a pause (the tools re-listed meanwhile), lest a server whose every stream fails
        be connected to again and again."""
        if self._closing or self._wake.is_set():
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._connected_at > _RENEW_RETRY[1]:
            self._stream_renewals = 0  # a stream that held this long is no loop
        pause = (
            0.0
            if self._stream_renewals == 0
            else min(_RENEW_RETRY[0] * 2 ** (self._stream_renewals - 1), _RENEW_RETRY[1])
        )
        self._stream_renewals += 1
        reason = (
            f"{self.config.display_url()}: the stream of server messages (GET) failed {MAX_RECONNECTION_ATTEMPTS} times in a row "
            f"(last: {masked(why, self.config.secrets())}) and is no longer re-opened, so change notices would be lost"
        )
        log.warning(
            "mcp upstream %s: %s; connecting a new session%s",
            self.name,
            reason,
            f" in {pause:g}s" if pause else "",
        )
        if not pause:
            self._renew_session(reason)
            return
        self._tools_changed("GET stream given up")
        self._renew_timer = loop.call_later(pause, self._renew_session, reason)

    def _renew_session(self, reason: str) -> None:
        self._renew_timer = None
        if not self._closing and not self._wake.is_set():
            self._lost_reason = reason
            self._wake.set()

    def _cancel_renewal(self) -> None:
        if self._renew_timer is not None:
            self._renew_timer.cancel()
            self._renew_timer = None

    async def _end_http_session(self, http: httpx2.AsyncClient) -> None:
        """End the HTTP session with a DELETE, as MCP asks of a client that no longer needs it,
        within `ping_timeout`; not when the server already said it does not know the session (a
        404, or a 400 and a failed liveness probe), which the SDK's own DELETE did at every such
        reconnect, logging `Session termination failed: 404` for an expected event. A DELETE that
        fails is a warning when the bridge closes the session; when the session was lost, whose
        reason is logged as a warning already (the server gone, say), it is logged at INFO."""
        headers, self._http_session = self._http_session, {}
        if "mcp-session-id" not in headers or self._session_forgotten:
            return
        assert self.config.url is not None
        level = logging.WARNING if self._closing else logging.INFO
        try:
            with anyio.fail_after(self.config.ping_timeout):
                response = await http.delete(
                    self.config.url,
                    headers={"accept": "application/json, text/event-stream", **headers},
                )
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.log(
                level,
                "mcp upstream %s: ending the HTTP session failed: %s",
                self.name,
                masked(failure, self.config.secrets()),
            )
            return
        if response.status_code == 404:
            log.info(
                "mcp upstream %s: the server no longer knew the HTTP session it was asked to end",
                self.name,
            )
        elif response.status_code not in (
            200,
            202,
            204,
            405,
        ):  # 405: the server does not let clients end sessions
            log.log(
                level,
                "mcp upstream %s: ending the HTTP session failed: HTTP %d",
                self.name,
                response.status_code,
            )
