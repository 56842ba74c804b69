"""Credentials of an OpenAPI upstream: API keys (header, query, cookie), HTTP bearer and basic,
OAuth2 client credentials (their tokens are `oauth2`'s), TLS client certificates (mutualTLS, whose
contexts are `auth_tls`'); which credential an operation gets follows the document's security
requirements. Secret values are held as SecretStr and scrubbed from anything the adapter returns."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urljoin

import aiohttp

from adapters.openapi.auth_config import AuthConfig, setup_error
from adapters.openapi.auth_tls import client_tls, origin, server_tls
from adapters.openapi.oauth2 import OAuth2Token
from adapters.openapi.params import RequestParts
from bridge.masking import SHORTEST_SECRET, masked, masked_value, secret_values

__all__ = ["Credentials", "Redactor", "shown_place"]


class Redactor:
    """Replaces every known secret (and its encoded forms) in text and JSON values with ***."""

    def __init__(self, current: Callable[[], list[str]] = list) -> None:
        self._static: set[str] = set()
        self._dynamic = current  # secrets that change (fetched access tokens)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= SHORTEST_SECRET:
            self._static.update(
                {secret, quote(secret, safe=""), base64.b64encode(secret.encode()).decode()}
            )

    def secrets(self) -> list[str]:
        return secret_values(self._static | {s for s in self._dynamic() if s})

    def text(self, value: str) -> str:
        return masked(value, self.secrets())

    def scrub(self, value: Any) -> Any:
        return masked_value(value, self.secrets())


class _Bound:
    def __init__(
        self,
        config: AuthConfig,
        name: str | None,
        location: str | None,
        token: OAuth2Token | None,
        tls: ssl.SSLContext | None = None,
        index: int = 0,
        scheme: str | None = None,
    ) -> None:
        self.config = config
        self.name = name
        self.location = location
        self.token = token
        self.tls = tls  # mtls: the TLS context presenting the client certificate
        self.index = index  # of the entry under `auth:`
        self.scheme = scheme  # the security scheme it meets; None: sent with every call

    @property
    def place(self) -> tuple[str, str]:
        """Where the credential goes in a request: (`header`, lower-cased name), (`query`, name),
        (`cookie`, name) or (`tls`, `client certificate`)."""
        if self.location is not None and self.name:
            return (self.location, self.name.lower() if self.location == "header" else self.name)
        if self.config.kind == "mtls":
            return ("tls", "client certificate")
        return ("header", "authorization")  # bearer, basic, oauth2


def shown_place(place: tuple[str, str], spelled: str | None = None) -> str:
    """A place of a request in words: `the X-Key header` (`spelled` gives the name's case)."""
    location, key = place
    if location == "header":
        return f"the {'Authorization' if key == 'authorization' else spelled or key} header"
    return {
        "query": f"the query parameter {key}",
        "cookie": f"the cookie {key}",
        "tls": "the TLS client certificate",
    }.get(location, location)


class Credentials:
    """Binds configured credentials to the document's security schemes and adds them to requests."""

    def __init__(
        self,
        configs: list[AuthConfig],
        schemes: dict[str, Any],
        server_url: str | None,
        resolve_path: Callable[[str], str] = str,
        verify_tls: bool = True,
        ca_file: str | None = None,
    ) -> None:
        self._resolve_path = resolve_path
        self._verify_tls = verify_tls
        self._ca_file = ca_file  # the upstream's, as written: added to every context made here
        self.redactor = Redactor(lambda: [value for t in self._tokens for value in t.recent])
        self._by_scheme: dict[str, _Bound] = {}
        self._always: list[_Bound] = []
        self._tokens: list[OAuth2Token] = []
        self._declared = frozenset(schemes)
        self._schemes = schemes
        for i, cfg in enumerate(configs):
            for secret in (cfg.value, cfg.token, cfg.password, cfg.client_secret):
                if secret is not None:
                    self.redactor.add(secret.get_secret_value())
            if cfg.username and cfg.password:
                self.redactor.add(f"{cfg.username}:{cfg.password.get_secret_value()}")
            if cfg.client_id and cfg.client_secret:
                self.redactor.add(f"{cfg.client_id}:{cfg.client_secret.get_secret_value()}")
            targets = self._targets(cfg, schemes, i)
            if not targets:
                self._always.append(self._bind(cfg, None, server_url, i))
            for scheme_name in targets:
                self._by_scheme[scheme_name] = self._bind(
                    cfg, schemes[scheme_name], server_url, i, scheme_name
                )
        # credentials sent with every call in one place: a request carries one, the first configured
        self.overrides: list[str] = []
        first: dict[tuple[str, str], _Bound] = {}
        for bound in self._always:
            kept = first.setdefault(bound.place, bound)
            if kept is not bound:
                self.overrides.append(
                    f"auth[{kept.index}] and auth[{bound.index}] (both sent with every call) put their credentials in one place, "
                    f"{shown_place(bound.place, kept.name)}, which a request carries once: auth[{kept.index}]'s is sent "
                    f"(the first configured), never auth[{bound.index}]'s"
                )
        self._always = list(first.values())
        # `ca_file` checks every request to the API's origin, not only those presenting the certificate
        # (loaded by client_tls above, which says so when it cannot be)
        # (the upstream's `ca_file` is the session's already: only added where a context replaces it)
        ca_files = [
            resolve_path(cfg.ca_file) for cfg in configs if cfg.kind == "mtls" and cfg.ca_file
        ]
        self.server_tls = (
            server_tls(ca_files + ([resolve_path(ca_file)] if ca_file else []))
            if ca_files and verify_tls
            else None
        )
        for token in self._tokens:
            token.ca_file = ca_file
            if origin(token.token_url) == origin(server_url):
                token.tls = self.server_tls

    @staticmethod
    def _matches(cfg: AuthConfig, scheme: Any, named: bool = False) -> bool:
        """Whether `cfg` satisfies `scheme`. A bearer token is what an OpenID Connect scheme
        asks for (an access token got from its provider), and, when the credential names it, an
        OAuth2 scheme whose flows the bridge does not run itself (authorization code, say)."""
        if not isinstance(scheme, dict):
            return False
        kind, http = scheme.get("type"), str(scheme.get("scheme", "")).lower()
        if cfg.kind == "apiKey":
            return kind == "apiKey" and (cfg.name is None or cfg.name == scheme.get("name"))
        if cfg.kind == "bearer" and (kind == "openIdConnect" or (named and kind == "oauth2")):
            return True
        if cfg.kind == "mtls" or kind == "mutualTLS":
            return cfg.kind == "mtls" and kind == "mutualTLS"
        if cfg.kind in ("bearer", "basic"):
            return kind == "http" and http == cfg.kind
        return kind == "oauth2"

    def _targets(self, cfg: AuthConfig, schemes: dict[str, Any], index: int) -> list[str]:
        if cfg.scheme is not None:
            if cfg.scheme not in schemes:
                known = ", ".join(sorted(schemes)) or "none"
                raise ValueError(
                    f"auth[{index}].scheme {cfg.scheme!r} is not a security scheme of the document (known: {known})"
                )
            if not self._matches(cfg, schemes[cfg.scheme], named=True):
                raise ValueError(
                    f"auth[{index}] is of type {cfg.type} but security scheme {cfg.scheme!r} is of type "
                    f"{schemes[cfg.scheme].get('type') if isinstance(schemes[cfg.scheme], dict) else '?'}"
                )
            return [cfg.scheme]
        return [name for name, scheme in schemes.items() if self._matches(cfg, scheme)]

    def _bind(
        self,
        cfg: AuthConfig,
        scheme: Any,
        server_url: str | None,
        index: int,
        scheme_name: str | None = None,
    ) -> _Bound:
        bound = self._bind_one(cfg, scheme, server_url, index)
        bound.index, bound.scheme = index, scheme_name
        return bound

    def _bind_one(self, cfg: AuthConfig, scheme: Any, server_url: str | None, index: int) -> _Bound:
        scheme = scheme if isinstance(scheme, dict) else {}
        if cfg.kind == "apiKey":
            name, location = cfg.name or scheme.get("name"), cfg.in_ or scheme.get("in")
            if not name or location not in ("header", "query", "cookie"):
                raise ValueError(
                    f"auth[{index}] (apiKey) needs `name` and `in` (header, query or cookie): "
                    "the document declares no apiKey scheme to take them from"
                )
            return _Bound(cfg, name, location, None)
        if cfg.kind == "oauth2":
            flows = found if isinstance(found := scheme.get("flows"), dict) else {}
            flow = found if isinstance(found := flows.get("clientCredentials"), dict) else {}
            token_url = cfg.token_url or flow.get("tokenUrl")
            if not token_url:
                raise ValueError(
                    f"auth[{index}] (oauth2) needs `token_url`: the document gives no clientCredentials tokenUrl"
                )
            if server_url and "://" not in token_url:
                token_url = urljoin(server_url + "/", token_url)
            token = OAuth2Token(cfg, token_url)
            self._tokens.append(token)
            return _Bound(cfg, None, None, token)
        if cfg.kind == "mtls":
            upstream_ca = self._resolve_path(self._ca_file) if self._ca_file else None
            return _Bound(
                cfg,
                None,
                None,
                None,
                client_tls(cfg, self._resolve_path, self._verify_tls, index, upstream_ca),
            )
        return _Bound(cfg, None, None, None)

    @property
    def tokens(self) -> list[OAuth2Token]:
        return list(self._tokens)

    @property
    def binds_schemes(self) -> bool:
        """Whether any credential is bound to a security scheme of the document."""
        return bool(self._by_scheme)

    @property
    def always(self) -> list[_Bound]:
        """The credentials bound to no scheme, sent with every call (but where one that meets
        the operation's security requirement goes)."""
        return list(self._always)

    @property
    def probe_tls(self) -> ssl.SSLContext | None:
        """The client certificate a request that needs none presents (the readiness probe): one
        sent with every request, else the first configured (a server that asks for a client
        certificate in its handshake refuses any connection without one)."""
        for bound in [*self._always, *self._by_scheme.values()]:
            if bound.tls is not None:
                return bound.tls
        return None

    def choose(
        self, requirements: list[dict[str, list[str]]] | None, operation: str
    ) -> list[_Bound]:
        """The credentials one call carries: the first alternative of the operation's security
        requirements that every needed scheme has a credential for, and the unbound ones but
        those in a place the alternative's take (a request carries one value there)."""
        chosen = list(self._always)
        if not requirements:
            return chosen
        anonymous = False
        for alternative in requirements:
            if not isinstance(alternative, dict) or not alternative:
                anonymous = True
                continue
            met = self._meet(alternative)
            if met is not None:
                taken = {bound.place for bound in met}
                return [bound for bound in chosen if bound.place not in taken] + met
        if anonymous or self._always:
            return chosen
        wanted = " or ".join("+".join(alt) for alt in requirements if isinstance(alt, dict))
        undeclared = sorted(
            {name for alt in requirements if isinstance(alt, dict) for name in alt} - self._declared
        )
        fix = "add a matching entry under `auth:` in the upstream's config"
        if undeclared:  # `scheme:` cannot name what the document does not declare
            fix += (
                f" (the document names {', '.join(repr(n) for n in undeclared)} without declaring it in "
                "components.securitySchemes: give the entry no `scheme:`, and for an apiKey its `name` and `in`; "
                "it is then sent with every call)"
            )
        if any(
            isinstance(self._schemes.get(n), dict) and self._schemes[n].get("type") == "mutualTLS"
            for alt in requirements
            if isinstance(alt, dict)
            for n in alt
        ):
            fix += (
                " (a mutualTLS scheme takes a TLS client certificate: "
                "`{type: mtls, cert_file: client.pem, key_file: client.key}`)"
            )
        raise setup_error(f"{operation} needs credentials for security scheme {wanted}; {fix}")

    def _place(self, name: str) -> tuple[str, str]:
        """Where the credential of scheme `name` goes in a request: (`header`, lower-cased name),
        (`query`, name) or (`cookie`, name); a scheme of no known place is a place of its own."""
        bound, scheme = self._by_scheme.get(name), self._schemes.get(name)
        if bound is not None:
            return bound.place
        if (
            isinstance(scheme, dict)
            and scheme.get("type") == "apiKey"
            and isinstance(scheme.get("name"), str)
        ):
            location, key = str(scheme.get("in")), scheme["name"]
        elif isinstance(scheme, dict) and scheme.get("type") in ("http", "oauth2", "openIdConnect"):
            location, key = "header", "Authorization"
        elif isinstance(scheme, dict) and scheme.get("type") == "mutualTLS":
            return ("tls", "client certificate")
        else:
            return ("scheme", name)
        return (location, key.lower() if location == "header" else key)

    def _groups(self, alternative: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
        groups: dict[tuple[str, str], list[str]] = {}
        for name in alternative:
            groups.setdefault(self._place(name), []).append(name)
        return groups

    def _meet(self, alternative: dict[str, Any]) -> list[_Bound] | None:
        """The credentials meeting one alternative of a security requirement, or None. Schemes of
        one alternative that use one place (two of them in the Authorization header) cannot all
        be sent: one request carries one value there, so the credential of the first of them
        that has one meets them all (`clashes` says so at start)."""
        met: list[_Bound] = []
        for names in self._groups(alternative).values():
            bound = next((self._by_scheme[n] for n in names if n in self._by_scheme), None)
            if bound is None:
                return None
            met.append(bound)
        return met

    def clashes(
        self, requirements: list[tuple[str, list[dict[str, list[str]]] | None]]
    ) -> list[str]:
        """A warning for each alternative of the operations' security requirements that puts two
        schemes in one place of a request: which credential is sent there, and which is not."""
        found: dict[tuple[str, ...], list[str]] = {}
        for operation, alternatives in requirements:
            for alternative in alternatives or ():
                if isinstance(alternative, dict) and any(
                    len(n) > 1 for n in self._groups(alternative).values()
                ):
                    found.setdefault(tuple(alternative), []).append(operation)
        messages = []
        for names, operations in found.items():
            shown = ", ".join(operations[:3]) + (", ..." if len(operations) > 3 else "")
            for (location, key), clashing in self._groups(dict.fromkeys(names)).items():
                if len(clashing) < 2:
                    continue
                have = [n for n in clashing if n in self._by_scheme]
                if len({id(self._by_scheme[n].config) for n in have}) > 1:
                    sent = f"{have[0]}'s credential is sent, not {' or '.join(have[1:])}'s (the first the requirement names)"
                elif have:
                    sent = f"{have[0]}'s credential is sent and meets the requirement"
                else:
                    sent = "a credential for any one of them meets the requirement"
                where = shown_place((location, key))
                messages.append(
                    f"security requirement {' + '.join(names)} of {len(operations)} operation(s) ({shown}) puts "
                    f"{' and '.join(clashing)} in one place, {where}, which a request carries once: {sent} "
                    "(a document meaning either lists them as separate alternatives)"
                )
        return messages

    async def apply(
        self,
        parts: RequestParts,
        bound: list[_Bound],
        session: aiohttp.ClientSession,
        timeout: float,
    ) -> list[tuple[OAuth2Token, str]]:
        """Add the chosen credentials to the request; returns the OAuth2 tokens it used."""
        used: list[tuple[OAuth2Token, str]] = []
        parts.tls = self.server_tls  # a client certificate's context takes its place below
        for b in bound:
            cfg = b.config
            if cfg.kind == "apiKey":
                assert cfg.value is not None and b.name is not None
                secret = cfg.value.get_secret_value()
                # in place of a parameter of the same name (compared without case for a header)
                if b.location == "header":
                    parts.set_header(b.name, secret)
                elif b.location == "query":
                    parts.set_query(b.name, f"{quote(b.name, safe='')}={quote(secret, safe='')}")
                else:
                    parts.set_cookie(b.name, f"{b.name}={quote(secret, safe='')}")
            elif cfg.kind == "bearer":
                assert cfg.token is not None
                parts.set_header("Authorization", f"Bearer {cfg.token.get_secret_value()}")
            elif cfg.kind == "basic":
                assert cfg.password is not None
                raw = f"{cfg.username}:{cfg.password.get_secret_value()}".encode()
                parts.set_header("Authorization", "Basic " + base64.b64encode(raw).decode())
            elif b.tls is not None:
                parts.tls = b.tls
            elif b.token is not None:
                token = await b.token.get(session, timeout)
                parts.set_header("Authorization", f"Bearer {token}")
                used.append((b.token, token))
        return used
