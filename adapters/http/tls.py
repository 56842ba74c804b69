"""The trust of an HTTP upstream's TLS connections (the system's CAs, with a `ca_file` added), and
what a failed check of a server's certificate, or a server that speaks no TLS where TLS was
asked for, says, the same way for every HTTP upstream (aiohttp's or httpx's): a setup problem
that fails again on every attempt, told apart from a refused or dropped connection, which may
not."""

from __future__ import annotations

import functools
import os
import ssl
import sys
import urllib.parse
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from pydantic import ValidationInfo

from bridge.model import BridgeError
from bridge.upstream import ConfigValueError

__all__ = [
    "SYSTEM_TRUST",
    "added_cas",
    "ca_file_trust",
    "certificate_failure",
    "configured_ca_file",
    "readable_ca_file",
    "server_of",
    "system_cas",
]

_E = TypeVar("_E", bound=BaseException)
_HOSTNAME_MISMATCH = 62  # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH
# how to trust a private CA where the system's CAs check the certificate (read when the bridge starts)
SYSTEM_TRUST = "add the CA that signed it to the system's CAs (or start the bridge with SSL_CERT_FILE naming a bundle that holds it)"


def ca_file_trust(ca_file: str | None) -> str:
    """How to trust a private CA on an upstream with a `ca_file` key (`ca_file`, its value as
    written, when one is given)."""
    if ca_file:
        return f"add the CA that signed it to `ca_file` ({ca_file}), or to the system's CAs"
    return (
        "give the CA that signed it as `ca_file` (a PEM file, added to the system's CAs), or "
        + SYSTEM_TRUST
    )


def readable_ca_file(written: str | None, base_dir: str) -> str | None:
    """`written` (a `ca_file` as the config gives it, relative to `base_dir`) when it is a PEM
    file of CA certificates; else a ConfigValueError naming the file and the fix."""
    if written is None:
        return None
    path = str(Path(base_dir) / os.path.expanduser(written))  # an absolute path stays as it is
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cafile=path
        )  # no system CAs read: fast
    except ssl.SSLError as exc:
        raise ConfigValueError(
            f"`{written}` holds no PEM CA certificate ({exc.reason or exc}: {path})",
            "give a PEM file of CA certificates (-----BEGIN CERTIFICATE----- blocks)",
        ) from None
    except OSError as exc:
        raise ConfigValueError(
            f"`{written}` cannot be read ({exc.strerror or exc}: {path})",
            "give the path of a PEM file of the CA certificates that sign the server's, relative to the config file's folder",
        ) from None
    return written


def configured_ca_file(value: str | None, info: ValidationInfo) -> str | None:
    """The `ca_file` field validator of every HTTP upstream's config: `readable_ca_file`,
    relative to the config file's folder (`base_dir`)."""
    return readable_ca_file(value, info.data.get("base_dir", "."))


@functools.cache
def system_cas() -> ssl.SSLContext:
    """The TLS context of the httpx clients (MCP over HTTP, A2A) of an upstream without
    `ca_file`, made once: the system's CAs, or SSL_CERT_FILE or SSL_CERT_DIR, as aiohttp's (A2T,
    OpenAPI) check a server; httpx's own default is certifi's bundle, which a CA added to the
    system's lacks. Making one reads the bundle, 30 ms of CPU on the event loop, which each start
    did, so every retry of a server that cannot be reached."""
    return httpx2.create_ssl_context()


def added_cas(path: str, written: str) -> ssl.SSLContext:
    """A TLS context checking servers against the system's CAs (or SSL_CERT_FILE or
    SSL_CERT_DIR) and those of the PEM file `path` (`ca_file`, `written` as the config gives
    it). Made once per version of the file (its path, size and time of change): making one
    reads the system's bundle, 30 ms of CPU. A file gone or changed since the config was read
    fails the start as a setup problem, naming it."""
    try:
        stat = os.stat(path)
        return _added_cas(path, stat.st_mtime_ns, stat.st_size)
    except OSError as exc:  # an ssl.SSLError too
        why = getattr(exc, "reason", None) or exc.strerror or str(exc) or type(exc).__name__
        raise BridgeError(
            f"`ca_file` {written} cannot be loaded ({why}: {path}): give a PEM file of CA certificates",
            error_class="setup_required",
            recoverability="setup",
        ) from None


@functools.lru_cache(maxsize=64)
def _added_cas(path: str, mtime_ns: int, size: int) -> ssl.SSLContext:
    context = httpx2.create_ssl_context()
    context.load_verify_locations(cafile=path)
    return context


def server_of(url: str) -> str:
    """`host:port` of `url` (an IPv6 host in brackets), the port its scheme's when it names
    none: the server a certificate message names. ValueError for a port that is no number."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{f'[{host}]' if ':' in host else host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def certificate_failure(
    exc: BaseException,
    *,
    trust: str,
    address: str,
    server: str | None = None,
    verify_tls: bool = True,
) -> str | None:
    """`the certificate of host:port cannot be verified (<OpenSSL's reason>): <fix>`, or None
    for any other error. `exc` is aiohttp's certificate error, which names host:port, or any
    error caused by an `ssl.SSLCertVerificationError` (httpx's ConnectError), for `server`
    (host:port). `trust` says how to trust a CA the system does not know, `address` names the
    key that gives the server's name; `verify_tls` offers turning the check off.

    A server that answers TLS with something else, plain HTTP most often (an `https://` URL
    naming an `http://` server), fails alike on every attempt too, and is said as such:
    `host:port does not speak TLS (WRONG_VERSION_NUMBER, ...): <fix>`."""
    if (plain := _plain_server(exc, address, server)) is not None:
        return plain
    if (aiohttp := _aiohttp()) and isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error: BaseException = exc.certificate_error
        server = f"{exc.host}:{exc.port}"
    else:
        found = _cause(exc, ssl.SSLCertVerificationError)
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


def _plain_server(exc: BaseException, address: str, server: str | None) -> str | None:
    """What a TLS handshake answered with no TLS says (OpenSSL's WRONG_VERSION_NUMBER: the
    first bytes back were no TLS record), or None. Other TLS errors (an EOF in the handshake,
    say) may not recur, and are left to the caller."""
    if (aiohttp := _aiohttp()) and isinstance(
        exc, aiohttp.ClientConnectorSSLError
    ):  # aiohttp's names host:port; its cause is the SSLError
        server = f"{exc.host}:{exc.port}"
        found = (
            exc.os_error if isinstance(exc.os_error, ssl.SSLError) else _cause(exc, ssl.SSLError)
        )
    else:
        found = _cause(exc, ssl.SSLError)
    if (
        found is None or getattr(found, "reason", None) != "WRONG_VERSION_NUMBER" or server is None
    ):  # aiohttp's errors are SSLErrors, with no reason
        return None
    return (
        f"{server} does not speak TLS (WRONG_VERSION_NUMBER: it answered the handshake with no TLS, plain HTTP most often): "
        f"write `{address}` with http:// if the server serves plain HTTP there, or with the port where it serves HTTPS"
    )


def _aiohttp() -> Any:
    """aiohttp, if loaded: it loads with the first upstream that uses it, and until then no error
    of its can have been raised."""
    return sys.modules.get("aiohttp")


def _cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """`exc`, or the first error it was raised from (or during), that is a `kind`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
