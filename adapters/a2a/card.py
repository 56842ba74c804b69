"""An A2A agent's card, fetched and kept current, and the credentials bound to the security
schemes it declares.

Discovery tries the configured card URL, or `/.well-known/agent-card.json` under a base URL, and
falls back to the older `/.well-known/agent.json`. Cards of protocol 1.0 and 0.3 are read with
a2a-sdk's parser, which turns a 0.3 card into the 1.0 shape. Refreshes revalidate with the
card's ETag, so an unchanged card costs one 304.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import urllib.parse
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard, AgentInterface, SecurityScheme
from google.protobuf.json_format import ParseError
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from adapters.http.tls import ca_file_trust, certificate_failure, server_of
from bridge.masking import masked
from bridge.model import BridgeError

__all__ = [
    "CARD_PATH",
    "LEGACY_CARD_PATH",
    "A2AAuth",
    "AgentCredentials",
    "CardFetch",
    "CardSource",
    "RedactingFilter",
    "WrittenOrder",
    "bind_credentials",
    "certificate_refused",
    "failed_url",
    "origin_text",
]

log = logging.getLogger("adapters.a2a")

CARD_PATH = "/.well-known/agent-card.json"
# Marks card fetches: they follow redirects, so they never carry credentials.
CARD_REQUEST = "a2a_card_request"
LEGACY_CARD_PATH = "/.well-known/agent.json"


class A2AAuth(BaseModel):
    """Credential values; where they go (header, query, cookie) comes from the agent card's
    security schemes."""

    model_config = ConfigDict(extra="forbid")

    bearer_token: SecretStr | None = Field(
        default=None, description="for http bearer, oauth2 and openIdConnect schemes"
    )
    api_key: SecretStr | None = Field(default=None, description="for apiKey schemes")
    schemes: dict[str, SecretStr] = Field(
        default_factory=dict, description="a value per scheme name; wins over the two above"
    )

    def secrets(self) -> list[str]:
        values = [self.bearer_token, self.api_key, *self.schemes.values()]
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


# ----------------------------------------------------------------------------- discovery


@dataclass
class WrittenOrder:
    """The order the card's document writes its security scheme names in: the parsed card keeps
    them in protobuf maps, whose order changes from one process to the next."""

    schemes: list[str] = field(default_factory=list)
    requirements: list[list[str]] = field(default_factory=list)

    @classmethod
    def of(cls, parsed: dict[str, Any]) -> WrittenOrder:
        """Of a card document as a2a-sdk's parser leaves it (a 0.3 `security` list turned into
        1.0 `securityRequirements`, in place, in its order)."""
        schemes = parsed.get("securitySchemes")
        requirements = parsed.get("securityRequirements")
        return cls(
            schemes=list(schemes) if isinstance(schemes, dict) else [],
            requirements=[
                list(r["schemes"])
                if isinstance(r, dict) and isinstance(r.get("schemes"), dict)
                else []
                for r in requirements
            ]
            if isinstance(requirements, list)
            else [],
        )


@dataclass
class CardFetch:
    card: AgentCard
    url: str
    etag: str | None
    digest: str
    order: WrittenOrder = field(default_factory=WrittenOrder)


class CardSource:
    """Where an agent's card lives and how to fetch it again."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        card_url: str | None,
        base_url: str | None,
        timeout: float,
        ca_file: str | None = None,
    ) -> None:
        self.http = http
        self.ca_file = ca_file  # as written, for the fix of a certificate that fails its check
        self.timeout = timeout
        self.fix = ""  # said after a failure that a mistaken card_url explains
        self.address = "card_url" if card_url else "base_url"  # the key naming the agent's server
        if card_url:
            self.candidates = [card_url]
            path = urllib.parse.urlsplit(card_url).path
            if "/.well-known/" not in path and not path.endswith(".json"):
                self.fix = (
                    f"; fix: card_url is the card's own URL; for the agent's root, set base_url: {card_url} instead "
                    f"(the card is then looked up at {card_url.rstrip('/')}{CARD_PATH})"
                )
            if card_url.rstrip("/").endswith(CARD_PATH):
                self.candidates.append(card_url.rstrip("/")[: -len(CARD_PATH)] + LEGACY_CARD_PATH)
        else:
            assert base_url is not None
            root = base_url.rstrip("/")
            self.candidates = [root + CARD_PATH, root + LEGACY_CARD_PATH]
        self.url = self.candidates[0]  # the one that answered last
        self.etag: str | None = None
        self.digest: str | None = None

    async def fetch(self, *, revalidate: bool = False) -> CardFetch | None:
        """The card, or None when revalidation says it has not changed.

        Raises BridgeError(dependency_unavailable) with `details.reachable` False when no
        connection could be made, True when the agent answered with no usable card, did not
        answer within `timeout` on a connection it took (`details.timed_out`), or gave a server
        certificate that fails its check (recoverability `setup`)."""
        order = [self.url] + [u for u in self.candidates if u != self.url]
        tried: list[str] = []
        for url in order:
            headers = {"Accept": "application/json"}
            if revalidate and self.etag and url == self.url:
                headers["If-None-Match"] = self.etag
            try:
                response = await self.http.get(
                    url,
                    headers=headers,
                    timeout=self.timeout,
                    follow_redirects=True,
                    extensions={CARD_REQUEST: True},
                )
            except httpx.HTTPError as exc:
                if (
                    refused := certificate_refused(exc, url, self.address, self.ca_file)
                ) is not None:
                    # a setup problem, not an outage: every attempt fails alike, and the agent is there
                    raise BridgeError(
                        f"cannot fetch the agent card at {url}: {refused}",
                        error_class="dependency_unavailable",
                        recoverability="setup",
                        details={"reachable": True},
                    ) from None
                if isinstance(exc, httpx.TimeoutException) and not isinstance(
                    exc, httpx.ConnectTimeout
                ):
                    # a connection was made (or all the client's are busy): the agent is there, slow
                    raise BridgeError(
                        f"the agent card at {url} did not answer within {self.timeout:g}s (start_timeout)",
                        error_class="dependency_unavailable",
                        recoverability="retry_later",
                        details={"reachable": True, "timed_out": True},
                    ) from None
                raise BridgeError(
                    f"cannot reach the agent card at {url}: {_describe(exc)}",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    details={"reachable": False},
                ) from None
            if response.status_code == 304:
                return None
            if response.status_code == 404:
                tried.append(url)
                continue
            if response.status_code >= 400:
                raise BridgeError(
                    f"the agent card at {url} answered HTTP {response.status_code}{self.fix}",
                    error_class="dependency_unavailable",
                    recoverability="retry_later",
                    details={"reachable": True, "http_status": response.status_code},
                )
            return self._parse(url, response)
        raise BridgeError(
            f"no agent card found (HTTP 404 at {' and '.join(tried)}){self.fix}",
            error_class="dependency_unavailable",
            recoverability="setup",
            details={"reachable": True, "http_status": 404},
        )

    async def answers(self, timeout: float) -> bool:
        """Whether the card that answered last still does (a 200, or a 304 to its ETag), within
        `timeout`: the agent is there, though one of its answers broke off. Nothing is kept of
        the answer: the card refresh reads changes."""
        headers = {"Accept": "application/json"} | (
            {"If-None-Match": self.etag} if self.etag else {}
        )
        try:
            response = await self.http.get(
                self.url,
                headers=headers,
                timeout=timeout,
                follow_redirects=True,
                extensions={CARD_REQUEST: True},
            )
        except httpx.HTTPError:
            return False
        return response.status_code in (200, 304)

    def _parse(self, url: str, response: httpx.Response) -> CardFetch | None:
        try:
            raw = response.json()
            card = parse_agent_card(raw)
        except (ValueError, ParseError) as exc:
            raise BridgeError(
                f"the document at {url} is not an A2A agent card: {exc}{self.fix}",
                error_class="dependency_unavailable",
                recoverability="setup",
                details={"reachable": True},
            ) from None
        order = WrittenOrder.of(raw)
        # keys sorted, so that a card written in another order is unchanged, but for the order
        # of its security schemes, which decides the credential sent where two share a place
        seen = [raw, order.schemes, order.requirements]
        digest = hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()
        unchanged = self.digest == digest and self.url == url
        self.url, self.etag, self.digest = url, response.headers.get("etag"), digest
        return (
            None
            if unchanged
            else CardFetch(card=card, url=url, etag=self.etag, digest=digest, order=order)
        )


