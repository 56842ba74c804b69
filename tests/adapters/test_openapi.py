"""OpenAPI upstream against real aiohttp servers on loopback: documents (3.0, 3.1, recursive and
cross-file refs, Swagger 2.0 and broken ones), mapping, every parameter style, every body kind,
every credential type, errors, retries, timeouts and secrets, mostly end to end through Bridge."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from adapters.openapi.config import OpenAPIConfig
from adapters.openapi.upstream import OpenAPIUpstream
from bridge.config import parse_config
from bridge.model import BridgeError
from bridge.runtime import Bridge
from bridge.upstream import CallContext
from tests.servers import clear_proxy_environment, forward_proxy, proxy_loopback_too

FIXTURES = Path(__file__).parent / "openapi_fixtures"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
SECRETS = {
    "api": "key-Secret-123",
    "bearer": "bearer-Secret-456",
    "password": "pw-Secret-789",
    "client_secret": "client-Secret-000",
}


# ---------------------------------------------------------------------------- the test API


class Api:
    """State of the test server: what it received, and knobs the tests turn."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.tokens_issued: list[str] = []
        self.revoked: set[str] = set()
        self.token_lifetime = 3600
        self.peers: set[Any] = set()
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_route("*", "/v1/{tail:.*}", self.echo)
        r.add_post("/oauth/token", self.token)
        r.add_get("/auth/{kind}", self.auth)
        r.add_post("/auth/leak", self.leak)
        r.add_route("*", "/flaky/{key}", self.flaky)
        r.add_get("/limited", self.limited)
        r.add_get("/problem", self.problem)
        r.add_get("/slow", self.slow)
        r.add_get("/binary", self.fixed(web.Response, body=PNG, content_type="image/png"))
        r.add_get("/text", self.fixed(web.Response, text="# Read me\nplain text"))
        r.add_get("/numbers", self.fixed(web.json_response, [1, 2, 3]))
        r.add_get("/openapi.yaml", self.fixed(web.FileResponse, FIXTURES / "service_31.yaml"))
        r.add_post("/trees", self.echo_json)
        return app

    @staticmethod
    def fixed(factory: Any, *args: Any, **kwargs: Any) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            return factory(*args, **kwargs)

        return handler

    async def echo(self, request: web.Request) -> web.Response:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        body: Any = None
        ctype = request.headers.get("Content-Type", "")
        if ctype.startswith("multipart/"):
            body = {}
            reader = await request.multipart()
            async for part in reader:
                data = await part.read()
                body.setdefault(part.name, []).append(
                    {
                        "filename": part.filename,
                        "content_type": part.headers.get("Content-Type"),
                        "text": data.decode(errors="replace") if not part.filename else None,
                        "b64": base64.b64encode(data).decode() if part.filename else None,
                    }
                )
        elif ctype.startswith("application/json"):
            body = await request.json()
        elif request.can_read_body:
            raw = await request.read()
            body = (
                raw.decode()
                if ctype.startswith("application/x-www-form")
                else {"size": len(raw), "b64": base64.b64encode(raw).decode()}
            )
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower().startswith("x-") or k in ("Cookie", "Accept", "Content-Type")
        }
        return web.json_response(
            {
                "method": request.method,
                "raw_path": request.raw_path,
                "headers": headers,
                "body": body,
            }
        )

    async def echo_json(self, request: web.Request) -> web.Response:
        return web.json_response(await request.json())

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        expected = "Basic " + base64.b64encode(f"cid:{SECRETS['client_secret']}".encode()).decode()
        if (
            request.headers.get("Authorization") != expected
            or form.get("grant_type") != "client_credentials"
        ):
            return web.json_response({"error": "invalid_client"}, status=401)
        token = f"tok-{len(self.tokens_issued) + 1}-{form.get('scope', '')}"
        self.tokens_issued.append(token)
        return web.json_response(
            {"access_token": token, "token_type": "bearer", "expires_in": self.token_lifetime}
        )

    async def auth(self, request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        auth = request.headers.get("Authorization", "")
        ok = {
            "header": request.headers.get("X-API-Key") == SECRETS["api"],
            "query": request.query.get("api_key") == SECRETS["api"],
            "cookie": request.cookies.get("session_key") == SECRETS["api"],
            "bearer": auth == f"Bearer {SECRETS['bearer']}",
            "basic": auth
            == "Basic " + base64.b64encode(f"ann:{SECRETS['password']}".encode()).decode(),
            "oauth": auth.startswith("Bearer tok-")
            and auth[7:] in self.tokens_issued
            and auth[7:] not in self.revoked,
            "either": auth == f"Bearer {SECRETS['bearer']}"
            or request.headers.get("X-API-Key") == SECRETS["api"],
        }.get(kind, False)
        if not ok:
            return web.json_response(
                {"type": "about:blank", "title": "Unauthorized", "status": 401},
                status=401,
                content_type="application/problem+json",
            )
        who = f"token {self.tokens_issued.index(auth[7:]) + 1}" if kind == "oauth" else kind
        return web.json_response({"ok": True, "who": who})

    async def leak(self, request: web.Request) -> web.Response:
        # a careless server that echoes the credentials it got
        return web.json_response(
            {
                "title": f"bad request from {request.headers.get('X-API-Key')}",
                "detail": request.headers.get("Authorization"),
            },
            status=400,
        )

    async def flaky(self, request: web.Request) -> web.Response:
        key = f"{request.method} {request.match_info['key']}"
        self.hits[key] = self.hits.get(key, 0) + 1
        if self.hits[key] <= int(request.query.get("fail", "0")):
            headers = (
                {"Retry-After": request.query["retry_after"]}
                if "retry_after" in request.query
                else {}
            )
            return web.json_response(
                {"title": "Service Unavailable", "status": 503},
                status=503,
                headers=headers,
                content_type="application/problem+json",
            )
        return web.json_response({"attempts": self.hits[key]})

    async def limited(self, request: web.Request) -> web.Response:
        self.hits["limited"] = self.hits.get("limited", 0) + 1
        return web.json_response(
            {"title": "Too Many Requests"}, status=429, headers={"Retry-After": "7"}
        )

    async def problem(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "type": "https://example.test/problems/invalid-pet",
                "title": "Invalid pet",
                "status": 422,
                "detail": "name must not be empty",
                "errors": [{"pointer": "/name"}],
            },
            status=422,
            content_type="application/problem+json",
        )

    async def slow(self, request: web.Request) -> web.Response:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.release.wait()
        return web.json_response({"late": True})


@pytest.fixture
async def api() -> AsyncIterator[tuple[Api, str]]:
    state = Api()
    server = TestServer(state.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield state, str(server.make_url("")).rstrip("/")
    finally:
        state.release.set()
        await server.close()


@contextlib.asynccontextmanager
async def bridge_for(spec: str, **upstream: Any) -> AsyncIterator[Bridge]:
    entry = {"name": "svc", "kind": "openapi", "spec": spec, **upstream}
    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "search": {"persist": False},
            "surfaces": [{"name": "default", "allow_destructive": True}],
            "upstreams": [entry],
        },
        base_dir=str(FIXTURES),
    )
    bridge = Bridge(config)
    async with asyncio.timeout(20):
        await bridge.start()
    try:
        yield bridge
    finally:
        await bridge.close()


async def call(bridge: Bridge, name: str, args: dict[str, Any] | None = None) -> Any:
    async with asyncio.timeout(20):
        return await bridge.invoker.invoke(f"svc__{name}", args or {})


def upstream_of(bridge: Bridge) -> OpenAPIUpstream:
    up = bridge.catalog.slot("svc").upstream
    assert isinstance(up, OpenAPIUpstream)
    return up


# ---------------------------------------------------------------------------- documents


async def test_openapi_30_document_maps_to_declarations(api):
    _, base = api
    async with bridge_for("styles_30.yaml", base_url=base + "/v1") as bridge:
        assert bridge.catalog.slot("svc").health.state == "ready"
        decl = bridge.catalog.resolve("svc__bodyJson")
        assert decl.tool_kind == "openapi_operation" and decl.tags == ["bodies"]
        schema = decl.input_schema
        assert schema["required"] == ["id", "name"] and schema["additionalProperties"] is False
        # 3.0 dialect rewritten: nullable -> type list, boolean exclusiveMinimum -> number
        assert schema["properties"]["size"] == {"type": ["integer", "null"], "exclusiveMinimum": 0}
        assert schema["properties"]["kind"] == {
            "type": "string",
            "enum": ["small", "large"],
            "default": "small",
        }
        assert "id_readonly" not in schema["properties"]  # readOnly properties are not sent
        mapping = decl.external_mappings[0]
        assert mapping == {
            "source": "openapi",
            "operation_id": "bodyJson",
            "method": "POST",
            "path": "/bodies/json/{id}",
            "server_url": base + "/v1",
            "security_scheme_refs": [],
        }
        # GitHub-style operationIds are cleaned; operations without one are named <method>_<path>
        gh = bridge.catalog.resolve("svc__repos_get-content")
        assert gh.native_id == "repos/get-content" and gh.title == "Get repository content"
        assert gh.annotations["openapi"]["description"].startswith("Gets the contents of a file")
        assert (
            bridge.catalog.resolve("svc__get_items_itemId").description
            == "An item without an operationId"
        )
        assert bridge.catalog.resolve("svc__delete_items_itemId") is not None


async def test_server_variables_used_without_base_url(api):
    _state, base = api
    port = base.rsplit(":", 1)[1]
    async with bridge_for(
        "styles_30.yaml", server_variables={"port": port}, include=["queryForm"]
    ) as bridge:
        result = await call(bridge, "queryForm", {"p": 1})
        assert not result.is_error, result.content
        assert result.structured_content["raw_path"] == "/v1/query/form?p=1"


async def test_a_password_in_base_url_is_sent_but_never_shown(api):
    _, base = api
    with_password = base.replace("http://", "http://ann:url-Secret-1@")
    async with bridge_for("service_31.yaml", base_url=with_password, include=["numbers"]) as bridge:
        decl = bridge.catalog.resolve("svc__numbers")
        assert decl.external_mappings[0]["server_url"] == base  # every caller sees the mappings
        assert (await upstream_of(bridge).health())["servers"] == [base]
        result = await call(bridge, "numbers")
        assert result.structured_content == {"result": [1, 2, 3]}


async def test_openapi_31_document_loaded_from_a_url(api):
    _, base = api
    async with bridge_for(base + "/openapi.yaml", include=["numbers", "readme"]) as bridge:
        decl = bridge.catalog.resolve("svc__numbers")
        assert (
            decl.external_mappings[0]["server_url"] == base
        )  # relative server resolved against the URL
        # a non-object JSON response is wrapped so structured content is always an object
        assert decl.output_schema == {
            "type": "object",
            "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
            "required": ["result"],
        }
        result = await call(bridge, "numbers")
        assert result.structured_content == {"result": [1, 2, 3]}
        text = await call(bridge, "readme")
        assert (
            text.content == [{"type": "text", "text": "# Read me\nplain text"}]
            and text.structured_content is None
        )


async def test_a_server_on_another_loopback_address_is_reached_directly_whatever_the_proxies(
    monkeypatch,
):
    """All of 127.0.0.0/8 is loopback, and `localhost.` (the root's) is `localhost`."""
    from yarl import URL

    from adapters.http.proxy import EnvironmentProxies

    clear_proxy_environment(monkeypatch)
    server = TestServer(Api().app(), host="127.0.0.2")
    await server.start_server()
    base = str(server.make_url("")).rstrip("/")
    try:
        async with forward_proxy() as (proxy, seen):
            monkeypatch.setenv("HTTP_PROXY", proxy)
            async with bridge_for(base + "/openapi.yaml", include=["numbers"]) as bridge:
                assert (await call(bridge, "numbers")).structured_content == {"result": [1, 2, 3]}
            assert seen == []
            routes = EnvironmentProxies()
            direct = (
                "http://127.0.0.2:8/",
                "http://127.9.8.7/",
                "http://localhost./",
                "http://LocalHost:8/",
                "http://[::1]:8/",
            )
            assert [routes.route(URL(u))[0] for u in direct] == [None] * len(direct)
            assert str(routes.route(URL("http://localhost.example/"))[0]) == proxy
            proxy_loopback_too(monkeypatch)
            async with bridge_for(base + "/openapi.yaml", include=["numbers"]) as bridge:
                assert (await call(bridge, "numbers")).structured_content == {"result": [1, 2, 3]}
            assert seen == [f"GET {base}/openapi.yaml", f"GET {base}/numbers"]
    finally:
        await server.close()


async def test_the_document_and_the_calls_go_through_the_environment_proxy_unless_no_proxy_names_the_host(
    api, monkeypatch
):
    _, base = api
    clear_proxy_environment(monkeypatch)
    async with forward_proxy() as (proxy, seen):
        monkeypatch.setenv(
            "http_proxy", f"{proxy.replace('http://', 'http://user:pw-5678@')}"
        )  # either case counts
        async with bridge_for(base + "/openapi.yaml", include=["numbers"]) as bridge:
            assert (await call(bridge, "numbers")).structured_content == {"result": [1, 2, 3]}
        assert seen == []  # a loopback host is reached directly, whatever the proxies
        proxy_loopback_too(monkeypatch)
        async with bridge_for(base + "/openapi.yaml", include=["numbers"]) as bridge:
            assert (await call(bridge, "numbers")).structured_content == {"result": [1, 2, 3]}
        assert seen == [f"GET {base}/openapi.yaml", f"GET {base}/numbers"]
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        seen.clear()
        async with bridge_for(base + "/openapi.yaml", include=["numbers"]) as bridge:
            assert (await call(bridge, "numbers")).structured_content == {"result": [1, 2, 3]}
        assert seen == []
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    monkeypatch.delenv("http_proxy")
    up = OpenAPIUpstream(OpenAPIConfig(name="svc", spec=base + "/openapi.yaml"))
    with pytest.raises(BridgeError, match="is a socks5:// proxy"):
        await up.start()
    await up.close()


async def test_a_document_read_from_a_url_cannot_refer_to_local_files(tmp_path):
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"registry": {"auth": "local-Secret-1"}}))
    leaky = {
        "name": "q",
        "in": "query",
        "schema": {"type": "object", "properties": {"r": {"$ref": local.as_uri() + "#/registry"}}},
    }
    doc = _document(
        {
            "/leak": {"get": {"operationId": "leak", "parameters": [leaky], "responses": _OK}},
            "/fine": {"get": {"operationId": "fine", "responses": _OK}},
        }
    )

    async def document(request: web.Request) -> web.Response:
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/openapi.json", document)
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge_for(
            str(http.make_url("/openapi.json")), base_url=str(http.make_url("")).rstrip("/")
        ) as bridge,
    ):
        assert [d.native_name for d in bridge.catalog.declarations()] == ["fine"]
        skipped = (await upstream_of(bridge).health())["skipped_operations"]
        assert "local files" in json.dumps(skipped)
        dumped = json.dumps([d.to_json() for d in bridge.catalog.declarations()]) + json.dumps(
            skipped
        )
    assert "local-Secret-1" not in dumped


