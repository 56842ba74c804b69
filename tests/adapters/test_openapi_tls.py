"""OpenAPI upstream against a real TLS server on loopback that asks for a client certificate:
`mutualTLS` security schemes and the `mtls` credential (certificates made for each test)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.model import BridgeError
from bridge.upstream import CallContext
from tests.adapters.test_openapi import (
    _OK,
    _document,
    _load_error,
    _write,
    bridge_for,
    call,
    upstream_of,
)

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

KEY_PASSWORD = "key-Secret-321"


def _issue(
    name: str, issuer: tuple[Any, Any] | None, *, ca: bool = False, ip: str | None = None
) -> tuple[Any, Any]:
    """A certificate for `name` with a fresh key, signed by `issuer` (certificate, key), or self-signed."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _pem(cert: Any) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any, password: str | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate (its key
    encrypted with KEY_PASSWORD), written as PEM files."""
    ca = _issue("test CA", None, ca=True)
    server = _issue("127.0.0.1", ca, ip="127.0.0.1")
    client = _issue("client-ann", ca)
    files = {
        "ca": _pem(ca[0]),
        "server_cert": _pem(server[0]),
        "server_key": _key_pem(server[1]),
        "client_cert": _pem(client[0]),
        "client_key": _key_pem(client[1], KEY_PASSWORD),
    }
    out = {}
    for name, data in files.items():
        (tmp_path / f"{name}.pem").write_bytes(data)
        out[name] = str(tmp_path / f"{name}.pem")
    return out


@contextlib.asynccontextmanager
async def tls_server(
    pki: dict[str, str], optional: bool = False
) -> AsyncIterator[tuple[list[str], str]]:
    """An HTTPS server that refuses any handshake without a client certificate its CA signed
    (`optional`: that takes one without), and answers with that certificate's common name (each
    request's is also kept; "" without one)."""
    seen: list[str] = []

    async def whoami(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        name = dict(item[0] for item in peer["subject"])["commonName"] if peer else ""
        seen.append(name)
        return web.json_response({"client": name})

    async def token(
        request: web.Request,
    ) -> web.Response:  # an OAuth2 token endpoint of the API's origin
        return web.json_response(
            {"access_token": "tok-1", "token_type": "bearer", "expires_in": 3600}
        )

    app = web.Application()
    app.router.add_get("/{tail:.*}", whoami)
    app.router.add_post("/oauth/token", token)
    async with https_server(pki, app, ssl.CERT_OPTIONAL if optional else ssl.CERT_REQUIRED) as base:
        yield seen, base


@contextlib.asynccontextmanager
async def https_server(
    pki: dict[str, str], app: web.Application, verify_mode: ssl.VerifyMode
) -> AsyncIterator[str]:
    """`app` served over HTTPS on loopback with the test CA's server certificate, taking client
    certificates of that CA as `verify_mode` says; yields its base URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki["server_cert"], pki["server_key"])
    context.load_verify_locations(cafile=pki["ca"])
    context.verify_mode = verify_mode
    server = TestServer(app, host="127.0.0.1", scheme="https")
    await server.start_server(ssl=context)
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        await server.close()


def _mutual_tls_document() -> dict[str, Any]:
    return _document(
        {
            "/whoami": {
                "get": {"operationId": "whoami", "security": [{"clientCert": []}], "responses": _OK}
            }
        },
        components={"securitySchemes": {"clientCert": {"type": "mutualTLS"}}},
    )


async def test_a_mutual_tls_scheme_is_met_by_a_client_certificate(pki, tmp_path):
    (tmp_path / "plain").mkdir()
    mtls = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": KEY_PASSWORD,
        "ca_file": pki["ca"],
    }
    spec = _write(tmp_path, _mutual_tls_document())
    async with tls_server(pki) as (seen, base):
        # the readiness probe needs the certificate too: the server refuses a handshake without one
        async with bridge_for(spec, base_url=base, auth=mtls, health_path="/") as bridge:
            result = await call(bridge, "whoami")
            assert not result.is_error, result.content
            assert result.structured_content == {"client": "client-ann"}
            assert KEY_PASSWORD not in repr(upstream_of(bridge).config)
        assert seen == ["client-ann", "client-ann"]
        # a document that declares no mutualTLS scheme: the certificate goes with every request
        plain = _write(
            tmp_path / "plain",
            _document({"/whoami": {"get": {"operationId": "whoami", "responses": _OK}}}),
        )
        async with bridge_for(plain, base_url=base, auth=mtls) as bridge:
            assert (await call(bridge, "whoami")).structured_content == {"client": "client-ann"}
        async with bridge_for(
            plain, base_url=base
        ) as bridge:  # the server refuses a handshake without it
            assert (await call(bridge, "whoami")).error.error_class == "dependency_unavailable"
        assert len(seen) == 3
        # none configured: the call fails before any request, saying which entry to add
        async with bridge_for(spec, base_url=base) as bridge:
            result = await call(bridge, "whoami")
        assert (
            result.error.error_class == "credential_missing"
            and result.error.recoverability == "setup"
        )
        assert (
            "clientCert" in result.error.message
            and "`{type: mtls, cert_file: client.pem, key_file: client.key}`"
            in result.error.message
        )
        assert len(seen) == 3


async def test_a_client_certificate_that_cannot_be_loaded_fails_the_start_naming_its_files(
    pki, tmp_path
):
    spec = _write(tmp_path, _mutual_tls_document())
    wrong = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": "not-it",
    }
    error = await _load_error(spec, auth=[wrong])
    assert (
        "auth[0] (mtls): the client certificate cannot be loaded from cert_file "
        + pki["client_cert"]
        in error.message
    )
    assert "not-it" not in error.message
    error = await _load_error(
        spec, auth=[{"type": "mtls", "cert_file": str(tmp_path / "missing.pem")}]
    )
    assert "file not found" in error.message


async def test_ca_file_verifies_the_calls_that_present_no_certificate_too(pki, tmp_path):
    # a server of a private CA asking some operations for a client certificate: the calls of
    # the others were checked against the system's CAs and failed verification
    flows = {"clientCredentials": {"tokenUrl": "/oauth/token", "scopes": {}}}
    doc = _document(
        {
            "/whoami": {
                "get": {"operationId": "whoami", "security": [{"clientCert": []}], "responses": _OK}
            },
            "/open": {"get": {"operationId": "open", "security": [], "responses": _OK}},
            "/token": {
                "get": {"operationId": "token", "security": [{"oauth": []}], "responses": _OK}
            },
        },
        components={
            "securitySchemes": {
                "clientCert": {"type": "mutualTLS"},
                "oauth": {"type": "oauth2", "flows": flows},
            }
        },
    )
    mtls = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": KEY_PASSWORD,
        "ca_file": pki["ca"],
    }
    oauth = {"type": "oauth2", "client_id": "cid", "client_secret": "client-Secret-1"}
    async with tls_server(pki, optional=True) as (seen, base):
        async with bridge_for(_write(tmp_path, doc), base_url=base, auth=[mtls, oauth]) as bridge:
            opened = await call(bridge, "open")
            assert not opened.is_error, opened.content
            assert opened.structured_content == {"client": ""}  # the certificate is not presented
            assert (await call(bridge, "whoami")).structured_content == {"client": "client-ann"}
            assert (await call(bridge, "open")).structured_content == {"client": ""}
            tokened = await call(
                bridge, "token"
            )  # the token request too (relative: on the API's origin)
            assert not tokened.is_error, tokened.content
        assert seen == ["", "client-ann", "", ""]
        # no ca_file: the system's CAs, which do not know the test CA
        async with bridge_for(
            _write(tmp_path, doc), base_url=base, auth={**mtls, "ca_file": None}
        ) as bridge:
            assert (await call(bridge, "open")).error.error_class == "dependency_unavailable"


async def test_a_certificate_that_fails_its_check_fails_the_call_at_once_saying_the_fix(
    pki, tmp_path, monkeypatch
):
    # a server of a private CA, trusted at start (ca_file), later presenting a certificate no
    # configured CA signed: retrying cannot help, and the server is not down
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki["server_cert"], pki["server_key"])

    async def answer(
        request: web.Request,
    ) -> web.Response:  # each request on a new connection, a new handshake
        return web.json_response({"ok": True}, headers={"Connection": "close"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    server = TestServer(app, host="127.0.0.1", scheme="https")
    await server.start_server(ssl=context)
    base = f"https://127.0.0.1:{server.port}"
    doc = _write(tmp_path, _document({"/open": {"get": {"operationId": "open", "responses": _OK}}}))
    mtls = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": KEY_PASSWORD,
        "ca_file": pki["ca"],
    }
    try:
        async with bridge_for(doc, base_url=base, auth=mtls, health_path="/") as bridge:
            upstream = upstream_of(bridge)
            assert not (await call(bridge, "open")).is_error
            events: list[Any] = []
            monkeypatch.setattr(upstream, "emit", events.append)
            stranger = _issue("127.0.0.1", None, ip="127.0.0.1")  # self-signed
            (tmp_path / "stranger.pem").write_bytes(_pem(stranger[0]) + _key_pem(stranger[1]))
            context.load_cert_chain(str(tmp_path / "stranger.pem"))
            progress: list[Any] = []

            async def sink(record: Any) -> None:
                progress.append(record.message)

            tool = next(iter(upstream._tools))
            with pytest.raises(BridgeError) as info:
                await upstream.invoke(
                    tool.native_id,
                    {},
                    CallContext(invocation_id="inv_1", timeout=5, progress_sink=sink),
                )
            error = info.value
            assert error.error_class == "dependency_unavailable" and error.recoverability == "setup"
            assert error.message.startswith(
                f"GET /open: the certificate of 127.0.0.1:{server.port} cannot be verified ("
            )
            assert (
                "give the CA that signed it as `ca_file` (a PEM file, added to the system's CAs)"
                in error.message
            )
            assert error.message.endswith("), or set `verify_tls: false`")
            assert (
                progress == [] and events == []
            )  # not retried; the upstream not marked unavailable
        # the readiness probe says the same at start
        async with bridge_for(doc, base_url=base, health_path="/") as bridge:
            health = bridge.catalog.slot("svc").health
            assert health.state == "failed" and "cannot be verified" in (health.reason or ""), (
                health
            )
        # called by a name the certificate does not hold
        context.load_cert_chain(pki["server_cert"], pki["server_key"])
        async with bridge_for(
            doc, base_url=base.replace("127.0.0.1", "localhost"), auth=mtls
        ) as bridge:
            result = await call(bridge, "open")
        assert (
            "Hostname mismatch" in result.error.message and "(`base_url`)" in result.error.message
        )
        # an OAuth2 token endpoint of a CA the system does not know
        flows = {"clientCredentials": {"tokenUrl": base + "/oauth/token", "scopes": {}}}
        oauth_doc = _write(
            tmp_path,
            _document(
                {"/open": {"get": {"operationId": "open", "responses": _OK}}},
                security=[{"oauth": []}],
                components={"securitySchemes": {"oauth": {"type": "oauth2", "flows": flows}}},
            ),
        )
        oauth = {"type": "oauth2", "client_id": "cid", "client_secret": "client-Secret-1"}
        async with bridge_for(oauth_doc, base_url="http://127.0.0.1:1", auth=oauth) as bridge:
            result = await call(bridge, "open")
        assert result.error.recoverability == "setup", result.error
        assert result.error.message.startswith(
            f"the OAuth2 token endpoint {base}/oauth/token: the certificate of 127.0.0.1:"
        )
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def document_server(
    pki: dict[str, str], documents: dict[str, Any]
) -> AsyncIterator[tuple[list[str], str]]:
    """An HTTPS server of the test CA taking a client certificate without asking for one,
    serving `documents` by path and answering any other GET with the client's common name;
    each request's path and common name ("" without a certificate) are kept."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        seen.append(
            f"{request.path} {dict(item[0] for item in peer['subject'])['commonName'] if peer else ''}".rstrip()
        )
        if request.path in documents:
            return web.json_response(documents[request.path])
        if request.path == "/moved.json":
            raise web.HTTPFound("/api.json")
        return web.json_response({"client": seen[-1].partition(" ")[2]})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    async with https_server(pki, app, ssl.CERT_OPTIONAL) as base:
        yield seen, base


