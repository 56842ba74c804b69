"""Who the caller is: a static bearer token from `server.tokens`, or an OAuth access token (a JWT
checked against its issuer's keys, or an opaque token introspected), the surface that identity
is given, and what it decides about each call: its rate limits, and the token an upstream that
acts for the caller is sent."""

from __future__ import annotations

from bridge.identity.admission import Admission, caller_keys
from bridge.identity.authenticate import Authenticator, AuthFailure, Identity
from bridge.identity.resource import challenge, resource_metadata

__all__ = [
    "Admission",
    "AuthFailure",
    "Authenticator",
    "Identity",
    "caller_keys",
    "challenge",
    "resource_metadata",
]
