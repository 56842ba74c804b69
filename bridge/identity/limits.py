"""Rate limits and quotas on calls: token buckets kept per caller, surface, tool or upstream, as
the `rate_limits` section lists them. A call takes one token from the bucket of each limit that
matches it, all of them or none; a call that finds one empty is refused, and told how many
seconds until it would pass.

The buckets live behind `RateCounters`, one small interface: `MemoryCounters` keeps them in this
process; a store the replicas share implements the same `take` (all or none, atomically)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

from bridge.limits_config import RateLimitConfig

__all__ = [
    "ANONYMOUS",
    "Bucket",
    "CallKeys",
    "MemoryCounters",
    "RateCounters",
    "RateLimited",
    "RateLimiter",
]

# The caller of a call that came with no identity (an open server, stdio): one caller for all.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Bucket:
    """One token bucket: `key` names it (its limit and the values of the limit's `per` keys);
    it holds at most `burst` tokens, full at first, and gains `rate` tokens a second."""

    key: str
    rate: float
    burst: float


class RateCounters(Protocol):
    """Where the buckets are kept."""

    async def take(self, buckets: Sequence[Bucket]) -> list[float]:
        """Take one token from each of `buckets`, all or none, atomically: the answer gives, for
        each bucket, the seconds until it holds a token (0.0: it holds one now). All zero: the
        tokens were taken; else none was."""
        ...

    async def aclose(self) -> None: ...


class MemoryCounters:
    """Buckets in this process's memory. A bucket that has refilled is the same as none, so at
    `max_keys` buckets the full ones are dropped, then the least recently used ones (whose
    callers start again with a full bucket)."""

    def __init__(
        self, max_keys: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_keys = max_keys
        self.clock = clock
        # key -> [tokens, when, seconds from then until full], least recently used first
        self._buckets: dict[str, list[float]] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    async def take(self, buckets: Sequence[Bucket]) -> list[float]:
        return self.take_now(buckets)

    def take_now(self, buckets: Sequence[Bucket]) -> list[float]:
        """`take`, on this thread (the event loop's)."""
        now = self.clock()
        held = self._buckets
        states = []
        waits = []
        for bucket in buckets:
            state = held.pop(bucket.key, None)  # put back below, as the most recent
            if state is None:
                state = [bucket.burst, now, 0.0]
            else:
                state[0] = min(bucket.burst, state[0] + (now - state[1]) * bucket.rate)
                state[1] = now
            held[bucket.key] = state
            states.append((state, bucket))
            waits.append(0.0 if state[0] >= 1.0 else (1.0 - state[0]) / bucket.rate)
        if not any(waits):
            for state, bucket in states:
                state[0] -= 1.0
                state[2] = (bucket.burst - state[0]) / bucket.rate  # seconds until full again
        if len(held) > self.max_keys:
            self._shrink(now)
        return waits

    def _shrink(self, now: float) -> None:
        """Drop the buckets that have refilled, then the least recent, to 90% of `max_keys`."""
        held = self._buckets
        for key in [k for k, (_, at, refill) in held.items() if now - at >= refill]:
            del held[key]
        excess = len(held) - self.max_keys * 9 // 10
        if excess > 0:
            for key in list(held)[:excess]:
                del held[key]

    async def aclose(self) -> None:
        self._buckets.clear()


@dataclass(frozen=True, slots=True)
class CallKeys:
    """What limits tell calls apart by: `caller` names who called, within its `caller_class`
    (`oauth`, `static` or `anonymous`), so a static token's name never shares a bucket with an
    OAuth subject of the same name."""

    caller: str
    caller_class: str
    surface: str
    tool: str
    upstream: str


@dataclass(frozen=True, slots=True)
class RateLimited:
    """A refused call: the limit that refused it (the one with the longest wait) and the seconds
    until every limit it is under would let it pass."""

    limit: str
    retry_after: float


class _Limit:
    __slots__ = ("burst", "filters", "name", "per", "rate")

    def __init__(self, config: RateLimitConfig, index: int) -> None:
        self.name = config.name or f"rate_limits[{index}]"
        self.rate = config.tokens_per_second
        self.burst = float(config.burst or 1)
        self.per = tuple(config.per)
        self.filters = tuple(
            (key, glob)
            for key in ("tool", "upstream", "surface", "caller")
            if (glob := getattr(config, key)) is not None
        )

    def bucket(self, call: CallKeys) -> Bucket | None:
        for key, glob in self.filters:
            if not fnmatchcase(getattr(call, key), glob):
                return None
        parts = [self.name]
        for key in self.per:
            parts.append(
                f"{call.caller_class}:{call.caller}" if key == "caller" else getattr(call, key)
            )
        return Bucket("\x1f".join(parts), self.rate, self.burst)


class RateLimiter:
    """The limits of one `rate_limits` section over a store of buckets. `update` swaps the
    limits (a reload) and keeps the buckets: a limit that keeps its name keeps its callers'
    tokens."""

    def __init__(
        self, limits: Sequence[RateLimitConfig] = (), counters: RateCounters | None = None
    ) -> None:
        self.counters: RateCounters = counters if counters is not None else MemoryCounters()
        self._limits: tuple[_Limit, ...] = ()
        self.update(limits)

    def update(self, limits: Sequence[RateLimitConfig]) -> None:
        self._limits = tuple(_Limit(config, i) for i, config in enumerate(limits))

    @property
    def active(self) -> bool:
        return bool(self._limits)

    def names(self) -> list[str]:
        return [limit.name for limit in self._limits]

    async def check(self, call: CallKeys) -> RateLimited | None:
        """Take a token for `call` from the bucket of each limit that matches it; None when it
        may go on, else why not (no token taken)."""
        matched = [(limit, bucket) for limit in self._limits if (bucket := limit.bucket(call))]
        if not matched:
            return None
        waits = await self.counters.take([bucket for _, bucket in matched])
        longest = max(waits)
        if longest <= 0:
            return None
        limit = matched[waits.index(longest)][0]
        return RateLimited(limit.name, longest)

    async def aclose(self) -> None:
        await self.counters.aclose()