async def test_ca_file_verifies_a_document_on_the_apis_origin(pki, tmp_path):
    # a document served by the API itself, behind a private CA: it was read before the
    # credentials were bound, against the system's CAs alone, and failed verification
    doc = _document(
        {
            "/whoami": {
                "get": {
                    "operationId": "whoami",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {"schema": {"$ref": "/parts.json#/Who"}}
                            },
                        }
                    },
                }
            }
        }
    )
    parts = {"Who": {"type": "object", "properties": {"client": {"type": "string"}}}}
    mtls = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": KEY_PASSWORD,
        "ca_file": pki["ca"],
    }
    async with document_server(pki, {"/api.json": doc, "/parts.json": parts}) as (seen, base):
        for spec in (f"{base}/api.json", f"{base}/moved.json"):  # a redirect within the origin too
            async with bridge_for(spec, base_url=base, auth=mtls) as bridge:
                health = bridge.catalog.slot("svc").health
                assert health.state == "ready", health
                tool = bridge.catalog.resolve("svc__whoami")
                assert tool.output_schema["properties"] == {"client": {"type": "string"}}
                assert (await call(bridge, "whoami")).structured_content == {"client": "client-ann"}
        # the client certificate is presented to the API's calls alone
        assert seen == [
            "/api.json",
            "/parts.json",
            "/whoami client-ann",
            "/moved.json",
            "/api.json",
            "/parts.json",
            "/whoami client-ann",
        ]
        # without base_url the API's origin is not known before the document is read: the
        # system's CAs check it, and the message says so
        async with bridge_for(f"{base}/api.json", auth=mtls) as bridge:
            health = bridge.catalog.slot("svc").health
        assert health.state == "failed" and "cannot be verified" in (health.reason or ""), health
        assert "give the CA that signed it as `ca_file`" in health.reason


