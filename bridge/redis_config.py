"""The `redis` section of the config: the Redis that replicas of the bridge share while they run
(bridge/shared_state/, docs/deploy.md). Without it the bridge keeps MCP sessions in its own
memory, as one process does."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bridge.upstream import ConfigValueError

__all__ = ["RedisConfig"]


class RedisConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str  # redis://[:PASSWORD@]HOST:PORT/N, rediss:// over TLS, unix:///path/redis.sock
    # what begins every key and the notices channel: replicas of one deployment share it, two
    # deployments on one Redis tell theirs apart with it
    key_prefix: str = Field(default="a2t-bridge:", min_length=1, max_length=100)
    # seconds one Redis command may take before Redis counts as away
    timeout: float = Field(default=1.0, gt=0, le=60, allow_inf_nan=False)
    # seconds a handshake-era session's record outlives its last request; none: the session idle
    # timeout (server.mcp_session_idle_timeout)
    session_ttl: float | None = Field(default=None, ge=1, allow_inf_nan=False)

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ConfigValueError(
                f"{parts.scheme or url!r} is no Redis URL scheme",
                "write redis://HOST:PORT/N (rediss:// for TLS, unix:///path)",
            )
        if parts.scheme != "unix" and not parts.hostname:
            raise ConfigValueError("the URL names no host", "write redis://HOST:PORT/N")
        return url
