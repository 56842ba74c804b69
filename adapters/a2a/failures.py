"""How an A2A call failed: its error read from the error and what it was raised from (HTTP
statuses, a2a-sdk 0.3's HTTP+JSON errors, A2A errors, lost connections, timeouts), a server
certificate that fails its check as a setup problem, and the one place a call decides that the
agent is gone: no answer came, and its card, fetched once more, does not answer either."""

from __future__ import annotations

from typing import Any

import httpx
from a2a.client.errors import A2AClientTimeoutError
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    ContentTypeNotSupportedError,
    ExtensionSupportRequiredError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from pydantic import ValidationError

from adapters.a2a.agent import Agent
from adapters.a2a.card import CardSource, certificate_refused, failed_url
from adapters.a2a.config import A2AConfig
from adapters.a2a.mapping import TaskTracker
from adapters.a2a.transport import (
    DROPPED_UNANSWERED,
    AnswerTooLarge,
    ReusedConnectionDropped,
    causes,
    cut_off,
    lost_connection,
)
from bridge.model import BridgeError, ErrorClass, validation_line

__all__ = ["CallFailures", "first_fault"]

CARD_CHECK_SECONDS = 5.0  # longest wait for the card when asking whether an agent that gave a call no answer is still there


class CallFailures:
    """The failed calls side of `A2AUpstream` (a mixin: the upstream holds the agent)."""

    name: str
    config: A2AConfig
    _source: CardSource | None

    def _redact(self, text: str) -> str:
        raise NotImplementedError

    def _connection_lost(self, reason: str) -> None:
        raise NotImplementedError

    async def _call_failed(
        self, agent: Agent, exc: BaseException, tracker: TaskTracker, *, stream_unbegun: bool
    ) -> BridgeError:
        """The error a failed call answers with, and the one place a call decides that the agent
        is gone: when no answer came (no connection was made, or it dropped before the answer
        ended) and the card, fetched once more, does not answer either. An answer of the agent's
        (an A2A error, an HTTP status, an answer too large) or a timeout never marks it."""
        refused = self._certificate_refused(agent, exc, tracker)
        if refused is not None:
            return refused
        error = self._call_error(exc, tracker)
        if lost_connection(exc) is None:
            return error
        assert self._source is not None
        if await self._source.answers(timeout=min(CARD_CHECK_SECONDS, self.config.start_timeout)):
            return self._agent_still_there(agent, exc, tracker, stream_unbegun)
        self._connection_lost(error.message)
        return error

    def _certificate_refused(
        self, agent: Agent, exc: BaseException, tracker: TaskTracker
    ) -> BridgeError | None:
        """The error for a call whose server certificate failed its check, or None: a setup
        problem, failed at once, which says nothing of the agent being gone (every attempt fails
        alike until an operator acts)."""
        url = failed_url(exc) or (agent.interface.url if agent.interface else agent.card_url)
        assert self._source is not None
        refused = certificate_refused(exc, url, self._source.address, self.config.ca_file)
        if refused is None:
            return None
        ref: dict[str, Any] = {"a2a_error": type(exc).__name__}
        if tracker.task_id:
            ref["task_id"] = tracker.task_id
        return BridgeError(
            f"{self._redact(url)}: {refused}",
            error_class="dependency_unavailable",
            recoverability="setup",
            native_error_ref=ref,
        )

    def _agent_still_there(
        self, agent: Agent, exc: BaseException, tracker: TaskTracker, stream_unbegun: bool
    ) -> BridgeError:
        """The error for a call that got no answer while the agent's card still answers: this call
        failed, the agent is there. A stream the agent began and broke off before its first event
        (its process died, say); a request (a message not streamed, a poll) whose connection
        dropped before its answer (a kept-alive connection the agent's server closed as it was
        reused, or the agent restarting: the message is never sent again, it may have reached
        the agent); or a connection the agent's interface did not take (it is on another origin
        than the card, down)."""
        lost = lost_connection(exc)
        assert lost is not None
        said = f"{type(lost).__name__}: {self._redact(str(lost)) or 'connection lost'}"
        if stream_unbegun:
            dropped = next(
                (e for e in causes(exc) if isinstance(e, httpx.RemoteProtocolError)), lost
            )
            what = f"the agent's stream broke before its first event ({type(dropped).__name__}: {self._redact(str(dropped)) or 'connection lost'})"
        elif isinstance(
            lost, ReusedConnectionDropped
        ):  # a message: a poll is sent again, on a new connection
            what = (
                f"the agent closed a kept-alive connection as the message was sent on it, before answering ({self._redact(str(lost))}); "
                "the message may or may not have reached the agent, and is not sent again"
            )
        elif cut_off(exc):
            cut = next(e for e in causes(exc) if isinstance(e, DROPPED_UNANSWERED))
            what = f"the agent's connection dropped before its answer ({type(cut).__name__}: {self._redact(str(cut)) or 'connection lost'})"
        else:
            where = agent.interface.url if agent.interface else "its interface"
            what = f"the agent's interface at {where} took no connection ({said})"
        ref: dict[str, Any] = {"a2a_error": type(exc).__name__}
        if tracker.task_id:
            ref["task_id"] = tracker.task_id
        return BridgeError(
            f"{what}; its card still answers",
            error_class="dependency_unavailable",
            recoverability="retry_later",
            retry_after=self.config.retry_initial,
            native_error_ref=ref,
        )

    def _call_error(self, exc: BaseException, tracker: TaskTracker) -> BridgeError:
        """What a failed call's error is, read from the error and what it was raised from. Only
        classifies: whether the agent is gone is decided by `_call_failed`, after its card."""
        chain = causes(exc)
        text = self._redact(str(exc) or type(exc).__name__)
        ref: dict[str, Any] = {"a2a_error": type(exc).__name__}
        if type(exc) in JSON_RPC_ERROR_CODE_MAP:
            ref["code"] = JSON_RPC_ERROR_CODE_MAP[type(exc)]  # type: ignore[index]
        if tracker.task_id:
            ref["task_id"] = tracker.task_id
        status_error = next((e for e in chain if isinstance(e, httpx.HTTPStatusError)), None)
        if status_error is not None:
            code = status_error.response.status_code
            ref["http_status"] = code
            if code in (401, 403):
                return BridgeError(
                    f"the agent refused the credentials (HTTP {code}); check auth in the config",
                    error_class="credential_missing",
                    recoverability="setup",
                    status="denied",
                    native_error_ref=ref,
                )
            if code == 429:
                after = status_error.response.headers.get("retry-after", "")
                return BridgeError(
                    "the agent is rate limiting calls (HTTP 429)",
                    error_class="rate_limited",
                    recoverability="retry_later",
                    retry_after=float(after) if after.replace(".", "", 1).isdigit() else None,
                    native_error_ref=ref,
                )
            said = _rest_0_3_error(status_error.response)
            if said is not None and code in _REST_0_3_ERRORS:
                if code == 404:
                    return BridgeError(
                        f"the agent does not know that task ({self._redact(said)}); start over without task_id",
                        error_class="invalid_arguments",
                        recoverability="change_arguments",
                        native_error_ref=ref,
                    )
                error_class = _REST_0_3_ERRORS[code]
                return BridgeError(
                    f"the agent {'refused the message' if error_class == 'invalid_arguments' else 'cannot serve this call'}: {self._redact(said)}",
                    error_class=error_class,
                    recoverability="change_arguments"
                    if error_class == "invalid_arguments"
                    else None,
                    native_error_ref=ref,
                )
            if code >= 500:
                return BridgeError(
                    f"the agent answered HTTP {code}",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    native_error_ref=ref,
                )
        large = next((e for e in chain if isinstance(e, AnswerTooLarge)), None)
        if large is not None:
            return BridgeError(
                f"the agent's answer is too large: {self._redact(str(large))}",
                error_class="result_too_large",
                recoverability="change_arguments",
                status="too_large",
                native_error_ref=ref,
            )
        lost = lost_connection(exc)
        if lost is not None:
            return BridgeError(
                f"the agent stopped answering: {type(lost).__name__}: {self._redact(str(lost)) or 'connection lost'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=self.config.retry_initial,
                native_error_ref=ref,
            )
        if any(isinstance(e, (A2AClientTimeoutError, httpx.TimeoutException)) for e in chain):
            return BridgeError(
                "the agent did not answer in time",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
                native_error_ref=ref,
            )
        if isinstance(exc, TaskNotFoundError):
            return BridgeError(
                f"the agent does not know that task ({text}); start over without task_id",
                error_class="invalid_arguments",
                recoverability="change_arguments",
                native_error_ref=ref,
            )
        if isinstance(exc, (InvalidParamsError, InvalidRequestError, ContentTypeNotSupportedError)):
            return BridgeError(
                f"the agent refused the message: {text}",
                error_class="invalid_arguments",
                recoverability="change_arguments",
                native_error_ref=ref,
            )
        if isinstance(
            exc,
            (
                UnsupportedOperationError,
                MethodNotFoundError,
                VersionNotSupportedError,
                ExtensionSupportRequiredError,
            ),
        ):
            return BridgeError(
                f"the agent cannot serve this call: {text}",
                error_class="capability_gap",
                native_error_ref=ref,
            )
        return BridgeError(
            f"the agent call failed: {text}", error_class="execution_failed", native_error_ref=ref
        )


# The HTTP+JSON errors of a2a-sdk 0.3 agents: a status per A2A error and `{"message": ...}`, with
# no error `type` for the client to read the A2A error from. 404 is a task the agent does not know
# (a route it lacks answers FastAPI's `{"detail": "Not Found"}`), 400/415/422 invalid requests,
# parameters or content types, 501 an unsupported operation.
_REST_0_3_ERRORS: dict[int, ErrorClass] = {
    400: "invalid_arguments",
    404: "invalid_arguments",
    415: "invalid_arguments",
    422: "invalid_arguments",
    501: "capability_gap",
}


def _rest_0_3_error(response: httpx.Response) -> str | None:
    """The `message` of a 0.3 HTTP+JSON error answer, or None for any other answer."""
    try:
        body = response.json()
    except (ValueError, httpx.ResponseNotRead):
        return None
    if isinstance(body, dict) and isinstance(body.get("message"), str) and "type" not in body:
        return str(body["message"])[:500]
    return None


def first_fault(exc: Exception) -> str:
    """One line of what was wrong with an answer, its first fault (never the value)."""
    if isinstance(exc, ValidationError):
        return validation_line(exc)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]
