"""Round trip: a second bridge federates the first bridge's MCP endpoint as an `mcp` upstream and
calls a tool that lives on an OpenAPI upstream of the first (a real HTTP API on loopback), in
both protocol eras of the hop between the bridges, with the first bridge's bearer token."""

from __future__ import annotations

import textwrap

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bridge.config import parse_config
from bridge.runtime import Bridge
from bridge.serve.mcp import MCPFrontend
from tests.servers import serve_asgi

SPEC = textwrap.dedent(
    """
    openapi: 3.1.0
    info: {title: Pets, version: "1"}
    paths:
      /pets/{petId}:
        get:
          operationId: getPetById
          summary: Get a pet by its id
          parameters:
            - {name: petId, in: path, required: true, schema: {type: integer}}
          responses:
            "200":
              description: the pet
              content:
                application/json:
                  schema:
                    type: object
                    properties: {id: {type: integer}, name: {type: string}}
                    required: [id, name]
            "404": {description: no such pet}
    """
)
TOKEN = "roundtrip-token-0001"


async def get_pet(request: Request) -> JSONResponse:
    pet_id = int(request.path_params["pet_id"])
    if pet_id != 7:
        return JSONResponse({"detail": "no such pet"}, status_code=404)
    return JSONResponse({"id": pet_id, "name": "Rex"})


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_second_bridge_calls_an_openapi_tool_of_the_first_over_mcp(tmp_path, protocol):
    (tmp_path / "pets.yaml").write_text(SPEC)
    pets_api = Starlette(routes=[Route("/pets/{pet_id:int}", get_pet)])
    async with serve_asgi(pets_api) as api_url:
        first = Bridge(
            parse_config(
                {
                    "server": {"tokens": [{"token": TOKEN}]},
                    "store": {"path": ":memory:"},
                    "upstreams": [
                        {
                            "name": "pets",
                            "kind": "openapi",
                            "spec": "pets.yaml",
                            "base_url": api_url,
                        }
                    ],
                },
                base_dir=str(tmp_path),
            )
        )
        await first.start()
        frontend = MCPFrontend(first)
        try:
            assert first.catalog.slot("pets").health.state == "ready", first.catalog.slot(
                "pets"
            ).health.reason
            (pet_tool,) = [d for d in first.catalog.declarations() if d.upstream == "pets"]
            async with serve_asgi(frontend.http_app([], host="127.0.0.1")) as first_url:
                second = Bridge(
                    parse_config(
                        {
                            "store": {"path": ":memory:"},
                            "upstreams": [
                                {
                                    "name": "first",
                                    "kind": "mcp",
                                    "url": f"{first_url}/mcp",
                                    "protocol": protocol,
                                    "headers": {"Authorization": f"Bearer {TOKEN}"},
                                }
                            ],
                        }
                    )
                )
                await second.start()
                try:
                    assert second.catalog.slot("first").health.state == "ready", (
                        second.catalog.slot("first").health.reason
                    )
                    (federated,) = [
                        d for d in second.catalog.declarations() if d.native_name == pet_tool.name
                    ]
                    assert federated.name == f"first__{pet_tool.name}"
                    assert federated.input_schema["required"] == pet_tool.input_schema["required"]
                    assert (
                        federated.safety.read_only
                    )  # GET: inferred read-only, rendered, parsed back

                    result = await second.invoker.invoke(federated.name, {"petId": 7})
                    assert not result.is_error, result.content
                    assert result.structured_content == {"id": 7, "name": "Rex"}

                    missing = await second.invoker.invoke(federated.name, {"petId": 8})
                    assert missing.is_error
                    bad = await second.invoker.invoke(federated.name, {"petId": "seven"})
                    assert (
                        bad.is_error
                        and bad.error is not None
                        and bad.error.error_class == "invalid_arguments"
                    )
                finally:
                    await second.close()
        finally:
            await frontend.aclose()
            await first.close()
