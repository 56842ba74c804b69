"""The notes demo service: a small aiohttp app described by `bridge/demo/openapi_demo.yaml` (served at
`/openapi.yaml`), the local upstream of `kind: openapi` in configs/demo.yaml.

    python -m bridge.demo.openapi_service --port 9101

Deleting a note needs the API key in `X-API-Key` (env DEMO_API_KEY, default `demo-key`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = ["build_app", "main"]

SPEC = Path(__file__).with_name("openapi_demo.yaml")
PROBLEM = "application/problem+json"


def _problem(status: int, title: str, detail: str) -> web.Response:
    return web.json_response(
        {"type": "about:blank", "title": title, "status": status, "detail": detail},
        status=status,
        content_type=PROBLEM,
    )


def build_app(api_key: str | None = None) -> web.Application:
    key = api_key or os.environ.get("DEMO_API_KEY", "demo-key")
    notes: dict[int, dict[str, Any]] = {}
    counter = {"next": 1}

    async def list_notes(request: web.Request) -> web.Response:
        tag = request.query.get("tag")
        try:
            limit = int(request.query.get("limit", "20"))
        except ValueError:
            return _problem(400, "Bad limit", "limit must be an integer")
        found = [
            n
            for n in sorted(notes.values(), key=lambda n: -n["id"])
            if tag is None or tag in n["tags"]
        ]
        return web.json_response(found[:limit])

    async def create_note(request: web.Request) -> web.Response:
        try:
            data = await request.json()
        except ValueError:
            return _problem(400, "Bad JSON", "the body is not JSON")
        title = data.get("title") if isinstance(data, dict) else None
        if not isinstance(title, str) or not title.strip():
            return _problem(422, "Invalid note", "a note needs a non-empty title")
        note: dict[str, Any] = {
            "id": counter["next"],
            "title": title,
            "body": str(data.get("body", "")),
            "tags": [str(t) for t in data.get("tags") or []],
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        counter["next"] += 1
        notes[note["id"]] = note
        return web.json_response(note, status=201)

    def _note_id(request: web.Request) -> int | None:
        try:
            return int(request.match_info["id"])
        except ValueError:
            return None

    async def get_note(request: web.Request) -> web.Response:
        note = notes.get(_note_id(request) or -1)
        if note is None:
            return _problem(404, "Not found", f"there is no note {request.match_info['id']}")
        return web.json_response(note)

    async def delete_note(request: web.Request) -> web.Response:
        given = request.headers.get("X-API-Key", "")
        if not hmac.compare_digest(given.encode(), key.encode()):
            return _problem(401, "Unauthorized", "send the service's API key in X-API-Key")
        if notes.pop(_note_id(request) or -1, None) is None:
            return _problem(404, "Not found", f"there is no note {request.match_info['id']}")
        return web.Response(status=204)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def spec(request: web.Request) -> web.Response:
        return web.Response(text=SPEC.read_text(encoding="utf-8"), content_type="application/yaml")

    app = web.Application()
    app.router.add_get("/notes", list_notes)
    app.router.add_post("/notes", create_note)
    app.router.add_get("/notes/{id}", get_note)
    app.router.add_delete("/notes/{id}", delete_note)
    app.router.add_get("/health", health)
    app.router.add_get("/openapi.yaml", spec)
    return app


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(build_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(f"notes demo service listening on http://{host}:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("PORT", "9101")),
        help="default: $PORT (the bridge sets it for a launch: whose URL names port 0), else 9101",
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()
