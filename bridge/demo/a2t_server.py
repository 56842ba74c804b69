"""A local a2t-dialect server (the Go reference's shapes) for the demo federation: a capabilities
document, two groups of tools, execution with HTTP 200 error objects, and a tool that announces a
new tool through a `tools_added` meta. Run: `python -m bridge.demo.a2t_server --port 9103`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["GROUPS", "TOOLS", "create_app", "main"]

Executor = Callable[[dict[str, Any]], Any]


def _int_args(params: dict[str, Any], *names: str) -> list[int]:
    values = []
    for name in names:
        value = params.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} must be an integer")
        values.append(value)
    return values


def _add(params: dict[str, Any]) -> Any:
    a, b = _int_args(params, "a", "b")
    return a + b


def _divide(params: dict[str, Any]) -> Any:
    a, b = _int_args(params, "a", "b")
    if b == 0:
        raise ValueError("division by zero")
    return a / b


def _multiply(params: dict[str, Any]) -> Any:
    a, b = _int_args(params, "a", "b")
    return a * b


def _weather(params: dict[str, Any]) -> Any:
    city = params.get("city")
    if not isinstance(city, str) or not city:
        raise ValueError("city is required")
    units = params.get("units", "celsius")
    celsius = (
        10 + sum(map(ord, city.lower())) % 20
    )  # deterministic, so demos and tests can check it
    return {
        "city": city,
        "temperature": celsius if units == "celsius" else round(celsius * 9 / 5 + 32),
        "units": units,
    }


_PAIR = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "description": "first operand"},
        "b": {"type": "integer", "description": "second operand"},
    },
    "required": ["a", "b"],
}

TOOLS: dict[str, dict[str, Any]] = {
    "add": {"description": "Add two integers.", "input_schema": _PAIR, "group_id": "math"},
    "divide": {
        "description": "Divide a by b (fails on b = 0).",
        "input_schema": _PAIR,
        "group_id": "math",
    },
    "discover_math": {
        "description": "Discover more math tools (announces `multiply`).",
        "input_schema": {"type": "object", "properties": {}},
        "group_id": "math",
    },
    "get_weather": {
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "city name"},
                "units": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "temperature units",
                },
            },
            "required": ["city"],
        },
        "group_id": "weather",
    },
}
_DYNAMIC = {
    "multiply": {"description": "Multiply two integers.", "input_schema": _PAIR, "group_id": "math"}
}
_EXECUTORS: dict[str, Executor] = {
    "add": _add,
    "divide": _divide,
    "multiply": _multiply,
    "get_weather": _weather,
}
GROUPS = {"math": "Math tools", "weather": "Weather tools"}


def _tool(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, **spec}


def _page(items: list[Any], request: web.Request, default: int) -> tuple[list[Any], dict[str, Any]]:
    offset = int(request.query.get("offset") or 0)
    limit = int(request.query.get("limit") or 0) or default
    page = {"total": len(items), "offset": offset, "limit": limit}
    # the reference omits zero values (omitempty)
    return items[offset : offset + limit], {k: v for k, v in page.items() if v}


def create_app() -> web.Application:
    tools: dict[str, dict[str, Any]] = dict(TOOLS)

    def matching(query: str, group: str | None) -> list[dict[str, Any]]:
        out = [_tool(n, s) for n, s in tools.items() if group is None or s["group_id"] == group]
        if query:
            q = query.lower()
            out = [t for t in out if q in t["name"].lower() or q in t["description"].lower()]
        random.shuffle(out)  # the reference iterates a Go map: order is random per request
        return out

    async def capabilities(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": "1.0",
                "features": {"groups": True, "search": True, "dynamic_tools": True},
                "endpoints": {"tools": "/tools", "groups": "/groups"},
            }
        )

    async def list_tools(request: web.Request) -> web.Response:
        page, meta = _page(matching(request.query.get("q", ""), None), request, 100)
        return web.json_response({"tools": page, **meta})

    async def list_groups(request: web.Request) -> web.Response:
        groups = [
            {"id": g, "name": n, "tool_count": sum(1 for s in tools.values() if s["group_id"] == g)}
            for g, n in GROUPS.items()
        ]
        page, meta = _page(groups, request, 50)
        return web.json_response({"groups": page, **meta})

    async def group_tools(request: web.Request) -> web.Response:
        page, meta = _page(
            matching(request.query.get("q", ""), request.match_info["group"]), request, 100
        )
        return web.json_response({"tools": page, **meta})

    async def execute(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            params = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": "request body must be JSON"}, status=400)
        if (
            isinstance(params, dict)
            and set(params) == {"body"}
            and isinstance(params["body"], dict)
        ):
            params = params["body"]
        if name not in tools:
            return web.json_response(
                {
                    "result": None,
                    "error": {"code": "tool_not_found", "message": f"Tool not found: {name}"},
                }
            )
        if name == "discover_math":
            tools.update(_DYNAMIC)
            added = [_tool(n, s) for n, s in _DYNAMIC.items()]
            return web.json_response(
                {
                    "result": {
                        "result": "Discovered 1 new math tool",
                        "meta": {"type": "tools_added", "tools": added},
                    }
                }
            )
        try:
            value = _EXECUTORS[name](params if isinstance(params, dict) else {})
        except ValueError as exc:
            return web.json_response(
                {"result": None, "error": {"code": "execution_error", "message": str(exc)}}
            )
        return web.json_response({"result": value})

    app = web.Application()
    app.router.add_get("/.well-known/a2t-capabilities.json", capabilities)
    app.router.add_get("/tools", list_tools)
    app.router.add_post("/tools/{name}", execute)
    app.router.add_get("/groups", list_groups)
    app.router.add_get("/groups/{group}/tools", group_tools)
    app.router.add_post("/groups/{group}/tools/{name}", execute)
    return app


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(f"a2t demo server listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a2t-dialect demo server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("PORT", "9103")),
        help="default: $PORT (the bridge sets it for a launch: whose URL names port 0), else 9103",
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args.host, args.port))
    except OSError as exc:
        print(f"a2t demo server: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
