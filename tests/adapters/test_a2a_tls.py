"""`kind: a2a` against real a2a-sdk agents served over TLS on loopback (certificates made for
each test): the CAs an agent's certificate is checked against, and a certificate that fails
its check, a setup problem answered at once and never taken for an agent that went away."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
import uvicorn.config
from starlette.responses import RedirectResponse

from adapters.a2a import transport as a2a_transport
from adapters.a2a import upstream as a2a
from adapters.http import tls as http_tls
from bridge.upstream import UpstreamEvent
from tests.adapters.a2a_fixtures.agent import build_agent
from tests.adapters.test_a2a import bridge, until
from tests.servers import free_port, serve_asgi

pytest.importorskip("cryptography.x509")
from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem


def _pki(tmp_path: Path) -> tuple[str, str, str]:
    """The CA's PEM file, and two certificates for 127.0.0.1 with their keys: one the CA signed,
    one self-signed (no CA the bridge knows)."""
    ca = _issue("test CA", None, ca=True)
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    for name, issuer in (("server.pem", ca), ("stranger.pem", None)):
        cert, key = _issue("127.0.0.1", issuer, ip="127.0.0.1")
        (tmp_path / name).write_bytes(_pem(cert) + _key_pem(key))
    return str(tmp_path / "ca.pem"), str(tmp_path / "server.pem"), str(tmp_path / "stranger.pem")


async def test_an_agents_certificate_is_checked_against_the_systems_cas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx's default context holds certifi's bundle: a CA added to the system's was not trusted
    ca, signed, _ = _pki(tmp_path)
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(variable, raising=False)
    paths = ssl.get_default_verify_paths()
    system = ssl.DefaultVerifyPaths(
        ca, None, paths.openssl_cafile_env, ca, paths.openssl_capath_env, str(tmp_path / "none")
    )
    monkeypatch.setattr(
        ssl, "get_default_verify_paths", lambda: system
    )  # the system's CAs: the test CA alone
    http_tls.system_cas.cache_clear()
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    app, _ = build_agent(base)
    try:
        async with (
            serve_asgi(app, port=port, lifespan="off", ssl_certfile=signed),
            bridge(base_url=base, retry_initial=30) as b,
        ):
            slot = b.catalog.slot("peer")
            assert slot.health.state == "ready", slot.health
            assert (await b.invoker.invoke("peer__echo", {"message": "hi"})).content[0][
                "text"
            ] == "echo: hi"
    finally:
        http_tls.system_cas.cache_clear()


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_certificate_that_fails_its_check_fails_the_start_and_calls_at_once_as_setup(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    streaming: bool,
) -> None:
    ca, signed, stranger = _pki(tmp_path)
    trusted = ssl.create_default_context(
        cafile=ca
    )  # the system's CAs, as the clients see them, with the test CA
    monkeypatch.setattr(a2a, "system_cas", lambda: trusted)
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    app, control = build_agent(base, streaming=streaming)
    said = f"the certificate of 127.0.0.1:{port} cannot be verified (self-signed certificate): give the CA that signed it as `ca_file`"
    # a start: the card's certificate, not an unreachable agent
    async with (
        serve_asgi(app, port=port, lifespan="off", ssl_certfile=stranger),
        bridge(base_url=base, retry_initial=30) as b,
    ):
        slot = b.catalog.slot("peer")
        assert slot.health.state == "failed", slot.health
        assert (slot.health.reason or "").startswith(
            f"cannot fetch the agent card at {base}/.well-known/agent-card.json: {said}"
        ), slot.health
        assert (
            "verify_tls" not in slot.health.reason
            and "connection refused" not in slot.health.reason
        )  # an A2A upstream has no such key
        assert slot.needs_setup
    # a call: failed at once, the agent left ready; a card refresh keeps the last card
    contexts: list[ssl.SSLContext] = []

    def recorded(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        contexts.append(made(*args, **kwargs))
        return contexts[-1]

    made = uvicorn.config.create_ssl_context
    monkeypatch.setattr(
        uvicorn.config, "create_ssl_context", recorded
    )  # the server's context, to change its certificate
    monkeypatch.setattr(
        a2a_transport, "KEEPALIVE_SECONDS", 0
    )  # each request a new connection, a new handshake
    async with (
        serve_asgi(app, port=port, lifespan="off", ssl_certfile=signed),
        bridge(base_url=base, retry_initial=30, card_refresh_interval=0.3) as b,
    ):
        slot = b.catalog.slot("peer")
        assert (await b.invoker.invoke("peer__echo", {"message": "trusted"})).content[0][
            "text"
        ] == "echo: trusted"
        events: list[UpstreamEvent] = []
        up: Any = slot.upstream
        monkeypatch.setattr(up, "emit", events.append)
        contexts[-1].load_cert_chain(stranger)
        seen = len(control.requests)
        begun = asyncio.get_running_loop().time()
        failed = await b.invoker.invoke("peer__echo", {"message": "stranger"})
        assert asyncio.get_running_loop().time() - begun < 1
        assert failed.error is not None and failed.error.error_class == "dependency_unavailable", (
            failed.error
        )
        assert failed.error.recoverability == "setup" and failed.error.retry_after is None, (
            failed.error
        )
        assert failed.error.message.startswith(f"{base}/: {said}"), failed.error.message
        assert events == [] and slot.health.state == "ready", (events, slot.health)
        await until(lambda: "keeping the last card: cannot fetch the agent card" in caplog.text)
        assert said in caplog.text and events == [] and slot.health.state == "ready", (
            events,
            slot.health,
        )
        assert control.requests[seen:] == []  # no handshake passed
    # called by a name the certificate does not hold
    async with (
        serve_asgi(app, port=port, lifespan="off", ssl_certfile=signed),
        bridge(base_url=base.replace("127.0.0.1", "localhost"), retry_initial=30) as b,
    ):
        reason = b.catalog.slot("peer").health.reason or ""
        assert (
            "Hostname mismatch" in reason
            and "call the server by a name its certificate holds (`base_url`)" in reason
        ), reason


async def test_a_card_redirected_to_a_server_whose_certificate_fails_names_that_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, _, stranger = _pki(tmp_path)
    monkeypatch.setattr(a2a, "system_cas", lambda: ssl.create_default_context(cafile=ca))
    port = free_port()
    target = f"https://127.0.0.1:{port}"
    app, _ = build_agent(target)

    async def moved(scope: Any, receive: Any, send: Any) -> None:
        await RedirectResponse(f"{target}{scope['path']}", status_code=302)(scope, receive, send)

    async with (
        serve_asgi(app, port=port, lifespan="off", ssl_certfile=stranger),
        serve_asgi(moved, lifespan="off") as home,
    ):
        async with bridge(card_url=f"{home}/.well-known/agent-card.json", retry_initial=30) as b:
            reason = b.catalog.slot("peer").health.reason or ""
    assert reason.startswith(
        f"cannot fetch the agent card at {home}/.well-known/agent-card.json: the certificate of 127.0.0.1:{port} "
        "cannot be verified (self-signed certificate)"
    ), reason
