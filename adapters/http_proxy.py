"""The proxies the environment names, for the aiohttp sessions of the OpenAPI and a2t upstreams.

aiohttp reads HTTP_PROXY and the others only with `trust_env=True`, which also sends a
`~/.netrc` password to any host it names and looks the proxy up on a worker thread at every
request. Here the variables are read once, when a session is made, and every request the
session makes goes through the proxy its URL's scheme gets (`HTTP_PROXY`, `HTTPS_PROXY`, else
`ALL_PROXY`; either case), unless `NO_PROXY` names its host.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import aiohttp
from yarl import URL

from bridge.model import BridgeError

__all__ = ["EnvironmentProxies", "proxied_session"]

_SPOKEN = ("http", "https")  # proxy schemes aiohttp connects through


class EnvironmentProxies:
    """The proxy for each URL, as the environment said when this was made."""

    def __init__(self) -> None:
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
                    error_class="dependency_unavailable", recoverability="setup",
                    details={"fix": "use an http:// proxy in HTTP_PROXY/HTTPS_PROXY/ALL_PROXY, or list the host in NO_PROXY"},
                )
            self.proxies[scheme] = (proxy.with_user(None), aiohttp.BasicAuth.from_url(proxy))

    def route(self, url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        """The proxy (and its credentials) a request to `url` goes through; (None, None) for none."""
        chosen = self.proxies.get(url.scheme)
        if chosen is None or not url.host:
            return None, None
        host = f"{url.host}:{url.explicit_port}" if url.explicit_port else url.host
        if self.no_proxy and urllib.request.proxy_bypass_environment(host, self.no_proxy):
            return None, None
        return chosen

    def request_class(self) -> type[aiohttp.ClientRequest]:
        """aiohttp's request, given the environment's proxy when the call names none."""
        if not self.proxies:
            return aiohttp.ClientRequest
        routes = self

        class ProxiedRequest(aiohttp.ClientRequest):
            def __init__(self, method: str, url: URL, *args: Any, proxy: URL | None = None,
                         proxy_auth: aiohttp.BasicAuth | None = None, **kwargs: Any) -> None:
                if proxy is None:
                    proxy, proxy_auth = routes.route(url)
                super().__init__(method, url, *args, proxy=proxy, proxy_auth=proxy_auth, **kwargs)

        return ProxiedRequest


def proxied_session(**kwargs: Any) -> aiohttp.ClientSession:
    """An `aiohttp.ClientSession` (of `kwargs`) whose requests go through the environment's proxies."""
    return aiohttp.ClientSession(request_class=EnvironmentProxies().request_class(), **kwargs)
