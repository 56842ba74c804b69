"""Resource subscriptions and logging levels of handshake-era MCP sessions shared by replicas
through Redis (`redis.url`), so that a session's `notifications/resources/updated` and
`notifications/message` reach its stream whichever replica holds that stream and whichever
received its `resources/subscribe`, `resources/unsubscribe` or `logging/setLevel`.

- The replica that serves one of those requests does what a single process does (it subscribes
  its upstream, passes the level on), then writes the session's subscribed URIs and level to the
  session's record and tells the other replicas, which take them for the copies they hold (a URI
  unsubscribed on another replica is also unfollowed upstream here).
- Each resource update and log message an upstream sends a replica is handed to the session
  copies it holds there as in one process, and published to the other replicas, which hand it
  to the session copies they hold whose shared subscriptions name the URI or whose level admits
  the message, but not to those they follow upstream themselves (their own upstream tells them).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from bridge.serve.mcp_notices import LOG_LEVELS, FeatureNotices
from bridge.shared_state import Notice, SessionRecord, SharedState, SharedStateUnavailable

__all__ = ["FOLLOWED_METHODS", "SharedFeatures"]

log = logging.getLogger("bridge.serve.mcp")

# the requests that change what a session follows
FOLLOWED_METHODS = frozenset(["resources/subscribe", "resources/unsubscribe", "logging/setLevel"])


@dataclass
class _Held:
    """A session copy this replica holds, and what the session follows on every replica."""

    connection: weakref.ref[Any]
    surface: str
    subscriptions: set[str] = field(default_factory=set)
    log_level: str | None = None


class SharedFeatures:
    """What sessions follow, shared between replicas; `notices` hands upstream notices on."""

    def __init__(self, notices: FeatureNotices, shared: SharedState) -> None:
        self.notices = notices
        self.shared = shared
        self._held: dict[str, _Held] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        notices.relay = self._relay

    # ------------------------------------------------------------------ session copies held here

    def hold(self, connection: Any, surface: str, record: SessionRecord | None = None) -> None:
        """A session copy opened or taken up here (`record`: as Redis had it)."""
        session_id = getattr(connection, "session_id", None) or (record and record.session_id)
        if not session_id:
            return
        held = _Held(weakref.ref(connection), surface)
        if record is not None:
            held.subscriptions = set(record.subscriptions)
            held.log_level = record.log_level
        self._held[session_id] = held
        exit_stack = getattr(connection, "exit_stack", None)
        if exit_stack is not None:
            exit_stack.callback(self._held.pop, session_id, None)

    def seen(self, record: SessionRecord) -> None:
        """A request of the session, with its record as Redis had it."""
        held = self._held.get(record.session_id)
        if held is not None:
            held.subscriptions = set(record.subscriptions)
            held.log_level = record.log_level

    async def changed(self, record: SessionRecord, method: str, params: Any) -> None:
        """The session's `method` succeeded here: its record and the other replicas learn it."""
        params = params if isinstance(params, dict) else {}
        uri = params.get("uri")
        uri = uri if isinstance(uri, str) else None
        level = params.get("level")
        try:
            uris, log_level = await self.shared.sessions.follow(
                record.session_id,
                subscribe=uri if method == "resources/subscribe" else None,
                unsubscribe=uri if method == "resources/unsubscribe" else None,
                log_level=level if method == "logging/setLevel" and level in LOG_LEVELS else None,
            )
        except SharedStateUnavailable as exc:
            log.info("%s of MCP session %s… kept here only: %s", method, record.session_id[:8], exc)
            return
        record.subscriptions, record.log_level = uris, log_level
        self.seen(record)
        await self.shared.link.publish(
            {
                "kind": "followed",
                "session": record.session_id,
                "subscriptions": uris,
                "log_level": log_level,
            }
        )

    # ------------------------------------------------------------------ notices of other replicas

    def on_notice(self, notice: Notice) -> bool:
        """Take a notice of another replica that concerns what sessions follow; False when it
        is of another kind."""
        kind = notice.get("kind")
        if kind == "followed":
            self._spawn(self._followed(notice))
        elif kind == "upstream_notice":
            self._spawn(self._deliver(notice))
        else:
            return False
        return True

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _followed(self, notice: Notice) -> None:
        held = self._held.get(str(notice.get("session")))
        uris = notice.get("subscriptions")
        if held is None or not isinstance(uris, list):
            return
        level = notice.get("log_level")
        held.subscriptions = {u for u in uris if isinstance(u, str)}
        held.log_level = level if level in LOG_LEVELS else None
        connection = held.connection()
        client = self.notices.local_client(connection) if connection is not None else None
        if client is None:
            return
        if client.log_level is not None:
            client.log_level = held.log_level
        for uri in client.subscriptions - held.subscriptions:  # unsubscribed elsewhere
            client.subscriptions.discard(uri)
            await self.notices.unfollow_exposed(uri)

    def _relay(
        self, upstream: str, method: str, params: dict[str, Any], exposed: list[str]
    ) -> None:
        notice = {
            "kind": "upstream_notice",
            "upstream": upstream,
            "method": method,
            "params": params,
            "exposed": exposed,
        }
        self._spawn(self.shared.link.publish(notice))

    async def _deliver(self, notice: Notice) -> None:
        upstream, method, params = (
            notice.get("upstream"),
            notice.get("method"),
            notice.get("params"),
        )
        exposed = notice.get("exposed")
        if not isinstance(upstream, str) or not isinstance(params, dict):
            return
        level = params.get("level")
        surfaces = self.notices.surfaces_showing(upstream) if level in LOG_LEVELS else set()
        for held in list(self._held.values()):
            connection = held.connection()
            if connection is None:
                continue
            client = self.notices.local_client(connection)
            try:
                if method == "notifications/resources/updated" and isinstance(exposed, list):
                    own = client.subscriptions if client is not None else set()
                    for uri in held.subscriptions.intersection(exposed) - own:
                        await connection.notify(method, {"uri": uri})
                elif method == "notifications/message" and held.surface in surfaces:
                    wanted = held.log_level
                    if wanted is None or (client is not None and client.log_level is not None):
                        continue
                    if LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
                        continue
                    logger = params.get("logger")
                    logger = f"{upstream}/{logger}" if logger else upstream
                    message = {"level": level, "data": params.get("data"), "logger": logger}
                    await connection.notify(method, message)
            except Exception as exc:
                log.debug("%s not delivered: %s", method, exc)
