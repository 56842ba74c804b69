"""The Redis the tests start: ready when the fixture hands it over, and back with what it held
after a stop and a start on the same port."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from bridge.demo.redis_server import RedisServer


async def test_redis_answers_and_keeps_its_data_across_a_restart(redis_server: RedisServer):
    client = aioredis.from_url(redis_server.url)
    try:
        assert await client.ping()
        await client.set("kept", "yes")
        redis_server.stop()
        with pytest.raises(RedisConnectionError):
            await client.get("kept")
        redis_server.start()
        assert await client.get("kept") == b"yes"
    finally:
        await client.aclose()
