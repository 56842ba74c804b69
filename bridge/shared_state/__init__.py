"""What running replicas share through Redis (`redis.url`): the state of handshake-era MCP
sessions, so that any replica serves any request of any session, the notices that carry a
change seen by one replica to the clients whose streams another holds, and the rate limits'
buckets."""

from __future__ import annotations

from typing import Any

from bridge.shared_state.counters import SharedCounters
from bridge.shared_state.link import Notice, RedisLink, SharedStateUnavailable, shown_url
from bridge.shared_state.sessions import SessionRecord, SharedSessions

__all__ = [
    "Notice",
    "SessionRecord",
    "SharedCounters",
    "SharedSessions",
    "SharedState",
    "SharedStateUnavailable",
    "shown_url",
]


class SharedState:
    """One replica's view of the shared state: the Redis link, the session records on it (kept
    `session_ttl` seconds past their last use) and the notices channel."""

    def __init__(
        self, url: str, *, session_ttl: float, prefix: str = "a2t-bridge:", timeout: float = 1.0
    ) -> None:
        self.link = RedisLink(url, prefix=prefix, timeout=timeout)
        self.sessions = SharedSessions(self.link, ttl=session_ttl)
        self.counters = SharedCounters(self.link)

    @property
    def available(self) -> bool:
        return self.link.available

    def health(self) -> dict[str, Any]:
        """What /healthz says of Redis."""
        answer: dict[str, Any] = {"url": self.link.url, "reachable": self.link.available}
        if not self.link.available:
            answer["since"] = self.link.unavailable_since
            answer["reason"] = self.link.reason
            answer["unavailable"] = [
                "handshake-era MCP sessions",
                "change notices between replicas",
            ]
        return answer

    async def check(self) -> bool:
        """Whether Redis answers now (a PING, at most every half second while it is away)."""
        try:
            await self.link.run(lambda client: client.ping())
        except SharedStateUnavailable:
            return False
        return True

    async def aclose(self) -> None:
        await self.link.aclose()
