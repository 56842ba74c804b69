"""httpx's reading of the proxy variables, which the A2A upstream's bounded transport relies on,
is where adapters/http/httpx_compat.py takes it, and answers as it did."""

from __future__ import annotations

import pytest

from adapters.http.httpx_compat import get_environment_proxies


def test_httpx_reads_the_proxy_variables_into_mount_patterns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.9")
    proxies = get_environment_proxies()
    assert proxies.get("https://") == "http://127.0.0.1:3128", proxies
    assert any(
        pattern.endswith("127.0.0.9") and target is None for pattern, target in proxies.items()
    ), proxies
