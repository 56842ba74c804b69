"""`ca_file` of the MCP (HTTP), A2A, A2T and OpenAPI upstreams, against real TLS servers on loopback
whose certificates a throwaway CA signed: the CA trusted beside the system's, a file that
cannot serve refused when the config loads, and the fix of a failed check naming the key. And
an `https://` URL naming a plain HTTP server, for every HTTP upstream: a setup problem, not an
outage."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.a2t.upstream import A2TConfig, A2TUpstream
from bridge.config import ConfigError, parse_config
from bridge.model import BridgeError
from bridge.runtime import Bridge
from tests.adapters.a2a_fixtures.agent import build_agent
from tests.adapters.mcp_fixtures.oversize_http import build_app
from tests.adapters.test_a2t import IETFServer, ctx
from tests.adapters.test_openapi import _OK, _document, _write, bridge_for, call
from tests.servers import free_port, serve_asgi

pytest.importorskip("cryptography.x509")
from tests.adapters.test_openapi_tls import _issue, _key_pem, _pem


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding `ca.pem` (a throwaway CA no system trusts) and `server.pem` (a
    certificate for 127.0.0.1 it signed, with its key)."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    ca = _issue("test CA", None, ca=True)
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    cert, key = _issue("127.0.0.1", ca, ip="127.0.0.1")
    (tmp_path / "server.pem").write_bytes(_pem(cert) + _key_pem(key))
    return tmp_path


@contextlib.asynccontextmanager
async def running(folder: Path, **upstream: Any) -> AsyncIterator[Bridge]:
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [{"name": "up", "retry_initial": 30, **upstream}],
        },
        source=str(folder / "bridge.yaml"),
        base_dir=str(folder),
    )
    async with Bridge(config) as bridge:
        yield bridge


def problems(folder: Path, **upstream: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"upstreams": [{"name": "up", **upstream}]},
            source=str(folder / "bridge.yaml"),
            base_dir=str(folder),
        )
    return str(info.value)


KINDS = [
    {"kind": "mcp", "url": "https://127.0.0.1:9/mcp"},
    {"kind": "a2a", "base_url": "https://127.0.0.1:9"},
    {"kind": "a2t", "url": "https://127.0.0.1:9"},
    {"kind": "openapi", "spec": "api.yaml"},
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k["kind"])
def test_a_ca_file_that_cannot_serve_is_a_config_error_naming_the_file_the_field_and_the_fix(
    tmp_path: Path, kind: dict[str, Any]
) -> None:
    said = problems(tmp_path, **kind, ca_file="certs/missing.pem")
    assert (
        "upstreams[0].ca_file: `certs/missing.pem` cannot be read (No such file or directory: "
        in said
    )
    assert str(tmp_path / "certs" / "missing.pem") in said and str(tmp_path / "bridge.yaml") in said
    assert "fix: give the path of a PEM file of the CA certificates" in said
    (tmp_path / "certs").mkdir()
    assert "`certs` cannot be read (Is a directory: " in problems(tmp_path, **kind, ca_file="certs")
    (tmp_path / "notes.txt").write_text("not a certificate\n")
    said = problems(tmp_path, **kind, ca_file="notes.txt")
    assert (
        "upstreams[0].ca_file: `notes.txt` holds no PEM CA certificate" in said
        and "-----BEGIN CERTIFICATE-----" in said
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k["kind"])
async def test_a_ca_file_gone_after_the_config_was_read_fails_the_start_as_setup_naming_it(
    signed: Path, kind: dict[str, Any]
) -> None:
    (signed / "api.yaml").write_text(
        '{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {}}'
    )
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "upstreams": [{"name": "up", "retry_initial": 30, **kind, "ca_file": "ca.pem"}],
        },
        base_dir=str(signed),
    )
    (signed / "ca.pem").unlink()
    async with Bridge(config) as bridge:
        slot = bridge.catalog.slot("up")
        assert slot.health.state == "failed" and slot.needs_setup, slot.health
        assert (
            slot.health.reason
            == f"`ca_file` ca.pem cannot be loaded (No such file or directory: {signed / 'ca.pem'}): give a PEM file of CA certificates"
        )


def test_a_stdio_mcp_server_takes_no_ca_file(signed: Path) -> None:
    said = problems(signed, kind="mcp", command="python", ca_file="ca.pem")
    assert (
        "`ca_file` applies to HTTPS servers (`url`), not to `command`" in said
        and "fix: remove `ca_file`" in said
    )


async def test_an_mcp_server_of_a_private_ca_is_trusted_through_ca_file(signed: Path) -> None:
    app, _ = build_app(json_answers=True, get_failures=100, get_failure="405")
    port = free_port()
    url = f"https://127.0.0.1:{port}/mcp"
    mcp = {"kind": "mcp", "url": url, "protocol": "legacy", "ping_interval": None}
    async with serve_asgi(app, port=port, lifespan="off", ssl_certfile=str(signed / "server.pem")):
        async with running(signed, **mcp, ca_file="ca.pem") as bridge:
            assert (await bridge.invoker.invoke("up__echo", {"text": "hi"})).content[0][
                "text"
            ] == "hi"
        async with running(signed, **mcp) as bridge:
            slot = bridge.catalog.slot("up")
            assert slot.health.state == "failed" and slot.needs_setup
            assert (
                f"the certificate of 127.0.0.1:{port} cannot be verified (unable to get local issuer certificate): give the CA "
                "that signed it as `ca_file` (a PEM file, added to the system's CAs), or add the CA that signed it to the "
                "system's CAs"
            ) in (slot.health.reason or "")


async def test_an_a2a_agent_of_a_private_ca_is_trusted_through_ca_file_for_its_card_and_its_calls(
    signed: Path,
) -> None:
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    app, _ = build_agent(base)
    async with serve_asgi(app, port=port, lifespan="off", ssl_certfile=str(signed / "server.pem")):
        async with running(signed, kind="a2a", base_url=base, ca_file="ca.pem") as bridge:
            assert bridge.catalog.slot("up").health.state == "ready"
            assert (await bridge.invoker.invoke("up__echo", {"message": "hi"})).content[0][
                "text"
            ] == "echo: hi"
        (signed / "other.pem").write_bytes(_pem(_issue("another CA", None, ca=True)[0]))
        async with running(signed, kind="a2a", base_url=base, ca_file="other.pem") as bridge:
            reason = bridge.catalog.slot("up").health.reason or ""
            assert reason.endswith(
                "(unable to get local issuer certificate): add the CA that signed it to `ca_file` (other.pem), "
                "or to the system's CAs"
            ), reason


async def test_an_a2t_server_of_a_private_ca_is_trusted_through_ca_file(signed: Path) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(signed / "server.pem"))
    server = IETFServer(count=1)
    http = TestServer(server.app(), host="127.0.0.1", scheme="https")
    await http.start_server(ssl=context)
    base = f"https://127.0.0.1:{http.port}"
    try:
        async with running(signed, kind="a2t", url=base, ca_file="ca.pem") as bridge:
            up = bridge.catalog.slot("up").upstream
            tool_id = (await up.list_tools())[0].native_id
            assert not (await up.invoke(tool_id, {"City": "Oslo"}, ctx())).is_error
        async with running(signed, kind="a2t", url=base) as bridge:
            reason = bridge.catalog.slot("up").health.reason or ""
            assert (
                "cannot be verified (unable to get local issuer certificate): give the CA that signed it as `ca_file`"
                in reason
            )
            assert reason.endswith("or set `verify_tls: false`"), reason
    finally:
        await http.close()


# ----------------------------------------------------------------------------- https:// to a plain HTTP server


def speaks_no_tls(port: int, address: str) -> str:
    return (
        f"127.0.0.1:{port} does not speak TLS (WRONG_VERSION_NUMBER: it answered the handshake with no TLS, plain HTTP most "
        f"often): write `{address}` with http:// if the server serves plain HTTP there, or with the port where it serves HTTPS"
    )


@contextlib.asynccontextmanager
async def plain(app: Any) -> AsyncIterator[int]:
    """An aiohttp `app` served over plain HTTP on loopback; yields its port."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server.port
    finally:
        await server.close()


