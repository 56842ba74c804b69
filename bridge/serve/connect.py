"""The routes a user's browser takes to connect an account at a `user_oauth` upstream
(bridge/identity/vault.py): `GET /oauth/connect?ticket=…`, the link a `credential_missing`
answer carries, which sends the browser to sign in at the bridge's identity provider;
`GET /oauth/signed-in`, where the provider sends it back, and which sends it on to the vendor
once the user is the one the link was made for; and `GET /oauth/callback`, where the vendor
sends it back. Neither needs the caller's bearer token: the ticket and the state, each
kept for one user and taken once, say whose account it is."""

from __future__ import annotations

from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from bridge.identity.vault import CALLBACK_PATH, CONNECT_PATH, SIGNED_IN_PATH, FlowRefused
from bridge.runtime import Bridge

__all__ = ["connect_routes"]

# the links carry one-time secrets: no cache keeps them, no Referer passes them on
_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _refused(refusal: FlowRefused) -> Response:
    body = {
        "error": {
            "error_class": "permission_denied",
            "error_code": refusal.code,
            "message": refusal.message,
            "recoverability": "setup",
        },
        "status": refusal.status,
    }
    return JSONResponse(body, status_code=refusal.status, headers=_HEADERS)


def connect_routes(bridge: Bridge) -> list[Route]:
    tokens = bridge.admission.user_tokens

    async def connect(request: Request) -> Response:
        try:
            url = await tokens.connect(request.query_params.get("ticket", ""))
        except FlowRefused as refusal:
            return _refused(refusal)
        return RedirectResponse(url, status_code=302, headers=_HEADERS)

    async def signed_in(request: Request) -> Response:
        try:
            url = await tokens.signed_in(dict(request.query_params))
        except FlowRefused as refusal:
            return _refused(refusal)
        return RedirectResponse(url, status_code=302, headers=_HEADERS)

    async def callback(request: Request) -> Response:
        try:
            upstream = await tokens.callback(dict(request.query_params))
        except FlowRefused as refusal:
            return _refused(refusal)
        page = (
            "<!doctype html><title>Connected</title>"
            f"<p>Your account at {escape(upstream)} is connected to the tool bridge. "
            "You can close this window and go back to your assistant.</p>"
        )
        return HTMLResponse(page, headers=_HEADERS)

    return [
        Route(CONNECT_PATH, connect, methods=["GET"]),
        Route(SIGNED_IN_PATH, signed_in, methods=["GET"]),
        Route(CALLBACK_PATH, callback, methods=["GET"]),
    ]
