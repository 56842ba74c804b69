"""The `rate_limits` section of the config: token buckets on calls, per caller, surface, tool or
upstream (bridge/identity/limits.py, docs/identity.md#rate-limits-and-quotas)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bridge.upstream import ConfigValueError

__all__ = ["LIMIT_KEYS", "RateLimitConfig", "per_second"]

# What a limit may keep a bucket for each of.
LimitKey = Literal["caller", "surface", "tool", "upstream"]
LIMIT_KEYS: tuple[LimitKey, ...] = ("caller", "surface", "tool", "upstream")
_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*([a-z]+)\s*$")


def per_second(rate: str) -> tuple[float, float]:
    """(tokens per second, tokens per stated period) of a rate written `N/unit` (`10/s`,
    `600/min`, `5000/hour`, `100000/day`); raises ConfigValueError."""
    match = _RATE.match(rate.lower())
    unit = _UNITS.get(match.group(2).removesuffix("s") or "s") if match else None
    if match is None or unit is None or float(match.group(1)) <= 0:
        raise ConfigValueError(
            f"rate {rate!r} is no rate",
            "write a positive number of calls per unit: 10/s, 600/min, 5000/hour or 100000/day",
        )
    count = float(match.group(1))
    return count / unit, count


class RateLimitConfig(BaseModel):
    """One limit: a token bucket of `burst` calls (by default the count of `rate`), refilled at
    `rate`, for each distinct value of the `per` keys among the calls its filters match."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    rate: str
    burst: int | None = Field(default=None, strict=True, ge=1)
    per: list[LimitKey] = Field(default_factory=lambda: list[LimitKey](["caller"]))
    # globs: the calls the limit counts (all given must match; none: every call)
    tool: str | None = None
    upstream: str | None = None
    surface: str | None = None
    caller: str | None = None

    @field_validator("per", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("per")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ConfigValueError(f"per {value} names a key twice", "name each key once")
        return value

    @field_validator("rate")
    @classmethod
    def _a_rate(cls, value: str) -> str:
        per_second(value)
        return value

    @model_validator(mode="after")
    def _burst_of_the_rate(self) -> RateLimitConfig:
        if self.burst is None:
            self.burst = max(1, round(per_second(self.rate)[1]))
        return self

    @property
    def tokens_per_second(self) -> float:
        return per_second(self.rate)[0]
