"""OpenAPI upstream: one place of a request (a header, compared without case; a query name; a
cookie name) claimed by two of its credentials, parameters and configured headers. A request
carries one value there, and the recording server reads the raw headers, so a header sent twice
in two cases shows."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from bridge.upstream import CallContext
from tests.adapters.test_openapi import (
    _OK,
    SECRETS,
    _document,
    _write,
    bridge_for,
    call,
    recording_server,
    upstream_of,
)


def sent(request: web.Request, name: str) -> list[str]:
    """Every value of header `name` the request carried, whatever the case of its name."""
    return [
        value.decode() for key, value in request.raw_headers if key.decode().lower() == name.lower()
    ]


def cookies(request: web.Request) -> list[str]:
    return [item.strip() for header in sent(request, "cookie") for item in header.split(";")]


async def test_a_credential_sent_with_every_call_gives_way_to_the_one_the_requirement_takes(
    tmp_path, caplog
):
    """An apiKey named `authorization` fits no scheme of a document whose only scheme is HTTP
    bearer, so it is sent with every call: the bearer token overwrote it, and when the cases
    differed both `authorization` and `Authorization` went out."""
    doc = _document(
        {
            "/private": {
                "get": {"operationId": "private", "security": [{"bearer": []}], "responses": _OK}
            },
            "/public": {"get": {"operationId": "public", "security": [], "responses": _OK}},
        },
        components={"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    )
    auth = [
        {"type": "apiKey", "name": "authorization", "in": "header", "value": "unbound-Secret-1"},
        {"type": "bearer", "token": SECRETS["bearer"]},
    ]
    async with recording_server() as (seen, base):
        with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
            async with bridge_for(_write(tmp_path, doc), base_url=base, auth=auth) as bridge:
                overrides = (await upstream_of(bridge).health()).get("credential_overrides")
                assert not (await call(bridge, "private")).is_error
                assert not (await call(bridge, "public")).is_error
    assert sent(seen[0], "Authorization") == [f"Bearer {SECRETS['bearer']}"]
    assert sent(seen[1], "Authorization") == ["unbound-Secret-1"]
    assert overrides == [
        "auth[0] (apiKey, sent with every call: it fits no security scheme of the document) and auth[1] (scheme bearer) "
        "put their credentials in one place, the Authorization header, which a request carries once: auth[1]'s is sent "
        "in the 1 operation(s) whose security requirement it meets (GET /private), auth[0]'s in the others"
    ]
    assert overrides[0] in caplog.text


async def test_two_credentials_sent_with_every_call_in_one_place_send_the_first(tmp_path):
    doc = _document({"/a": {"get": {"operationId": "a", "responses": _OK}}})
    auth = [
        {"type": "apiKey", "name": "X-Key", "in": "header", "value": "first-Secret"},
        {"type": "apiKey", "name": "x-key", "in": "header", "value": "second-Secret"},
        {"type": "apiKey", "name": "k", "in": "query", "value": "q-first"},
        {"type": "apiKey", "name": "k", "in": "query", "value": "q-second"},
    ]
    async with recording_server() as (seen, base):
        async with bridge_for(_write(tmp_path, doc), base_url=base, auth=auth) as bridge:
            overrides = (await upstream_of(bridge).health()).get("credential_overrides")
            assert not (await call(bridge, "a")).is_error
    assert sent(seen[0], "x-key") == ["first-Secret"] and seen[0].query.getall("k") == ["q-first"]
    assert overrides == [
        "auth[0] and auth[1] (both sent with every call) put their credentials in one place, the X-Key header, which a "
        "request carries once: auth[0]'s is sent (the first configured), never auth[1]'s",
        "auth[2] and auth[3] (both sent with every call) put their credentials in one place, the query parameter k, "
        "which a request carries once: auth[2]'s is sent (the first configured), never auth[3]'s",
    ]


def _keyed_document() -> dict[str, Any]:
    """Parameters named as the credentials' places, in a case of their own for the header: a
    document that declares its key as a parameter too."""
    params = [
        {"name": "x-api-key", "in": "header", "required": True, "schema": {"type": "string"}},
        {"name": "api_key", "in": "query", "schema": {"type": "string"}},
        {"name": "session_key", "in": "cookie", "schema": {"type": "string"}},
        {"name": "other", "in": "query", "schema": {"type": "string"}},
    ]
    schemes = {
        "key": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        "q": {"type": "apiKey", "in": "query", "name": "api_key"},
        "c": {"type": "apiKey", "in": "cookie", "name": "session_key"},
    }
    return _document(
        {
            "/items": {
                "get": {
                    "operationId": "items",
                    "parameters": params,
                    "security": [{"key": [], "q": [], "c": []}],
                    "responses": _OK,
                }
            },
            "/open": {
                "get": {
                    "operationId": "open",
                    "parameters": params,
                    "security": [],
                    "responses": _OK,
                }
            },
        },
        components={"securitySchemes": schemes},
    )


async def test_a_parameter_in_a_credentials_place_is_left_out_of_the_input_and_the_credential_sent_once(
    tmp_path, caplog
):
    """The credential overwrote the caller's header argument (both were sent when the cases
    differed), and a query or cookie key went out twice."""
    auth = [{"type": "apiKey", "scheme": s, "value": SECRETS["api"]} for s in ("key", "q", "c")]
    async with recording_server() as (seen, base):
        with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
            async with bridge_for(
                _write(tmp_path, _keyed_document()), base_url=base, auth=auth
            ) as bridge:
                keyed = bridge.catalog.resolve("svc__items").input_schema
                assert set(keyed["properties"]) == {"other"} and "required" not in keyed
                assert set(bridge.catalog.resolve("svc__open").input_schema["properties"]) == {
                    "x-api-key",
                    "api_key",
                    "session_key",
                    "other",
                }
                refused = await call(bridge, "items", {"x-api-key": "caller", "other": "1"})
                assert refused.error.error_class == "invalid_arguments"
                assert not (await call(bridge, "items", {"other": "1"})).is_error
                assert not (
                    await call(
                        bridge,
                        "open",
                        {"x-api-key": "caller", "api_key": "qa", "session_key": "sa"},
                    )
                ).is_error
                overrides = (await upstream_of(bridge).health()).get("credential_overrides")
                # a caller reaching the adapter past the input schema is not sent either
                upstream = upstream_of(bridge)
                tool = next(t for t in await upstream.list_tools() if t.name == "items")
                arguments = {"x-api-key": "caller", "api_key": "qa", "session_key": "sa"}
                assert not (
                    await upstream.invoke(
                        tool.native_id, arguments, CallContext(invocation_id="inv_1", timeout=5)
                    )
                ).is_error
    for request in (seen[0], seen[2]):
        assert sent(request, "X-API-Key") == [SECRETS["api"]]
        assert request.query.getall("api_key") == [SECRETS["api"]]
        assert [c for c in cookies(request) if c.startswith("session_key=")] == [
            f"session_key={SECRETS['api']}"
        ]
    assert sent(seen[1], "X-API-Key") == ["caller"] and seen[1].query.getall("api_key") == ["qa"]
    assert cookies(seen[1]) == ["session_key=sa"]
    assert overrides == [
        "the header parameter x-api-key of 1 operation(s) (GET /items) is where auth[0]'s credential goes: the credential is "
        "sent, and the parameter is left out of those tools' inputs",
        "the query parameter api_key of 1 operation(s) (GET /items) is where auth[1]'s credential goes: the credential is "
        "sent, and the parameter is left out of those tools' inputs",
        "the cookie parameter session_key of 1 operation(s) (GET /items) is where auth[2]'s credential goes: the credential is "
        "sent, and the parameter is left out of those tools' inputs",
    ]
    assert overrides[0] in caplog.text


async def test_configured_headers_give_way_to_credentials_compared_without_case(tmp_path, caplog):
    """A configured `authorization` and the bearer token both went out (`headers` were merged
    with the request's own by the exact name), and a configured `Cookie` was replaced by the
    credential's cookie; the cookie the credential takes the place of was not named among the
    overrides."""
    doc = _document(
        {
            "/private": {
                "get": {"operationId": "private", "security": [{"bearer": []}], "responses": _OK}
            },
            "/public": {"get": {"operationId": "public", "security": [], "responses": _OK}},
        },
        components={"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    )
    headers = {"authorization": "Token configured-Secret", "Cookie": "pref=dark; session_key=stale"}
    auth = [
        {"type": "bearer", "token": SECRETS["bearer"]},
        {"type": "apiKey", "name": "session_key", "in": "cookie", "value": "cookie-Secret"},
    ]
    async with recording_server() as (seen, base):
        with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
            async with bridge_for(
                _write(tmp_path, doc), base_url=base, auth=auth, headers=headers
            ) as bridge:
                assert not (await call(bridge, "private")).is_error
                assert not (await call(bridge, "public")).is_error
                overrides = (await upstream_of(bridge).health()).get("credential_overrides")
    assert sent(seen[0], "Authorization") == [f"Bearer {SECRETS['bearer']}"]
    assert sent(seen[1], "Authorization") == ["Token configured-Secret"]
    for (
        request
    ) in seen:  # one Cookie header: the configured cookies, the credential's in place of its name
        assert sent(request, "Cookie") == ["pref=dark; session_key=cookie-Secret"]
    assert overrides == [
        "the configured header authorization is where auth[0]'s credential goes: the credential is sent in the 1 "
        "operation(s) that carry it (GET /private), the configured header in the others",
        "the cookie session_key of the configured Cookie header is where auth[1]'s credential goes: the credential is "
        "sent in the 2 operation(s) that carry it (GET /private, GET /public), never the configured cookie",
    ]
    assert all(caplog.text.count(message) == 1 for message in overrides)


async def test_a_parameter_a_configured_header_fills_is_left_out_of_the_input(tmp_path):
    """A document declaring the version header `headers:` pins: the caller's value went out
    beside the configured one when the cases differed, and replaced it otherwise."""
    version = {"name": "x-version", "in": "header", "required": True, "schema": {"type": "string"}}
    doc = _document(
        {"/items": {"get": {"operationId": "items", "parameters": [version], "responses": _OK}}}
    )
    async with recording_server() as (seen, base):
        async with bridge_for(
            _write(tmp_path, doc), base_url=base, headers={"X-Version": "2022-11-28"}
        ) as bridge:
            assert bridge.catalog.resolve("svc__items").input_schema["properties"] == {}
            assert not (await call(bridge, "items")).is_error
            overrides = (await upstream_of(bridge).health()).get("credential_overrides")
    assert sent(seen[0], "X-Version") == ["2022-11-28"]
    assert overrides == [
        "the header parameter x-version of 1 operation(s) (GET /items) is filled by the configured header X-Version: "
        "the configured value is sent, and the parameter is left out of those tools' inputs"
    ]


async def test_a_cookie_parameter_a_configured_cookie_fills_is_left_out_of_the_input(tmp_path):
    """As a header parameter is: the caller's cookie replaced the configured one of its name,
    which was not said anywhere."""
    params = [
        {"name": "session", "in": "cookie", "required": True, "schema": {"type": "string"}},
        {"name": "theme", "in": "cookie", "schema": {"type": "string"}},
    ]
    doc = _document(
        {"/items": {"get": {"operationId": "items", "parameters": params, "responses": _OK}}}
    )
    async with recording_server() as (seen, base):
        async with bridge_for(
            _write(tmp_path, doc), base_url=base, headers={"Cookie": "session=conf-Secret; lang=en"}
        ) as bridge:
            schema = bridge.catalog.resolve("svc__items").input_schema
            assert set(schema["properties"]) == {"theme"} and "required" not in schema
            assert not (await call(bridge, "items", {"theme": "dark"})).is_error
            upstream = upstream_of(bridge)
            tool = next(t for t in await upstream.list_tools() if t.name == "items")
            arguments = {
                "session": "caller",
                "theme": "light",
            }  # past the input schema: not sent either
            assert not (
                await upstream.invoke(
                    tool.native_id, arguments, CallContext(invocation_id="inv_1", timeout=5)
                )
            ).is_error
            overrides = (await upstream.health()).get("credential_overrides")
    assert sent(seen[0], "Cookie") == ["session=conf-Secret; lang=en; theme=dark"]
    assert sent(seen[1], "Cookie") == ["session=conf-Secret; lang=en; theme=light"]
    assert overrides == [
        "the cookie parameter session of 1 operation(s) (GET /items) is filled by the cookie session of the configured "
        "Cookie header: the configured value is sent, and the parameter is left out of those tools' inputs"
    ]


async def test_a_cookie_an_exploded_object_parameter_names_gives_way_to_the_configured_one(
    tmp_path,
):
    """Its keys are cookie names the caller chooses: one naming a cookie of the configured
    `Cookie` header replaced the configured value; a credential's cookie still takes its place."""
    prefs = {
        "name": "prefs",
        "in": "cookie",
        "explode": True,
        "schema": {"type": "object", "additionalProperties": {"type": "string"}},
    }
    doc = _document(
        {"/items": {"get": {"operationId": "items", "parameters": [prefs], "responses": _OK}}}
    )
    headers = {"Cookie": "session=conf-Secret; lang=en"}
    auth = {"type": "apiKey", "name": "lang", "in": "cookie", "value": "key-Secret"}
    async with recording_server() as (seen, base):
        async with bridge_for(
            _write(tmp_path, doc), base_url=base, headers=headers, auth=auth
        ) as bridge:
            assert not (
                await call(
                    bridge, "items", {"prefs": {"session": "caller", "lang": "fr", "theme": "dark"}}
                )
            ).is_error
    assert sent(seen[0], "Cookie") == ["session=conf-Secret; theme=dark; lang=key-Secret"]
