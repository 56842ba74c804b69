"""The OpenAPI upstream: every selected operation of an OpenAPI 3.0/3.1 document becomes a tool,
called over one pooled aiohttp session with retries for idempotent operations and the
document's credentials. Loading and mapping live in `openapi_spec` / `openapi_operations`,
request encoding in `openapi_params`, credentials in `openapi_auth`, results in
`openapi_response`."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator
from yarl import URL

from adapters.http.body import read_body
from adapters.http.proxy import proxied_session
from adapters.http.tls import added_cas, configured_ca_file
from adapters.openapi.auth import AuthConfig, Credentials, certificate_failure, document_tls
from adapters.openapi.operations import Operation, Selector, map_operations, shown_url
from adapters.openapi.params import RequestParts, build_request
from adapters.openapi.places import claimed_places, served
from adapters.openapi.response import error_result, success_result
from adapters.openapi.spec import SpecError, is_url, parse_document, read_source
from bridge.model import BridgeError, UpstreamResult, UpstreamTool
from bridge.translate.http import retry_after_seconds
from bridge.upstream import CallContext, Upstream, UpstreamConfig, UpstreamEvent

__all__ = ["OpenAPIConfig", "OpenAPIUpstream", "RetryConfig"]

log = logging.getLogger("adapters.openapi")

# configured `headers` whose names say they carry a credential: their values are masked in what
# calls return, as `auth` values are (`X-GitHub-Api-Version: 2022-11-28` is left as it is)
SECRET_HEADER = re.compile(r"auth|token|key|secret|passw|session|cookie|credential", re.IGNORECASE)
USER_AGENT = "a2t-bridge (openapi upstream)"
_HEALTH_SKIPPED = 50  # skipped operations named in health (all are counted)


class RetryConfig(BaseModel):
    """Retries of idempotent operations after a 5xx answer or a connection error."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(default=2, ge=0, le=10, description="retries after the first attempt")
    backoff: float = Field(default=0.25, ge=0, description="first delay in seconds; doubles each retry")
    max_backoff: float = Field(default=5.0, ge=0, description="longest delay between attempts")
    max_retry_after: float = Field(default=10.0, ge=0, description="longest Retry-After waited for before retrying")


class OpenAPIConfig(UpstreamConfig):
    """`kind: openapi`: one OpenAPI document, one HTTP API."""

    kind: str = "openapi"
    spec: str = Field(description="path (relative to the config) or http(s) URL of the document, YAML or JSON")
    base_url: str | None = Field(default=None, description="server URL; default: the document's first server")
    server_variables: dict[str, str] = Field(default_factory=dict, description="values of server URL variables")
    include: list[str | Selector] = Field(default_factory=list, description="operations to keep (default: all)")
    exclude: list[str | Selector] = Field(default_factory=list, description="operations to drop")
    auth: list[AuthConfig] = Field(default_factory=list, description="credentials (one mapping or a list)")
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers sent with every request")
    connect_timeout: float = Field(default=10.0, gt=0, description="seconds to open a connection")
    connection_limit: int = Field(default=32, ge=1, description="open connections at most")
    keepalive_timeout: float = Field(default=15.0, ge=0, description="seconds an idle connection is kept")
    verify_tls: bool = True
    ca_file: str | None = Field(default=None, description="PEM file of CA certificates every server is checked against, beside the system's")
    retries: RetryConfig = Field(default_factory=RetryConfig)
    max_response_bytes: int = Field(default=16 << 20, ge=1024, description="larger responses are refused")
    validate_spec: Literal["auto", "full", "off"] = Field(
        default="auto", description="full: openapi-spec-validator; auto: full for documents up to 256 KB")
    description_max: int = Field(default=600, ge=40, description="characters of description kept in the tool")
    health_path: str | None = Field(default=None, description="path probed on start; with `launch` default /")
    bad_operations: Literal["skip", "fail"] = Field(
        default="skip", description="an operation that cannot be mapped: left out with a warning, or the whole upstream fails")

    _ca_file_readable = field_validator("ca_file")(configured_ca_file)

    @field_validator("auth", "include", "exclude", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (dict, str)) else value