def certificate_refused(
    exc: BaseException, url: str, address: str, ca_file: str | None = None
) -> str | None:
    """`the certificate of host:port cannot be verified (<OpenSSL's reason>): <fix>` when `exc`
    is a failed check of the server's certificate, else None: of the server of the request that
    failed (a redirect's), or of `url`. `address` is the config key naming the agent (`base_url`
    or `card_url`). The check is made against the system's CAs and the upstream's `ca_file`; an
    A2A upstream has no key turning it off."""
    try:
        server = server_of(failed_url(exc) or url)
    except ValueError:
        return None
    return certificate_failure(
        exc, trust=ca_file_trust(ca_file), address=address, server=server, verify_tls=False
    )


def failed_url(exc: BaseException) -> str | None:
    """The URL (without its query, which may carry a credential) of the request `exc` failed,
    looked for in what `exc` was raised from too."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        if isinstance(current, httpx.RequestError):
            with contextlib.suppress(RuntimeError):  # an error raised with no request
                return str(current.request.url.copy_with(query=None))
        seen.append(current)
        current = current.__cause__
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"connection refused or host unreachable ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.ConnectTimeout):
        return "no connection in time"
    return str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------- credentials


@dataclass
class AgentCredentials(httpx.Auth):
    """Credentials added to calls bound for `origins`: the origin the operator configured (of
    `base_url` or `card_url`) and those listed in `credential_origins`; never to another origin,
    whatever the card says, and never to card fetches (which follow redirects; calls do not).
    `missing` says what the card asks for that the config does not give; `withheld` says why
    the chosen interface gets none of them; `schemes` names the schemes in use (names only);
    `overrides` says which credential is sent where two schemes put theirs in one place."""

    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    origins: set[tuple[str, str, int | None]] = field(default_factory=set)
    schemes: list[str] = field(default_factory=list)
    missing: str | None = None
    withheld: str | None = None
    overrides: list[str] = field(default_factory=list)
    placed: dict[tuple[str, str], str] = field(
        default_factory=dict
    )  # (header/query/cookie, name; a header's lower case) -> its scheme

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # an Authorization the call carries is the caller's own credential (a token obtained for
        # the caller): it replaces the configured ones, and goes to the same origins only
        bound = not request.extensions.get(CARD_REQUEST) and (
            (request.url.scheme, request.url.host, request.url.port) in self.origins
        )
        if "Authorization" in request.headers:
            if not bound:
                del request.headers["Authorization"]
        elif bound:
            for name, value in self.headers.items():
                request.headers[name] = value
            if self.params:
                request.url = request.url.copy_merge_params(self.params)
            if self.cookies:
                pairs = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
                existing = request.headers.get("Cookie")
                request.headers["Cookie"] = f"{existing}; {pairs}" if existing else pairs
        yield request

    @property
    def sends_any(self) -> bool:
        return bool(self.headers or self.params or self.cookies)

    @property
    def blocked(self) -> str | None:
        """Why calls cannot go with the credentials they need, or None."""
        return self.missing or self.withheld

    def receiving_origins(self) -> list[str]:
        """The origins that get the credentials, as text (none when there is nothing to send)."""
        return sorted(origin_text(o) for o in self.origins) if self.sends_any else []

    def check_interface(self, url: str, binding: str) -> None:
        """Set `withheld` when the interface at `url`, which calls will go to, is on an origin
        that may not get the credentials: a call would go without them, and fail as refused."""
        if not self.sends_any or not url:
            return
        try:
            origin = _origin(url)
        except httpx.InvalidURL:
            self.withheld = f"the agent card puts its {binding} interface at {url[:200]!r}, which is no URL credentials can be sent to"
            return
        if origin in self.origins:
            return
        allowed = " and ".join(sorted(origin_text(o) for o in self.origins))
        where = origin_text(origin)
        self.withheld = (
            f"the agent card puts its {binding} interface on {where}, and credentials go only to {allowed} "
            f"(the origin of base_url or card_url, and credential_origins): they are not sent there. "
            f"If that origin is the agent's, add it to the upstream's credential_origins: [\"{where}\"]"
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = httpx.URL(url)
    return parts.scheme, parts.host, parts.port


def origin_text(origin: tuple[str, str, int | None]) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def _value_for(name: str, scheme: SecurityScheme, auth: A2AAuth) -> str | None:
    explicit = auth.schemes.get(name)
    if explicit is not None:
        return explicit.get_secret_value()
    kind = scheme.WhichOneof("scheme")
    if (
        kind == "http_auth_security_scheme"
        and scheme.http_auth_security_scheme.scheme.lower() == "bearer"
    ):
        return auth.bearer_token.get_secret_value() if auth.bearer_token else None
    if kind in ("oauth2_security_scheme", "open_id_connect_security_scheme"):
        return auth.bearer_token.get_secret_value() if auth.bearer_token else None
    if kind == "api_key_security_scheme":
        return auth.api_key.get_secret_value() if auth.api_key else None
    return None


def _apply(
    creds: AgentCredentials,
    name: str,
    scheme: SecurityScheme,
    value: str,
    requirement: list[str] | None,
) -> bool:
    """Add the credential of scheme `name` (of `requirement`, or of a card with none); False for
    a scheme the bridge cannot send. A header another scheme's credential already takes (names
    compared without case: a request carries one) keeps that one, the first, and the override
    is said."""
    kind = scheme.WhichOneof("scheme")
    if kind == "api_key_security_scheme":
        key = scheme.api_key_security_scheme
        location = key.location.lower()
        where = location if location in ("query", "cookie") else "header"
        return _place(creds, name, where, key.name, value, requirement)
    if (
        kind == "http_auth_security_scheme"
        and scheme.http_auth_security_scheme.scheme.lower() != "bearer"
    ):
        return False  # basic and other HTTP schemes are not supported
    if kind in (
        "http_auth_security_scheme",
        "oauth2_security_scheme",
        "open_id_connect_security_scheme",
    ):
        return _place(creds, name, "header", "Authorization", f"Bearer {value}", requirement)
    return False  # mutual TLS is configured on the connection, not per request


def _place(
    creds: AgentCredentials,
    name: str,
    where: str,
    key: str,
    value: str,
    requirement: list[str] | None,
) -> bool:
    values = {"header": creds.headers, "query": creds.params, "cookie": creds.cookies}[where]
    taken = creds.placed.get((where, key.lower() if where == "header" else key))
    if taken is None:
        creds.placed[(where, key.lower() if where == "header" else key)] = name
        values[key] = value
        creds.schemes.append(name)
        return True
    place = next(k for k in values if (k.lower() == key.lower() if where == "header" else k == key))
    place = f"the {place} header" if where == "header" else f"the {where} parameter {place}"
    if requirement is not None:
        said, first = (
            f"security requirement {' + '.join(requirement)} puts {taken} and {name} in one place",
            "the first the requirement names",
        )
    else:
        said, first = (
            f"schemes {taken} and {name} put their credentials in one place",
            "the first the card declares",
        )
    creds.overrides.append(
        f"{said}, {place}, which a request carries once: {taken}'s credential is sent, not {name}'s ({first})"
    )
    return True


def _scheme_label(name: str, scheme: SecurityScheme) -> str:
    kind = scheme.WhichOneof("scheme")
    if kind == "api_key_security_scheme":
        key = scheme.api_key_security_scheme
        return f"{name} (apiKey in {key.location or 'header'} {key.name!r}: set auth.api_key or auth.schemes.{name})"
    if kind == "http_auth_security_scheme":
        return f"{name} (http {scheme.http_auth_security_scheme.scheme}: set auth.bearer_token or auth.schemes.{name})"
    if kind in ("oauth2_security_scheme", "open_id_connect_security_scheme"):
        return f"{name} (OAuth 2 bearer token: set auth.bearer_token or auth.schemes.{name})"
    return f"{name} ({kind or 'unknown scheme'}, not supported)"


def _in_order(names: Iterable[str], written: list[str]) -> list[str]:
    """`names` in the order the card writes them (any it does not, after, by name)."""
    return sorted(
        names, key=lambda n: (written.index(n), "") if n in written else (len(written), n)
    )


def bind_credentials(
    card: AgentCard, auth: A2AAuth, origins: Iterable[str], order: WrittenOrder | None = None
) -> AgentCredentials:
    """Bind configured values to the card's security schemes, for calls to `origins` (URLs;
    their scheme, host and port count), in the order the card writes them (`order`).

    The first of the card's security requirements whose every scheme has a value is used. A card
    that declares schemes but no requirement gets every scheme that has a value. A card that
    declares no schemes gets `bearer_token`, when set, as `Authorization: Bearer`. Two schemes
    whose credentials go in one header send the first's: the first the requirement names, or
    the first the card declares."""
    order = order or WrittenOrder()
    creds = AgentCredentials(origins={_origin(u) for u in origins if u})
    schemes = {n: card.security_schemes[n] for n in _in_order(card.security_schemes, order.schemes)}
    requirements = [
        _in_order(req.schemes, order.requirements[i] if i < len(order.requirements) else [])
        for i, req in enumerate(card.security_requirements)
    ]
    if not schemes:
        if auth.bearer_token is not None:
            creds.headers["Authorization"] = f"Bearer {auth.bearer_token.get_secret_value()}"
            creds.schemes.append("bearer")
        if auth.api_key is not None:
            log.warning(
                "auth.api_key is set but the agent card declares no apiKey scheme; it is not sent"
            )
        return creds
    if not requirements:
        for name, scheme in schemes.items():
            value = _value_for(name, scheme, auth)
            if value:
                _apply(creds, name, scheme, value, None)
        return creds
    for names in requirements:
        if all(n in schemes for n in names):
            values = {n: _value_for(n, schemes[n], auth) for n in names}
            if all(values.values()):
                trial = AgentCredentials(origins=creds.origins)
                if all(_apply(trial, n, schemes[n], values[n] or "", names) for n in names):
                    return trial
    options = [
        " and ".join(
            _scheme_label(n, schemes[n]) if n in schemes else f"{n} (undeclared)" for n in names
        )
        for names in requirements
    ]
    creds.missing = "the agent requires credentials the config does not give: " + " or ".join(
        options
    )
    return creds


class RedactingFilter(logging.Filter):
    """Masks credential values in records of HTTP client loggers (a query-string API key would
    otherwise show up in request log lines)."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = masked(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def chosen_interface(
    card: AgentCard, bindings: list[str], client_preference: bool
) -> AgentInterface | None:
    """The interface a2a-sdk's client factory picks: the first offered binding we speak (or our
    preferred one), the 1.0 interface of it when there are several."""
    interfaces = list(card.supported_interfaces)
    if client_preference:
        binding = next(
            (b for b in bindings if any(i.protocol_binding == b for i in interfaces)), None
        )
    else:
        binding = next(
            (i.protocol_binding for i in interfaces if i.protocol_binding in bindings), None
        )
    candidates = [i for i in interfaces if i.protocol_binding == binding]
    return next(
        (i for i in candidates if i.protocol_version.startswith("1.0")),
        candidates[0] if candidates else None,
    )


def spoken_card(card: AgentCard) -> AgentCard:
    """The card as the client factory is given it: an interface of protocol 0.2 (the cards of
    a2a-sdk 0.2.x agents say `protocolVersion: 0.2.x`) is spoken to as 0.3, whose method and
    field names it shares (`message/send`, `tasks/get`, `kind` parts); the factory itself takes
    no interface below 0.3 and the agent would be refused as offering no transport."""
    if not any(below_0_3(i.protocol_version) for i in card.supported_interfaces):
        return card
    spoken = AgentCard()
    spoken.CopyFrom(card)
    for interface in spoken.supported_interfaces:
        if below_0_3(interface.protocol_version):
            interface.protocol_version = "0.3"
    return spoken


def below_0_3(version: str) -> bool:
    match = re.match(r"(\d+)\.(\d+)", version)
    return match is not None and (int(match[1]), int(match[2])) < (0, 3)
