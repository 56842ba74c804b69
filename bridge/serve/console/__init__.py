"""The designers' console at `/ui`: a page of static assets shipped in the wheel (no build step)
that reads the catalog through the REST API and `/ui/api`, with the caller's own token. The page
itself holds no catalog data, so it is served without a token; every datum behind it is asked
with one, and answered from that token's surface alone."""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bridge.serve.console.api import API_PREFIX, console_api_routes
from bridge.serve.rest_http import ApiError, ServeContext, error_response

__all__ = ["API_PREFIX", "CONSOLE_PATH", "console_routes"]

CONSOLE_PATH = "/ui"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Scripts and styles from the bridge alone, none inline; data only from the bridge's own API.
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _assets() -> dict[str, tuple[bytes, str, str]]:
    """Every asset by file name: (bytes, media type, ETag), read once."""
    out: dict[str, tuple[bytes, str, str]] = {}
    folder = resources.files(__package__).joinpath("assets")
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _MEDIA_TYPES:
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            out[entry.name] = (body, _MEDIA_TYPES[suffix], etag)
    return out


def console_routes(ctx: ServeContext) -> list[BaseRoute]:
    """`GET /ui` (the page), `GET /ui/assets/{name}` and the JSON routes under `/ui/api`."""
    assets = _assets()

    def send(request: Request, name: str) -> Response:
        found = assets.get(name)
        if found is None:
            return error_response(
                ApiError(
                    404,
                    "invalid_arguments",
                    f"no console asset {name[:60]!r}",
                    error_code="route_not_found",
                )
            )
        body, media_type, etag = found
        headers = {**_HEADERS, "ETag": etag}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=media_type, headers=headers)

    async def page(request: Request) -> Response:
        return send(request, "index.html")

    async def asset(request: Request) -> Response:
        return send(request, request.path_params["name"])

    return [
        Route(CONSOLE_PATH, page, methods=["GET"]),
        Route(f"{CONSOLE_PATH}/", page, methods=["GET"]),
        Route(f"{CONSOLE_PATH}/assets/{{name}}", asset, methods=["GET"]),
        *console_api_routes(ctx),
    ]