async def test_the_upstreams_ca_file_checks_every_server_and_adds_to_an_mtls_entrys_cas(
    pki, tmp_path
):
    # a private CA given once, for the upstream: the document and the one its $ref names, read
    # with no base_url (the API's origin not known yet), the calls presenting no certificate and
    # those presenting one; they were checked against the system's CAs and failed verification
    doc = _document(
        {
            "/whoami": {
                "get": {
                    "operationId": "whoami",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {"schema": {"$ref": "/parts.json#/Who"}}
                            },
                        }
                    },
                }
            }
        }
    )
    parts = {"Who": {"type": "object", "properties": {"client": {"type": "string"}}}}
    mtls = {
        "type": "mtls",
        "cert_file": pki["client_cert"],
        "key_file": pki["client_key"],
        "password": KEY_PASSWORD,
    }
    async with document_server(pki, {"/api.json": doc, "/parts.json": parts}) as (seen, base):
        doc["servers"] = [{"url": base}]  # served as it is when asked for
        async with bridge_for(f"{base}/api.json", ca_file=pki["ca"]) as bridge:
            assert bridge.catalog.slot("svc").health.state == "ready", bridge.catalog.slot(
                "svc"
            ).health
            assert bridge.catalog.resolve("svc__whoami").output_schema["properties"] == {
                "client": {"type": "string"}
            }
            assert (await call(bridge, "whoami")).structured_content == {"client": ""}
        async with bridge_for(
            f"{base}/api.json", base_url=base, ca_file=pki["ca"], auth=mtls
        ) as bridge:
            assert (await call(bridge, "whoami")).structured_content == {"client": "client-ann"}
        assert seen == [
            "/api.json",
            "/parts.json",
            "/whoami",
            "/api.json",
            "/parts.json",
            "/whoami client-ann",
        ]
        # a local document naming one on the server by its URL
        local = json.loads(
            json.dumps(doc).replace('"/parts.json#/Who"', json.dumps(f"{base}/parts.json#/Who"))
        )
        async with bridge_for(_write(tmp_path, local), ca_file=pki["ca"]) as bridge:
            assert bridge.catalog.resolve("svc__whoami").output_schema["properties"] == {
                "client": {"type": "string"}
            }
        assert seen[-1] == "/parts.json"
        plain = _write(
            tmp_path, _document({"/whoami": {"get": {"operationId": "whoami", "responses": _OK}}})
        )
        async with bridge_for(
            plain, base_url=base, auth=mtls
        ) as bridge:  # the mtls entry's CAs alone: the system's
            result = await call(bridge, "whoami")
        assert (
            result.error.recoverability == "setup"
            and "give the CA that signed it as `ca_file` (a PEM file" in result.error.message
        )


async def test_verify_tls_off_reaches_the_documents_a_ref_names(pki, tmp_path):
    # the document was read unchecked, and the one its $ref names checked by urllib's defaults:
    # its only operation could not be mapped, and the upstream failed
    doc = _document(
        {
            "/whoami": {
                "get": {
                    "operationId": "whoami",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {"schema": {"$ref": "/parts.json#/Who"}}
                            },
                        }
                    },
                }
            }
        }
    )
    parts = {"Who": {"type": "object", "properties": {"client": {"type": "string"}}}}
    async with document_server(pki, {"/api.json": doc, "/parts.json": parts}) as (seen, base):
        async with bridge_for(f"{base}/api.json", base_url=base, verify_tls=False) as bridge:
            assert bridge.catalog.slot("svc").health.state == "ready", bridge.catalog.slot(
                "svc"
            ).health
            assert bridge.catalog.resolve("svc__whoami").output_schema["properties"] == {
                "client": {"type": "string"}
            }
            assert (await call(bridge, "whoami")).structured_content == {"client": ""}
    assert seen == ["/api.json", "/parts.json", "/whoami"]
