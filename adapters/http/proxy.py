"""The proxies the environment names, for the aiohttp sessions of the OpenAPI and a2t upstreams
(and the urllib reads of the documents an OpenAPI document's `$ref`s name: `adapters.openapi.spec`).

aiohttp reads HTTP_PROXY and the others only with `trust_env=True`, which also sends a
`~/.netrc` password to any host it names and looks the proxy up on a worker thread at every
request. Here the variables are read once, when a session is made, and every request the
session makes goes through the proxy its URL's scheme gets (`HTTP_PROXY`, `HTTPS_PROXY`, else
`ALL_PROXY`; either case), unless `NO_PROXY` names its host or the host is a loopback one.

A loopback host (`localhost`, `localhost.`, 127.0.0.0/8, `::1`) is always reached directly, by
every upstream kind: a proxy set for the whole machine cannot reach the bridge's own loopback
services (the `launch:` sidecars, the demo upstreams), and `NO_PROXY` often does not name them.
httpx's mounts name hosts, not ranges: the A2A client's proxy transports send a loopback host's
requests to its direct one (`LoopbackDirect`), and the MCP client, which only ever asks its one
URL, mounts `localhost`, 127.0.0.1, `::1` and that URL's host when it is another loopback one.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

import httpx

from bridge.model import BridgeError
from bridge.net import is_loopback

if TYPE_CHECKING:
    import aiohttp
    from yarl import URL

__all__ = [
    "LOOPBACK_DIRECT",
    "EnvironmentProxies",
    "LoopbackDirect",
    "loopback_direct",
    "loopback_mounts",
    "proxied_session",
]

LOOPBACK_DIRECT = True  # loopback hosts skip the proxies (the tests of proxying turn it off)
# httpx's mounts for the loopback hosts, to the client's own direct transport (None)
_LOOPBACK_PATTERNS = ("all://localhost", "all://127.0.0.1", "all://[::1]")

# urllib's NO_PROXY matching, which the standard library has but its type stubs do not declare
_bypass_environment = vars(urllib.request)["proxy_bypass_environment"]


def _loopback_patterns(url: str | None) -> tuple[str, ...]:
    """The loopback hosts' mount patterns, and that of `url`'s host when it is another loopback
    address (127.0.0.2): httpx's patterns name hosts, not the range 127.0.0.0/8."""
    host = urllib.parse.urlsplit(url).hostname if url else None
    if not host or not is_loopback(host):
        return _LOOPBACK_PATTERNS
    own = f"all://[{host}]" if ":" in host else f"all://{host}"
    return _LOOPBACK_PATTERNS if own in _LOOPBACK_PATTERNS else (*_LOOPBACK_PATTERNS, own)


def loopback_mounts(url: str | None = None) -> dict[str, None]:
    """For an httpx client that reads the environment's proxies itself (given no transport): its
    `mounts`, the loopback hosts (and `url`'s, when it is one) to its own direct transport, when
    the environment names a proxy."""
    found = urllib.request.getproxies_environment()
    if not LOOPBACK_DIRECT or not any(found.get(k) for k in ("http", "https", "all")):
        return {}
    return dict.fromkeys(_loopback_patterns(url))


class LoopbackDirect(httpx.AsyncBaseTransport):
    """A proxy's transport that sends the requests for a loopback host to the client's direct
    transport instead, whatever its address in 127.0.0.0/8 (a card may name any)."""

    def __init__(self, proxied: httpx.AsyncBaseTransport, direct: httpx.AsyncBaseTransport) -> None:
        self.proxied = proxied
        self.direct = direct

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        chosen = self.direct if is_loopback(request.url.host) else self.proxied
        return await chosen.handle_async_request(request)

    async def aclose(self) -> None:
        await self.proxied.aclose()  # the direct transport is the client's own, closed with it


def loopback_direct(
    mounts: dict[str, httpx.AsyncBaseTransport | None], direct: httpx.AsyncBaseTransport
) -> dict[str, httpx.AsyncBaseTransport | None]:
    """An httpx client's `mounts` (from the environment's proxies), each proxy's transport sending
    a loopback host's requests to `direct`, the client's own transport."""
    if not LOOPBACK_DIRECT:
        return mounts
    return {
        pattern: None if t is None else LoopbackDirect(t, direct) for pattern, t in mounts.items()
    }


_SPOKEN = ("http", "https")  # proxy schemes aiohttp connects through


class EnvironmentProxies:
    """The proxy for each URL, as the environment said when this was made."""

    def __init__(self) -> None:
        import aiohttp  # loaded with the first session made: a stdio MCP upstream makes none
        from yarl import URL

        found = urllib.request.getproxies_environment()
        self.no_proxy = {"no": found["no"]} if found.get("no") else {}
        self.proxies: dict[str, tuple[URL, aiohttp.BasicAuth | None]] = {}
        for scheme in _SPOKEN:
            raw = found.get(scheme) or found.get("all")
            if not raw:
                continue
            proxy = URL(raw if "://" in raw else f"http://{raw}")
            if proxy.scheme not in _SPOKEN:
                raise BridgeError(
                    f"the environment's proxy for {scheme}:// URLs is a {proxy.scheme}:// proxy, which the bridge's HTTP client "
                    "does not speak",
                    error_class="dependency_unavailable",
                    recoverability="setup",
                    details={
                        "fix": "use an http:// proxy in HTTP_PROXY/HTTPS_PROXY/ALL_PROXY, or list the host in NO_PROXY"
                    },
                )
            self.proxies[scheme] = (proxy.with_user(None), aiohttp.BasicAuth.from_url(proxy))

    def route(self, url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        """The proxy (and its credentials) a request to `url` goes through; (None, None) for none."""
        chosen = self.proxies.get(url.scheme)
        if chosen is None or not url.host or (LOOPBACK_DIRECT and is_loopback(url.host)):
            return None, None
        host = f"{url.host}:{url.explicit_port}" if url.explicit_port else url.host
        if self.no_proxy and _bypass_environment(host, self.no_proxy):
            return None, None
        return chosen

    def request_class(self) -> type[aiohttp.ClientRequest]:
        """aiohttp's request, given the environment's proxy when the call names none."""
        import aiohttp

        if not self.proxies:
            return aiohttp.ClientRequest
        routes = self

        class ProxiedRequest(aiohttp.ClientRequest):
            def __init__(
                self,
                method: str,
                url: URL,
                *args: Any,
                proxy: URL | None = None,
                proxy_auth: aiohttp.BasicAuth | None = None,
                **kwargs: Any,
            ) -> None:
                if proxy is None:
                    proxy, proxy_auth = routes.route(url)
                super().__init__(method, url, *args, proxy=proxy, proxy_auth=proxy_auth, **kwargs)

        return ProxiedRequest


def proxied_session(**kwargs: Any) -> aiohttp.ClientSession:
    """An `aiohttp.ClientSession` (of `kwargs`) whose requests go through the environment's proxies."""
    import aiohttp

    return aiohttp.ClientSession(request_class=EnvironmentProxies().request_class(), **kwargs)