async def test_a_document_read_from_a_url_refers_only_to_documents_on_its_origin(tmp_path):
    inside: list[str] = []

    async def internal(request: web.Request) -> web.Response:  # a service only this host can reach
        inside.append(request.path)
        return web.json_response({"creds": {"type": "string", "default": "internal-Secret-1"}})

    other = web.Application()
    other.router.add_get("/meta.json", internal)
    async with TestServer(other, host="127.0.0.1") as elsewhere:

        def param(name: str, ref: str) -> dict[str, Any]:
            return {"name": name, "in": "query", "schema": {"$ref": ref}}

        doc = _document(
            {
                "/far": {
                    "get": {
                        "operationId": "far",
                        "parameters": [
                            param("c", str(elsewhere.make_url("/meta.json")) + "#/creds")
                        ],
                        "responses": _OK,
                    }
                },
                "/hop": {
                    "get": {
                        "operationId": "hop",
                        "parameters": [param("c", "/hop.json#/creds")],
                        "responses": _OK,
                    }
                },
                "/near": {
                    "get": {
                        "operationId": "near",
                        "parameters": [param("n", "/shared.json#/name")],
                        "responses": _OK,
                    }
                },
            }
        )

        async def document(request: web.Request) -> web.Response:
            return web.json_response(doc)

        async def shared(request: web.Request) -> web.Response:
            return web.json_response({"name": {"type": "string", "maxLength": 9}})

        async def hop(request: web.Request) -> web.Response:  # same origin, then a redirect away
            raise web.HTTPFound(str(elsewhere.make_url("/meta.json")))

        app = web.Application()
        app.router.add_get("/openapi.json", document)
        app.router.add_get("/shared.json", shared)
        app.router.add_get("/hop.json", hop)
        async with (
            TestServer(app, host="127.0.0.1") as http,
            bridge_for(
                str(http.make_url("/openapi.json")), base_url=str(http.make_url("")).rstrip("/")
            ) as bridge,
        ):
            near = bridge.catalog.resolve("svc__near")
            assert (
                near is not None and near.input_schema["properties"]["n"]["maxLength"] == 9
            )  # its own origin: read
            assert sorted(d.native_name for d in bridge.catalog.declarations()) == ["near"]
            skipped = json.dumps((await upstream_of(bridge).health())["skipped_operations"])
            assert (
                "only to documents on its own origin" in skipped
                and "redirects to another origin" in skipped
            )
            dumped = json.dumps([d.to_json() for d in bridge.catalog.declarations()])
    assert inside == [] and "internal-Secret-1" not in dumped + skipped


async def test_referenced_documents_go_through_the_proxy_the_calls_do(monkeypatch):
    # a `$ref` to another document of the API's origin is fetched as the document itself is:
    # a loopback host directly, ALL_PROXY for a scheme without its own, NO_PROXY honoured
    seen_auth: list[str | None] = []
    doc = _document(
        {
            "/near": {
                "get": {
                    "operationId": "near",
                    "responses": _OK,
                    "parameters": [
                        {"name": "n", "in": "query", "schema": {"$ref": "/hop.json#/name"}}
                    ],
                }
            }
        }
    )

    async def document(request: web.Request) -> web.Response:
        return web.json_response(doc)

    async def hop(request: web.Request) -> web.Response:  # a redirect within the origin
        raise web.HTTPFound("/shared.json")

    async def shared(request: web.Request) -> web.Response:
        seen_auth.append(request.headers.get("Proxy-Authorization"))
        return web.json_response({"name": {"type": "string", "maxLength": 9}})

    app = web.Application()
    app.router.add_get("/openapi.json", document)
    app.router.add_get("/hop.json", hop)
    app.router.add_get("/shared.json", shared)
    clear_proxy_environment(monkeypatch)

    async def loaded(http: TestServer) -> None:
        async with bridge_for(
            str(http.make_url("/openapi.json")), base_url=str(http.make_url("")).rstrip("/")
        ) as bridge:
            near = bridge.catalog.resolve("svc__near")
            assert near is not None and near.input_schema["properties"]["n"]["maxLength"] == 9

    async with TestServer(app, host="127.0.0.1") as http, forward_proxy() as (proxy, seen):
        base = str(http.make_url("")).rstrip("/")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        await loaded(http)
        assert seen == []  # a loopback host is reached directly, whatever the proxies
        proxy_loopback_too(monkeypatch)
        monkeypatch.delenv("HTTP_PROXY")
        monkeypatch.setenv("ALL_PROXY", proxy.replace("http://", "http://user:pw-5678@"))
        await loaded(http)
        assert seen == [
            f"GET {base}/openapi.json",
            f"GET {base}/hop.json",
            f"GET {base}/shared.json",
        ]
        assert (
            seen_auth[-1] == "Basic " + base64.b64encode(b"user:pw-5678").decode()
        )  # the proxy's own credentials
        seen.clear()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        await loaded(http)
        assert seen == []


async def test_a_referenced_https_document_is_not_tunnelled_unencrypted_through_an_https_proxy(
    tmp_path, monkeypatch
):
    clear_proxy_environment(monkeypatch)
    proxy_loopback_too(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "https://user:pw-5678@127.0.0.1:9")
    doc = _document(
        {
            "/far": {
                "get": {
                    "operationId": "far",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "n",
                            "in": "query",
                            "schema": {"$ref": "https://127.0.0.1:9/shared.json#/name"},
                        }
                    ],
                }
            },
            "/fine": {"get": {"operationId": "fine", "responses": _OK}},
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url="http://127.0.0.1:1") as bridge:
        assert [d.native_name for d in bridge.catalog.declarations()] == ["fine"]
        skipped = json.dumps((await upstream_of(bridge).health())["skipped_operations"])
    assert (
        "cannot be fetched through the https:// proxy https://127.0.0.1:9 " in skipped
        and "pw-5678" not in skipped
    )


async def test_recursive_and_cross_file_refs_resolve_without_hanging(api):
    _, base = api
    async with asyncio.timeout(10), bridge_for("recursive_31.yaml", base_url=base) as bridge:
        tree = bridge.catalog.resolve("svc__plantTree")
        schema = tree.input_schema
        node = schema["$defs"]["Node"]
        assert node["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
        # the recursive body is inlined once at the top; its children refer to the definition
        assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
        assert schema["required"] == ["name"]
        nested = {"name": "root", "children": [{"name": "a", "children": [{"name": "b"}]}]}
        jsonschema.Draft202012Validator(schema).validate(nested)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(schema).validate(
                {"name": "x", "children": [{"name": 1}]}
            )
        # a cycle through two files (Person -> Company -> Person) and a local self-reference
        people = bridge.catalog.resolve("svc__addPerson")
        defs = people.input_schema["$defs"]
        assert set(defs) >= {"Person", "Category"}
        jsonschema.Draft202012Validator(people.input_schema).validate(
            {
                "person": {
                    "name": "ann",
                    "employer": {"title": "acme", "employees": [{"name": "bob"}]},
                },
                "category": {"label": "x", "parent": {"label": "y"}},
            }
        )
        out = people.output_schema
        assert out["properties"]["employees"]["items"]["properties"]["employer"] == {
            "$ref": "#/$defs/Company"
        }
        jsonschema.Draft202012Validator(out).validate(
            {"title": "a", "employees": [{"employer": {"employees": []}}]}
        )
        # a path item in another file, whose own references are relative to that file
        person = bridge.catalog.resolve("svc__getPerson")
        assert person.input_schema["properties"]["id"] == {"type": "integer", "minimum": 1}
        assert person.output_schema["properties"]["employer"] == {"$ref": "#/$defs/Company"}
        jsonschema.Draft202012Validator(person.output_schema).validate(
            {
                "name": "ann",
                "employer": {"employees": [{"name": "bob", "employer": {"title": "x"}}]},
            }
        )
        result = await call(bridge, "plantTree", nested)
        assert result.structured_content == nested


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("swagger_20.yaml", ["Swagger 2.0", "OpenAPI 3.0 and 3.1", "$.swagger"]),
        ("broken_yaml.yaml", ["not valid YAML", "line 6"]),
        (
            "invalid_30.yaml",
            ["not a valid OpenAPI 3.0 document", "$.paths['/pets'].get.parameters[0]"],
        ),
        (
            "dangling_ref_31.yaml",
            [
                "'#/components/schemas/Missing' cannot be resolved",
                "$.paths['/pets'].get.responses['200']",
            ],
        ),
        ("missing.yaml", ["file not found"]),
    ],
)
async def test_unusable_documents_fail_with_located_messages(fixture, expected):
    upstream = OpenAPIUpstream(
        OpenAPIConfig(
            name="bad", spec=fixture, base_url="http://127.0.0.1:1", base_dir=str(FIXTURES)
        )
    )
    with pytest.raises(BridgeError) as info:
        async with asyncio.timeout(10):
            await upstream.start()
    assert info.value.error_class == "setup_required"
    for part in expected:
        assert part in info.value.message, info.value.message
    await upstream.close()


async def test_broken_document_reported_in_catalog_health():
    async with bridge_for("swagger_20.yaml", retry_initial=30) as bridge:
        health = bridge.catalog.slot("svc").health
        assert health.state == "failed" and "Swagger 2.0" in health.reason


async def test_relative_server_in_a_file_needs_base_url():
    upstream = OpenAPIUpstream(
        OpenAPIConfig(name="rel", spec="service_31.yaml", base_dir=str(FIXTURES))
    )
    with pytest.raises(BridgeError, match=r"relative.*set `base_url`"):
        await upstream.start()
    await upstream.close()


def _document(paths: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths, **extra}


def _write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "api.json"
    path.write_text(json.dumps(doc))
    return str(path)


async def _load_error(spec: str, **config: Any) -> BridgeError:
    upstream = OpenAPIUpstream(
        OpenAPIConfig(name="bad", spec=spec, **{"base_url": "http://127.0.0.1:1", **config})
    )
    try:
        with pytest.raises(BridgeError) as info:
            async with asyncio.timeout(10):
                await upstream.start()
    finally:
        await upstream.close()
    assert info.value.error_class == "setup_required"
    return info.value


_OK = {"200": {"description": "ok"}}


async def test_a_referenced_document_whose_aliases_expand_past_reason_leaves_its_operation_out(
    tmp_path,
):
    lines = ["x-a: &a [" + ", ".join(["lol"] * 9) + "]"]
    lines += [
        f"x-{b}: &{b} [" + ", ".join([f"*{a}"] * 9) + "]"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\nname: {type: string}\n")
    doc = _document(
        {
            "/far": {
                "get": {
                    "operationId": "far",
                    "responses": _OK,
                    "parameters": [
                        {"name": "n", "in": "query", "schema": {"$ref": "bomb.yaml#/name"}}
                    ],
                }
            },
            "/fine": {"get": {"operationId": "fine", "responses": _OK}},
        }
    )
    async with (
        asyncio.timeout(10),
        bridge_for(_write(tmp_path, doc), base_url="http://127.0.0.1:1") as bridge,
    ):
        assert [d.native_name for d in bridge.catalog.declarations()] == ["fine"]
        assert "expands to more than 10,000,000 values" in json.dumps(
            (await upstream_of(bridge).health())["skipped_operations"]
        )


async def test_a_document_fetched_from_a_url_is_read_up_to_its_limit(monkeypatch):
    import adapters.openapi.spec

    monkeypatch.setattr(adapters.openapi.spec, "MAX_DOCUMENT_BYTES", 1 << 20)

    async def endless(
        request: web.Request,
    ) -> web.StreamResponse:  # no length: counted as it arrives
        response = web.StreamResponse(headers={"Content-Type": "application/yaml"})
        await response.prepare(request)
        await response.write(b"openapi: 3.1.0\nx-pad: '")
        for _ in range(64):
            await response.write(b"x" * 65_536)
        return response

    app = web.Application()
    app.router.add_get("/spec.yaml", endless)
    async with TestServer(app, host="127.0.0.1") as http:
        error = await _load_error(str(http.make_url("/spec.yaml")))
    assert "is larger than 1 MiB" in error.message


async def test_a_document_whose_yaml_aliases_expand_past_reason_is_refused_at_once(tmp_path):
    # nine levels of aliases of aliases: 13 lines that expand to 387 million values (they once
    # took 38 s and 4 GB before failing)
    lines = [
        "openapi: 3.1.0",
        "info: {title: t, version: '1'}",
        "paths: {}",
        "x-a: &a [" + ", ".join(["lol"] * 9) + "]",
    ]
    lines += [
        f"x-{b}: &{b} [" + ", ".join([f"*{a}"] * 9) + "]"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    error = await _load_error(str(tmp_path / "bomb.yaml"))
    assert "expands to more than 10,000,000 values" in error.message


_PARAM_LOOP = _document(
    {
        "/a": {
            "get": {
                "operationId": "a",
                "parameters": [{"$ref": "#/components/parameters/p"}],
                "responses": _OK,
            }
        }
    },
    components={"parameters": {"p": {"$ref": "#/components/parameters/p"}}},
)


def _schema_loop(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return _document(
        {
            "/a": {
                "get": {
                    "operationId": "a",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/A"}}
                    ],
                    "responses": _OK,
                }
            }
        },
        components={"schemas": {"A": a, "B": b}},
    )


_PURE_LOOP = _schema_loop({"$ref": "#/components/schemas/B"}, {"$ref": "#/components/schemas/A"})
_ALLOF_LOOP = _schema_loop(
    {"allOf": [{"$ref": "#/components/schemas/B"}]},
    {"anyOf": [{"type": "null"}, {"$ref": "#/components/schemas/A"}]},
)
# A reaches B through a property first (fine), then through allOf -> C -> B -> A (no value ends it)
_HIDDEN_LOOP = _document(
    {
        "/a": {
            "get": {
                "operationId": "a",
                "parameters": [
                    {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/A"}}
                ],
                "responses": _OK,
            }
        }
    },
    components={
        "schemas": {
            "A": {
                "properties": {"x": {"$ref": "#/components/schemas/B"}},
                "allOf": [{"$ref": "#/components/schemas/C"}],
            },
            "B": {"allOf": [{"$ref": "#/components/schemas/A"}]},
            "C": {"allOf": [{"$ref": "#/components/schemas/B"}]},
        }
    },
)


@pytest.mark.parametrize(
    ("doc", "validate", "expected"),
    [
        (
            _PARAM_LOOP,
            "auto",
            [
                "$.components.parameters.p",
                "$ref cycle #/components/parameters/p -> #/components/parameters/p",
                "validate_spec: off",
            ],
        ),
        (_PARAM_LOOP, "off", ["$.paths['/a'].get.parameters[0]", "refers to itself"]),
        (
            _PURE_LOOP,
            "auto",
            [
                "$ref cycle #/components/schemas/B -> #/components/schemas/A -> #/components/schemas/B",
                "only a reference",
            ],
        ),
        (
            _PURE_LOOP,
            "off",
            [
                "$.paths['/a'].get.parameters[0].schema",
                "$ref cycle #/components/schemas/B -> #/components/schemas/A -> #/components/schemas/B",
                "never reaches a concrete schema",
                "`exclude`",
            ],
        ),
        (
            _ALLOF_LOOP,
            "auto",
            [
                "$.components.schemas.A.allOf[0]",
                "$ref cycle #/components/schemas/A -> #/components/schemas/B -> #/components/schemas/A",
            ],
        ),
        (
            _ALLOF_LOOP,
            "off",
            ["$.paths['/a'].get.parameters[0].schema", "never reaches a concrete schema"],
        ),
        (_HIDDEN_LOOP, "off", [" -> ".join(f"#/components/schemas/{n}" for n in "CBAC")]),
    ],
    ids=[
        "param-validated",
        "param",
        "schema-validated",
        "schema",
        "allOf-validated",
        "allOf",
        "allOf-behind-a-property",
    ],
)
async def test_ref_cycles_without_a_schema_are_located_load_errors(
    tmp_path, doc, validate, expected
):
    error = await _load_error(_write(tmp_path, doc), validate_spec=validate)
    for part in expected:
        assert part in error.message, error.message
    assert "recursion" not in error.message


@pytest.mark.parametrize("validate", ["auto", "off"])
async def test_31_schemas_written_in_an_older_draft_are_read(api, tmp_path, validate):
    _, base = api
    draft4 = {
        "type": "number",
        "minimum": 10,
        "maximum": 20,
        "exclusiveMinimum": True,
        "exclusiveMaximum": True,
        "default": 12,
    }
    own = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "integer",
        "minimum": 0,
        "exclusiveMaximum": False,
        "maximum": 5,
    }
    doc = _document(
        {
            "/v1/n": {
                "get": {
                    "operationId": "n",
                    "parameters": [
                        {"name": "a", "in": "query", "required": True, "schema": draft4},
                        {"name": "b", "in": "query", "schema": own},
                    ],
                    "responses": _OK,
                }
            }
        },
        jsonSchemaDialect="http://json-schema.org/draft-04/schema#",
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base, validate_spec=validate) as bridge:
        schema = bridge.catalog.resolve("svc__n").input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["a"] == {
            "type": "number",
            "exclusiveMinimum": 10,
            "exclusiveMaximum": 20,
            "default": 12,
        }
        assert schema["properties"]["b"] == {"type": "integer", "minimum": 0, "maximum": 5}
        refused = await call(bridge, "n", {"a": 20})
        assert refused.is_error and refused.to_json()["error"]["error_class"] == "invalid_arguments"
        result = await call(bridge, "n", {"a": 12, "b": 5})
        assert not result.is_error, result.content
        assert result.structured_content["raw_path"] == "/v1/n?a=12&b=5"


async def test_30_operations_without_responses_are_read(api, tmp_path):
    """OpenAPI 3.0 asks each operation for at least one response (3.1 does not); a call needs
    none, and the validator refused the whole document."""
    _, base = api
    doc = _document(
        {
            "/v1/a": {
                "post": {"operationId": "empty", "responses": {}},
                "get": {"operationId": "none"},
            }
        },
        openapi="3.0.3",
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
        assert bridge.catalog.slot("svc").health.state == "ready", bridge.catalog.slot(
            "svc"
        ).health.reason
        for name in ("empty", "none"):
            result = await call(bridge, name)
            assert not result.is_error, result.content
            assert bridge.catalog.resolve(f"svc__{name}").output_schema is None


async def test_recursion_too_deep_for_the_validator_is_reported_with_its_fix(tmp_path):
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(400):
        deep = {"allOf": [deep]}
    doc = _document(
        {
            "/a": {
                "get": {
                    "operationId": "a",
                    "parameters": [{"name": "q", "in": "query", "schema": deep}],
                    "responses": _OK,
                }
            }
        }
    )
    error = await _load_error(_write(tmp_path, doc), validate_spec="full")
    assert (
        "not a valid OpenAPI 3.1 document" in error.message
        and "`validate_spec: off`" in error.message
    )


@pytest.mark.parametrize(
    ("param", "validate", "expected"),
    [
        (
            {"name": "p", "in": ["query"]},
            "auto",
            ["$.paths['/a'].get.parameters[0].in", "is not one of"],
        ),
        (
            {"name": "p", "in": ["query"]},
            "off",
            ["$.paths['/a'].get.parameters[0]", "`in` must be path, query, header or cookie"],
        ),
        (
            {"name": "p", "in": "query", "content": {"application/json": "oops"}},
            "off",
            [
                "$.paths['/a'].get.parameters[0]",
                "`content['application/json']` must be a media type object",
            ],
        ),
    ],
    ids=["in-list-validated", "in-list", "content-string"],
)
async def test_values_of_the_wrong_type_name_operation_and_field(
    tmp_path, param, validate, expected
):
    doc = _document({"/a": {"get": {"operationId": "a", "parameters": [param], "responses": _OK}}})
    error = await _load_error(_write(tmp_path, doc), validate_spec=validate)
    for part in expected:
        assert part in error.message, error.message


async def test_other_malformed_values_name_the_operation(tmp_path):
    body = {
        "content": {
            "application/json": {
                "schema": {"type": "object", "properties": {"a": {}}, "required": 5}
            }
        },
        "required": True,
    }
    doc = _document(
        {"/a": {"post": {"operationId": "a", "requestBody": body, "responses": _OK}}},
        servers=[{"url": "http://127.0.0.1:1/{v}", "variables": [1]}],
    )
    error = await _load_error(_write(tmp_path, doc), validate_spec="off")
    assert (
        "$.paths['/a'].post" in error.message and "POST /a has a malformed field" in error.message
    ), error.message
    doc["paths"] = {"/a": {"get": {"operationId": "a", "tags": "billing", "responses": _OK}}}
    error = await _load_error(_write(tmp_path, doc), validate_spec="off", base_url=None)
    assert (
        "`servers[0].variables` must be an object" in error.message
        and "$.paths['/a'].get" in error.message
    )


async def test_ecma_patterns_python_cannot_compile_are_left_to_the_server(api, tmp_path):
    """AWS documents write `pattern: '^[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*$'` (ECMA-262 Unicode
    properties): the validator refused the whole document, and in a larger one (not validated)
    the schema was no valid JSON Schema and every argument of the tool went unchecked."""
    _, base = api
    tag = {
        "type": "string",
        "pattern": r"^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$",
        "description": "A tag key.",
    }
    doc = _document(
        {
            "/v1/tags": {
                "post": {
                    "operationId": "tag",
                    "responses": _OK,
                    "parameters": [
                        {"name": "key", "in": "query", "required": True, "schema": tag},
                        {
                            "name": "email",
                            "in": "query",
                            "schema": {"type": "string", "pattern": r"^[\w-.+]+@[\w-.+]+$"},
                        },
                        {
                            "name": "code",
                            "in": "query",
                            "schema": {"type": "string", "pattern": "^[A-Z]{3}$"},
                        },
                    ],
                }
            }
        }
    )
    for validate in ("full", "off"):
        async with bridge_for(
            _write(tmp_path, doc), base_url=base, validate_spec=validate
        ) as bridge:
            decl = bridge.catalog.resolve("svc__tag")
            assert decl is not None, bridge.catalog.slot("svc").health.reason
            props = decl.input_schema["properties"]
            jsonschema.Draft202012Validator.check_schema(decl.input_schema)
            assert props["key"] == {
                "type": "string",
                "description": (
                    r"A tag key. (pattern (ECMA-262, not checked by the bridge): ^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$)"
                ),
            }
            assert "pattern" not in props["email"] and props["code"]["pattern"] == "^[A-Z]{3}$"
            result = await call(bridge, "tag", {"key": "Größe", "code": "ABC"})
            assert not result.is_error and result.structured_content["raw_path"].startswith(
                "/v1/tags?key=Gr"
            )
            refused = await call(
                bridge, "tag", {"key": "k", "code": "abc"}
            )  # the arguments are still checked
            assert refused.is_error and refused.error.error_class == "invalid_arguments"


async def test_a_default_of_the_wrong_type_is_named_where_it_is(tmp_path):
    """openapi-spec-validator checks each schema on its own: its message said only `$: '100' is not of type 'integer'`."""
    doc = _document(
        {
            "/m": {
                "get": {
                    "operationId": "m",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "default": "100"},
                        }
                    ],
                }
            }
        },
        components={
            "schemas": {
                "Flag": {
                    "type": "object",
                    "properties": {"on": {"type": "boolean", "default": "false"}},
                }
            }
        },
    )
    error = await _load_error(_write(tmp_path, doc), validate_spec="full")
    assert (
        "$.paths['/m'].get.parameters[0].schema.default: '100' is not of type 'integer'"
        in error.message
    ), error.message
    assert (
        "$.components.schemas.Flag.properties.on.default: 'false' is not of type 'boolean'"
        in error.message
    )
    assert "`validate_spec: off`" in error.message
    # the fix before the problems: the catalog shows a reason up to 500 characters
    assert error.message.index("validate_spec: off") < error.message.index("$.paths")


