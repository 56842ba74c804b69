"""The replica's link to Redis: one pooled asyncio client, whether Redis answers (and since when
it does not), and the channel on which replicas tell each other what changed.

A command that cannot reach Redis raises `SharedStateUnavailable` at once; while Redis is away,
commands fail fast (one attempt to reconnect every `RECHECK` seconds, not one per request), and
the first one that goes through again marks it back. Nothing here needs a restart: the pool
reconnects by itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["RECHECK", "RedisLink", "SharedStateUnavailable", "shown_url"]

log = logging.getLogger("bridge.shared_state")

T = TypeVar("T")

# Seconds a replica that found Redis away waits before trying it again; meanwhile what needs it
# fails at once.
RECHECK = 0.5
# Seconds between two attempts of the notice listener to subscribe again, at most.
LISTEN_RETRY_MAX = 2.0

Notice = dict[str, Any]


class SharedStateUnavailable(Exception):
    """Redis cannot be reached: what the replicas share cannot be read or written now."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the shared state store (Redis at {url}) cannot be reached: {reason}")
        self.url = url
        self.reason = reason


def shown_url(url: str) -> str:
    """`url` without its password, for logs, errors and /healthz."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    host = parts.hostname or ""
    netloc = f"{user}{host}{f':{parts.port}' if parts.port else ''}"
    return urlunsplit(parts._replace(netloc=netloc))


class RedisLink:
    """One client for `url` (redis://HOST:PORT/N), each command bounded by `timeout` seconds.
    Keys are prefixed with `prefix`; `replica` names this process in the notices it
    publishes, so it can tell its own from the others'."""

    def __init__(self, url: str, *, prefix: str = "a2t-bridge:", timeout: float = 1.0) -> None:
        # redis (and the OpenTelemetry metrics SDK it loads) imported only here: a bridge
        # without `redis` in its config starts half a second of CPU sooner
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self.url = shown_url(url)
        self.prefix = prefix
        self.replica = uuid.uuid4().hex
        self.channel = f"{prefix}notices"  # what every replica hears
        self.own_channel = self.replica_channel(self.replica)  # what is told to this one alone
        # one retry without backoff: a pooled connection that a Redis restart broke is replaced
        # at once, while a Redis that is away is found away in one attempt
        self.client: aioredis.Redis = aioredis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
        )
        self.unavailable_since: float | None = None  # wall-clock time Redis was first found away
        self.reason: str | None = None
        self._next_try = 0.0  # monotonic: no attempt before, while Redis is away
        self._listeners: list[Callable[[Notice], None]] = []
        self._listening: asyncio.Task[None] | None = None
        self.listening = False  # subscribed to the notices channel right now
        self._subscribed: asyncio.Event | None = None  # set while subscribed
        self.round_trips = 0  # commands (or pipelines) sent, for the metrics

    @property
    def available(self) -> bool:
        return self.unavailable_since is None

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def run(self, command: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """`command(client)`'s answer; `SharedStateUnavailable` when Redis cannot be reached."""
        if self.unavailable_since is not None and time.monotonic() < self._next_try:
            raise SharedStateUnavailable(self.url, self.reason or "unreachable")
        self.round_trips += 1
        try:
            answer = await command(self.client)
        except self._errors as exc:
            self._away(exc)
            raise SharedStateUnavailable(self.url, self.reason or "unreachable") from None
        self._back()
        return answer

    def _away(self, exc: BaseException) -> None:
        self._next_try = time.monotonic() + RECHECK
        reason = str(exc) or type(exc).__name__
        if self.unavailable_since is None:
            self.unavailable_since = time.time()
            log.warning(
                "Redis at %s cannot be reached (%s): MCP sessions of the handshake era "
                "are refused until it is back",
                self.url,
                reason,
            )
        self.reason = reason

    def _back(self) -> None:
        if self.unavailable_since is not None:
            log.warning(
                "Redis at %s is reachable again after %.1f s",
                self.url,
                time.time() - self.unavailable_since,
            )
            self.unavailable_since = None
            self.reason = None

    # ------------------------------------------------------------------ notices between replicas

    async def publish(self, notice: Notice) -> None:
        """Tell the other replicas (best effort: a notice lost while Redis is away is logged)."""
        body = json.dumps({**notice, "origin": self.replica}, separators=(",", ":"))
        try:
            await self.run(lambda client: client.publish(self.channel, body))
        except SharedStateUnavailable as exc:
            log.info("notice %s not published to the other replicas: %s", notice.get("kind"), exc)

    def replica_channel(self, replica: str) -> str:
        return f"{self.prefix}replica:{replica}"

    async def tell(self, replica: str, notice: Notice) -> bool:
        """Tell one replica (named by its `replica`): whether it heard, that is whether it is
        still running and listening. Raises SharedStateUnavailable when Redis is away."""
        body = json.dumps({**notice, "origin": self.replica}, separators=(",", ":"))
        channel = self.replica_channel(replica)
        heard = await self.run(lambda client: client.publish(channel, body))
        return bool(heard)

    async def wait_listening(self, timeout: float) -> bool:
        """Whether this replica hears notices within `timeout` seconds (it listens once
        `on_notice` was called)."""
        if self.listening:
            return True
        if self._subscribed is None:
            self._subscribed = asyncio.Event()
        try:
            await asyncio.wait_for(self._subscribed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def on_notice(self, listener: Callable[[Notice], None]) -> Callable[[], None]:
        """Call `listener` with each notice another replica publishes; returns its removal."""
        self._listeners.append(listener)
        if self._listening is None:
            self._listening = asyncio.get_running_loop().create_task(
                self._listen(), name="redis notices"
            )
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def _listen(self) -> None:
        """Subscribe, hand each notice on, and subscribe again (with backoff) whenever the
        connection is lost."""
        delay = 0.05
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel, self.own_channel)
                self.listening = True
                if self._subscribed is None:
                    self._subscribed = asyncio.Event()
                self._subscribed.set()
                self._back()
                delay = 0.05
                async for message in pubsub.listen():
                    self._deliver(message)
            except asyncio.CancelledError:
                raise
            except self._errors as exc:
                self._away(exc)
            finally:
                self.listening = False
                if self._subscribed is not None:
                    self._subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(delay)
            delay = min(LISTEN_RETRY_MAX, delay * 2)

    def _deliver(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        try:
            notice = json.loads(message["data"])
        except (ValueError, TypeError):
            log.debug("a notice that is not JSON was ignored")
            return
        if not isinstance(notice, dict) or notice.get("origin") == self.replica:
            return
        for listener in list(self._listeners):
            try:
                listener(notice)
            except Exception:
                log.exception("a notice listener failed on %s", notice.get("kind"))

    async def aclose(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(BaseException):
                await self._listening
            self._listening = None
        with contextlib.suppress(Exception):
            await self.client.aclose()