async def test_an_a2t_url_of_https_to_a_plain_http_server_is_a_setup_problem_not_retried(
    tmp_path: Path,
) -> None:
    async with plain(IETFServer(count=1).app()) as port:
        up = A2TUpstream(
            A2TConfig(
                name="up", url=f"https://127.0.0.1:{port}", retries={"count": 2, "backoff": 0.2}
            )
        )
        begun = asyncio.get_running_loop().time()
        with pytest.raises(BridgeError) as info:
            await up.start()
        await up.close()
    assert (
        asyncio.get_running_loop().time() - begun < 0.2
    )  # not retried (2 retries with backoff take 0.6 s)
    assert (
        info.value.error_class == "dependency_unavailable" and info.value.recoverability == "setup"
    )
    assert info.value.message.endswith(speaks_no_tls(port, "url")), info.value.message


async def test_an_openapi_base_url_of_https_to_a_plain_http_server_fails_a_call_at_once_as_setup(
    tmp_path: Path,
) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    doc = _write(tmp_path, _document({"/open": {"get": {"operationId": "open", "responses": _OK}}}))
    async with (
        plain(app) as port,
        bridge_for(doc, base_url=f"https://127.0.0.1:{port}", retries={"count": 2}) as bridge,
    ):
        begun = asyncio.get_running_loop().time()
        result = await call(bridge, "open")
        assert asyncio.get_running_loop().time() - begun < 0.2
        assert (
            result.error.error_class == "dependency_unavailable"
            and result.error.recoverability == "setup"
        ), result.error
        assert result.error.message.endswith("GET /open: " + speaks_no_tls(port, "base_url")), (
            result.error.message
        )
        assert bridge.catalog.slot("svc").health.state == "ready"
    async with (
        plain(app) as port,
        bridge_for(doc, base_url=f"https://127.0.0.1:{port}", health_path="/") as bridge,
    ):
        slot = bridge.catalog.slot("svc")
        assert (
            slot.health.state == "failed"
            and slot.needs_setup
            and speaks_no_tls(port, "base_url") in (slot.health.reason or "")
        )


