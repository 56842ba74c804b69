"""Rate-limit buckets in Redis (`RateCounters` of bridge/identity/limits.py), so that replicas
share them: a caller's calls count against one bucket whichever replica serves them.

One Lua script takes a token from each of a call's buckets, all or none, atomically, on Redis's
own clock (the replicas' clocks may differ). A bucket is a hash (`t`: tokens, `at`: when) that
expires once it would be full again, so Redis holds only the callers seen lately. While Redis
cannot be reached (the link fails fast then), calls are let through, with one warning when it
goes and one when it is back: a limit never takes the bridge down with Redis."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bridge.shared_state.link import RedisLink, SharedStateUnavailable

__all__ = ["TAKE_SCRIPT", "SharedCounters"]

log = logging.getLogger("bridge.shared_state")

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


class SharedCounters:
    """Buckets under `<prefix>limit:` in the Redis of `link`."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self._script = link.client.register_script(TAKE_SCRIPT)
        self._away = False

    async def take(self, buckets: Sequence[Any]) -> list[float]:
        """`RateCounters.take` (bridge/identity/limits.py): each bucket has `key`, `rate` and
        `burst`."""
        keys = [self.link.key("limit", bucket.key) for bucket in buckets]
        args: list[float] = []
        for bucket in buckets:
            args += [bucket.rate, bucket.burst]
        script = self._script
        try:
            answer = await self.link.run(lambda client: script(keys=keys, args=args, client=client))
        except SharedStateUnavailable as exc:
            if not self._away:
                log.warning("rate limits let every call through while %s", exc)
            self._away = True
            return [0.0] * len(buckets)
        if self._away:
            log.warning("rate limits count in Redis again")
            self._away = False
        return [float(wait) for wait in answer]

    async def aclose(self) -> None:
        """Nothing of its own to close: the link is the shared state's."""
