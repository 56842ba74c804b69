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
import re
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp

from adapters.http.proxy import proxied_session
from adapters.http.tls import added_cas
from adapters.openapi.auth import Credentials
from adapters.openapi.auth_tls import certificate_failure, document_tls
from adapters.openapi.calls import OperationCalls
from adapters.openapi.config import OpenAPIConfig
from adapters.openapi.operations import map_operations, shown_url
from adapters.openapi.places import claimed_places, served
from adapters.openapi.records import Operation
from adapters.openapi.spec import SpecError, is_url, parse_document, read_source
from bridge.model import BridgeError, UpstreamTool
from bridge.upstream import Upstream

__all__ = ["OpenAPIUpstream"]

log = logging.getLogger("adapters.openapi")

# configured `headers` whose names say they carry a credential: their values are masked in what
# calls return, as `auth` values are (`X-GitHub-Api-Version: 2022-11-28` is left as it is)
SECRET_HEADER = re.compile(r"auth|token|key|secret|passw|session|cookie|credential", re.IGNORECASE)
USER_AGENT = "a2t-bridge (openapi upstream)"
_HEALTH_SKIPPED = 50  # skipped operations named in health (all are counted)


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


class OpenAPIUpstream(OperationCalls, Upstream):
    kind = "openapi"
    config_model = OpenAPIConfig
    config: OpenAPIConfig

    def __init__(self, config: OpenAPIConfig) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None
        self._loaded: _Loaded | None = None
        self._credentials: Credentials | None = None
        self._document_tls: ssl.SSLContext | None = (
            None  # of the document given as a URL, or its $refs
        )
        self._listed_since_start = False
        self._kept_over: str | None = (
            None  # why the document read before is kept (a later read failed)
        )
        self._clashes: list[str] = []  # security requirements putting two credentials in one place
        self._overrides: list[
            str
        ] = []  # credentials, configured headers and parameters claiming one place
        # what is served: the mapped tools and operations without the parameters the configuration fills
        self._tools: list[UpstreamTool] = []
        self._operations: dict[str, Operation] = {}
        self._mapping: tuple[str, asyncio.Future[_Loaded]] | None = (
            None  # (signature, its mapping), while it runs
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        if self._session is None or self._session.closed:
            tls: ssl.SSLContext | bool = cfg.verify_tls
            if cfg.verify_tls and cfg.ca_file:
                tls = added_cas(
                    cfg.resolve_path(cfg.ca_file), cfg.ca_file
                )  # every request the session sends, unless one gives its own
            connector = aiohttp.TCPConnector(
                limit=cfg.connection_limit, keepalive_timeout=cfg.keepalive_timeout, ssl=tls
            )
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
                    self._document_tls = document_tls(
                        cfg.auth,
                        cfg.spec,
                        cfg.base_url,
                        cfg.resolve_path,
                        cfg.verify_tls,
                        cfg.ca_file,
                    )
                except ValueError as exc:
                    raise BridgeError(
                        str(exc), error_class="setup_required", recoverability="setup"
                    ) from None
            await self._load()
            self._bind_credentials()
        except BaseException:
            await self.close()
            raise
        self._listed_since_start = False
        probe = (
            cfg.health_path
            if cfg.health_path is not None
            else ("/" if cfg.launch is not None else None)
        )
        if probe is not None:
            await self._probe(probe)

    def _server_url(self) -> str | None:
        assert self._loaded is not None
        return self.config.base_url or min(
            (op.server_url for op in self._loaded.operations.values()), default=None
        )

    def _bind_credentials(self) -> None:
        """Match the configured credentials to the document's security schemes."""
        assert self._loaded is not None
        try:
            self._credentials = Credentials(
                self.config.auth,
                self._loaded.security_schemes,
                self._server_url(),
                self.config.resolve_path,
                self.config.verify_tls,
                self.config.ca_file,
            )
        except ValueError as exc:  # a credential that does not fit the document
            raise BridgeError(
                str(exc), error_class="setup_required", recoverability="setup"
            ) from None
        for header, value in self.config.headers.items():  # `X-Api-Token: ...` is a credential too
            if SECRET_HEADER.search(header):
                self._credentials.redactor.add(value)
        self._clashes = self._credentials.clashes(
            [(f"{op.method} {op.path}", op.security) for op in self._loaded.operations.values()]
        )
        claims = claimed_places(
            self._credentials, self._loaded.operations.values(), self.config.headers
        )
        self._overrides = claims.messages
        self._tools, self._operations = served(
            self._loaded.tools, self._loaded.operations, claims.covered
        )
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
            async with self._session.get(
                url,
                timeout=aiohttp.ClientTimeout(total=self.config.connect_timeout),
                ssl=tls if tls is not None else True,
            ) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            await self.close()
            if (failure := certificate_failure(exc, self.config.ca_file)) is not None:
                raise BridgeError(
                    f"{self.name}: server {shown_url(base)}: {failure}",
                    error_class="dependency_unavailable",
                    recoverability="setup",
                ) from None
            raise BridgeError(
                f"{self.name}: server {shown_url(base)} does not answer ({type(exc).__name__})",
                error_class="dependency_unavailable",
                recoverability="retry_later",
            ) from None

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
            **(
                {
                    "skipped_operations": {
                        exc.location: exc.problem for exc in loaded.skipped[:_HEALTH_SKIPPED]
                    },
                    "skipped_operation_count": len(loaded.skipped),
                }
                if loaded.skipped
                else {}
            ),
            **(
                {
                    "spec_problems_tolerated": loaded.tolerated[:_HEALTH_SKIPPED],
                    "spec_problem_count": len(loaded.tolerated),
                }
                if loaded.tolerated
                else {}
            ),
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
            text, uri = await read_source(
                source,
                cfg.resolve_path,
                self._session,
                cfg.start_timeout,
                self._document_tls,
                cfg.ca_file,
            )
            if is_url(source):
                signature = hashlib.sha256(text.encode()).hexdigest()
                if self._loaded is not None and self._loaded.signature == signature:
                    return
            self._loaded = await self._mapped(text, uri, signature)
            self._kept_over = None
        except asyncio.CancelledError:
            cancelled = (
                True  # (start_timeout): the phase stays, for the catalog to name in the reason
            )
            raise
        except SpecError as exc:
            where = (
                exc.location
                if exc.location.startswith((source, "/", "http"))
                else f"{source} {exc.location}".strip()
            )
            reason = f"OpenAPI document {where}: {exc.problem}"
            if self._loaded is None:
                raise BridgeError(
                    reason, error_class="setup_required", recoverability="setup"
                ) from None
            # a document read before is kept: the API behind it still answers (a file half
            # written, a URL briefly wrong must not take its tools offline); said once a fault
            if reason != self._kept_over:
                log.warning(
                    "%s: %s; the document read before is kept until this one can be read",
                    self.name,
                    reason,
                )
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
            job.add_done_callback(
                lambda done: done.cancelled() or done.exception()
            )  # read, even when no start waits
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
            document = parse_document(
                text, uri, cfg.spec, fetch_timeout=cfg.start_timeout, tls=self._document_tls
            )
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
            raise SpecError(
                "nests objects, lists or `$ref`s too deeply to be read (about a thousand levels); "
                "flatten the deepest structure",
                cfg.spec,
            ) from None
        except StopIteration as exc:
            # raised in a thread, a StopIteration never reaches the awaiting future: start-up would
            # hang until start_timeout instead of saying what failed
            raise RuntimeError(f"mapping the document stopped early: StopIteration {exc}") from None
        for left in skipped or ():
            log.warning(
                "%s: operation left out: OpenAPI document %s %s: %s",
                self.name,
                cfg.spec,
                left.location,
                left.problem,
            )
        if tolerated:
            log.warning(
                "%s: OpenAPI document %s is read despite %d validation problem(s) that leave it usable: %s%s",
                self.name,
                cfg.spec,
                len(tolerated),
                "; ".join(tolerated[:5]),
                " ..." if len(tolerated) > 5 else "",
            )
        components = document.data.get("components")
        schemes = components.get("securitySchemes") if isinstance(components, dict) else None
        return _Loaded(
            signature,
            document.data.get("openapi"),
            schemes if isinstance(schemes, dict) else {},
            operations,
            tools,
            skipped or [],
            tolerated,
        )

    def _on_phase(self, phase: str) -> None:
        self.phase = phase