async def test_an_mcp_url_of_https_to_a_plain_http_server_fails_the_start_as_setup(
    tmp_path: Path,
) -> None:
    app, _ = build_app(json_answers=True, get_failures=100, get_failure="405")
    async with serve_asgi(app, lifespan="off") as base:
        port = int(base.rsplit(":", 1)[1])
        async with running(
            tmp_path,
            kind="mcp",
            url=f"https://127.0.0.1:{port}/mcp",
            protocol="legacy",
            ping_interval=None,
        ) as bridge:
            slot = bridge.catalog.slot("up")
            assert slot.health.state == "failed" and slot.needs_setup, slot.health
            assert (slot.health.reason or "").startswith(
                f"https://127.0.0.1:{port}/mcp: " + speaks_no_tls(port, "url")
            ), slot.health


async def test_an_a2a_agent_of_https_to_a_plain_http_server_fails_its_card_and_its_calls_as_setup(
    signed: Path,
) -> None:
    plain_port = free_port()
    agent, _ = build_agent(f"http://127.0.0.1:{plain_port}")
    async with serve_asgi(agent, port=plain_port, lifespan="off"):
        async with running(
            signed, kind="a2a", base_url=f"https://127.0.0.1:{plain_port}"
        ) as bridge:
            slot = bridge.catalog.slot("up")
            assert slot.health.state == "failed" and slot.needs_setup, slot.health
            assert speaks_no_tls(plain_port, "base_url") in (slot.health.reason or ""), slot.health
        # a card served over TLS naming an interface of https:// where the agent serves plain HTTP
        port = free_port()
        card, _ = build_agent(f"https://127.0.0.1:{plain_port}")
        async with (
            serve_asgi(card, port=port, lifespan="off", ssl_certfile=str(signed / "server.pem")),
            running(
                signed, kind="a2a", base_url=f"https://127.0.0.1:{port}", ca_file="ca.pem"
            ) as bridge,
        ):
            begun = asyncio.get_running_loop().time()
            result = await bridge.invoker.invoke("up__echo", {"message": "hi"})
            assert asyncio.get_running_loop().time() - begun < 1
            assert (
                result.error.error_class == "dependency_unavailable"
                and result.error.recoverability == "setup"
            ), result.error
            assert speaks_no_tls(plain_port, "base_url") in result.error.message, (
                result.error.message
            )
            assert bridge.catalog.slot("up").health.state == "ready"