async def test_auto_validation_loads_a_document_with_problems_it_can_read_past(
    api, tmp_path, caplog
):
    """`validate_spec: auto` validated documents up to 256 KB and refused one for a wrong `default`
    that a larger document was loaded with. A wrong default, duplicate enum values and a `required`
    naming an undefined property are warned about; a document they make unusable is still refused."""
    _state, base = api
    doc = _document(
        {
            "/items": {
                "get": {
                    "operationId": "list",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "default": "100"},
                        },
                        {
                            "name": "color",
                            "in": "query",
                            "schema": {"type": "string", "enum": ["red", "red", "blue"]},
                        },
                        {
                            "name": "filter",
                            "in": "query",
                            "style": "deepObject",
                            "schema": {
                                "type": "object",
                                "required": ["on"],
                                "allOf": [{"type": "object"}],
                            },
                        },
                    ],
                }
            }
        }
    )
    doc["openapi"] = "3.0.3"
    spec = _write(tmp_path, doc)
    with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
        async with bridge_for(spec, base_url=base + "/v1") as bridge:
            health = await upstream_of(bridge).health()
            assert health["spec_problem_count"] == 3
            assert health["spec_problems_tolerated"] == [
                "$.paths['/items'].get.parameters[0].schema.default: '100' is not of type 'integer'",
                "$.paths['/items'].get.parameters[1].schema.enum: ['red', 'red', 'blue'] has non-unique elements",
                "$.paths['/items'].get.parameters[2].schema: Required list has not defined properties: ['on']",
            ]
            props = bridge.catalog.resolve("svc__list").input_schema["properties"]
            assert props["color"]["enum"] == ["red", "blue"]
            result = await call(bridge, "list", {"limit": 5, "color": "red", "filter": {"on": "x"}})
            assert (
                result.structured_content["raw_path"] == "/v1/items?limit=5&color=red&filter[on]=x"
            ), result.content
    assert (
        "is read despite 3 validation problem(s)" in caplog.text
        and "parameters[0].schema.default" in caplog.text
    )
    error = await _load_error(spec, validate_spec="full")  # `full` refuses them as before
    assert (
        "not a valid OpenAPI 3.0 document" in error.message
        and "has non-unique elements" in error.message
    )
    doc["paths"]["/items"]["get"]["parameters"].append(
        {"name": "page", "in": "query"}
    )  # no schema: unusable
    error = await _load_error(_write(tmp_path, doc))
    assert "parameters[3]" in error.message and "default" not in error.message, error.message


@pytest.mark.parametrize("validate", ["full", "off"])
async def test_extensions_of_the_paths_object_are_no_paths(api, tmp_path, validate):
    """Apicurio's registry document has `paths: {x-codegen-contextRoot: /apis/registry/v2, ...}`:
    read as a path item, it failed the whole document (`a path item must be an object`)."""
    _, base = api
    doc = _document(
        {
            "x-codegen-contextRoot": "/apis/registry/v2",
            "x-owner": {"team": "a"},
            "/items": {"get": {"operationId": "listItems", "responses": _OK}},
        }
    )
    async with bridge_for(
        _write(tmp_path, doc), base_url=base + "/v1", validate_spec=validate
    ) as bridge:
        assert [d.native_id for d in bridge.catalog.declarations()] == ["listItems"]
        assert "skipped_operations" not in await upstream_of(bridge).health()


async def test_parameters_that_clean_to_one_name_keep_a_property_each(api, tmp_path):
    """Twilio filters by `StartTime`, `StartTime<` and `StartTime>`: the last two both cleaned to
    `query_StartTime`, so one property held both and its value was sent as each."""
    _, base = api
    date = {"type": "string", "format": "date-time"}
    doc = _document(
        {
            "/calls": {
                "get": {
                    "operationId": "listCalls",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "StartTime",
                            "in": "query",
                            "schema": date,
                            "description": "Calls started on this date.",
                        },
                        {
                            "name": "StartTime<",
                            "in": "query",
                            "schema": date,
                            "description": "Calls started on or before this date.",
                        },
                        {"name": "StartTime>", "in": "query", "schema": date},
                        {"name": "query_StartTime_3", "in": "query", "schema": {"type": "string"}},
                    ],
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        props = bridge.catalog.resolve("svc__listCalls").input_schema["properties"]
        assert list(props) == [
            "StartTime",
            "query_StartTime",
            "query_StartTime_2",
            "query_StartTime_3",
        ]
        assert (
            props["query_StartTime"]["description"]
            == "Calls started on or before this date. (the query parameter StartTime<)"
        )
        assert props["query_StartTime_2"]["description"] == "the query parameter StartTime>"
        result = await call(
            bridge,
            "listCalls",
            {"StartTime": "a", "query_StartTime": "b", "query_StartTime_2": "c"},
        )
        assert (
            result.structured_content["raw_path"]
            == "/v1/calls?StartTime=a&StartTime%3C=b&StartTime%3E=c"
        )


async def test_nullable_beside_a_ref_or_a_combinator_accepts_null(tmp_path):
    """`{$ref: Person, nullable: true}` is how OpenAPI 3.0 documents say "a Person or null" (1,045
    times in 39 documents of APIs.guru's directory): the `nullable` was dropped, and the output
    schema refused the null answers of the API it describes."""
    person = {"type": "object", "properties": {"name": {"type": "string"}}}
    status = {"type": "string", "enum": ["open", "closed"]}
    pet = {
        "type": "object",
        "properties": {
            "owner": {"$ref": "#/components/schemas/Person", "nullable": True},
            "status": {
                "$ref": "#/components/schemas/Status",
                "nullable": True,
                "description": "The pet's status.",
            },
            "previous": {"allOf": [{"$ref": "#/components/schemas/Person"}], "nullable": True},
            "kept": {"$ref": "#/components/schemas/Status"},
        },
    }
    doc = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "components": {"schemas": {"Person": person, "Status": status, "Pet": pet}},
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "getPet",
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "schema": {"$ref": "#/components/schemas/Status", "nullable": True},
                        }
                    ],
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}
                            },
                        }
                    },
                }
            }
        },
    }
    async with bridge_for(_write(tmp_path, doc), base_url="http://127.0.0.1:1") as bridge:
        decl = bridge.catalog.resolve("svc__getPet")
        output = jsonschema.Draft202012Validator(decl.output_schema)
        assert output.is_valid({"owner": None, "status": None, "previous": None, "kept": "open"})
        assert output.is_valid(
            {"owner": {"name": "ann"}, "status": "open", "previous": {"name": "bob"}}
        )
        assert (
            not output.is_valid({"owner": 5})
            and not output.is_valid({"status": "lost"})
            and not output.is_valid({"kept": None})
        )
        props = decl.output_schema["properties"]
        assert props["status"] == {
            "type": ["string", "null"],
            "enum": ["open", "closed", None],
            "description": "The pet's status.",
        }
        assert props["previous"] == {"anyOf": [{"allOf": [person]}, {"type": "null"}]}
        assert jsonschema.Draft202012Validator(decl.input_schema).is_valid({"status": None})


async def test_form_bodies_described_as_no_object_are_sent_as_the_schema_says(api, tmp_path):
    """Jira's attachments are a multipart body given as one binary string, LibreTranslate's forms
    as a string, Codat's as `{}`: the tools accepted a string, and every call was then refused
    (`a multipart body must be an object`). 27 operations of 10 documents in APIs.guru's directory."""
    _, base = api

    def body(media_type: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"required": True, "content": {media_type: {"schema": schema}}}

    doc = _document(
        {
            "/attach": {
                "post": {
                    "operationId": "attach",
                    "responses": _OK,
                    "requestBody": body(
                        "multipart/form-data", {"type": "string", "format": "binary"}
                    ),
                }
            },
            "/detect": {
                "post": {
                    "operationId": "detect",
                    "responses": _OK,
                    "requestBody": body(
                        "application/x-www-form-urlencoded", {"type": "string", "example": "es"}
                    ),
                }
            },
            "/upload": {
                "post": {
                    "operationId": "upload",
                    "responses": _OK,
                    "requestBody": body("multipart/form-data", {}),
                }
            },
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        schema = bridge.catalog.resolve("svc__attach").input_schema["properties"]["body"]
        assert schema == {
            "type": "string",
            "contentEncoding": "base64",
            "description": "the file (base64-encoded; sent as the multipart part `file`)",
        }
        sent = (
            await call(bridge, "attach", {"body": base64.b64encode(b"hello").decode()})
        ).structured_content
        assert sent["body"] == {
            "file": [
                {
                    "filename": "file",
                    "content_type": "application/octet-stream",
                    "text": None,
                    "b64": base64.b64encode(b"hello").decode(),
                }
            ]
        }
        assert (
            bridge.catalog.resolve("svc__detect").input_schema["properties"]["body"]["type"]
            == "object"
        )
        assert (await call(bridge, "detect", {"body": {"q": "hola mundo"}})).structured_content[
            "body"
        ] == "q=hola%20mundo"
        assert bridge.catalog.resolve("svc__upload").input_schema["properties"]["body"] == {
            "type": "object",
            "description": "the form's fields, by name",
            "properties": {},
        }
        sent = (await call(bridge, "upload", {"body": {"note": "x"}})).structured_content
        assert sent["body"]["note"][0]["text"] == "x"


async def test_a_type_json_schema_does_not_know_is_left_out(tmp_path):
    """Cloudmersive wrote `{$ref: FormDefinitionTemplate, type: application/json}`, Codat a schema
    under `type`: copied into the tool, they made its schema invalid (no provider takes it, and the
    bridge could check none of its arguments)."""
    doc = {
        "openapi": "3.0.1",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/ocr": {
                "post": {
                    "operationId": "recognize",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "template",
                            "in": "header",
                            "schema": {
                                "$ref": "#/components/schemas/Template",
                                "type": "application/json",
                            },
                        },
                        {
                            "name": "kind",
                            "in": "query",
                            "schema": {"type": {"type": "string", "enum": ["a", "b"]}},
                        },
                        {
                            "name": "count",
                            "in": "query",
                            "required": True,
                            "schema": {"type": ["integer", "null"]},
                        },
                    ],
                }
            }
        },
        "components": {
            "schemas": {"Template": {"type": "object", "properties": {"name": {"type": "string"}}}}
        },
    }
    async with bridge_for(
        _write(tmp_path, doc), base_url="http://127.0.0.1:1", validate_spec="off"
    ) as bridge:
        schema = bridge.catalog.resolve("svc__recognize").input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["template"] == {
            "type": "object",
            "properties": {"name": {"type": "string"}},
        }
        assert schema["properties"]["kind"] == {} and schema["properties"]["count"] == {
            "type": ["integer", "null"]
        }
        refused = await call(bridge, "recognize", {"count": "many"})  # the arguments are checked
        assert refused.is_error and refused.error.error_class == "invalid_arguments"


