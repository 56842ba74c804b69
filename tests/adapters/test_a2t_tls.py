"""`kind: a2t` against a real TLS server on loopback whose certificate fails the check: a setup
problem, answered at once and never taken for a server that went away."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp.connector
import pytest
from aiohttp.test_utils import TestServer

from adapters.a2t.upstream import A2TConfig, A2TUpstream
from bridge.catalog import Catalog
from bridge.model import BridgeError
from bridge.store import Store
from tests.adapters.test_a2t import IETFServer, ctx, until, upstream

pytest.importorskip("cryptography.x509")
from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem


def _chain(tmp_path: Path, name: str, issuer: tuple[Any, Any] | None) -> str:
    """A certificate for 127.0.0.1 signed by `issuer` (self-signed without one), with its key."""
    cert, key = _issue("127.0.0.1", issuer, ip="127.0.0.1")
    (tmp_path / name).write_bytes(_pem(cert) + _key_pem(key))
    return str(tmp_path / name)


async def test_a_certificate_that_fails_its_check_fails_at_once_and_does_not_mark_the_upstream_down(
    tmp_path, monkeypatch
):
    ca = _issue("test CA", None, ca=True)
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    # the system's CAs, as the session sees them, with the test CA added
    system = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    monkeypatch.setattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", system)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(_chain(tmp_path, "server.pem", ca))
    server = IETFServer(count=1)
    app = server.app()

    async def close_each(
        request: Any, response: Any
    ) -> None:  # each request a new connection, a new handshake
        response.headers["Connection"] = "close"

    app.on_response_prepare.append(close_each)
    http = TestServer(app, host="127.0.0.1", scheme="https")
    await http.start_server(ssl=context)
    base = f"https://127.0.0.1:{http.port}"
    catalog = Catalog(Store())
    up = upstream(base, retries={"count": 2, "backoff": 0.2}, retry_initial=30)
    catalog.add_upstream(up)
    try:
        await catalog.start()
        tool_id = (await up.list_tools())[0].native_id
        assert not (await up.invoke(tool_id, {"City": "Oslo"}, ctx())).is_error
        events: list[Any] = []
        monkeypatch.setattr(up, "emit", events.append)
        context.load_cert_chain(
            _chain(tmp_path, "stranger.pem", None)
        )  # self-signed: no CA the bridge knows
        loop = asyncio.get_running_loop()
        begun = loop.time()
        with pytest.raises(BridgeError) as info:
            await up.invoke(tool_id, {"City": "Lima"}, ctx())
        error = info.value
        assert loop.time() - begun < 0.2  # not retried (2 retries with backoff took 0.6 s)
        assert error.error_class == "dependency_unavailable" and error.recoverability == "setup"
        assert error.message.startswith(
            f"POST {base}/tools/{tool_id}:invoke: the certificate of 127.0.0.1:{http.port} cannot be verified ("
        )
        assert (
            "give the CA that signed it as `ca_file`" in error.message
            and "`verify_tls: false`" in error.message
        )
        assert events == [] and catalog.slot("remote").health.state == "ready"
        assert len(server.invocations) == 1
        # a start says the same, and the catalog shows it as the reason
        again = upstream(base, retries={"count": 2, "backoff": 0.2})
        with pytest.raises(BridgeError) as info:
            await again.start()
        await again.close()
        assert (
            info.value.recoverability == "setup"
            and "cannot be verified (self-signed certificate" in info.value.message
        )
        starting = Catalog(Store())
        starting.add_upstream(A2TUpstream(A2TConfig(name="fresh", url=base, retry_initial=30)))
        try:
            await starting.start()
            await until(lambda: starting.slot("fresh").health.state == "failed")
            assert "cannot be verified" in (starting.slot("fresh").health.reason or "")
        finally:
            await starting.close()
        # called by a name the certificate does not hold
        context.load_cert_chain(_chain(tmp_path, "server.pem", ca))
        other = upstream(base.replace("127.0.0.1", "localhost"))
        with pytest.raises(BridgeError) as info:
            await other.start()
        await other.close()
        assert "Hostname mismatch" in info.value.message and "(`url`)" in info.value.message
    finally:
        await catalog.close()
        await http.close()
