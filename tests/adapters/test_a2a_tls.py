"""`kind: a2a` against real a2a-sdk agents served over TLS on loopback (certificates made for
each test): the CAs an agent's certificate is checked against."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from adapters import a2a
from tests.adapters.a2a_fixtures.agent import build_agent
from tests.adapters.test_a2a import bridge
from tests.servers import free_port, serve_asgi

pytest.importorskip("cryptography.x509")
from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem  # noqa: E402


def _pki(tmp_path: Path) -> tuple[str, str, str]:
    """The CA's PEM file, and two certificates for 127.0.0.1 with their keys: one the CA signed,
    one self-signed (no CA the bridge knows)."""
    ca = _issue("test CA", None, ca=True)
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    for name, issuer in (("server.pem", ca), ("stranger.pem", None)):
        cert, key = _issue("127.0.0.1", issuer, ip="127.0.0.1")
        (tmp_path / name).write_bytes(_pem(cert) + _key_pem(key))
    return str(tmp_path / "ca.pem"), str(tmp_path / "server.pem"), str(tmp_path / "stranger.pem")


async def test_an_agents_certificate_is_checked_against_the_systems_cas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx's default context holds certifi's bundle: a CA added to the system's was not trusted
    ca, signed, _ = _pki(tmp_path)
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(variable, raising=False)
    paths = ssl.get_default_verify_paths()
    system = ssl.DefaultVerifyPaths(ca, None, paths.openssl_cafile_env, ca, paths.openssl_capath_env, str(tmp_path / "none"))
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: system)  # the system's CAs: the test CA alone
    a2a._tls_context.cache_clear()
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    app, _ = build_agent(base)
    try:
        async with serve_asgi(app, port=port, lifespan="off", ssl_certfile=signed), bridge(base_url=base, retry_initial=30) as b:
            slot = b.catalog.slot("peer")
            assert slot.health.state == "ready", slot.health
            assert (await b.invoker.invoke("peer__echo", {"message": "hi"})).content[0]["text"] == "echo: hi"
    finally:
        a2a._tls_context.cache_clear()
