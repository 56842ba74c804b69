"""What the HTTP upstreams take from httpx beyond its public API, in one place: httpx's own reading
of the proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY), which it applies only to a
client given no transport of its own. tests/adapters/test_httpx_compat.py fails, naming it, when
an httpx release moves it."""

from __future__ import annotations

from httpx._utils import get_environment_proxies

__all__ = ["get_environment_proxies"]