async def test_a_large_schema_used_many_times_is_written_once(api, tmp_path):
    """DocuSign's envelope schemas use each large tab schema dozens of times: inlined at every
    use, one tool's input schema was 60 MB written out, and the upstream did not start within
    its start_timeout."""
    _, base = api
    tab = {
        "type": "object",
        "properties": {
            f"field{i}": {"type": "string", "description": f"Field {i}."} for i in range(200)
        },
    }
    tabs = {
        "type": "object",
        "properties": {
            f"kind{i}": {"type": "array", "items": {"$ref": "#/components/schemas/Tab"}}
            for i in range(30)
        },
    }
    doc = _document(
        {
            "/tabs": {
                "post": {
                    "operationId": "putTabs",
                    "responses": _OK,
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "tabs": {"$ref": "#/components/schemas/Tabs"},
                                        "note": {"$ref": "#/components/schemas/Note"},
                                    },
                                }
                            }
                        }
                    },
                }
            }
        },
        components={
            "schemas": {"Tab": tab, "Tabs": tabs, "Note": {"type": "string", "maxLength": 10}}
        },
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        schema = bridge.catalog.resolve("svc__putTabs").input_schema
        assert len(json.dumps(schema)) < 2 * len(json.dumps(tab))
        assert schema["$defs"] == {"Tab": tab}
        assert schema["properties"]["tabs"]["properties"]["kind3"] == {
            "type": "array",
            "items": {"$ref": "#/$defs/Tab"},
        }
        assert schema["properties"]["note"] == {
            "type": "string",
            "maxLength": 10,
        }  # a small one is inlined
        sent = await call(bridge, "putTabs", {"tabs": {"kind0": [{"field1": "a"}]}, "note": "n"})
        assert sent.structured_content["body"] == {
            "tabs": {"kind0": [{"field1": "a"}]},
            "note": "n",
        }
        refused = await call(bridge, "putTabs", {"tabs": {"kind0": [{"field1": 5}]}})
        assert refused.is_error and refused.error.error_class == "invalid_arguments"


