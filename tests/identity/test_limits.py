"""Rate limits: token buckets per caller, surface, tool or upstream, taken all or none; a limit hit
is `rate_limited` with `retry_after` (REST: 429 with `Retry-After`; MCP: an error result carrying
it), and lifted once the bucket refills; each refusal is counted by limit and caller class. The
buckets' clock is the test's, so a refill needs no waiting."""

from __future__ import annotations

import pytest

from bridge.config import ConfigError, parse_config
from bridge.identity.limits import Bucket, CallKeys, MemoryCounters, RateLimiter
from bridge.limits_config import RateLimitConfig, per_second
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.serve.rest_env import config_with, serving
from tests.telemetry.test_metrics import scrape, value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keys(caller: str = "alice", tool: str = "svc__read", caller_class: str = "static") -> CallKeys:
    return CallKeys(caller, caller_class, "default", tool, "svc")


def test_rates_are_read_in_every_unit_and_a_bad_one_names_its_fix():
    assert per_second("10/s") == (10.0, 10.0)
    assert per_second("600/min") == (10.0, 600.0)
    assert per_second("7200 / hours") == (2.0, 7200.0)
    assert per_second("86400/day") == (1.0, 86400.0)
    assert RateLimitConfig(rate="600/min").burst == 600
    with pytest.raises(ConfigError) as caught:
        parse_config({"rate_limits": [{"rate": "10 per second"}, {"rate": "5/s", "per": ["who"]}]})
    text = str(caught.value)
    assert "rate_limits[0].rate: rate '10 per second' is no rate" in text
    assert "fix: write a positive number of calls per unit" in text
    assert "rate_limits[1].per" in text


async def test_a_bucket_refuses_past_its_burst_and_refills_at_its_rate():
    clock = Clock()
    counters = MemoryCounters(clock=clock)
    bucket = Bucket("k", rate=2.0, burst=3.0)
    assert [await counters.take([bucket]) for _ in range(3)] == [[0.0]] * 3
    assert await counters.take([bucket]) == [0.5]  # 1 token at 2/s
    clock.now += 0.25
    assert await counters.take([bucket]) == [0.25]
    clock.now += 0.25
    assert await counters.take([bucket]) == [0.0]
    clock.now += 100
    assert [await counters.take([bucket]) for _ in range(4)] == [[0.0]] * 3 + [
        [0.5]
    ]  # never past burst


async def test_tokens_are_taken_from_every_matching_bucket_or_from_none():
    clock = Clock()
    counters = MemoryCounters(clock=clock)
    wide, narrow = Bucket("wide", 1.0, 5.0), Bucket("narrow", 1.0, 1.0)
    assert await counters.take([wide, narrow]) == [0.0, 0.0]
    assert await counters.take([wide, narrow]) == [
        0.0,
        1.0,
    ]  # narrow is empty: wide keeps its token
    assert [await counters.take([wide]) for _ in range(5)] == [[0.0]] * 4 + [[1.0]]


async def test_memory_stays_bounded_dropping_refilled_buckets_first():
    clock = Clock()
    counters = MemoryCounters(max_keys=100, clock=clock)
    busy = Bucket("busy", 1 / 3600, 1.0)  # a quota: one call an hour
    assert await counters.take([busy]) == [0.0]
    for n in range(500):
        await counters.take([Bucket(f"caller-{n}", 10.0, 1.0)])
        clock.now += 1.0  # each caller's bucket is full again a tenth of a second later
    assert len(counters) <= 100
    assert (await counters.take([busy]))[0] > 3000  # the hour's quota was kept, not forgotten


async def test_limits_key_their_buckets_by_caller_tool_and_class():
    clock = Clock()
    limiter = RateLimiter(
        [
            RateLimitConfig(name="each-caller", rate="1/min", per=["caller"]),
            RateLimitConfig(name="writes", rate="1/hour", burst=2, per=[], tool="*__write"),
        ],
        MemoryCounters(clock=clock),
    )
    assert await limiter.check(keys("alice")) is None
    refused = await limiter.check(keys("alice"))
    assert refused is not None and refused.limit == "each-caller" and refused.retry_after == 60.0
    assert await limiter.check(keys("bob")) is None
    assert (
        await limiter.check(keys("alice", caller_class="oauth")) is None
    )  # another class: another caller
    assert await limiter.check(keys("carol", tool="svc__write")) is None
    assert await limiter.check(keys("dave", tool="svc__write")) is None
    refused = await limiter.check(keys("erin", tool="svc__write"))  # all callers share `writes`
    assert refused is not None and refused.limit == "writes" and refused.retry_after == 3600.0


# ----------------------------------------------------------------------------- served


def limited(**limit: object) -> dict[str, object]:
    return config_with(
        server={
            "tokens": [
                {"token": "token-of-alice", "name": "alice"},
                {"token": "token-of-bobby", "name": "bob"},
            ]
        },
        rate_limits=[{"name": "per-caller", "rate": "2/min", "per": "caller", **limit}],
    )


def svc() -> FakeUpstream:
    return FakeUpstream(name="svc", tools=[tool("read", read_only=True)])


async def test_a_limit_hit_is_429_with_retry_after_and_lifted_when_the_bucket_refills():
    upstream = svc()
    async with serving(upstream, config=limited()) as served:
        clock = Clock()
        served.bridge.admission.limiter.counters.clock = clock  # type: ignore[attr-defined]
        call = {"tool": "svc__read", "arguments": {"text": "x"}}
        for _ in range(2):
            assert (await served.post("/invoke", call, token="token-of-alice"))[0] == 200
        status, body, response = await served.post("/invoke", call, token="token-of-alice")
        assert status == 429
        assert body["error"]["error_class"] == "rate_limited"
        assert body["error"]["retry_after"] == 30.0
        assert response.headers["Retry-After"] == "30"
        assert "per-caller" in body["error"]["message"]
        assert (await served.post("/invoke", call, token="token-of-bobby"))[
            0
        ] == 200  # its own bucket
        async with http_client(served.base, HANDSHAKE, token="token-of-alice") as client:
            result = await client.call("svc__read", {"text": "x"})
        assert result.is_error
        assert result.structured_content["error"]["error_class"] == "rate_limited"
        assert result.structured_content["error"]["retry_after"] == 30.0
        clock.now += 30
        assert (await served.post("/invoke", call, token="token-of-alice"))[0] == 200  # lifted
        assert len(upstream.calls) == 4  # the refused calls never reached it
        found = await scrape(served, token="token-of-alice")
    assert (
        value(found, "bridge_rate_limited_calls_total", limit="per-caller", caller_class="static")
        == 2
    )
    assert (
        value(
            found,
            "bridge_tool_calls_total",
            outcome="rate_limited",
            surface="default",
            tool="svc__read",
            upstream="svc",
        )
        == 2
    )


async def test_a_reload_applies_new_limits_and_a_kept_name_keeps_its_buckets():
    upstream = svc()
    async with serving(upstream, config=limited()) as served:
        call = {"tool": "svc__read", "arguments": {"text": "x"}}
        for _ in range(2):
            assert (await served.post("/invoke", call, token="token-of-alice"))[0] == 200
        await served.bridge.reload(parse_config(limited(rate="5/min")))  # same name, a larger rate
        # the bucket was kept with its 0 tokens; 5/min would have given a fresh one 5
        assert (await served.post("/invoke", call, token="token-of-alice"))[0] == 429
        await served.bridge.reload(parse_config(config_with(server=limited()["server"])))
        assert (await served.post("/invoke", call, token="token-of-alice"))[0] == 200
