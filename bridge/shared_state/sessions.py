"""Handshake-era MCP sessions in Redis, so that any replica serves any request of any session:
what the handshake settled (protocol version, the client's `initialize` parameters, the surface,
the principal that opened it) in one hash, and the deferred tools it loaded through search in a
sorted set beside it (oldest first), the URIs it subscribed to in a set, and the logging level it
set in the hash. All expire `ttl` seconds after the session's last request;
each operation is one round trip."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from bridge.shared_state.link import RedisLink

__all__ = ["SessionRecord", "SharedSessions"]


@dataclass
class SessionRecord:
    """One handshake-era session as every replica reads it."""

    session_id: str
    protocol_version: str
    client_params: dict[str, Any]  # the client's `initialize` params, as it sent them
    surface: str
    owner: dict[str, Any] | None = None  # the SDK's principal of the request that opened it
    loaded: list[str] = field(default_factory=list)  # tool ids loaded through search, oldest first
    subscriptions: list[str] = field(default_factory=list)  # URIs of `resources/subscribe`
    log_level: str | None = None  # set by `logging/setLevel`


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SharedSessions:
    """The session records of one Redis (`link`), kept `ttl` seconds past their last use."""

    def __init__(self, link: RedisLink, *, ttl: float) -> None:
        self.link = link
        self.ttl = max(1, round(ttl))

    def _keys(self, session_id: str) -> tuple[str, str]:
        return self.link.key("session", session_id), self.link.key("session", session_id, "loaded")

    def _subscribed_key(self, session_id: str) -> str:
        return self.link.key("session", session_id, "subscribed")

    async def create(self, record: SessionRecord) -> None:
        key, loaded = self._keys(record.session_id)
        fields = {
            "protocol_version": record.protocol_version,
            "client_params": json.dumps(record.client_params, separators=(",", ":")),
            "surface": record.surface,
            "owner": json.dumps(record.owner, separators=(",", ":"), sort_keys=True),
        }

        async def write(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.delete(key, loaded, self._subscribed_key(record.session_id))
                pipe.hset(key, mapping=fields)
                pipe.expire(key, self.ttl)
                await pipe.execute()

        await self.link.run(write)

    async def fetch(self, session_id: str) -> SessionRecord | None:
        """The session's record, its expiry pushed back `ttl` seconds; None when there is none
        (never opened, ended, or expired)."""
        key, loaded = self._keys(session_id)
        subscribed = self._subscribed_key(session_id)

        async def read(client: Any) -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                pipe.expire(key, self.ttl)
                pipe.expire(loaded, self.ttl)
                pipe.expire(subscribed, self.ttl)
                pipe.hgetall(key)
                pipe.zrange(loaded, 0, -1)
                pipe.smembers(subscribed)
                return list(await pipe.execute())

        _, _, _, fields, tool_ids, uris = await self.link.run(read)
        if not fields:
            return None
        values = {_text(k): _text(v) for k, v in fields.items()}
        try:
            return SessionRecord(
                session_id=session_id,
                protocol_version=values["protocol_version"],
                client_params=json.loads(values["client_params"]),
                surface=values["surface"],
                owner=json.loads(values.get("owner", "null")),
                loaded=[_text(t) for t in tool_ids],
                subscriptions=sorted(_text(u) for u in uris),
                log_level=values.get("log_level") or None,
            )
        except (KeyError, ValueError):  # written by something else: no session of ours
            return None

    async def load(self, session_id: str, tool_ids: list[str], limit: int) -> list[str]:
        """Add `tool_ids` to the session's loaded tools (a tool loaded again becomes the
        newest), the oldest dropping out past `limit`; the loaded tools after it, oldest first."""
        _, loaded = self._keys(session_id)
        now = time.time()
        # later in the list, newer (as a session kept in one process orders them)
        scores = {tool_id: now + i * 1e-6 for i, tool_id in enumerate(tool_ids)}

        async def write(client: Any) -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                if scores:
                    pipe.zadd(loaded, scores)
                pipe.zremrangebyrank(loaded, 0, -(limit + 1))
                pipe.expire(loaded, self.ttl)
                pipe.zrange(loaded, 0, -1)
                return list(await pipe.execute())

        answers = await self.link.run(write)
        return [_text(t) for t in answers[-1]]

    async def follow(
        self,
        session_id: str,
        *,
        subscribe: str | None = None,
        unsubscribe: str | None = None,
        log_level: str | None = None,
    ) -> tuple[list[str], str | None]:
        """Add a URI to the session's subscriptions, take one out, or set its logging level;
        the subscriptions and level after it."""
        key = self._keys(session_id)[0]
        subscribed = self._subscribed_key(session_id)

        async def write(client: Any) -> list[Any]:
            async with client.pipeline(transaction=True) as pipe:
                if subscribe is not None:
                    pipe.sadd(subscribed, subscribe)
                if unsubscribe is not None:
                    pipe.srem(subscribed, unsubscribe)
                if log_level is not None:
                    pipe.hset(key, "log_level", log_level)
                pipe.expire(subscribed, self.ttl)
                pipe.smembers(subscribed)
                pipe.hget(key, "log_level")
                return list(await pipe.execute())

        answers = await self.link.run(write)
        level = answers[-1]
        return sorted(_text(u) for u in answers[-2]), _text(level) if level else None

    async def delete(self, session_id: str) -> None:
        keys = (*self._keys(session_id), self._subscribed_key(session_id))
        await self.link.run(lambda client: client.delete(*keys))