@dataclass
class _Loaded:
    """What is kept of a document once mapped: not the document itself, whose parsed form is
    several times its text (Microsoft Graph beta's 47 MB took 170 MB), for as long as it serves."""

    signature: str
    openapi: Any  # the document's `openapi` version
    security_schemes: dict[str, Any]  # `components.securitySchemes`
    operations: dict[str, Operation]
    tools: list[UpstreamTool]
    skipped: list[SpecError]  # operations left out (`bad_operations: skip`)
    tolerated: list[str]  # validation problems `validate_spec: auto` loads the document with


class OpenAPIUpstream(Upstream):
    kind = "openapi"
    config_model = OpenAPIConfig
    config: OpenAPIConfig

    def __init__(self, config: OpenAPIConfig) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None
        self._loaded: _Loaded | None = None
        self._credentials: Credentials | None = None
        self._document_tls: ssl.SSLContext | None = None  # of the document given as a URL, or its $refs
        self._listed_since_start = False
        self._kept_over: str | None = None  # why the document read before is kept (a later read failed)
        self._clashes: list[str] = []  # security requirements putting two credentials in one place
        self._overrides: list[str] = []  # credentials, configured headers and parameters claiming one place
        # what is served: the mapped tools and operations without the parameters the configuration fills
        self._tools: list[UpstreamTool] = []
        self._operations: dict[str, Operation] = {}
        self._mapping: tuple[str, asyncio.Future[_Loaded]] | None = None  # (signature, its mapping), while it runs

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        if self._session is None or self._session.closed:
            tls: ssl.SSLContext | bool = cfg.verify_tls
            if cfg.verify_tls and cfg.ca_file:
                tls = added_cas(cfg.resolve_path(cfg.ca_file), cfg.ca_file)  # every request the session sends, unless one gives its own
            connector = aiohttp.TCPConnector(limit=cfg.connection_limit, keepalive_timeout=cfg.keepalive_timeout, ssl=tls)
            self._session = proxied_session(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=cfg.timeout, connect=cfg.connect_timeout),
                # `headers` are the API's, added to each call by `_send`: as session defaults they
                # would also reach the document's host and any origin a redirect leads to
                headers={"User-Agent": USER_AGENT, "Accept": "application/json, */*;q=0.8"},
                cookie_jar=aiohttp.DummyCookieJar(),  # calls stay independent: no server cookies kept
            )
        try:
            # a document on the API's origin is checked with its `ca_file`s too, and the `$ref`s of
            # a local one with the upstream's
            if is_url(cfg.spec) or (cfg.ca_file and cfg.verify_tls):
                try:
                    self._document_tls = document_tls(cfg.auth, cfg.spec, cfg.base_url, cfg.resolve_path, cfg.verify_tls, cfg.ca_file)
                except ValueError as exc:
                    raise BridgeError(str(exc), error_class="setup_required", recoverability="setup") from None
            await self._load()
            self._bind_credentials()
        except BaseException:
            await self.close()
            raise
        self._listed_since_start = False
        probe = cfg.health_path if cfg.health_path is not None else ("/" if cfg.launch is not None else None)
        if probe is not None:
            await self._probe(probe)

    def _server_url(self) -> str | None:
        assert self._loaded is not None
        return self.config.base_url or min((op.server_url for op in self._loaded.operations.values()), default=None)

    def _bind_credentials(self) -> None:
        """Match the configured credentials to the document's security schemes."""
        assert self._loaded is not None
        try:
            self._credentials = Credentials(self.config.auth, self._loaded.security_schemes, self._server_url(),
                                            self.config.resolve_path, self.config.verify_tls, self.config.ca_file)
        except ValueError as exc:  # a credential that does not fit the document
            raise BridgeError(str(exc), error_class="setup_required", recoverability="setup") from None
        for header, value in self.config.headers.items():  # `X-Api-Token: ...` is a credential too
            if SECRET_HEADER.search(header):
                self._credentials.redactor.add(value)
        self._clashes = self._credentials.clashes(
            [(f"{op.method} {op.path}", op.security) for op in self._loaded.operations.values()])
        claims = claimed_places(self._credentials, self._loaded.operations.values(), self.config.headers)
        self._overrides = claims.messages
        self._tools, self._operations = served(self._loaded.tools, self._loaded.operations, claims.covered)
        for clash in [*self._clashes, *self._overrides]:
            log.warning("%s: %s", self.name, clash)

    async def _probe(self, path: str) -> None:
        """Readiness: any HTTP answer from the server counts (a launched service may still be starting)."""
        assert self._session is not None and self._loaded is not None
        base = self._server_url()
        if base is None:
            return
        url = base.rstrip("/") + "/" + path.lstrip("/")
        tls = self._credentials.probe_tls if self._credentials else None
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=self.config.connect_timeout),
                                         ssl=tls if tls is not None else True) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            if (failure := certificate_failure(exc, self.config.ca_file)) is not None:
                raise BridgeError(f"{self.name}: server {shown_url(base)}: {failure}", error_class="dependency_unavailable",
                                  recoverability="setup") from None
            raise BridgeError(f"{self.name}: server {shown_url(base)} does not answer ({type(exc).__name__})",
                              error_class="dependency_unavailable", recoverability="retry_later") from None

    async def list_tools(self) -> list[UpstreamTool]:
        # the first listing after start uses what start loaded; later ones (refresh) re-read the source
        if self._listed_since_start:
            before = self._loaded
            await self._load()
            if self._loaded is not before:
                self._bind_credentials()
        self._listed_since_start = True
        assert self._loaded is not None
        return list(self._tools)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def operation(self, native_id: str) -> Operation | None:
        """The HTTP operation behind a tool (None when unknown or not loaded)."""
        return self._operations.get(native_id) if self._loaded else None

    @property
    def credentials(self) -> Credentials | None:
        """The credentials bound at the last start (None before)."""
        return self._credentials

    def secrets(self) -> list[str]:
        """The config's, and every credential bound at the last start, in its encoded forms too,
        with the access tokens fetched lately."""
        credentials = self._credentials
        bound = credentials.redactor.secrets() if credentials is not None else []
        return [*super().secrets(), *bound]

    async def health(self) -> dict[str, Any]:
        loaded = self._loaded
        if loaded is None:
            return {"spec": self.config.spec}
        tokens = self._credentials.tokens if self._credentials else []
        return {
            "spec": self.config.spec,
            "openapi": loaded.openapi,
            "operations": len(loaded.operations),
            "servers": sorted({shown_url(op.server_url) for op in loaded.operations.values()}),
            **({"skipped_operations": {exc.location: exc.problem for exc in loaded.skipped[:_HEALTH_SKIPPED]},
                "skipped_operation_count": len(loaded.skipped)} if loaded.skipped else {}),
            **({"spec_problems_tolerated": loaded.tolerated[:_HEALTH_SKIPPED],
                "spec_problem_count": len(loaded.tolerated)} if loaded.tolerated else {}),
            **({"oauth2_token_fetches": sum(t.fetches for t in tokens)} if tokens else {}),
            **({"security_clashes": self._clashes} if self._clashes else {}),
            **({"credential_overrides": self._overrides} if self._overrides else {}),
            **({"document_kept_over": self._kept_over} if self._kept_over else {}),
        }

    # ------------------------------------------------------------------ loading

    async def _load(self) -> None:
        cfg = self.config
        source = cfg.spec
        if not is_url(source):
            path = cfg.resolve_path(source)
            try:
                st = os.stat(path)
                signature = f"{os.path.abspath(path)}:{st.st_mtime_ns}:{st.st_size}"
            except OSError:
                signature = ""
            if self._loaded is not None and signature and self._loaded.signature == signature:
                return
        cancelled = False
        try:
            self.phase = "reading the document"
            text, uri = await read_source(source, cfg.resolve_path, self._session, cfg.start_timeout, self._document_tls, cfg.ca_file)
            if is_url(source):
                signature = hashlib.sha256(text.encode()).hexdigest()
                if self._loaded is not None and self._loaded.signature == signature:
                    return
            self._loaded = await self._mapped(text, uri, signature)
            self._kept_over = None
        except asyncio.CancelledError:
            cancelled = True  # (start_timeout): the phase stays, for the catalog to name in the reason
            raise
        except SpecError as exc:
            where = exc.location if exc.location.startswith((source, "/", "http")) else f"{source} {exc.location}".strip()
            reason = f"OpenAPI document {where}: {exc.problem}"
            if self._loaded is None:
                raise BridgeError(reason, error_class="setup_required", recoverability="setup") from None
            # a document read before is kept: the API behind it still answers (a file half
            # written, a URL briefly wrong must not take its tools offline); said once a fault
            if reason != self._kept_over:
                log.warning("%s: %s; the document read before is kept until this one can be read", self.name, reason)
            self._kept_over = reason
        finally:
            if not cancelled:
                self.phase = None

    async def _mapped(self, text: str, uri: str, signature: str) -> _Loaded:
        """The document mapped on a worker thread. A start cut short by start_timeout leaves
        the thread mapping (a thread cannot be stopped): the next start waits for that mapping of
        the same document, rather than starting another beside it that, sharing the CPU with
        it, might not end in time either."""
        running = self._mapping
        if running is None or running[0] != signature:
            job = asyncio.ensure_future(asyncio.to_thread(self._map, text, uri, signature))
            job.add_done_callback(lambda done: done.cancelled() or done.exception())  # read, even when no start waits
            running = self._mapping = (signature, job)
        try:
            return await asyncio.shield(running[1])
        finally:
            if running[1].done() and self._mapping is running:
                self._mapping = None

    def _map(self, text: str, uri: str, signature: str) -> _Loaded:
        cfg = self.config
        try:
            self.phase = f"parsing the document ({len(text) / 1e6:.1f} MB)"
            document = parse_document(text, uri, cfg.spec, fetch_timeout=cfg.start_timeout, tls=self._document_tls)
            self.phase = "validating the document"  # when validate_spec says so; else a moment
            tolerated = document.validate(cfg.validate_spec)
            skipped: list[SpecError] | None = [] if cfg.bad_operations == "skip" else None
            operations, tools = map_operations(
                document,
                base_url=cfg.base_url,
                server_variables=cfg.server_variables,
                include=list(cfg.include),
                exclude=list(cfg.exclude),
                description_max=cfg.description_max,
                skipped=skipped,
                on_phase=self._on_phase,
            )
        except RecursionError:
            # the located checks (validation, `$ref` cycles) come first; this is what is left
            raise SpecError("nests objects, lists or `$ref`s too deeply to be read (about a thousand levels); "
                            "flatten the deepest structure", cfg.spec) from None
        except StopIteration as exc:
            # raised in a thread, a StopIteration never reaches the awaiting future: start-up would
            # hang until start_timeout instead of saying what failed
            raise RuntimeError(f"mapping the document stopped early: StopIteration {exc}") from None
        for left in skipped or ():
            log.warning("%s: operation left out: OpenAPI document %s %s: %s", self.name, cfg.spec, left.location, left.problem)
        if tolerated:
            log.warning("%s: OpenAPI document %s is read despite %d validation problem(s) that leave it usable: %s%s",
                        self.name, cfg.spec, len(tolerated), "; ".join(tolerated[:5]), " ..." if len(tolerated) > 5 else "")
        components = document.data.get("components")
        schemes = components.get("securitySchemes") if isinstance(components, dict) else None
        return _Loaded(signature, document.data.get("openapi"), schemes if isinstance(schemes, dict) else {}, operations, tools,
                       skipped or [], tolerated)

    def _on_phase(self, phase: str) -> None:
        self.phase = phase

    # ------------------------------------------------------------------ calls

    async def invoke(self, native_id: str, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        session, loaded, credentials = self._session, self._loaded, self._credentials
        if session is None or loaded is None or credentials is None:
            raise BridgeError(f"upstream {self.name!r} is not started", error_class="dependency_unavailable",
                              recoverability="retry_later")
        op = self._operations.get(native_id)
        if op is None:
            raise BridgeError(f"upstream {self.name!r} has no operation {native_id!r}", error_class="unknown_tool",
                              recoverability="change_arguments")
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ctx.timeout
        bound = credentials.choose(op.security, f"{op.method} {op.path}")
        redactor = credentials.redactor
        attempt = 0
        refreshed = False
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _timeout(op, ctx.timeout)
            if session.closed:  # closed while this call waited to retry: the upstream is reconnecting
                raise BridgeError(f"upstream {self.name!r} is not connected (it is reconnecting)", error_class="dependency_unavailable",
                                  recoverability="retry_later", retry_after=1.0)
            parts = build_request(op, arguments)
            parts.default_headers(cfg.headers)
            for name, value in ctx.trace_headers().items():  # W3C trace context, over any other
                parts.set_header(name, value)
            plain = parts.header_items()
            used = await credentials.apply(parts, bound, session, remaining)
            secret = {k.lower() for k, v in parts.header_items().items() if plain.get(k) != v}
            try:
                status, reason, headers, payload, charset = await self._send(session, op, parts, secret, remaining)
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                if isinstance(exc, aiohttp.ServerTimeoutError):
                    raise _timeout(op, ctx.timeout) from None
                if (failure := certificate_failure(exc, self.config.ca_file)) is not None:
                    # a setup problem, not an outage: not retried, the upstream not marked unavailable
                    raise BridgeError(f"{op.method} {op.path}: {failure}", error_class="dependency_unavailable",
                                      recoverability="setup") from None
                delay = self._retry_delay(op, attempt, None, deadline - loop.time())
                what = redactor.text(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                if delay is not None:
                    attempt += 1
                    await ctx.report_progress(f"retrying after a connection error ({attempt}/{cfg.retries.count})")
                    await asyncio.sleep(delay)
                    continue
                if cfg.health_path is not None or cfg.launch is not None:
                    self.emit(UpstreamEvent("unavailable", reason=f"server does not answer: {what}"))
                raise BridgeError(f"{op.method} {op.path}: the server cannot be reached ({what})",
                                  error_class="dependency_unavailable", recoverability="retry_later") from None
            except TimeoutError:
                raise _timeout(op, ctx.timeout) from None
            except aiohttp.ClientError as exc:  # bad URL, too many redirects ...: the text may hold a query secret
                what = redactor.text(f"{type(exc).__name__}: {exc}")
                raise BridgeError(f"{op.method} {op.path} failed: {what}", error_class="execution_failed") from None
            if status == 401 and used and not refreshed:
                # an OAuth2 token the server no longer accepts: fetch a new one and send once more
                for token, value in used:
                    token.invalidate(value)
                refreshed = True
                continue
            if status >= 500:
                wait = retry_after_seconds(headers.get("retry-after")) if status == 503 else None
                delay = self._retry_delay(op, attempt, wait, deadline - loop.time())
                if delay is not None:
                    attempt += 1
                    await ctx.report_progress(f"retrying after HTTP {status} ({attempt}/{cfg.retries.count})")
                    await asyncio.sleep(delay)
                    continue
            if status < 400:
                return success_result(op, status, reason, headers, payload, charset, self.name, ctx.invocation_id, redactor)
            log.info("%s %s %s -> HTTP %s", self.name, op.method, op.path, status)
            return error_result(op, status, reason, headers, payload, charset, redactor)

    async def _send(self, session: aiohttp.ClientSession, op: Operation, parts: RequestParts, secret: set[str],
                    timeout: float) -> tuple[int, str, Mapping[str, str], bytes, str | None]:
        """Send one request, following redirects here rather than in aiohttp: the credentials
        (the `secret` headers, cookies, Authorization) go only to the origin they were
        configured for, and so do the configured `headers`. A redirect to another origin (a
        download on a CDN, say) is followed without them; a 303, or a 301/302 answering a POST,
        continues as a GET without the body."""
        cfg = self.config
        method, url, data = op.method, URL(parts.full_url(), encoded=True), parts.data
        headers = parts.header_items()  # the configured `headers` among them
        secret = secret | {k.lower() for k in cfg.headers}
        origin = url.origin()
        for _ in range(MAX_REDIRECTS + 1):
            # a client certificate, like the other credentials, is presented to the API's origin alone
            tls = parts.tls if parts.tls is not None and url.origin() == origin else True
            async with session.request(
                method, url, headers=headers, data=data, allow_redirects=False, ssl=tls,
                # without it aiohttp labels a POST, PUT or PATCH that has no body application/octet-stream
                skip_auto_headers=("Content-Type",) if data is None else None,
                timeout=aiohttp.ClientTimeout(total=timeout, connect=min(cfg.connect_timeout, timeout)),
            ) as response:
                location = response.headers.get("Location")
                if response.status not in _REDIRECTS or not location:
                    payload = await read_body(response, cfg.max_response_bytes, f"{op.method} {op.path}")
                    return response.status, response.reason or "", response.headers, payload, response.charset
                status = response.status
            url = _redirect_target(op, url, location, status)
            if url.origin() != origin:
                headers = {k: v for k, v in headers.items() if k.lower() not in secret and k.lower() not in _ORIGIN_BOUND}
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, data = "GET", None
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        raise BridgeError(f"{op.method} {op.path}: more than {MAX_REDIRECTS} redirects", error_class="execution_failed")

    def _retry_delay(self, op: Operation, attempt: int, retry_after: float | None, remaining: float) -> float | None:
        """Seconds to wait before the next attempt, or None when this answer is final."""
        retries = self.config.retries
        if not op.idempotent or attempt >= retries.count:
            return None
        if retry_after is not None:
            delay = retry_after
            if delay > retries.max_retry_after:
                return None
        else:
            delay = min(retries.max_backoff, retries.backoff * (2**attempt)) * (0.5 + random.random() / 2)
        return delay if delay < remaining else None


MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# headers that belong to the origin they were sent to, whatever the configured credentials are
_ORIGIN_BOUND = frozenset({"authorization", "cookie", "proxy-authorization"})


def _redirect_target(op: Operation, url: URL, location: str, status: int) -> URL:
    """Where a redirect from `url` leads, or a refusal when that is no http(s) URL with a host
    (`file:///etc/passwd`, `mailto:`, a Location that is not a URL): the bridge is an HTTP
    client of the API, and follows it nowhere else."""
    try:
        target = url.join(URL(location))
    except ValueError:
        target = None
    if target is None or target.scheme not in ("http", "https") or not target.host:
        shown = location if len(location) <= 200 else location[:197] + "..."
        raise BridgeError(f"{op.method} {op.path}: the server redirected (HTTP {status}) to "
                          f"{shown!r}, which is not an http(s) URL; it was not followed",
                          error_class="execution_failed", error_code="redirect_refused",
                          details={"status": status, "location": shown})
    return target


def _timeout(op: Operation, seconds: float) -> BridgeError:
    return BridgeError(f"{op.method} {op.path} did not answer within {seconds:g}s", error_class="timeout",
                       recoverability="retry", status="timed_out")