async def test_an_operation_that_cannot_be_mapped_is_left_out_and_named_in_health(
    api, tmp_path, caplog
):
    _, base = api
    doc = _document(
        {
            "/echo": {"post": {"operationId": "echo", "responses": _OK}},
            "/bad": {
                "post": {
                    "operationId": "bad",
                    "responses": _OK,
                    "parameters": [{"name": "p", "in": ["query"]}],
                }
            },
            "/loop": {
                "get": {
                    "operationId": "loop",
                    "responses": _OK,
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/A"}}
                    ],
                }
            },
            # a path template whose {y} no parameter declares would be sent as written
            "/e/{x}/{y}": {
                "get": {
                    "operationId": "templated",
                    "responses": _OK,
                    "parameters": [
                        {"name": "x", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                }
            },
        },
        components={
            "schemas": {
                "A": {"$ref": "#/components/schemas/B"},
                "B": {"$ref": "#/components/schemas/A"},
            }
        },
    )
    spec = _write(tmp_path, doc)
    async with bridge_for(spec, base_url=base + "/v1", validate_spec="off") as bridge:
        assert [d.native_id for d in bridge.catalog.declarations()] == ["echo"]
        assert not (await call(bridge, "echo", {})).is_error
        details = await bridge.catalog.slot("svc").upstream.health()
        assert details["skipped_operation_count"] == 3
        skipped = details["skipped_operations"]
        assert (
            skipped["$.paths['/e/{x}/{y}'].get"]
            == "the path template's {y} has no `in: path` parameter; declare it"
        )
        assert (
            "`in` must be path, query, header or cookie"
            in skipped["$.paths['/bad'].post.parameters[0]"]
        )
        (loop,) = [
            where
            for where in skipped
            if where.startswith("$.paths['/loop'].get.parameters[0].schema")
        ]
        assert "never reaches a concrete schema" in skipped[loop]
    assert sum("operation left out" in r.getMessage() for r in caplog.records) == 3
    error = await _load_error(
        spec, validate_spec="off", bad_operations="fail"
    )  # the whole upstream, as asked
    assert "`in` must be path, query, header or cookie" in error.message


async def test_operation_id_spelled_like_another_operations_method_and_path(api, tmp_path):
    _, base = api
    confirm = [{"name": "confirm", "in": "query", "required": True, "schema": {"type": "string"}}]
    doc = _document(
        {
            "/first": {
                "delete": {
                    "operationId": "GET /other",
                    "summary": "Delete everything",
                    "parameters": confirm,
                    "responses": _OK,
                }
            },
            "/other": {
                "get": {"summary": "Read other", "tags": "billing", "responses": _OK}
            },  # tags: not a list
            "/last": {
                "post": {"operationId": "GET /other", "summary": "Post last", "responses": _OK}
            },
            "/dup": {
                "put": {"operationId": "same", "responses": _OK},
                "patch": {"operationId": "same", "responses": _OK},
            },
        }
    )
    # repeated operationIds are invalid OpenAPI: only a document that is not validated gets here
    async with bridge_for(
        _write(tmp_path, doc), base_url=base + "/v1", validate_spec="off"
    ) as bridge:
        decls = {d.native_id: d for d in bridge.catalog.declarations()}
        assert set(decls) == {"DELETE /first", "GET /other", "POST /last", "same", "PATCH /dup"}
        for native_id, args in [
            ("DELETE /first", {"confirm": "yes"}),
            ("GET /other", {}),
            ("POST /last", {}),
            ("same", {}),
            ("PATCH /dup", {}),
        ]:
            result = await bridge.invoker.invoke(decls[native_id].name, args)
            assert not result.is_error, result.content
            method, path = native_id.split(" ") if " " in native_id else ("PUT", "/dup")
            assert (
                result.structured_content["method"],
                result.structured_content["raw_path"].split("?")[0],
            ) == (method, "/v1" + path)
        assert (
            decls["GET /other"].external_mappings[0]["operation_id"] is None
            and decls["GET /other"].tags == []
        )
        # the operationId itself names the operation it routes to (PUT), not the other (PATCH)
        assert (decls["same"].name, decls["PATCH /dup"].name.startswith("svc__same_")) == (
            "svc__same",
            True,
        )


async def test_summary_opening_the_description_is_said_once_and_a_long_one_is_no_hint(tmp_path):
    long_summary = "Create an order for a customer and bill it to the card on file at once"
    doc = _document(
        {
            "/a": {
                "post": {
                    "operationId": "create",
                    "summary": "Create an order.",
                    "description": "Create an order.  The order is billed at once.",
                    "responses": _OK,
                }
            },
            "/b": {"post": {"operationId": "bill", "summary": long_summary, "responses": _OK}},
            "/c": {
                "get": {
                    "operationId": "list",
                    "summary": "List orders",
                    "description": "Pages of 50.",
                    "responses": _OK,
                }
            },
            "/d": {
                "get": {
                    "operationId": "get",
                    "summary": "Get",
                    "description": "Gets an order.",
                    "responses": _OK,
                }
            },
            "/e": {
                "get": {
                    "operationId": "head",
                    "summary": "Read an order",
                    "description": "Read an order. By id.",
                    "responses": _OK,
                }
            },
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url="http://127.0.0.1:1") as bridge:
        create, bill, listing = (
            bridge.catalog.resolve(f"svc__{n}") for n in ("create", "bill", "list")
        )
        assert create.description == "Create an order.  The order is billed at once."
        assert (create.title, create.search_hint) == ("Create an order.", "Create an order.")
        assert listing.description == "List orders\n\nPages of 50."
        assert (
            bridge.catalog.resolve("svc__get").description == "Get\n\nGets an order."
        )  # a word, not the opening
        assert bridge.catalog.resolve("svc__head").description == "Read an order. By id."
        # more than 10 words is no capability phrase: the search derives the hint
        assert (bill.title, bill.search_hint) == (long_summary, None)
        assert await bridge.search.wait_indexed()
        match = bridge.search.search(
            "bill the card on file", surface=bridge.surfaces.get("default")
        ).matches[0]
        assert (match.name, match.search_hint) == (
            "svc__bill",
            "Create an order for a customer and bill it to",
        )


async def test_a_description_cut_short_is_searched_whole(tmp_path):
    from bridge.search.tooltext import FULL_DESCRIPTION_MAX, searched_description

    archive = (
        "Moves the project to the archive tier. Its jobs stop and its members keep read access. "
        "Retention: snapshots stay in cold storage for ninety days before deletion."
    )
    restore = (
        "Restore an archived project. "
        + "Jobs restart where they stopped. " * 3
        + "Quota is checked first."
    )
    doc = _document(
        {
            "/archive": {
                "post": {
                    "operationId": "archive",
                    "summary": "Archive a project",
                    "description": archive,
                    "responses": _OK,
                }
            },
            "/restore": {
                "post": {
                    "operationId": "restore",
                    "summary": "Restore an archived project.",
                    "description": restore,
                    "responses": _OK,
                }
            },
            "/manual": {
                "get": {
                    "operationId": "manual",
                    "description": "The manual. " + "Read it twice. " * 900,
                    "responses": _OK,
                }
            },
            "/purge": {
                "delete": {
                    "operationId": "purge",
                    "summary": "Purge deleted projects",
                    "responses": _OK,
                }
            },
            "/audit": {
                "get": {
                    "operationId": "audit",
                    "summary": "Audit a project: "
                    + "every change is listed. " * 5
                    + "Exports as CSV.",
                    "responses": _OK,
                }
            },
        }
    )
    async with bridge_for(
        _write(tmp_path, doc), base_url="http://127.0.0.1:1", description_max=80
    ) as bridge:
        tools = {
            n: bridge.catalog.resolve(f"svc__{n}")
            for n in ("archive", "restore", "manual", "purge", "audit")
        }
        assert (
            tools["archive"].description.endswith("…")
            and "cold storage" not in tools["archive"].description
        )
        # the listing shows the cut text; the search reads the whole, the summary said once
        assert searched_description(tools["archive"]) == f"Archive a project\n\n{archive}"
        assert searched_description(tools["restore"]) == restore
        assert len(searched_description(tools["manual"])) == FULL_DESCRIPTION_MAX
        assert searched_description(tools["purge"]) == "Purge deleted projects"
        assert tools["audit"].description.endswith("…") and searched_description(
            tools["audit"]
        ).endswith("Exports as CSV.")
        assert await bridge.search.wait_indexed()
        surface = bridge.surfaces.get("default")
        assert [
            m.name
            for m in bridge.search.search("snapshots in cold storage", surface=surface).matches
        ][:1] == ["svc__archive"]
        assert [m.name for m in bridge.search.search("quota", surface=surface).matches][:1] == [
            "svc__restore"
        ]
        match = bridge.search.search("archive tier", surface=surface).matches[0]
        assert (match.name, match.description) == ("svc__archive", tools["archive"].description)
    # a description that ends in an ellipsis of its own, or whose kept text is another's, is read as given
    plain = tools["archive"].model_copy(update={"description": "Wait for it…", "annotations": {}})
    other = tools["archive"].model_copy(update={"description": "Something else entirely…"})
    assert (searched_description(plain), searched_description(other)) == (
        "Wait for it…",
        "Something else entirely…",
    )


async def test_body_property_when_parameters_hold_every_usual_name(api, tmp_path):
    _, base = api
    params = [
        {"name": n, "in": "query", "schema": {"type": "string"}}
        for n in ("body", "request_body", "_body", "body_2")
    ]
    doc = _document(
        {
            "/echo": {
                "post": {
                    "operationId": "echo",
                    "parameters": params,
                    "responses": _OK,
                    "requestBody": {"content": {"application/json": {"schema": {"type": "array"}}}},
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1", start_timeout=5) as bridge:
        decl = bridge.catalog.resolve("svc__echo")
        assert decl is not None, bridge.catalog.slot("svc").health.reason
        assert set(decl.input_schema["properties"]) == {
            "body",
            "request_body",
            "_body",
            "body_2",
            "body_3",
        }
        result = await call(bridge, "echo", {"body": "q", "_body": "u", "body_3": [1, 2]})
        assert result.structured_content["body"] == [1, 2]
        assert result.structured_content["raw_path"] == "/v1/echo?body=q&_body=u"


async def test_a_mapping_that_stops_early_fails_at_once(api, tmp_path, monkeypatch):
    # a StopIteration raised in the mapping thread never reaches the awaiting future on its own
    def stops(*args, **kwargs):
        raise StopIteration("no free name")

    monkeypatch.setattr("adapters.openapi.upstream.map_operations", stops)
    _, base = api
    doc = _document({"/echo": {"post": {"operationId": "echo", "responses": _OK}}})
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1", start_timeout=30) as bridge:
        health = bridge.catalog.slot("svc").health
        assert health.state == "failed" and "stopped early" in health.reason


# ---------------------------------------------------------------------------- selection


async def test_include_and_exclude_by_tag_id_path_and_method(api):
    _, base = api
    async with bridge_for(
        "styles_30.yaml",
        base_url=base,
        include=[{"tag": "bodies"}, "query*", {"path": "/items/*", "method": "delete"}],
        exclude=["bodyRaw", {"operation_id": "queryDeep*"}],
    ) as bridge:
        names = sorted(d.native_name for d in bridge.catalog.declarations())
    assert names == [
        "bodyArray",
        "bodyClash",
        "bodyForm",
        "bodyJson",
        "bodyMultipart",
        "delete_items_itemId",
        "queryDelimited",
        "queryForm",
        "queryFormNoExplode",
    ]


# ---------------------------------------------------------------------------- parameter styles

COLOR = {"R": 100, "G": 200, "B": 150}


@pytest.mark.parametrize(
    ("op", "args", "raw"),
    [
        (
            "pathSimple",
            {"p": 5, "a": [3, 4, 5], "o": COLOR, "oe": COLOR},
            "/v1/path/simple/5/3,4,5/R,100,G,200,B,150/R=100,G=200,B=150",
        ),
        (
            "pathLabel",
            {"p": 5, "a": [3, 4, 5], "ae": [3, 4, 5], "o": COLOR, "oe": COLOR},
            "/v1/path/label/.5.3,4,5.3.4.5.R,100,G,200,B,150.R=100.G=200.B=150",
        ),
        (
            "pathMatrix",
            {"p": 5, "a": [3, 4, 5], "ae": [3, 4, 5], "o": COLOR, "oe": COLOR},
            "/v1/path/matrix/;p=5;a=3,4,5;ae=3;ae=4;ae=5;o=R,100,G,200,B,150;R=100;G=200;B=150",
        ),
        (
            "queryForm",
            {"p": 5, "a": [3, 4], "o": COLOR, "s": "a b&c/d", "r": "x/y?z"},
            "/v1/query/form?p=5&a=3&a=4&R=100&G=200&B=150&s=a%20b%26c%2Fd&r=x/y?z",
        ),
        # allowReserved still encodes what would end the query (#), start another parameter (&), read as a space (+), or [ ]
        (
            "queryForm",
            {"p": 5, "r": "x/y?z#f&api_key=h+i[0]"},
            "/v1/query/form?p=5&r=x/y?z%23f%26api_key=h%2Bi%5B0%5D",
        ),
        (
            "queryFormNoExplode",
            {"p": 5, "a": [3, 4, 5], "o": COLOR},
            "/v1/query/form-flat?p=5&a=3,4,5&o=R,100,G,200,B,150",
        ),
        (
            "queryDelimited",
            {"sa": [3, 4], "so": COLOR, "pa": [3, 4], "po": COLOR, "px": [1, 2]},
            "/v1/query/delimited?sa=3%204&so=R%20100%20G%20200%20B%20150&pa=3|4&po=R|100|G|200|B|150&px=1&px=2",
        ),
        (
            "queryDeepObject",
            {"o": COLOR, "filter": {"state": "open", "owner": {"login": "ann"}}, "q": {"k": "v"}},
            "/v1/query/deep?o[R]=100&o[G]=200&o[B]=150&filter[state]=open&filter[owner][login]=ann&q=%7B%22k%22%3A%22v%22%7D",
        ),
    ],
)
async def test_path_and_query_styles(api, op, args, raw):
    _, base = api
    async with bridge_for("styles_30.yaml", base_url=base + "/v1", include=[op]) as bridge:
        result = await call(bridge, op, args)
        assert not result.is_error, result.content
        assert result.structured_content["raw_path"] == raw


async def test_path_values_cannot_step_out_of_their_segment(api, tmp_path):
    state, base = api
    string = {"type": "string"}
    doc = _document(
        {
            "/users/{id}/{part}": {
                "get": {
                    "operationId": "userPart",
                    "responses": _OK,
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": string},
                        {"name": "part", "in": "path", "required": True, "schema": string},
                    ],
                }
            },
            "/pair/{a}{b}": {
                "get": {
                    "operationId": "pair",
                    "responses": _OK,
                    "parameters": [
                        {"name": "a", "in": "path", "required": True, "schema": string},
                        {"name": "b", "in": "path", "required": True, "schema": string},
                    ],
                }
            },
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        # a whole segment `..` or `.` is a step in the path to a server or proxy resolving dot
        # segments: /v1/users/../profile is /v1/profile, another route
        for name, args in (
            ("userPart", {"id": "..", "part": "profile"}),
            ("userPart", {"id": "1", "part": "."}),
            ("pair", {"a": ".", "b": "."}),
        ):
            result = await call(bridge, name, args)
            assert result.is_error and result.error.error_class == "invalid_arguments", (
                args,
                result.content,
            )
            assert "segment" in result.error.message
        # an empty value made `/v1/users//profile`: another route, or none
        empty = await call(bridge, "userPart", {"id": "", "part": "profile"})
        assert (
            empty.is_error
            and empty.error.error_class == "invalid_arguments"
            and "'id' is empty" in empty.error.message
        )
        assert not state.peers  # nothing was sent
        sent = await call(bridge, "userPart", {"id": "../admin", "part": "a..b"})
        assert sent.structured_content["raw_path"] == "/v1/users/..%2Fadmin/a..b"
        assert (await call(bridge, "pair", {"a": "..", "b": "."})).structured_content[
            "raw_path"
        ] == "/v1/pair/..."


async def test_deep_object_arrays_are_indexed(api, tmp_path):
    """OpenAPI leaves a deepObject array undefined; Stripe's document uses it (`expand`, and the
    form fields of its bodies) and reads `expand[0]=a&expand[1]=b`, `items[0][price]=p`, as its
    own libraries send them."""
    _, base = api
    strings = {"type": "array", "items": {"type": "string"}}
    items = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"price": {"type": "string"}, "tax_rates": strings},
        },
    }
    doc = _document(
        {
            "/subscriptions": {
                "post": {
                    "operationId": "subscribe",
                    "responses": _OK,
                    "parameters": [
                        {
                            "name": "expand",
                            "in": "query",
                            "style": "deepObject",
                            "explode": True,
                            "schema": strings,
                        }
                    ],
                    "requestBody": {
                        "content": {
                            "application/x-www-form-urlencoded": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"items": items, "metadata": {"type": "object"}},
                                },
                                "encoding": {
                                    "items": {"style": "deepObject", "explode": True},
                                    "metadata": {"style": "deepObject", "explode": True},
                                },
                            }
                        }
                    },
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        args = {
            "expand": ["customer", "latest invoice"],
            "items": [{"price": "p_1", "tax_rates": ["t_1", "t&2"]}, {"price": "p_2"}],
            "metadata": {"order": "7", "tags": ["a", "b"]},
        }
        sent = (await call(bridge, "subscribe", args)).structured_content
        assert sent["raw_path"] == "/v1/subscriptions?expand[0]=customer&expand[1]=latest%20invoice"
        assert sent["body"] == (
            "items[0][price]=p_1&items[0][tax_rates][0]=t_1&items[0][tax_rates][1]=t%262&items[1][price]=p_2"
            "&metadata[order]=7&metadata[tags][0]=a&metadata[tags][1]=b"
        )


async def test_header_and_cookie_styles(api):
    _, base = api
    async with bridge_for(
        "styles_30.yaml", base_url=base + "/v1", include=["header*", "cookie*"]
    ) as bridge:
        decl = bridge.catalog.resolve("svc__headerSimple")
        assert (
            "Accept" not in decl.input_schema["properties"]
        )  # OpenAPI ignores Accept/Content-Type/Authorization params
        headers = (
            await call(
                bridge, "headerSimple", {"X-P": 5, "X-A": [3, 4, 5], "X-O": COLOR, "X-OE": COLOR}
            )
        ).structured_content["headers"]
        assert (headers["X-P"], headers["X-A"], headers["X-O"], headers["X-OE"]) == (
            "5",
            "3,4,5",
            "R,100,G,200,B,150",
            "R=100,G=200,B=150",
        )
        cookie = (
            await call(bridge, "cookieForm", {"p": 5, "a": [3, 4, 5], "o": COLOR})
        ).structured_content["headers"]["Cookie"]
        assert cookie == "p=5; a=3,4,5; o=R,100,G,200,B,150"
        cookie = (
            await call(bridge, "cookieFormExplode", {"a": [3, 4], "o": {"R": 1}})
        ).structured_content["headers"]["Cookie"]
        assert cookie == "a=3; a=4; R=1"


async def test_cookie_object_keys_cannot_add_cookies(api):
    _, base = api
    async with bridge_for(
        "styles_30.yaml", base_url=base + "/v1", include=["cookieFormExplode"]
    ) as bridge:
        # an exploded object's keys are cookie names: `;` and `=` in them are encoded like values
        result = await call(
            bridge, "cookieFormExplode", {"o": {"R; session_key=forged": 1, "G\r\nX-Forged: 1": 2}}
        )
        assert not result.is_error, result.content
        assert (
            result.structured_content["headers"]["Cookie"]
            == "R%3B%20session_key%3Dforged=1; G%0D%0AX-Forged%3A%201=2"
        )


# ---------------------------------------------------------------------------- bodies


async def test_request_body_kinds(api):
    _, base = api
    async with bridge_for(
        "styles_30.yaml", base_url=base + "/v1", include=[{"tag": "bodies"}]
    ) as bridge:
        r = await call(bridge, "bodyJson", {"id": 7, "name": "rex", "size": None})
        assert r.structured_content["body"] == {"name": "rex", "size": None}
        assert r.structured_content["raw_path"] == "/v1/bodies/json/7"
        assert r.structured_content["headers"]["Content-Type"] == "application/json"
        # a body property clashing with a parameter name keeps the body whole under `body`
        clash = bridge.catalog.resolve("svc__bodyClash").input_schema["properties"]
        assert set(clash) == {"name", "body"}
        r = await call(bridge, "bodyClash", {"name": "p", "body": {"name": "b", "note": "n"}})
        assert r.structured_content["body"] == {"name": "b", "note": "n"}
        r = await call(bridge, "bodyArray", {"body": ["x", "y"]})
        assert r.structured_content["body"] == ["x", "y"]
        r = await call(
            bridge, "bodyForm", {"name": "a b", "tags": ["t1", "t2"], "meta": {"a": "1", "b": "2"}}
        )
        assert r.structured_content["body"] == "name=a%20b&tags=t1&tags=t2&meta[a]=1&meta[b]=2"
        r = await call(
            bridge,
            "bodyMultipart",
            {"description": "a pic", "file": base64.b64encode(PNG).decode(), "meta": {"size": 3}},
        )
        parts = r.structured_content["body"]
        assert parts["description"] == [
            {"filename": None, "content_type": "text/plain", "text": "a pic", "b64": None}
        ]
        assert (
            parts["file"][0]["content_type"] == "image/png"
            and base64.b64decode(parts["file"][0]["b64"]) == PNG
        )
        assert (
            json.loads(parts["meta"][0]["text"]) == {"size": 3}
            and parts["meta"][0]["content_type"] == "application/json"
        )
        # a required multipart body given none of its optional fields is still multipart, not an empty urlencoded form
        r = await call(bridge, "bodyMultipart", {})
        assert r.structured_content["headers"]["Content-Type"].startswith(
            "multipart/form-data; boundary="
        )
        assert r.structured_content["body"] == {}
        r = await call(bridge, "bodyRaw", {"body": base64.b64encode(b"\x00\x01raw").decode()})
        assert r.structured_content["body"] == {
            "size": 5,
            "b64": base64.b64encode(b"\x00\x01raw").decode(),
        }
        assert r.structured_content["headers"]["Content-Type"] == "application/octet-stream"
        # arguments are validated against the merged schema before any request is made
        bad = await call(bridge, "bodyJson", {"id": 7})
        assert bad.is_error and bad.error.error_class == "invalid_arguments"


async def test_a_required_list_or_object_parameter_needs_an_item(api, tmp_path):
    """An empty list or object expands to nothing in every style, so the request would go without
    the parameter (the petstore's findPetsByStatus: `GET /pet/findByStatus`, refused as missing
    status), or with an empty path segment."""
    _, base = api
    point = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}
    doc = _document(
        {
            "/v1/pets/{at}": {
                "get": {
                    "operationId": "find",
                    "responses": _OK,
                    "parameters": [
                        {"name": "at", "in": "path", "required": True, "schema": point},
                        {
                            "name": "status",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "array", "items": {"type": "string"}},
                        },
                        {
                            "name": "tags",
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "string"}},
                        },
                    ],
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
        props = bridge.catalog.resolve("svc__find").input_schema["properties"]
        assert (
            props["status"]["minItems"] == 1
            and "minItems" not in props["tags"]
            and props["at"]["minProperties"] == 1
        )
        for refused in ({"at": {"x": 1}, "status": []}, {"at": {}, "status": ["sold"]}):
            result = await call(bridge, "find", refused)
            assert result.is_error and result.error.error_class == "invalid_arguments", refused
        result = await call(bridge, "find", {"at": {"x": 1}, "status": ["sold"], "tags": []})
        assert result.structured_content["raw_path"] == "/v1/pets/x,1?status=sold"


async def test_a_call_without_a_body_sends_no_content_type(api, tmp_path):
    """aiohttp labels a POST, PUT or PATCH without data `application/octet-stream`; a server that
    checks the content type against the document would refuse a body the call never had."""
    _, base = api
    note = {"type": "object", "properties": {"title": {"type": "string"}}}
    doc = _document(
        {
            "/revoke": {"post": {"operationId": "revoke", "responses": _OK}},
            "/notes": {
                "put": {
                    "operationId": "putNote",
                    "responses": _OK,
                    "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}}],
                    "requestBody": {"content": {"application/json": {"schema": note}}},
                }
            },
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        for name, args in (("revoke", {}), ("putNote", {"q": "x"})):
            result = await call(bridge, name, args)
            assert not result.is_error, result.content
            assert "Content-Type" not in result.structured_content["headers"], (
                name,
                result.structured_content,
            )
            assert result.structured_content["body"] is None
        sent = (await call(bridge, "putNote", {"title": "t"})).structured_content
        assert sent["headers"]["Content-Type"] == "application/json" and sent["body"] == {
            "title": "t"
        }


async def test_an_optional_body_given_some_fields_needs_its_required_ones(api, tmp_path):
    """A requestBody without `required: true` may be left out, but a body that is sent must be
    valid: its own required properties are asked for once any of its fields is given."""
    state, base = api
    order = {
        "type": "object",
        "required": ["account", "amount"],
        "properties": {
            "account": {"type": "string"},
            "amount": {"type": "integer"},
            "note": {"type": "string"},
        },
    }
    doc = _document(
        {
            "/orders": {
                "post": {
                    "operationId": "order",
                    "responses": _OK,
                    "parameters": [{"name": "dry", "in": "query", "schema": {"type": "boolean"}}],
                    "requestBody": {"content": {"application/json": {"schema": order}}},
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        assert (
            "required" not in bridge.catalog.resolve("svc__order").input_schema
        )  # the body may be left out
        result = await call(bridge, "order", {"note": "n", "amount": 3})
        assert result.is_error and result.error.error_class == "invalid_arguments", result.content
        assert "'account'" in result.error.message and "'amount'" not in result.error.message
        assert not state.peers  # nothing was sent
        assert (await call(bridge, "order", {"dry": True})).structured_content["body"] is None
        sent = (await call(bridge, "order", {"account": "a", "amount": 3})).structured_content
        assert sent["body"] == {"account": "a", "amount": 3}


async def test_a_media_range_is_never_sent_as_the_content_type(api, tmp_path):
    """`*/*`, `application/*+json` or `text/*` name no type a body can carry: a listed media type
    is sent in their place (ASP.NET documents list `application/*+json` before `application/json`),
    else the usual type of the body's kind."""
    _, base = api
    note = {"type": "object", "properties": {"title": {"type": "string"}}}

    def body_op(name: str, *types: str, schema: dict[str, Any] = note) -> dict[str, Any]:
        return {
            "post": {
                "operationId": name,
                "responses": _OK,
                "requestBody": {
                    "required": True,
                    "content": {t: {"schema": schema} for t in types},
                },
            }
        }

    doc = _document(
        {
            "/any": body_op("any", "*/*"),
            "/aspnet": body_op("aspnet", "application/*+json", "application/json", "text/json"),
            "/suffix": body_op("suffix", "application/*+json"),
            "/text": body_op("text", "text/*", schema={"type": "string"}),
            "/upload": body_op("upload", "*/*", schema={"type": "string", "format": "binary"}),
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        for name, args, content_type in (
            ("any", {"title": "t"}, "application/json"),
            ("aspnet", {"title": "t"}, "application/json"),
            ("suffix", {"title": "t"}, "application/json"),
            ("text", {"body": "hi"}, "text/plain"),
        ):
            sent = (await call(bridge, name, args)).structured_content
            assert sent["headers"]["Content-Type"] == content_type, (name, sent)
            assert (
                bridge.catalog.resolve(f"svc__{name}").annotations["openapi"]["request_media_type"]
                == content_type
            )
        assert (await call(bridge, "aspnet", {"title": "t"})).structured_content["body"] == {
            "title": "t"
        }
        # bytes under `*/*` are a file: base64 in, the bytes themselves out, not a JSON string
        assert (
            bridge.catalog.resolve("svc__upload").input_schema["properties"]["body"][
                "contentEncoding"
            ]
            == "base64"
        )
        sent = (
            await call(bridge, "upload", {"body": base64.b64encode(PNG).decode()})
        ).structured_content
        assert sent["headers"]["Content-Type"] == "application/octet-stream"
        assert base64.b64decode(sent["body"]["b64"]) == PNG


async def test_a_yaml_body_is_text_not_base64(api, tmp_path):
    """`application/x-yaml` (Open Policy Agent's document) is YAML as `application/yaml` is: an
    object body is taken as an object and sent as JSON, which is YAML, not asked for as base64."""
    _, base = api
    doc = _document(
        {
            "/data": {
                "post": {
                    "operationId": "put",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {"application/x-yaml": {"schema": {"type": "object"}}},
                    },
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        assert bridge.catalog.resolve("svc__put").input_schema["properties"]["body"] == {
            "type": "object"
        }
        sent = (await call(bridge, "put", {"body": {"a": [1, "b"]}})).structured_content
        assert sent["headers"]["Content-Type"] == "application/x-yaml"
        assert base64.b64decode(sent["body"]["b64"]) == b'{"a":[1,"b"]}'


async def test_an_xml_body_is_an_xml_document_not_json(api, tmp_path):
    """An object schema under `application/xml` (openSUSE's build service, AWS's XML APIs) has no
    one XML form: the tool takes the document as a string and sends it as it is, never JSON
    labelled as XML."""
    _, base = api
    tracker = {
        "type": "object",
        "description": "An issue tracker.",
        "properties": {"name": {"type": "string"}},
    }
    doc = _document(
        {
            "/trackers": {
                "post": {
                    "operationId": "add",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {"application/xml; charset=utf-8": {"schema": tracker}},
                    },
                }
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        body = bridge.catalog.resolve("svc__add").input_schema["properties"]["body"]
        assert (
            body["type"] == "string"
            and body["contentMediaType"] == "application/xml; charset=utf-8"
        )
        assert (
            body["description"]
            == "the application/xml; charset=utf-8 body: an XML document (An issue tracker.)"
        )
        refused = await call(bridge, "add", {"body": {"name": "gh"}})
        assert refused.is_error and refused.error.error_class == "invalid_arguments"
        xml = '<issue-tracker name="gh">é</issue-tracker>'
        sent = (await call(bridge, "add", {"body": xml})).structured_content
        assert sent["headers"]["Content-Type"] == "application/xml; charset=utf-8"
        assert base64.b64decode(sent["body"]["b64"]).decode() == xml


async def test_a_discriminated_one_of_whose_branches_overlap_takes_a_value_of_either(api, tmp_path):
    """Branches that extend one base schema (`allOf: [Pet, {...}]`) match a value of each other
    too; with a discriminator that picks the branch, a `oneOf` refused every value as matching
    both (the petstore's `PATCH /pets` with a Cat)."""
    _, base = api
    pet = {
        "type": "object",
        "required": ["pet_type"],
        "properties": {"pet_type": {"type": "string"}},
    }
    doc = _document(
        {
            "/v1/pets": {
                "patch": {
                    "operationId": "update",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [
                                        {"$ref": "#/components/schemas/Cat"},
                                        {"$ref": "#/components/schemas/Dog"},
                                    ],
                                    "discriminator": {"propertyName": "pet_type"},
                                }
                            }
                        },
                    },
                }
            }
        },
        components={
            "schemas": {
                "Pet": pet,
                "Cat": {
                    "allOf": [
                        {"$ref": "#/components/schemas/Pet"},
                        {"type": "object", "properties": {"hunts": {"type": "boolean"}}},
                    ]
                },
                "Dog": {
                    "allOf": [
                        {"$ref": "#/components/schemas/Pet"},
                        {"type": "object", "properties": {"bark": {"type": "boolean"}}},
                    ]
                },
            }
        },
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
        body = bridge.catalog.resolve("svc__update").input_schema["properties"]["body"]
        assert "oneOf" not in body and len(body["anyOf"]) == 2
        cat = {"pet_type": "Cat", "hunts": True}
        result = await call(bridge, "update", {"body": cat})
        assert not result.is_error, result.content
        assert result.structured_content["body"] == cat
        refused = await call(bridge, "update", {"body": {"hunts": True}})
        assert refused.is_error and refused.error.error_class == "invalid_arguments"


async def test_a_discriminator_pins_each_branch_to_its_value(api, tmp_path):
    """Without its discriminator a `oneOf` lets `{type: pagerduty}` match the Slack branch, which
    needs no routing key: the server, reading the type, would refuse it. Each mapped branch gets
    its value as a constant, so the bridge asks for what the server needs."""
    state, base = api
    kind = {"type": "string", "enum": ["slack", "pagerduty"]}
    doc = _document(
        {
            "/endpoints": {
                "post": {
                    "operationId": "create",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/Endpoint"}
                            }
                        },
                    },
                }
            }
        },
        components={
            "schemas": {
                "Endpoint": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/Slack"},
                        {"$ref": "#/components/schemas/PagerDuty"},
                    ],
                    "discriminator": {
                        "propertyName": "type",
                        "mapping": {
                            "slack": "#/components/schemas/Slack",
                            "pagerduty": "PagerDuty",
                        },
                    },
                },
                "Slack": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": kind, "url": {"type": "string"}},
                },
                "PagerDuty": {
                    "type": "object",
                    "required": ["type", "routingKey"],
                    "properties": {"type": kind, "routingKey": {"type": "string"}},
                },
            }
        },
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        refused = await call(bridge, "create", {"body": {"type": "pagerduty"}})
        assert refused.is_error and refused.error.error_class == "invalid_arguments", (
            refused.content
        )
        assert not state.peers
        for body in ({"type": "pagerduty", "routingKey": "k"}, {"type": "slack"}):
            assert (await call(bridge, "create", {"body": body})).structured_content["body"] == body


@contextlib.asynccontextmanager
async def recording_server() -> AsyncIterator[tuple[list[web.Request], str]]:
    """A server that answers `{}` to anything and keeps each request, headers and all: what
    calls return is scrubbed of credentials, so what was sent is read here."""
    seen: list[web.Request] = []

    async def record(request: web.Request) -> web.Response:
        await request.read()  # kept on the request, for `valid_per_document`
        seen.append(request)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield seen, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def valid_per_document(doc: dict[str, Any], base: str, seen: list[web.Request]) -> None:
    """Check recorded requests against the document with openapi-core (raises on the first invalid)."""
    from openapi_core import OpenAPI
    from openapi_core.contrib.aiohttp import AIOHTTPOpenAPIWebRequest

    url = URL(base)  # openapi-core's aiohttp request gives its host without the port
    spec = OpenAPI.from_dict(
        {**doc, "servers": [{"url": f"{url.scheme}://{url.host}{url.path.rstrip('/')}"}]}
    )
    for request in seen:
        spec.validate_request(AIOHTTPOpenAPIWebRequest(request, body=await request.read()))


@pytest.mark.parametrize("version", ["3.0.3", "3.1.0"])
async def test_keywords_beside_a_ref_follow_the_documents_version(tmp_path, version):
    """OpenAPI 3.0 ignores what is written beside a `$ref`: `type: integer` beside a string enum
    was merged into it, and no value was valid. 3.1 applies it as well as the referenced schema.
    Descriptions are kept in both."""
    body = {
        "type": "object",
        "properties": {
            "status": {
                "$ref": "#/components/schemas/Status",
                "type": "integer",
                "description": "How it stands.",
            },
            "code": {"$ref": "#/components/schemas/Code", "maxLength": 3},
            "owner": {"$ref": "#/components/schemas/Owner", "required": ["email"]},
        },
    }
    doc = {
        "openapi": version,
        "info": {"title": "t", "version": "1"},
        "components": {
            "schemas": {
                "Status": {"type": "string", "enum": ["open", "closed"]},
                "Code": {"type": "string", "minLength": 2},
                "Owner": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                },
            }
        },
        "paths": {
            "/tickets": {
                "post": {
                    "operationId": "open",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": body}},
                    },
                }
            }
        },
    }
    async with (
        recording_server() as (seen, base),
        bridge_for(_write(tmp_path, doc), base_url=base) as bridge,
    ):
        props = bridge.catalog.resolve("svc__open").input_schema["properties"]
        assert props["status"]["description"] == "How it stands."
        ok = {"code": "abc", "owner": {"name": "ann", "email": "a@x.test"}}
        assert not (await call(bridge, "open", ok)).is_error
        assert (await call(bridge, "open", {"status": 5})).error.error_class == "invalid_arguments"
        assert (await call(bridge, "open", {"code": "a"})).error.error_class == "invalid_arguments"
        assert (
            await call(bridge, "open", {"owner": {"email": "a@x.test"}})
        ).error.error_class == "invalid_arguments"
        # the constraints written beside the $ref (`type: integer` leaves 3.1 no status at all)
        beside = [{"status": "open"}, {"code": "abcd"}, {"owner": {"name": "ann"}}]
        for args in beside:
            result = await call(bridge, "open", args)
            if version == "3.0.3":
                assert not result.is_error, result.content
            else:
                assert result.error.error_class == "invalid_arguments", (args, result.content)
        assert [await request.json() for request in seen] == (
            [ok, *beside] if version == "3.0.3" else [ok]
        )
        if (
            version == "3.1.0"
        ):  # openapi-core applies them in 3.0 too, where a Reference Object's other fields "SHALL be ignored"
            await valid_per_document(doc, base, seen)


def _pets(discriminated: dict[str, Any], **schemas: Any) -> dict[str, Any]:
    """A document whose PATCH /pets takes `discriminated` as its body, with `schemas` as components."""
    return _document(
        {
            "/pets": {
                "patch": {
                    "operationId": "update",
                    "responses": _OK,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": discriminated}},
                    },
                }
            }
        },
        components={"schemas": schemas},
    )


async def test_a_discriminator_without_a_mapping_pins_each_branch_to_its_schema_name(tmp_path):
    """OpenAPI's implicit mapping: the value naming `#/components/schemas/Dog` is `Dog`. Unpinned,
    `{pet_type: Dog}` without `bark` matched the Cat branch and reached a server that reads it as a Dog."""
    pet_type = {"type": "string"}
    doc = _pets(
        {
            "oneOf": [{"$ref": "#/components/schemas/Cat"}, {"$ref": "#/components/schemas/Dog"}],
            "discriminator": {"propertyName": "pet_type"},
        },
        Cat={
            "type": "object",
            "required": ["pet_type"],
            "properties": {"pet_type": pet_type, "hunts": {"type": "boolean"}},
        },
        Dog={
            "type": "object",
            "required": ["pet_type", "bark"],
            "properties": {"pet_type": pet_type, "bark": {"type": "boolean"}},
        },
    )
    async with recording_server() as (seen, base):
        async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
            for body in ({"pet_type": "Dog"}, {"pet_type": "Bird"}):
                refused = await call(bridge, "update", {"body": body})
                assert refused.is_error and refused.error.error_class == "invalid_arguments", (
                    body,
                    refused.content,
                )
            assert not seen
            sent = [{"pet_type": "Dog", "bark": True}, {"pet_type": "Cat", "hunts": False}]
            for body in sent:
                assert not (await call(bridge, "update", {"body": body})).is_error
        assert [await request.json() for request in seen] == sent
        await valid_per_document(doc, base, seen)
        # a branch whose own schema allows other values only: the document sends those, not the name
        # (openapi-core, reading the implicit mapping strictly, would refuse every value of it)
        doc["components"]["schemas"]["Cat"]["properties"]["pet_type"] = {
            "type": "string",
            "enum": ["cat"],
        }
        async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
            assert not (
                await call(bridge, "update", {"body": {"pet_type": "cat", "hunts": True}})
            ).is_error
        assert await seen[-1].json() == {"pet_type": "cat", "hunts": True}


async def test_a_one_of_whose_branches_inherit_the_discriminator_through_all_of_picks_by_it(
    api, tmp_path
):
    """`oneOf: [Cat, Dog]` without a discriminator of its own, each branch `allOf: [Pet, {...}]`
    and `Pet` holding it: every value matched both branches, and the oneOf refused them all."""
    _, base = api
    doc = _pets(
        {"oneOf": [{"$ref": "#/components/schemas/Cat"}, {"$ref": "#/components/schemas/Dog"}]},
        Pet={
            "type": "object",
            "required": ["pet_type"],
            "properties": {"pet_type": {"type": "string"}},
            "discriminator": {
                "propertyName": "pet_type",
                "mapping": {"dog": "#/components/schemas/Dog"},
            },
        },
        Cat={
            "allOf": [
                {"$ref": "#/components/schemas/Pet"},
                {"type": "object", "properties": {"hunts": {"type": "boolean"}}},
            ]
        },
        Dog={
            "allOf": [
                {"$ref": "#/components/schemas/Pet"},
                {"type": "object", "properties": {"bark": {"type": "boolean"}}},
            ]
        },
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base + "/v1") as bridge:
        schema = bridge.catalog.resolve("svc__update").input_schema["properties"]["body"]
        assert "oneOf" not in schema and len(schema["anyOf"]) == 2
        for body in ({"pet_type": "Cat", "hunts": True}, {"pet_type": "dog", "bark": True}):
            result = await call(bridge, "update", {"body": body})
            assert not result.is_error, (body, result.content)
            assert result.structured_content["body"] == body
        for body in ({"pet_type": "Dog"}, {"pet_type": "cat"}, {"hunts": True}):
            refused = await call(bridge, "update", {"body": body})
            assert refused.is_error and refused.error.error_class == "invalid_arguments", body


# ---------------------------------------------------------------------------- credentials


def _auth() -> list[dict[str, Any]]:
    return [
        {"type": "apiKey", "scheme": "header_key", "value": SECRETS["api"]},
        {"type": "apiKey", "scheme": "query_key", "value": SECRETS["api"]},
        {"type": "apiKey", "scheme": "cookie_key", "value": SECRETS["api"]},
        {"type": "bearer", "token": SECRETS["bearer"]},
        {"type": "basic", "username": "ann", "password": SECRETS["password"]},
        {
            "type": "oauth2",
            "client_id": "cid",
            "client_secret": SECRETS["client_secret"],
            "scopes": ["notes:read"],
        },
    ]


async def test_each_credential_type_is_accepted_by_the_server(api):
    state, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, auth=_auth(), include=["auth*"]
    ) as bridge:
        for op in (
            "authHeader",
            "authQuery",
            "authCookie",
            "authBearer",
            "authBasic",
            "authOauth",
            "authEither",
        ):
            result = await call(bridge, op)
            assert not result.is_error, (op, result.content)
            assert result.structured_content["ok"] is True
        mapping = bridge.catalog.resolve("svc__authEither").external_mappings[0]
        assert mapping["security_scheme_refs"] == ["bearer", "header_key"]
        assert state.tokens_issued == ["tok-1-notes:read"]


async def test_oauth2_token_cached_refreshed_on_expiry_and_on_401(api):
    state, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, auth=_auth()[5:], include=["authOauth"]
    ) as bridge:
        for _ in range(3):
            assert not (await call(bridge, "authOauth")).is_error
        assert len(state.tokens_issued) == 1  # cached
        token = upstream_of(bridge).credentials.tokens[0]
        real_clock = token.clock
        token.clock = lambda: real_clock() + 3600  # an hour later the token has expired
        result = await call(bridge, "authOauth")
        assert result.structured_content["who"] == "token 2" and len(state.tokens_issued) == 2
        state.revoked.add("tok-2-notes:read")  # the server stops accepting it before it expires
        result = await call(bridge, "authOauth")
        assert not result.is_error and result.structured_content["who"] == "token 3"


async def test_a_bearer_token_satisfies_openid_connect_and_a_named_oauth2_scheme(api, tmp_path):
    """OpenID Connect schemes, and OAuth2 flows the bridge does not run (authorization code),
    take an access token got elsewhere: a `bearer` credential is what they need."""
    _, base = api
    flows = {
        "authorizationCode": {
            "authorizationUrl": "https://id.test/auth",
            "tokenUrl": "https://id.test/token",
            "scopes": {},
        }
    }
    doc = _document(
        {
            "/auth/bearer": {
                "get": {"operationId": "oidc", "security": [{"oidc": []}], "responses": _OK}
            },
            "/auth/either": {
                "get": {"operationId": "code", "security": [{"code": []}], "responses": _OK}
            },
        },
        components={
            "securitySchemes": {
                "oidc": {
                    "type": "openIdConnect",
                    "openIdConnectUrl": "https://id.test/.well-known",
                },
                "code": {"type": "oauth2", "flows": flows},
            }
        },
    )
    token = {"type": "bearer", "token": SECRETS["bearer"]}
    async with bridge_for(_write(tmp_path, doc), base_url=base, auth=[token]) as bridge:
        assert (await call(bridge, "oidc")).structured_content == {"ok": True, "who": "bearer"}
        missing = await call(
            bridge, "code"
        )  # an OAuth2 scheme is bound only when the credential names it
        assert missing.is_error and missing.error.error_class == "credential_missing"
    async with bridge_for(
        _write(tmp_path, doc), base_url=base, auth=[{**token, "scheme": "code"}]
    ) as bridge:
        assert (await call(bridge, "code")).structured_content == {"ok": True, "who": "either"}


async def test_a_scheme_the_document_names_but_does_not_declare_is_answered_with_the_entry_that_works(
    api, tmp_path
):
    # the fix said "add a matching entry under auth:", and `scheme: api_key` was then refused
    # as no security scheme of the document
    _, base = api
    doc = _document(
        {
            "/auth/header": {
                "get": {"operationId": "keyed", "security": [{"api_key": []}], "responses": _OK}
            }
        }
    )
    async with bridge_for(_write(tmp_path, doc), base_url=base) as bridge:
        result = await call(bridge, "keyed")
        assert (
            result.error.error_class == "credential_missing"
            and "without declaring it" in result.error.message
        )
        assert "no `scheme:`" in result.error.message and "`name` and `in`" in result.error.message
    entry = {"type": "apiKey", "name": "X-API-Key", "in": "header", "value": SECRETS["api"]}
    async with bridge_for(
        _write(tmp_path, doc), base_url=base, auth=[entry]
    ) as bridge:  # the entry it names works
        result = await call(bridge, "keyed")
        assert not result.is_error, result.content


async def test_schemes_of_one_requirement_that_use_one_place_send_one_credential_and_say_so(
    tmp_path, caplog
):
    """conjur's document requires an apiKey scheme named `Authorization` together with HTTP basic:
    the second credential overwrote the first without a word. Two apiKey schemes of one query
    name were both sent (`?key=a&key=b`), and a server reads one."""
    schemes = {
        "token": {"type": "apiKey", "in": "header", "name": "Authorization"},
        "basic": {"type": "http", "scheme": "basic"},
        "k1": {"type": "apiKey", "in": "query", "name": "key"},
        "k2": {"type": "apiKey", "in": "query", "name": "key"},
    }
    doc = _document(
        {
            "/secrets": {
                "get": {
                    "operationId": "secrets",
                    "security": [{"token": [], "basic": []}],
                    "responses": _OK,
                }
            },
            "/search": {
                "get": {
                    "operationId": "search",
                    "security": [{"k1": [], "k2": []}],
                    "responses": _OK,
                }
            },
        },
        components={"securitySchemes": schemes},
    )
    spec = _write(tmp_path, doc)
    token = {"type": "apiKey", "scheme": "token", "value": 'Token token="abc"'}
    basic = {"type": "basic", "username": "ann", "password": SECRETS["password"]}
    keys = [
        {"type": "apiKey", "scheme": "k1", "value": "first"},
        {"type": "apiKey", "scheme": "k2", "value": "second"},
    ]
    async with recording_server() as (seen, base):
        with caplog.at_level(logging.WARNING, logger="adapters.openapi"):
            async with bridge_for(spec, base_url=base, auth=[token, basic, *keys]) as bridge:
                clashes = (await upstream_of(bridge).health())["security_clashes"]
                assert not (await call(bridge, "secrets")).is_error
                assert not (await call(bridge, "search")).is_error
        assert clashes == [
            "security requirement token + basic of 1 operation(s) (GET /secrets) puts token and basic in one place, the "
            "Authorization header, which a request carries once: token's credential is sent, not basic's (the first the "
            "requirement names) (a document meaning either lists them as separate alternatives)",
            "security requirement k1 + k2 of 1 operation(s) (GET /search) puts k1 and k2 in one place, the query parameter "
            "key, which a request carries once: k1's credential is sent, not k2's (the first the requirement names) (a "
            "document meaning either lists them as separate alternatives)",
        ]
        assert clashes[0] in caplog.text
        assert seen[0].headers.getall("Authorization") == ['Token token="abc"']
        assert seen[1].query.getall("key") == ["first"]
        # a credential for one of them meets the requirement: the other could not be sent anyway
        async with bridge_for(spec, base_url=base, auth=[basic]) as bridge:
            assert not (await call(bridge, "secrets")).is_error
            assert (
                "basic's credential is sent and meets the requirement"
                in (await upstream_of(bridge).health())["security_clashes"][0]
            )
        assert seen[2].headers.getall("Authorization") == [
            "Basic " + base64.b64encode(f"ann:{SECRETS['password']}".encode()).decode()
        ]


async def test_missing_credentials_fail_before_the_request(api):
    _state, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["authBearer"]) as bridge:
        result = await call(bridge, "authBearer")
    assert result.is_error and result.error.error_class == "credential_missing"
    assert result.error.recoverability == "setup" and "bearer" in result.error.message


async def test_wrong_oauth_client_secret_is_a_setup_error_without_the_secret(api):
    _, base = api
    auth = {"type": "oauth2", "client_id": "cid", "client_secret": "not-the-Secret-x"}
    async with bridge_for(
        "service_31.yaml", base_url=base, auth=auth, include=["authOauth"]
    ) as bridge:
        result = await call(bridge, "authOauth")
    assert (
        result.error.error_class == "credential_missing"
        and "invalid_client" in result.error.message
    )
    assert "not-the-Secret-x" not in json.dumps(result.to_json())


async def test_secrets_never_in_results_errors_or_logs(api, caplog):
    caplog.set_level(logging.DEBUG)
    _, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, auth=_auth(), include=["authLeak", "authQuery"]
    ) as bridge:
        result = await call(bridge, "authLeak")
        assert result.is_error and result.error.error_class == "invalid_arguments"
        assert "***" in result.error.message
        dumped = json.dumps(result.to_json()) + json.dumps(
            [d.to_json() for d in bridge.catalog.declarations()]
        )
        dumped += repr(upstream_of(bridge).config) + json.dumps(await upstream_of(bridge).health())
        ok = await call(bridge, "authQuery")
        dumped += json.dumps(ok.to_json())
    ours = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith("aiohttp.access")
    )  # not the test server's
    for secret in SECRETS.values():
        assert secret not in dumped
        assert secret not in ours
        assert base64.b64encode(f"ann:{secret}".encode()).decode() not in dumped


# ---------------------------------------------------------------------------- errors, retries, timeouts


async def test_problem_body_becomes_an_error_envelope(api):
    _, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["problem"]) as bridge:
        result = await call(bridge, "problem")
    assert result.is_error and result.status == "rejected"
    err = result.error
    assert err.error_class == "invalid_arguments" and err.recoverability == "change_arguments"
    assert err.error_code == "https://example.test/problems/invalid-pet"
    assert err.details["http_status"] == 422 and err.details["problem"]["errors"] == [
        {"pointer": "/name"}
    ]
    assert "Invalid pet: name must not be empty" in err.message
    assert err.native_error_ref["status"] == 422


async def test_answers_nesting_past_the_json_reader_are_said_not_tracebacks(tmp_path, caplog):
    deep = b"[" * 5000 + b"]" * 5000  # past Python's JSON reader (about a thousand levels)

    async def answer(request: web.Request) -> web.Response:
        return web.Response(
            body=deep,
            status=200 if request.path == "/deep" else 500,
            content_type="application/json",
        )

    app = web.Application()
    app.router.add_get("/deep", answer)
    app.router.add_get("/deep_problem", answer)
    doc = _document(
        {
            "/deep": {"get": {"operationId": "deep", "responses": _OK}},
            "/deep_problem": {"get": {"operationId": "deep_problem", "responses": _OK}},
        }
    )
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge_for(
            _write(tmp_path, doc), base_url=str(http.make_url("")).rstrip("/"), retries={"count": 0}
        ) as bridge,
    ):
        result = await call(bridge, "deep")
        assert (
            result.error.error_class == "execution_failed"
            and "nests too deep to read" in result.error.message
        )
        problem = await call(bridge, "deep_problem")
        assert problem.error.details["http_status"] == 500 and problem.error.details[
            "problem"
        ].startswith("[[[")  # kept as text
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


