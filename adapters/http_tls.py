"""What a failed check of an HTTP server's certificate says, the same way for every HTTP upstream
(aiohttp's or httpx's): a setup problem that fails again on every attempt, told apart from a
refused or dropped connection, which may not."""

from __future__ import annotations

import ssl

import aiohttp

__all__ = ["SYSTEM_TRUST", "certificate_failure"]

_HOSTNAME_MISMATCH = 62  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH
# how to trust a private CA where the system's CAs check the certificate (read when the bridge starts)
SYSTEM_TRUST = "add the CA that signed it to the system's CAs (or start the bridge with SSL_CERT_FILE naming a bundle that holds it)"


def certificate_failure(exc: BaseException, *, trust: str, address: str, server: str | None = None,
                        verify_tls: bool = True) -> str | None:
    """`the certificate of host:port cannot be verified (<OpenSSL's reason>): <fix>`, or None
    for any other error. `exc` is aiohttp's certificate error, which names host:port, or any
    error caused by an `ssl.SSLCertVerificationError` (httpx's ConnectError), for `server`
    (host:port). `trust` says how to trust a CA the system does not know, `address` names the
    key that gives the server's name; `verify_tls` offers turning the check off."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error: BaseException = exc.certificate_error
        server = f"{exc.host}:{exc.port}"
    else:
        found = _verification_error(exc)
        if found is None or server is None:
            return None
        error = found
    why = getattr(error, "verify_message", None) or str(error) or type(error).__name__
    off = ", or set `verify_tls: false`" if verify_tls else ""
    if getattr(error, "verify_code", None) == _HOSTNAME_MISMATCH:
        fix = f"call the server by a name its certificate holds (`{address}`){off}"
    else:
        fix = f"{trust}{off}"
    return f"the certificate of {server} cannot be verified ({why}): {fix}"


def _verification_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
