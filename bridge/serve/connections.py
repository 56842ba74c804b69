"""The HTTP server's client connections: how many are open and from which address, and which
one a new connection takes the place of, or why it is refused, when a cap or the open-file
limit leaves no room. No part of it knows HTTP or uvicorn (`http_protocol.py` does)."""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Protocol

from bridge.config import ServerConfig
from bridge.serve.rest_http import ApiError

__all__ = ["DESCRIPTOR_RECOUNT", "ConnectionTable", "DescriptorBudget", "Held", "open_descriptors"]

log = logging.getLogger("bridge.serve")

# seconds a count of the process's open descriptors is trusted: counting costs about 1 µs a
# descriptor, so it is done at most this often, and only as connections are accepted
DESCRIPTOR_RECOUNT = 1.0
# seconds between two warnings about refused connections (a flood would otherwise flood the log)
REFUSAL_WARNING_EVERY = 60.0


class Held(Protocol):
    """A client connection as the table sees it."""

    @property
    def address(self) -> str:
        """The client's IP address."""
        ...

    @property
    def idle_since(self) -> float | None:
        """Since when (monotonic) no request of it is being served; None while one is."""
        ...

    def let_go(self) -> None:
        """Close the connection (it has no request being served)."""
        ...


def open_descriptors() -> int | None:
    """How many file descriptors the process has open; None where the system does not say."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # none left even to list them
                return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            return None
    return None


class DescriptorBudget:
    """Whether the open-file limit (`ulimit -n`) leaves room for one more client connection
    while keeping `reserve` descriptors free for the rest of the bridge: upstream connections,
    stdio children's pipes, the store and the search index. What the rest holds is counted at
    most every `DESCRIPTOR_RECOUNT` seconds; client connections are counted as they come and go."""

    def __init__(
        self,
        reserve: int,
        count: Callable[[], int | None] = open_descriptors,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reserve = reserve
        self._count = count
        self._clock = clock
        self._others = 0  # descriptors held by anything but client connections
        self._limit: int | None = None
        self._counted_at: float | None = None

    def limit(self) -> int | None:
        """The open-file limit as last read (None: none)."""
        return self._limit

    def room_for(self, connections: int) -> bool:
        """Whether `connections` client connections (every one accepted, the newest included)
        leave `reserve` descriptors free."""
        now = self._clock()
        if self._counted_at is None or now - self._counted_at >= DESCRIPTOR_RECOUNT:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            self._limit = None if soft == resource.RLIM_INFINITY else soft
            counted = self._count()
            self._counted_at = now
            self._others = 0 if counted is None else max(0, counted - connections)
        return self._limit is None or self._others + connections + self.reserve <= self._limit


class ConnectionTable:
    """The open client connections of one server, by address. A connection past a cap takes
    the place of an idle one (no request being served): under `max_connections_per_address`
    the longest idle of its own address, under `max_connections` or the descriptor budget the
    longest idle of the address holding the most. When none is idle it is refused."""

    def __init__(self, server: ServerConfig, budget: DescriptorBudget | None = None) -> None:
        self.max_connections = server.max_connections
        self.max_per_address = server.max_connections_per_address
        self.budget = budget or DescriptorBudget(server.fd_reserve)
        self._by_address: dict[str, dict[Held, None]] = {}
        self._count = 0
        self._refused = 0
        self._warned_at: float | None = None

    def __len__(self) -> int:
        return self._count

    def from_address(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    def admit(self, conn: Held) -> ApiError | None:
        """Take `conn` in, letting an idle connection go if a cap says so; or the error to
        refuse it with (429 past its address's cap, 503 past the others)."""
        own = self._by_address.get(conn.address, {})
        if len(own) >= self.max_per_address:
            victim = _longest_idle(own)
            if victim is None:
                return self._refuse(
                    conn,
                    _address_full(len(own)),
                    (
                        f"{len(own)} connections from {conn.address}, the most one address may hold "
                        "(server.max_connections_per_address)"
                    ),
                )
            self._let_go(victim)
        at_cap = self._count >= self.max_connections
        if at_cap or not self.budget.room_for(self._count + 1):
            victim = self._longest_idle_of_the_most()
            if victim is None:
                holding = (
                    f"{self._count} connections, the most it holds (server.max_connections)"
                    if at_cap
                    else f"{self._count} connections, as many as its open-file limit "
                    f"({self.budget.limit()}) allows while keeping {self.budget.reserve} "
                    "descriptors free (server.fd_reserve)"
                )
                return self._refuse(conn, _server_full(), holding)
            self._let_go(victim)
        self._by_address.setdefault(conn.address, {})[conn] = None
        self._count += 1
        return None

    def release(self, conn: Held) -> None:
        """`conn` is closed (a call for a connection not in the table does nothing)."""
        own = self._by_address.get(conn.address)
        if own is None or conn not in own:
            return
        del own[conn]
        if not own:
            del self._by_address[conn.address]
        self._count -= 1

    def _let_go(self, victim: Held) -> None:
        log.info("closed an idle connection from %s to make room for a new one", victim.address)
        self.release(victim)
        victim.let_go()

    def _longest_idle_of_the_most(self) -> Held | None:
        for own in sorted(self._by_address.values(), key=len, reverse=True):
            victim = _longest_idle(own)
            if victim is not None:
                return victim
        return None

    def _refuse(self, conn: Held, error: ApiError, holding: str) -> ApiError:
        """`error`, with a warning saying what the bridge holds (one a minute at most)."""
        self._refused += 1
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= REFUSAL_WARNING_EVERY:
            since = "" if self._warned_at is None else f" in {now - self._warned_at:.0f} s"
            log.warning(
                "refused %d connection(s)%s, the last from %s: the bridge holds %s, "
                "none of them idle",
                self._refused,
                since,
                conn.address,
                holding,
            )
            self._warned_at, self._refused = now, 0
        return error


def _longest_idle(conns: dict[Held, None]) -> Held | None:
    """The connection idle the longest, the first opened among equals; None if none is idle."""
    best: Held | None = None
    best_since = 0.0
    for conn in conns:
        since = conn.idle_since
        if since is not None and (best is None or since < best_since):
            best, best_since = conn, since
    return best


def _address_full(count: int) -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        f"this address has {count} connections open to the "
        "bridge, the most it may; reuse or close them",
        headers={"Retry-After": "1"},
    )


def _server_full() -> ApiError:
    return ApiError(
        503,
        "dependency_unavailable",
        "the bridge has no room for another connection now; retry shortly",
        headers={"Retry-After": "1"},
    )