async def test_a_compressed_answer_is_limited_by_its_decompressed_size(tmp_path):
    # 32 KB of gzip that inflates to 32 MB: its Content-Length is far under the limit
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = packer.compress(b"0" * (32 << 20)) + packer.flush()
    assert len(bomb) < 1 << 20

    async def answer(request: web.Request) -> web.Response:
        return web.Response(
            body=bomb, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"}
        )

    app = web.Application()
    app.router.add_get("/bomb", answer)
    doc = _document({"/bomb": {"get": {"operationId": "bomb", "responses": _OK}}})
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge_for(
            _write(tmp_path, doc),
            base_url=str(http.make_url("")).rstrip("/"),
            max_response_bytes=1 << 20,
        ) as bridge,
    ):
        result = await call(bridge, "bomb")
    assert (
        result.error.error_class == "result_too_large"
        and "max_response_bytes=1048576" in result.error.message
    )


async def test_configured_headers_that_carry_a_credential_are_masked_in_what_calls_return(tmp_path):
    async def echo(request: web.Request) -> web.Response:  # a server that echoes what it was sent
        return web.json_response(
            {"sent": {k: v for k, v in request.headers.items() if k.startswith("X-")}}
        )

    app = web.Application()
    app.router.add_get("/echo", echo)
    doc = _document({"/echo": {"get": {"operationId": "echo", "responses": _OK}}})
    headers = {"X-Api-Token": "hdr-secret-123", "X-GitHub-Api-Version": "2022-11-28"}
    async with (
        TestServer(app, host="127.0.0.1") as http,
        bridge_for(
            _write(tmp_path, doc), base_url=str(http.make_url("")).rstrip("/"), headers=headers
        ) as bridge,
    ):
        result = await call(bridge, "echo")
    assert result.structured_content["sent"] == {
        "X-Api-Token": "***",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    assert "hdr-secret-123" not in json.dumps(result.to_json())


async def test_a_token_endpoint_that_redirects_never_gets_the_client_secret_sent_on(tmp_path):
    stolen: list[str] = []

    async def steal(request: web.Request) -> web.Response:
        stolen.append(await request.text())
        return web.json_response({"access_token": "t", "expires_in": 60})

    elsewhere = web.Application()
    elsewhere.router.add_post("/token", steal)
    async with TestServer(elsewhere, host="127.0.0.1") as other:

        async def token(
            request: web.Request,
        ) -> web.Response:  # 307: a client following it posts the form again
            raise web.HTTPTemporaryRedirect(str(other.make_url("/token")))

        app = web.Application()
        app.router.add_post("/oauth/token", token)

        async def notes(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app.router.add_get("/notes", notes)
        doc = _document(
            {
                "/notes": {
                    "get": {"operationId": "notes", "security": [{"oauth": []}], "responses": _OK}
                }
            },
            components={
                "securitySchemes": {
                    "oauth": {
                        "type": "oauth2",
                        "flows": {"clientCredentials": {"tokenUrl": "/oauth/token", "scopes": {}}},
                    }
                }
            },
        )
        auth = {
            "type": "oauth2",
            "client_id": "cid",
            "client_secret": "the-client-secret",
            "client_auth": "body",
        }
        async with (
            TestServer(app, host="127.0.0.1") as http,
            bridge_for(
                _write(tmp_path, doc), base_url=str(http.make_url("")).rstrip("/"), auth=auth
            ) as bridge,
        ):
            result = await call(bridge, "notes")
    assert result.error.recoverability == "setup" and "HTTP 307, a redirect" in result.error.message
    assert stolen == []


async def test_get_retried_on_503_with_retry_after(api):
    state, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["flaky*"]) as bridge:
        result = await call(bridge, "flakyRead", {"key": "a", "fail": 2, "retry_after": "0"})
        assert not result.is_error and result.structured_content == {"attempts": 3}
        # more failures than retries: the last 503 comes back, Retry-After passed on
        result = await call(bridge, "flakyRead", {"key": "b", "fail": 9, "retry_after": "0"})
        assert (
            result.error.error_class == "dependency_unavailable" and result.error.retry_after == 0
        )
        assert state.hits["GET b"] == 3
        # a Retry-After longer than retries.max_retry_after is handed to the caller at once
        result = await call(bridge, "flakyRead", {"key": "c", "fail": 1, "retry_after": "120"})
        assert result.error.retry_after == 120 and result.error.recoverability == "retry_later"
        assert state.hits["GET c"] == 1


async def test_a_call_the_upstream_is_closed_under_is_dependency_unavailable(api, caplog):
    """A call waiting to retry when its upstream is closed (the catalog reconnects it: its
    launched process exited) ends as `dependency_unavailable`, not as a bridge fault."""
    state, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, include=["flaky*"], retries={"count": 3, "backoff": 0.5}
    ) as bridge:
        running = asyncio.create_task(call(bridge, "flakyRead", {"key": "z", "fail": 9}))
        await until(lambda: state.hits.get("GET z") == 1)
        await upstream_of(bridge).close()
        result = await running
        assert (
            result.error.error_class == "dependency_unavailable"
            and "not connected" in result.error.message
        )
        assert state.hits["GET z"] == 1
    assert "Traceback" not in caplog.text


