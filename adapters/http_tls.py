"""What a failed check of an HTTP server's certificate says, the same way for every aiohttp
upstream: a setup problem that fails again on every attempt, told apart from a refused or
dropped connection, which may not."""

from __future__ import annotations

import aiohttp

__all__ = ["certificate_failure"]

_HOSTNAME_MISMATCH = 62  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH


def certificate_failure(exc: BaseException, *, trust: str, address: str) -> str | None:
    """`the certificate of host:port cannot be verified (<OpenSSL's reason>): <fix>`, or None
    for any other error. `trust` says how to trust a CA the system does not know, `address`
    names the key that gives the server's name."""
    if not isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return None
    error = exc.certificate_error
    why = getattr(error, "verify_message", None) or str(error) or type(error).__name__
    if getattr(error, "verify_code", None) == _HOSTNAME_MISMATCH:
        fix = f"call the server by a name its certificate holds (`{address}`), or set `verify_tls: false`"
    else:
        fix = f"{trust}, or set `verify_tls: false`"
    return f"the certificate of {exc.host}:{exc.port} cannot be verified ({why}): {fix}"
