"""OpenAPI upstream: one place of a request (a header, compared without case; a query name; a
cookie name) claimed by two of its credentials, parameters and configured headers. A request
carries one value there, and the recording server reads the raw headers, so a header sent twice
in two cases shows."""

from __future__ import annotations

import logging

from aiohttp import web

from tests.adapters.test_openapi import _OK, SECRETS, _document, _write, bridge_for, call, recording_server, upstream_of


def sent(request: web.Request, name: str) -> list[str]:
    """Every value of header `name` the request carried, whatever the case of its name."""
    return [value.decode() for key, value in request.raw_headers if key.decode().lower() == name.lower()]


def cookies(request: web.Request) -> list[str]:
    return [item.strip() for header in sent(request, "cookie") for item in header.split(";")]


async def test_a_credential_sent_with_every_call_gives_way_to_the_one_the_requirement_takes(tmp_path, caplog):
    """An apiKey named `authorization` fits no scheme of a document whose only scheme is HTTP
    bearer, so it is sent with every call: the bearer token overwrote it, and when the cases
    differed both `authorization` and `Authorization` went out."""
    doc = _document({"/private": {"get": {"operationId": "private", "security": [{"bearer": []}], "responses": _OK}},
                     "/public": {"get": {"operationId": "public", "security": [], "responses": _OK}}},
                    components={"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}})
    auth = [{"type": "apiKey", "name": "authorization", "in": "header", "value": "unbound-Secret-1"},
            {"type": "bearer", "token": SECRETS["bearer"]}]
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
        "in the 1 operation(s) whose security requirement it meets (GET /private), auth[0]'s in the others"]
    assert overrides[0] in caplog.text


async def test_two_credentials_sent_with_every_call_in_one_place_send_the_first(tmp_path):
    doc = _document({"/a": {"get": {"operationId": "a", "responses": _OK}}})
    auth = [{"type": "apiKey", "name": "X-Key", "in": "header", "value": "first-Secret"},
            {"type": "apiKey", "name": "x-key", "in": "header", "value": "second-Secret"},
            {"type": "apiKey", "name": "k", "in": "query", "value": "q-first"},
            {"type": "apiKey", "name": "k", "in": "query", "value": "q-second"}]
    async with recording_server() as (seen, base):
        async with bridge_for(_write(tmp_path, doc), base_url=base, auth=auth) as bridge:
            overrides = (await upstream_of(bridge).health()).get("credential_overrides")
            assert not (await call(bridge, "a")).is_error
    assert sent(seen[0], "x-key") == ["first-Secret"] and seen[0].query.getall("k") == ["q-first"]
    assert overrides == [
        "auth[0] and auth[1] (both sent with every call) put their credentials in one place, the X-Key header, which a "
        "request carries once: auth[0]'s is sent (the first configured), never auth[1]'s",
        "auth[2] and auth[3] (both sent with every call) put their credentials in one place, the query parameter k, "
        "which a request carries once: auth[2]'s is sent (the first configured), never auth[3]'s"]


async def test_configured_headers_give_way_to_credentials_compared_without_case(tmp_path, caplog):
    """A configured `authorization` and the bearer token both went out (`headers` were merged
    with the request's own by the exact name), and a configured `Cookie` was replaced by the
    credential's cookie."""
    doc = _document({"/private": {"get": {"operationId": "private", "security": [{"bearer": []}], "responses": _OK}},
                     "/public": {"get": {"operationId": "public", "security": [], "responses": _OK}}},
                    components={"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}})
    headers = {"authorization": "Token configured-Secret", "Cookie": "pref=dark; session_key=stale"}
    auth = [{"type": "bearer", "token": SECRETS["bearer"]},
            {"type": "apiKey", "name": "session_key", "in": "cookie", "value": "cookie-Secret"}]
    async with recording_server() as (seen, base):
        with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
            async with bridge_for(_write(tmp_path, doc), base_url=base, auth=auth, headers=headers) as bridge:
                assert not (await call(bridge, "private")).is_error
                assert not (await call(bridge, "public")).is_error
                overrides = (await upstream_of(bridge).health()).get("credential_overrides")
    assert sent(seen[0], "Authorization") == [f"Bearer {SECRETS['bearer']}"]
    assert sent(seen[1], "Authorization") == ["Token configured-Secret"]
    for request in seen:  # one Cookie header: the configured cookies, the credential's in place of its name
        assert sent(request, "Cookie") == ["pref=dark; session_key=cookie-Secret"]
    assert overrides == [
        "the configured header authorization is where auth[0]'s credential goes: the credential is sent in the 1 "
        "operation(s) that carry it (GET /private), the configured header in the others"]
    assert overrides[0] in caplog.text