async def test_post_never_retried(api):
    state, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["flaky*"]) as bridge:
        result = await call(bridge, "flakyWrite", {"key": "p", "fail": 1, "retry_after": "3"})
    assert result.is_error and result.error.retry_after == 3
    assert state.hits["POST p"] == 1


async def test_429_passes_retry_after_on_without_retrying(api):
    state, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["rateLimited"]) as bridge:
        result = await call(bridge, "rateLimited")
    assert result.error.error_class == "rate_limited" and result.error.retry_after == 7
    assert result.error.recoverability == "retry_later" and state.hits["limited"] == 1


async def test_connection_errors_retried_then_reported(api):
    _, _base = api
    # nothing listens on port 1 of loopback
    async with bridge_for(
        "service_31.yaml",
        base_url="http://127.0.0.1:1",
        include=["numbers"],
        retries={"count": 1, "backoff": 0.01},
    ) as bridge:
        result = await call(bridge, "numbers")
    assert (
        result.error.error_class == "dependency_unavailable"
        and result.error.recoverability == "retry_later"
    )


async def test_timeout(api):
    _, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, include=["slow"], timeout=0.3
    ) as bridge:
        result = await call(bridge, "slow")
    assert (
        result.is_error and result.error.error_class == "timeout" and result.status == "timed_out"
    )


async def test_binary_response_is_a_resource(api):
    _, base = api
    async with bridge_for("service_31.yaml", base_url=base, include=["download"]) as bridge:
        result = await call(bridge, "download")
    assert not result.is_error
    resource = result.content[1]
    assert resource["type"] == "resource" and resource["_meta"]["size"] == len(PNG)
    assert (
        resource["resource"]["mimeType"] == "image/png"
        and base64.b64decode(resource["resource"]["blob"]) == PNG
    )
    assert (
        result.structured_content["size"] == len(PNG)
        and result.structured_content["media_type"] == "image/png"
    )


async def test_one_pooled_connection_is_reused(api):
    state, base = api
    async with bridge_for("styles_30.yaml", base_url=base + "/v1", include=["queryForm"]) as bridge:
        for i in range(5):
            assert not (await call(bridge, "queryForm", {"p": i})).is_error
    assert len(state.peers) == 1


# ---------------------------------------------------------------------------- safety hints


async def test_safety_hints_inferred_from_methods_and_declared_by_extensions(api):
    _, base = api
    async with bridge_for(
        "service_31.yaml", base_url=base, include=["numbers", "flaky*", "purge", "search"]
    ) as bridge:
        get = bridge.catalog.resolve("svc__numbers").safety
        assert (get.read_only, get.idempotent, get.destructive) == (True, True, False)
        assert get.sources["read_only"] == "inferred"
        post = bridge.catalog.resolve("svc__flakyWrite").safety
        assert (post.read_only, post.idempotent) == (False, False)
        purge = bridge.catalog.resolve("svc__purge").safety
        assert purge.destructive and purge.idempotent
        assert (
            purge.sources["destructive"] == "declared" and purge.sources["read_only"] == "inferred"
        )
        search = bridge.catalog.resolve("svc__search").safety
        assert search.read_only and search.sources["read_only"] == "declared"


