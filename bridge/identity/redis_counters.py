"""Rate-limit buckets in Redis (`RateCounters`), so that replicas share them: a caller's calls
count against one bucket whichever replica serves them.

One Lua script takes a token from each of a call's buckets, all or none, atomically, on Redis's
own clock (the replicas' clocks may differ). A bucket is a hash (`t`: tokens, `at`: when) that
expires once it would be full again, so Redis holds only the callers seen lately. While Redis
cannot be reached, calls are let through, with one warning when it goes and one when it is back:
a limit never takes the bridge down with Redis."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bridge.identity.limits import Bucket

__all__ = ["TAKE_SCRIPT", "RedisCounters"]

log = logging.getLogger("bridge.identity")

TAKE_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local tokens, waits, short = {}, {}, false
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local held = redis.call('HMGET', KEYS[i], 't', 'at')
  local t = tonumber(held[1])
  if t == nil then
    t = burst
  else
    t = math.min(burst, t + math.max(0, now - tonumber(held[2])) * rate)
  end
  tokens[i] = t
  if t >= 1 then waits[i] = '0' else waits[i] = tostring((1 - t) / rate); short = true end
end
for i = 1, #KEYS do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local t = tokens[i]
  if not short then t = t - 1 end
  redis.call('HSET', KEYS[i], 't', tostring(t), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[i], math.ceil((burst - t) / rate * 1000) + 1000)
end
return waits
"""


class RedisCounters:
    """Buckets under `<prefix>limit:` in the Redis `client` (redis-py's asyncio client, which
    the caller owns and closes)."""

    def __init__(self, client: Any, prefix: str = "a2t-bridge:") -> None:
        self.client = client
        self.prefix = f"{prefix}limit:"
        self._script = client.register_script(TAKE_SCRIPT)
        self._away: str | None = None

    async def take(self, buckets: Sequence[Bucket]) -> list[float]:
        from redis.exceptions import RedisError

        keys = [self.prefix + bucket.key for bucket in buckets]
        args: list[float] = []
        for bucket in buckets:
            args += [bucket.rate, bucket.burst]
        try:
            answer = await self._script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            if self._away is None:
                log.warning("rate limits let every call through while Redis is away (%s)", exc)
            self._away = str(exc) or type(exc).__name__
            return [0.0] * len(buckets)
        if self._away is not None:
            log.warning("rate limits count in Redis again")
            self._away = None
        return [float(wait) for wait in answer]

    async def aclose(self) -> None:
        """Nothing of its own to close: the client is its owner's."""
