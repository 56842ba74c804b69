"""What an access token's claims say: its scopes, and the surface a claim picks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["claim_values", "scopes_of", "surface_for"]


def claim_values(claims: Mapping[str, Any], name: str) -> list[str]:
    """The strings a claim holds: a string is one value (the `scope` and `scp` claims, a
    space-separated list by RFC 9068 and RFC 7662, are split), a list gives its strings. A name
    with dots (`realm_access.roles`) reaches into nested objects when no claim has that name."""
    value: Any = claims.get(name)
    if value is None and "." in name:
        value = claims
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return value.split() if name in ("scope", "scp") else [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def scopes_of(claims: Mapping[str, Any]) -> set[str]:
    """The token's scopes: `scope` (a space-separated string), else `scp` (Entra ID: a string,
    Okta: a list)."""
    return set(claim_values(claims, "scope") or claim_values(claims, "scp"))


def surface_for(
    claims: Mapping[str, Any], claim: str | None, surfaces: Mapping[str, str], default: str
) -> str:
    """The surface of the first entry of `surfaces`, in the order the config lists them, whose
    value the claim holds; `default` when none matches (or no claim is configured). The config's
    order, not the token's, decides between several matches, so the issuer cannot reorder a
    caller onto another surface."""
    if claim is None or not surfaces:
        return default
    held = set(claim_values(claims, claim))
    for value, surface in surfaces.items():
        if value in held:
            return surface
    return default