async def test_delete_is_destructive_and_idempotent(api):
    _, base = api
    async with bridge_for(
        "styles_30.yaml", base_url=base, include=[{"method": "delete"}]
    ) as bridge:
        (decl,) = bridge.catalog.declarations()
    assert (decl.safety.destructive, decl.safety.idempotent, decl.safety.read_only) == (
        True,
        True,
        False,
    )


async def test_upstream_used_directly_outside_a_bridge(api):
    _, base = api
    config = OpenAPIConfig(
        name="direct",
        spec="service_31.yaml",
        base_url=base,
        include=["numbers"],
        base_dir=str(FIXTURES),
    )
    async with OpenAPIUpstream(config) as upstream:
        (tool,) = await upstream.list_tools()
        result = await upstream.invoke(
            tool.native_id, {}, CallContext(invocation_id="inv_1", timeout=5)
        )
        assert result.structured_content == {"result": [1, 2, 3]}
        assert result.meta["http"]["status"] == 200
    with pytest.raises(BridgeError, match="not started"):
        await upstream.invoke(tool.native_id, {}, CallContext(invocation_id="inv_2", timeout=5))


REDIRECTS_SPEC = """
openapi: 3.1.0
info: {title: redirects, version: "1"}
components:
  securitySchemes:
    header_key: {type: apiKey, in: header, name: X-API-Key}
    bearer: {type: http, scheme: bearer}
security: [{header_key: [], bearer: []}]
paths:
  /hop/same: {get: {operationId: hopSame, responses: {"200": {description: ok}}}}
  /hop/away: {get: {operationId: hopAway, responses: {"200": {description: ok}}}}
  /hop/post:
    post:
      operationId: hopPost
      requestBody: {content: {application/json: {schema: {type: object}}}}
      responses: {"200": {description: ok}}
"""


async def test_credentials_never_follow_a_redirect_to_another_origin():
    async def seen(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "method": request.method,
                "key": request.headers.get("X-API-Key"),
                "auth": request.headers.get("Authorization"),
                "vendor": request.headers.get("X-Vendor-Token"),
                "host": request.host,
            }
        )

    document_fetches: list[dict[str, str]] = []

    async def document(request: web.Request) -> web.Response:
        document_fetches.append(dict(request.headers))
        return web.Response(text=REDIRECTS_SPEC, content_type="application/yaml")

    other = web.Application()
    other.router.add_get("/landing", seen)
    other.router.add_get("/redirects.yaml", document)
    async with TestServer(other, host="127.0.0.1") as elsewhere:
        landing = str(elsewhere.make_url("/landing"))

        def to(location: str, status: int) -> Any:
            async def handler(request: web.Request) -> web.Response:
                return web.Response(status=status, headers={"Location": location})

            return handler

        app = web.Application()
        app.router.add_get("/hop/same", to("/checked", 307))
        app.router.add_get("/checked", seen)
        app.router.add_get("/hop/away", to(landing, 302))
        app.router.add_post("/hop/post", to(landing, 303))
        async with TestServer(app, host="127.0.0.1") as origin:
            auth = [
                {"type": "apiKey", "scheme": "header_key", "value": SECRETS["api"]},
                {"type": "bearer", "scheme": "bearer", "token": SECRETS["bearer"]},
            ]
            # the configured headers are the API's too: a vendor token there stays on its origin
            async with bridge_for(
                str(elsewhere.make_url("/redirects.yaml")),
                base_url=str(origin.make_url("")).rstrip("/"),
                auth=auth,
                headers={"X-Vendor-Token": "vendor-token-1"},
            ) as bridge:
                same = (await call(bridge, "hopSame")).structured_content
                # same origin: the credentials arrived (and the server's echo of them is redacted,
                # the vendor token's too: its header's name says it is one)
                assert (same["key"], same["auth"], same["vendor"]) == ("***", "Bearer ***", "***")
                away = await call(bridge, "hopAway")
                assert (
                    not away.is_error
                    and away.structured_content["host"] == elsewhere.make_url("").raw_authority
                )
                assert (
                    away.structured_content["key"],
                    away.structured_content["auth"],
                    away.structured_content["vendor"],
                ) == (None, None, None)
                posted = (await call(bridge, "hopPost", {"body": {"a": 1}})).structured_content
                assert posted["method"] == "GET" and (
                    posted["key"],
                    posted["auth"],
                    posted["vendor"],
                ) == (None, None, None)
    # the document, on another origin than the API, was fetched without them
    assert document_fetches and all("X-Vendor-Token" not in headers for headers in document_fetches)


@pytest.mark.parametrize(
    "location",
    ["file:///etc/passwd", "mailto:ops@example.invalid", "http://[::1/x", "https://host:99999/"],
)
async def test_a_redirect_to_no_http_url_is_refused_clearly_without_a_traceback(
    location: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def away(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": location})

    app = web.Application()
    app.router.add_get("/hop/same", away)
    async with TestServer(app, host="127.0.0.1") as server:
        operation = {"operationId": "hopSame", "responses": {"200": {"description": "ok"}}}
        spec = {
            "openapi": "3.1.0",
            "info": {"title": "hops", "version": "1"},
            "servers": [{"url": str(server.make_url(""))}],
            "paths": {"/hop/same": {"get": operation}},
        }
        (tmp_path / "hops.json").write_text(json.dumps(spec))
        async with bridge_for(str(tmp_path / "hops.json")) as bridge:
            result = await call(bridge, "hopSame")
    assert result.status == "failed" and result.error.error_class == "execution_failed"
    assert result.error.error_code == "redirect_refused"
    assert result.error.details == {"status": 302, "location": location}
    said = f"the server redirected (HTTP 302) to {location!r}, which is not an http(s) URL"
    assert result.error.message == f"GET /hop/same: {said}; it was not followed"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# ---------------------------------------------------------------------------- launched service, reloads


async def until(predicate: Any, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_launched_demo_service_end_to_end_and_back_after_a_crash():
    from tests.servers import free_port

    port = free_port()
    root = Path(__file__).resolve().parents[2]
    async with bridge_for(
        str(root / "bridge" / "demo" / "openapi_demo.yaml"),
        base_url=f"http://127.0.0.1:{port}",
        retry_initial=0.05,
        retries={"count": 0},
        auth={"type": "apiKey", "value": "launch-Secret-1"},
        launch={
            "command": "python",
            "args": ["-m", "bridge.demo.openapi_service", "--port", str(port)],
            "cwd": str(root),
            "env": {"DEMO_API_KEY": "launch-Secret-1"},
        },
    ) as bridge:
        slot = bridge.catalog.slot("svc")
        assert slot.health.state == "ready", slot.health.reason
        created = await call(bridge, "createNote", {"title": "milk", "tags": ["shop"]})
        assert created.status == "succeeded" and created.structured_content["id"] == 1
        listed = await call(bridge, "listNotes", {"tag": "shop"})
        assert [n["title"] for n in listed.structured_content["result"]] == ["milk"]
        assert (await call(bridge, "deleteNote", {"id": 1})).content == [
            {"type": "text", "text": "HTTP 204 No Content"}
        ]
        missing = await call(bridge, "getNote", {"id": 1})
        assert missing.error.details["problem"]["title"] == "Not found"
        # the service dies: the upstream is unavailable at once with the exit, and relaunched
        states: list[tuple[str, str | None]] = []
        bridge.catalog.subscribe(
            lambda change: (
                states.append((slot.health.state, slot.health.reason))
                if change.state_changed
                else None
            )
        )
        assert slot.sidecar is not None and slot.sidecar.process is not None
        slot.sidecar.process.kill()
        await slot.sidecar.process.wait()
        await until(lambda: slot.health.state == "ready" and slot.sidecar.running and states)
        assert (
            states[0][0] == "unavailable" and "launched process exited with code -9" in states[0][1]
        ), states
        assert (await call(bridge, "listNotes")).structured_content == {"result": []}


async def test_changed_document_is_reloaded_on_refresh(tmp_path):
    spec = tmp_path / "api.yaml"
    text = (FIXTURES / "service_31.yaml").read_text()
    spec.write_text(text)
    upstream = OpenAPIUpstream(
        OpenAPIConfig(
            name="live", spec=str(spec), base_url="http://127.0.0.1:1", include=["numbers"]
        )
    )
    async with upstream:
        assert [t.name for t in await upstream.list_tools()] == ["numbers"]
        assert [t.name for t in await upstream.list_tools()] == [
            "numbers"
        ]  # unchanged file: not re-read
        spec.write_text(text.replace("operationId: numbers", "operationId: numbersV2"))
        upstream.config.include = ["numbers*"]
        assert [t.name for t in await upstream.list_tools()] == ["numbersV2"]
        # a document that cannot be read (half written, say) keeps the one read before, said in health
        spec.write_text(text[: len(text) // 2] + "\n  bad: [")
        assert [t.name for t in await upstream.list_tools()] == ["numbersV2"]
        assert "document_kept_over" in await upstream.health()
        spec.write_text(text)
        assert [t.name for t in await upstream.list_tools()] == ["numbers"]
        assert "document_kept_over" not in await upstream.health()


def _values(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + sum(_values(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_values(v) for v in node)
    return 1


async def test_an_output_schema_of_objects_naming_one_another_is_cut_to_its_top_level(tmp_path):
    # Stripe's objects name one another (an expandable field is an id or the object): its 452
    # tools listed 317 MB of output schemas, and starting the upstream took 5.5 s and 1.4 GB
    def obj(i: int) -> dict[str, Any]:
        props: dict[str, Any] = {"id": {"type": "string", "description": f"id of object {i}"}}
        props.update({f"field_{k}": {"type": "string", "maxLength": 40} for k in range(30)})
        props.update(
            {
                f"link_{j}": {
                    "anyOf": [{"type": "string"}, {"$ref": f"#/components/schemas/Obj{j}"}],
                    "description": f"object {j}",
                }
                for j in range(i + 1, min(i + 4, 60))
            }
        )
        return {
            "type": "object",
            "properties": props,
            "required": ["id"],
            "description": f"object {i}",
        }

    answer = {
        "type": "object",
        "properties": {
            "data": {"$ref": "#/components/schemas/Obj0"},
            "small": {"$ref": "#/components/schemas/Small"},
        },
    }
    schemas = {f"Obj{i}": obj(i) for i in range(60)} | {
        "Small": {"type": "object", "properties": {"n": {"type": "integer"}}}
    }
    doc = _document(
        {
            "/things/{id}": {
                "get": {
                    "operationId": "getThing",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {"application/json": {"schema": answer}},
                        }
                    },
                }
            },
            "/small": {
                "get": {
                    "operationId": "getSmall",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Small"}
                                }
                            },
                        }
                    },
                }
            },
        },
        components={"schemas": schemas},
    )
    async with bridge_for(
        _write(tmp_path, doc), base_url="http://127.0.0.1:1", validate_spec="off"
    ) as bridge:
        cut = bridge.catalog.resolve("svc__getThing").output_schema
        assert _values(cut) < 200 and "$defs" not in cut
        assert (
            set(cut["properties"]) == {"data", "small"}
            and "left out as too large" in cut["description"]
        )
        assert cut["properties"]["data"] == {
            "description": "its schema is left out as too large"
        }  # it refers
        assert cut["properties"]["small"] == {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
        }  # small: whole
        # every answer the whole schema accepts, the cut one accepts
        good = {
            "data": {"id": "o0", "field_1": "x", "link_1": {"id": "o1", "link_2": "o2"}},
            "small": {"n": 1},
        }
        assert not list(jsonschema.Draft202012Validator(cut).iter_errors(good))
        small = bridge.catalog.resolve("svc__getSmall").output_schema  # a small one is whole
        assert small["properties"] == {"n": {"type": "integer"}}


def test_a_pattern_python_warns_about_is_read_without_the_warning():
    # `[[` made Python print "FutureWarning: Possible nested set" on reading the document
    import warnings

    from adapters.openapi.keywords import python_reads

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert python_reads("^[[a-z]+$") and not python_reads("^\\p{L}+$")


async def test_a_start_says_what_it_is_doing_while_it_maps_the_document(monkeypatch):
    # the catalog gives an upstream's phase as the reason it is still connecting
    from adapters.openapi import upstream as adapter

    seen: list[str | None] = []
    mapping = adapter.map_operations

    def recorded(*args: Any, **kwargs: Any) -> Any:
        kwargs["on_phase"]("mapping 3 operations")
        seen.append(upstream.phase)
        return mapping(*args, **kwargs)

    monkeypatch.setattr(adapter, "map_operations", recorded)
    upstream = OpenAPIUpstream(
        OpenAPIConfig(
            name="svc", spec=str(FIXTURES / "service_31.yaml"), base_url="http://127.0.0.1:1"
        )
    )
    async with upstream:
        assert (
            seen == ["mapping 3 operations"] and upstream.phase is None
        )  # said while mapping, not after


def test_mapping_tells_how_many_operations_it_maps():
    from adapters.openapi.operations import map_operations
    from adapters.openapi.spec import parse_document

    path = FIXTURES / "service_31.yaml"
    doc = parse_document(path.read_text(), path.as_uri(), str(path))
    phases: list[str] = []
    _, tools = map_operations(
        doc, base_url="http://127.0.0.1:1", include=["numbers"], on_phase=phases.append
    )
    assert phases == ["mapping 1 operation"] and len(tools) == 1


async def test_the_parsed_document_is_let_go_once_mapped(monkeypatch):
    # its parsed form is several times its text (Microsoft Graph beta's 47 MB), and the tools,
    # operations, security schemes and version are all a started upstream needs of it
    import gc
    import weakref

    from adapters.openapi import upstream as adapter

    parsed: list[weakref.ref[Any]] = []
    parse = adapter.parse_document

    def recorded(*args: Any, **kwargs: Any) -> Any:
        document = parse(*args, **kwargs)
        parsed.append(weakref.ref(document))
        return document

    monkeypatch.setattr(adapter, "parse_document", recorded)
    upstream = OpenAPIUpstream(
        OpenAPIConfig(
            name="svc",
            spec=str(FIXTURES / "service_31.yaml"),
            base_url="http://127.0.0.1:1",
            auth={"type": "apiKey", "value": "k"},
        )
    )
    async with upstream:
        gc.collect()
        assert len(parsed) == 1 and parsed[0]() is None
        assert (await upstream.health())["openapi"].startswith(
            "3.1"
        ) and upstream.credentials is not None
        assert len(await upstream.list_tools()) > 1


async def test_a_start_past_start_timeout_leaves_its_mapping_to_the_next_start(monkeypatch):
    # a document that takes longer to map than start_timeout (Microsoft Graph's beta on a busy
    # host): each attempt started a mapping of its own beside the one still running, which then
    # took longer still, and the upstream never came up
    import time as clock

    from adapters.openapi import upstream as adapter

    mapped: list[float] = []
    mapping = adapter.map_operations

    def slow(*args: Any, **kwargs: Any) -> Any:
        kwargs["on_phase"]("mapping 3 operations")
        mapped.append(clock.monotonic())
        clock.sleep(1.5)
        return mapping(*args, **kwargs)

    monkeypatch.setattr(adapter, "map_operations", slow)
    async with bridge_for(
        "service_31.yaml",
        base_url="http://127.0.0.1:1",
        start_timeout=1.0,
        retry_initial=0.1,
        retry_max=0.2,
    ) as bridge:
        slot = bridge.catalog.slot("svc")
        assert (
            slot.health.state == "failed"
            and "no answer within start_timeout=1.0s (still mapping 3 operations)"
            in slot.health.reason
        )
        await until(lambda: slot.health.state == "ready", timeout=10)
        assert (
            len(mapped) == 1 and len(bridge.catalog) > 1
        )  # the attempts after the first waited for its mapping
