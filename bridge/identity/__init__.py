"""Who the caller is: a static bearer token from `server.tokens`, or an OAuth access token (a JWT
checked against its issuer's keys, or an opaque token introspected), and the surface that
identity is given."""

from __future__ import annotations

from bridge.identity.authenticate import Authenticator, AuthFailure, Identity
from bridge.identity.resource import challenge, resource_metadata

__all__ = ["AuthFailure", "Authenticator", "Identity", "challenge", "resource_metadata"]
