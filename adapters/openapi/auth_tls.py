"""TLS of an OpenAPI upstream's credentials and documents: the context of an `mtls` credential
(its client certificate), of requests to the API's origin (every `ca_file`), and of the fetch of
a document given as a URL; what a failed check of a server's certificate says."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from adapters.http.tls import ca_file_trust
from adapters.http.tls import certificate_failure as _certificate_failure
from adapters.openapi.auth_config import AuthConfig

__all__ = ["certificate_failure", "client_tls", "document_tls", "origin", "server_tls"]


def client_tls(
    cfg: AuthConfig,
    resolve_path: Callable[[str], str],
    verify: bool,
    index: int,
    upstream_ca: str | None = None,
) -> ssl.SSLContext:
    """The TLS context of an `mtls` credential: its client certificate, and the server checked
    against the system's CAs, its `ca_file` and the upstream's (`upstream_ca`, resolved) unless
    `verify_tls` is off."""
    assert cfg.cert_file is not None
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    files = {"cert_file": cfg.cert_file, "key_file": cfg.key_file, "ca_file": cfg.ca_file}
    paths = {key: resolve_path(value) for key, value in files.items() if value}
    try:
        if "ca_file" in paths and verify:
            context.load_verify_locations(cafile=paths["ca_file"])
        if upstream_ca and verify:
            context.load_verify_locations(cafile=upstream_ca)
        context.load_cert_chain(
            paths["cert_file"],
            paths.get("key_file"),
            password=cfg.password.get_secret_value() if cfg.password else None,
        )
    except (OSError, ssl.SSLError, ValueError) as exc:
        shown = ", ".join(f"{key} {path}" for key, path in paths.items())
        why = (
            "file not found"
            if isinstance(exc, FileNotFoundError)
            else (getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
        )
        raise ValueError(
            f"auth[{index}] (mtls): the client certificate cannot be loaded from {shown}: {why} "
            "(PEM files; a key encrypted with a password needs `password:`)"
        ) from None
    return context


def server_tls(ca_files: list[str]) -> ssl.SSLContext:
    """The TLS context of a request to the API's origin that presents no client certificate:
    the server checked against the system's CAs and those of every `ca_file`."""
    context = ssl.create_default_context()
    for path in ca_files:
        context.load_verify_locations(cafile=path)
    return context


def document_tls(
    configs: list[AuthConfig],
    document_url: str,
    api_url: str | None,
    resolve_path: Callable[[str], str],
    verify_tls: bool = True,
    ca_file: str | None = None,
) -> ssl.SSLContext | None:
    """The TLS context of the fetch of a document given as a URL, and of those its `$ref`s name:
    with `verify_tls: false` no check (the session checks none either, but the `$ref`s are
    read by urllib); on the API's origin (`base_url`'s), the server checked against the
    system's CAs and those of every `ca_file`, no client certificate presented; elsewhere,
    against the system's CAs and those of the upstream's `ca_file` (`ca_file`, as written). None
    with no `ca_file` that applies."""
    if not verify_tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    ca_files = [
        (f"auth[{i}] (mtls) ca_file", cfg.ca_file)
        for i, cfg in enumerate(configs)
        if cfg.kind == "mtls" and cfg.ca_file
    ]
    if api_url is None or origin(document_url) != origin(api_url):
        ca_files = []
    if ca_file:
        ca_files.append(("ca_file", ca_file))
    if not ca_files:
        return None
    try:
        return server_tls([resolve_path(path) for _, path in ca_files])
    except (
        OSError,
        ssl.SSLError,
    ) as exc:  # said as client_tls says it, before the document is read
        shown = ", ".join(f"{key} {resolve_path(path)}" for key, path in ca_files)
        why = (
            "file not found"
            if isinstance(exc, FileNotFoundError)
            else (getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
        )
        raise ValueError(
            f"{shown}: the CA certificates cannot be loaded: {why} (a PEM file)"
        ) from None


def certificate_failure(exc: BaseException, ca_file: str | None = None) -> str | None:
    """What a failed check of the certificate of a server of the API says, with its fix (the
    upstream's `ca_file`, as written, when it has one); None for any other error."""
    return _certificate_failure(exc, trust=ca_file_trust(ca_file), address="base_url")


def origin(url: str | None) -> tuple[str, str, int | None] | None:
    if not url:
        return None
    parts = urlsplit(url)
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        parts.port or {"http": 80, "https": 443}.get(parts.scheme),
    )
