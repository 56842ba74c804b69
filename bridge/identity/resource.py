"""What the bridge tells clients about itself as a protected resource: its RFC 9728 metadata,
and the `WWW-Authenticate` challenge (RFC 6750) that points them to it."""

from __future__ import annotations

from typing import Any

from bridge.config import OAuthConfig

__all__ = ["challenge", "resource_metadata"]


def resource_metadata(oauth: OAuthConfig) -> dict[str, Any]:
    """The RFC 9728 document: the resource (the audience tokens must name), the issuer that
    grants them, the scopes the bridge requires, and that tokens go in the Authorization header."""
    document: dict[str, Any] = {
        "resource": oauth.audience,
        "authorization_servers": [oauth.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "a2t-bridge",
    }
    if oauth.scopes_required:
        document["scopes_supported"] = list(oauth.scopes_required)
    return document


def _quoted(value: str) -> str:
    """An auth-param value as a quoted-string: only characters RFC 6750 allows in its
    error_description (printable ASCII but `"` and `\\`)."""
    return '"' + "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in value) + '"'


def challenge(
    *,
    error: str | None,
    description: str | None,
    metadata_url: str | None,
    scopes: list[str] | None = None,
) -> str:
    """`Bearer` with `resource_metadata` (when OAuth is configured), `error` and
    `error_description` (none when the request sent no token, RFC 6750 3.1), and `scope`
    (the scopes the bridge requires)."""
    params = []
    if error:
        params.append(f"error={_quoted(error)}")
        if description:
            params.append(f"error_description={_quoted(description)}")
    if scopes:
        params.append(f"scope={_quoted(' '.join(scopes))}")
    if metadata_url:
        params.append(f"resource_metadata={_quoted(metadata_url)}")
    return "Bearer " + ", ".join(params) if params else 'Bearer realm="bridge"'
