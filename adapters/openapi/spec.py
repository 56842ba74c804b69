"""OpenAPI documents: reading (file or URL, YAML or JSON), version check, validation with
located messages, `$ref` resolution through jsonschema-path, and the resolver handed to the
operation mapper (`adapters.openapi.operations`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

import aiohttp
import yaml
from jsonschema_path import SchemaPath
from jsonschema_path.handlers.file import FileHandler, FilePathHandler
from jsonschema_path.handlers.urllib import UrllibHandler
from jsonschema_path.loaders import JsonschemaSafeLoader
from referencing.exceptions import Unresolvable
from yarl import URL

from adapters.http.body import read_body
from adapters.http.proxy import EnvironmentProxies, proxied_session
from adapters.http.tls import ca_file_trust, certificate_failure
from adapters.openapi.schema import RefCycleError, SchemaInliner, SpecError
from bridge.documents import expanded_size
from bridge.model import BridgeError

__all__ = ["HTTP_METHODS", "Document", "SpecError", "is_url", "parse_document", "read_source"]

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# openapi-spec-validator walks every schema and costs seconds per megabyte (the GitHub REST API
# document, 13 MB, takes about a minute); above this size "auto" keeps to the checks the mapper
# makes anyway, each naming the location of the problem it meets.
AUTO_VALIDATE_MAX_BYTES = 256 * 1024
# The largest public API documents hold a few hundred thousand values; YAML aliases of aliases
# (`&b [*a, *a, ...]`) let a dozen lines expand to billions (38 s and 4 GB before failing).
MAX_DOCUMENT_VALUES = 10_000_000
MAX_DOCUMENT_BYTES = (
    256 << 20
)  # of a document fetched from a URL (GitHub's, among the largest: 13 MB)


def is_url(source: str) -> bool:
    return urlsplit(source).scheme in ("http", "https")


def _location(path: list[Any]) -> str:
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.replace("_", "").replace("-", "").isalnum():
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


class _CachedHandler:
    """One read per referenced file or URL while a document loads (jsonschema-path's handlers
    do the reading and parsing)."""

    def __init__(self, inner: Callable[[str], Any]) -> None:
        self.inner = inner
        self.cache: dict[str, Any] = {}

    def __call__(self, uri: str) -> Any:
        if uri not in self.cache:
            self.cache[uri] = self.inner(uri)
        return self.cache[uri]


def _no_local_files(uri: str) -> Any:
    raise PermissionError("a document read from a URL cannot refer to local files")


def _shown(url: str) -> str:
    """A URL as an error message shows it: no user, password or query (a key may be there)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        parts.port or {"http": 80, "https": 443}.get(parts.scheme),
    )


class _Referenced(FileHandler):
    """A document a `$ref` names, read as the main one is: up to MAX_DOCUMENT_BYTES, and refused
    when its YAML aliases expand past MAX_DOCUMENT_VALUES."""

    def __call__(self, stream: Any) -> Any:
        text = stream.read(MAX_DOCUMENT_BYTES + 1)
        if len(text) > MAX_DOCUMENT_BYTES:
            raise ValueError(f"a referenced document is larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
        data = yaml.load(text, self.loader)
        if expanded_size(data, {}) > MAX_DOCUMENT_VALUES:
            raise ValueError(
                f"a referenced document expands to more than {MAX_DOCUMENT_VALUES:,} values"
            )
        return json.loads(json.dumps(data, default=str))


class _RedirectsWithin(urllib.request.HTTPRedirectHandler):
    def __init__(self, origin: tuple[str, str, int | None] | None) -> None:
        self.origin = origin

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if self.origin is not None and _origin(newurl) != self.origin:
            raise PermissionError(
                f"a referenced document redirects to another origin ({_shown(newurl)})"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Proxied(urllib.request.ProxyHandler):
    """The proxy of each referenced document's URL, chosen as the upstream's session chooses it
    (`adapters.http.proxy`): a loopback host or one `NO_PROXY` names directly, `ALL_PROXY` for
    a scheme with no proxy of its own. urllib's own choice skips `ALL_PROXY` and sends loopback
    hosts through the proxy. Being a ProxyHandler, it takes the place of urllib's."""

    def __init__(self) -> None:
        super().__init__({})
        self._routes: EnvironmentProxies | None = None

    def _through(self, req: urllib.request.Request) -> Any:
        if req.has_proxy():  # an http URL handed on to the https handler below
            return None
        if (
            self._routes is None
        ):  # read at the first referenced URL, as a session reads it when made
            self._routes = EnvironmentProxies()
        proxy, auth = self._routes.route(URL(req.full_url))
        if proxy is None:
            return None
        if auth is not None:  # not carried on by a redirect, whose host may get no proxy
            req.add_unredirected_header("Proxy-Authorization", auth.encode())
        scheme = req.type
        if (
            scheme == "https" and proxy.scheme == "https"
        ):  # urllib would send the CONNECT (and the proxy's credentials) unencrypted
            raise PermissionError(
                f"an https:// document cannot be fetched through the https:// proxy {proxy} "
                "(urllib speaks plain HTTP to a proxy it tunnels through); give an http:// one"
            )
        req.set_proxy(proxy.raw_authority, proxy.scheme)
        if scheme == proxy.scheme or scheme == "https":  # an https URL is tunnelled (CONNECT)
            return None
        return self.parent.open(req, timeout=req.timeout)  # an http URL through an https proxy

    http_open = https_open = _through


class _Remote(UrllibHandler):
    """Documents a `$ref` names by URL. Those of a document read from a URL must be on its origin
    (redirects too): someone else's document must not make this host read its network (a cloud
    metadata address, an internal service) into the tools' schemas. A local document's refs go
    where its author wrote."""

    def __init__(
        self,
        origin: tuple[str, str, int | None] | None,
        timeout: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__("http", "https", file_handler=_Referenced(), timeout=timeout)
        self.origin = origin
        checked = [urllib.request.HTTPSHandler(context=tls)] if tls is not None else []
        self.opener = urllib.request.build_opener(_Proxied(), _RedirectsWithin(origin), *checked)

    def _open(self, uri: str) -> Any:
        if self.origin is not None and _origin(uri) != self.origin:
            raise PermissionError(
                f"a document read from a URL can refer only to documents on its own origin, not {_shown(uri)}"
            )
        return closing(self.opener.open(uri, timeout=self.timeout))


@dataclass
class Document:
    """A parsed OpenAPI 3.x document and the resolver for its `$ref`s."""

    data: dict[str, Any]
    uri: str
    source: str
    version: Literal["3.0", "3.1"]
    fetch_timeout: float = 10.0
    size: int = 0  # characters of the document text
    tls: ssl.SSLContext | None = field(
        default=None, repr=False
    )  # checks the server of `source`'s origin (or any, of a local one)
    _resolver: Any = field(default=None, repr=False)
    _lookups: dict[str, Any] = field(default_factory=dict, repr=False)
    _handlers: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        timeout = max(1, int(self.fetch_timeout))
        remote = is_url(self.uri)
        # `tls` checks the documents of the origin `source` names, whose refs are all there (redirects
        # too), or those a local document's refs name (with the upstream's `ca_file`)
        tls = (
            self.tls
            if not remote or (is_url(self.source) and _origin(self.uri) == _origin(self.source))
            else None
        )
        web = _CachedHandler(_Remote(_origin(self.uri) if remote else None, timeout, tls))
        # a document read from a URL is someone else's: its `$ref`s must not read this host's files
        # into the tools' schemas (an unknown scheme would go to urlopen, which reads files too)
        files = (
            _no_local_files
            if remote
            else _CachedHandler(FilePathHandler("file", file_handler=_Referenced()))
        )
        self._handlers = {"file": files, "http": web, "https": web}
        root = SchemaPath.from_dict(self.data, base_uri=self.uri, handlers=self._handlers)
        with root.resolve() as resolved:
            self._resolver = resolved.resolver

    @property
    def openapi_30(self) -> bool:
        return self.version == "3.0"

    def lookup(self, uri: str) -> Any:
        """The node an absolute `$ref` URI points to (raises referencing's Unresolvable)."""
        found = self._lookups.get(uri)
        if found is None:
            found = self._lookups[uri] = self._resolver.lookup(uri).contents
        return found

    def validate(self, mode: Literal["auto", "full", "off"]) -> list[str]:
        """Check the document against the OpenAPI specification (openapi-spec-validator, as used
        by openapi-core). Raises SpecError listing the first problems with their locations. Under
        `auto`, problems the mapper reads past (see `_tolerable`) do not refuse the document: they
        are returned, located, for the upstream to warn about."""
        tolerated: list[str] = []
        if mode == "off" or (mode == "auto" and self.size > AUTO_VALIDATE_MAX_BYTES):
            return tolerated
        from openapi_spec_validator.validation import (
            OpenAPIV30SpecValidator,
            OpenAPIV31SpecValidator,
        )

        cls: Any = _located(OpenAPIV30SpecValidator if self.openapi_30 else OpenAPIV31SpecValidator)
        root = SchemaPath.from_dict(self.data, base_uri=self.uri, handlers=self._handlers)
        problems: list[str] = []

        def collect(errors: Any) -> None:
            for err in errors:
                if err.validator == "format" and err.validator_value == "regex":
                    continue  # an ECMA-262 pattern Python cannot compile: the mapper leaves it out of the schema
                if not self.openapi_30 and _older_dialect(err):
                    continue  # a 3.1 schema written in draft 4 to 7: the mapper reads it (see _older_dialect)
                if _no_responses(err):
                    continue  # 3.0 asks every operation for a response; a call needs none (3.1 dropped the rule)
                where = _location(list(err.absolute_path)) if err.absolute_path else "$"
                message = err.message if len(err.message) < 300 else err.message[:297] + "..."
                if mode == "auto" and _tolerable(err):
                    tolerated.append(f"{where}: {message}")
                    continue
                problems.append(f"{where}: {message}")
                if len(problems) >= 5:
                    break

        try:
            collect(cls(root).iter_errors())
        except Unresolvable as exc:
            # the mapper finds the same reference and names where it is used
            if not problems:
                return tolerated
            problems.append(f"$ref {getattr(exc, 'ref', '?')!r} cannot be resolved")
        except RecursionError:
            # the validator follows `$ref`s without end: find the cycle so the message can name it
            self._raise_ref_cycle()
            problems.append(
                "validation recursed without end: a `$ref` cycle that never reaches a concrete schema, "
                "or nesting too deep to check; fix the document, or set `validate_spec: off` (the "
                "operations are still checked, and a cycle one of them uses is named)"
            )
        except (TypeError, ValueError, KeyError, AttributeError):
            # the validator's semantic checks stop at a value of the wrong type (`in: [query]`);
            # its schema check alone still says where that value is
            if not problems:
                collect(cls.schema_validator.iter_errors(self.data))
        if problems:
            text = "; ".join(problems) + (" (first 5 shown)" if len(problems) >= 5 else "")
            # the fix comes before the problems: a reason is shown up to 500 characters
            fix = (
                ""
                if "validate_spec: off" in text
                else (
                    " (fix it, or set `validate_spec: off` to read it with the mapper's checks only: an operation they "
                    "find unreadable is left out)"
                )
            )
            raise SpecError(text, "not a valid OpenAPI " + self.version + " document" + fix)
        return tolerated

    def _raise_ref_cycle(self) -> None:
        """Raise a SpecError naming a `$ref` cycle the validator cannot get out of: a chain of
        objects that are only a `$ref` and lead back to themselves (parameters, path items,
        schemas), or schemas under `components.schemas` that reach themselves through `allOf`,
        `anyOf`, `oneOf` or `not` (the mapper's check). Returns when there is none."""
        fix = (
            "; make one of them end the cycle (or set `validate_spec: off` and leave out the operations that "
            "use it with `exclude`)"
        )
        todo: deque[tuple[Any, list[Any]]] = deque([(self.data, [])])
        while todo:
            node, path = todo.popleft()
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    cycle = self._ref_chain_cycle(node)
                    if cycle:
                        raise SpecError(
                            f"$ref cycle {' -> '.join(cycle)}: each is only a reference to the next, "
                            "so nothing is ever described" + fix,
                            _location(path),
                        )
                todo.extend((v, [*path, k]) for k, v in node.items())
            elif isinstance(node, list):
                todo.extend((v, [*path, i]) for i, v in enumerate(node))
        components = self.data.get("components")
        schemas = components.get("schemas") if isinstance(components, dict) else None
        if isinstance(schemas, dict):
            inliner = SchemaInliner(self.lookup, self.uri, self.openapi_30)
            for name, schema in schemas.items():
                try:
                    inliner.schema(
                        schema, self.uri, _location(["components", "schemas", name]), "input"
                    )
                except RefCycleError as exc:
                    raise SpecError(
                        f"$ref cycle {exc.cycle} {RefCycleError.WHY}" + fix, exc.location
                    ) from None
                except (SpecError, RecursionError):
                    continue  # another problem: the mapper reports it where an operation uses it

    def _ref_chain_cycle(self, node: dict[str, Any]) -> list[str] | None:
        """The refs of a chain starting at `node` that comes back to itself, or None."""
        base, seen = self.uri, list[str]()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            uri = urljoin(base, node["$ref"])
            if uri in seen:
                loop = [*seen[seen.index(uri) :], uri]
                return [
                    f"#{urldefrag(u).fragment}" if urldefrag(u).url == self.uri else u for u in loop
                ]
            seen.append(uri)
            try:
                node, base = self.lookup(uri), urldefrag(uri).url
            except Unresolvable:
                return None
        return None


def _tolerable(err: Any) -> bool:
    """Whether a validation error leaves the document readable as it is: a schema's `default` that
    its schema refuses (an annotation: nothing sends it), duplicate `enum` values (3.0 asks them
    unique; JSON Schema 2020-12, which the tools' schemas are, does not), or a `required` naming a
    property the schema does not define (a value must still have it, as the tool's schema says)."""
    if getattr(err, "bridge_default", False):
        return True
    path = list(err.absolute_path)
    if err.validator == "uniqueItems" and path[-1:] == ["enum"]:
        return True
    return type(err).__name__ == "ExtraParametersError"


def _no_responses(err: Any) -> bool:
    """Whether a validation error only says an operation has no `responses` or an empty one."""
    path = list(err.absolute_path)
    if err.validator == "minProperties" and path[-1:] == ["responses"]:
        return True
    return err.validator == "required" and err.message == "'responses' is a required property"


def _older_dialect(err: Any) -> bool:
    """Whether a 3.1 validation error only says a schema is written in an older JSON Schema
    draft (by `jsonSchemaDialect` or its own `$schema`), which the validator judges as 2020-12
    or does not know: a boolean `exclusiveMinimum`/`exclusiveMaximum` (draft 4; the mapper
    turns it into a number, as for 3.0) or the `$schema` of draft 5, 6 or 7."""
    if str(err.message).startswith("Unknown JSON Schema dialect"):
        return True
    if err.validator in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(
        err.validator_value, bool
    ):
        return True
    path = list(err.absolute_path)
    return (
        bool(path)
        and path[-1] in ("exclusiveMinimum", "exclusiveMaximum")
        and isinstance(err.instance, bool)
    )


@functools.cache
def _located(spec_validator: Any) -> Any:
    """`spec_validator` whose errors about a schema, or about its `default`, start their path at
    that schema's place in the document: openapi-spec-validator checks each schema on its own,
    so its errors give only the place inside it (`$: '100' is not of type 'integer'`)."""
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    keywords = spec_validator.keyword_validators

    def placing(keyword_cls: type, tail: tuple[str, ...]) -> type:
        def __call__(self: Any, schema: Any, *args: Any, **kwargs: Any) -> Any:
            for err in keyword_cls.__call__(self, schema, *args, **kwargs):
                if not isinstance(
                    err, OpenAPIValidationError
                ):  # wrapped here, so the marks below stay on it
                    err = OpenAPIValidationError.create_from(err)
                if not getattr(err, "bridge_placed", False):  # the innermost schema says where
                    err.path.extendleft(reversed((*schema.parts, *tail)))
                    err.bridge_placed = True
                    err.bridge_default = tail == ("default",)
                yield err

        return type(keyword_cls.__name__, (keyword_cls,), {"__call__": __call__})

    placed = {
        **keywords,
        "schema": placing(keywords["schema"], ()),
        "default": placing(keywords["default"], ("default",)),
    }
    return type(spec_validator.__name__, (spec_validator,), {"keyword_validators": placed})


async def read_source(
    source: str,
    base_dir: Callable[[str], str],
    session: aiohttp.ClientSession | None,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    ca_file: str | None = None,
) -> tuple[str, str]:
    """(text, base URI) of a document given as a URL or a path relative to the config. `tls`
    checks the server of the URL's origin (a redirect elsewhere gets the session's default);
    `ca_file`, the upstream's as written, is named in the fix of a certificate that fails."""
    if is_url(source):
        owned = session is None
        session = session or proxied_session()
        try:
            async with _get(session, URL(source), timeout, tls) as response:
                if response.status != 200:
                    raise SpecError(
                        f"GET answered HTTP {response.status} {response.reason or ''}".rstrip(),
                        source,
                    )
                try:
                    body = await read_body(response, MAX_DOCUMENT_BYTES, "the document")
                except BridgeError:
                    raise SpecError(
                        f"is larger than {MAX_DOCUMENT_BYTES >> 20} MiB; no API document is this large",
                        source,
                    ) from None
                try:
                    return body.decode(response.charset or "utf-8", errors="replace"), str(
                        response.url
                    )
                except LookupError:  # a charset Python does not know
                    return body.decode("utf-8", errors="replace"), str(response.url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            if (
                failure := certificate_failure(exc, trust=ca_file_trust(ca_file), address="spec")
            ) is not None:
                raise SpecError(f"cannot be fetched: {failure}", source) from None
            raise SpecError(
                f"cannot be fetched: {type(exc).__name__}: {exc}"
                if str(exc)
                else f"cannot be fetched: {type(exc).__name__}",
                source,
            ) from None
        finally:
            if owned:
                await session.close()
    path = Path(base_dir(source)).resolve()
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot be read: {exc}", str(path)) from None
    return text, path.as_uri()


@contextlib.asynccontextmanager
async def _get(
    session: aiohttp.ClientSession, url: URL, timeout: float, tls: ssl.SSLContext | None
) -> AsyncIterator[aiohttp.ClientResponse]:
    """GET `url`, redirects followed (at most 10) in one `timeout`; with `tls`, followed here, so
    that it checks the server of `url`'s origin alone."""
    if tls is None:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            yield response
        return
    origin = url.origin()
    deadline = asyncio.get_running_loop().time() + timeout
    for _ in range(_MAX_REDIRECTS + 1):
        left = max(deadline - asyncio.get_running_loop().time(), 0.001)
        async with session.get(
            url,
            allow_redirects=False,
            ssl=tls if url.origin() == origin else True,
            timeout=aiohttp.ClientTimeout(total=left),
        ) as response:
            location = response.headers.get("Location")
            if response.status not in (301, 302, 303, 307, 308) or not location:
                yield response
                return
        url = url.join(URL(location))
    raise aiohttp.TooManyRedirects(response.request_info, response.history)


_MAX_REDIRECTS = 10  # aiohttp's default, as a redirect it follows itself


def parse_document(
    text: str, uri: str, source: str, fetch_timeout: float = 10.0, tls: ssl.SSLContext | None = None
) -> Document:
    """Parse YAML or JSON and check it is OpenAPI 3.0.x or 3.1.x. Runs off the event loop."""
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            data = json.loads(text)
        else:
            data = yaml.load(text, JsonschemaSafeLoader)
            if (
                expanded_size(data, {}) > MAX_DOCUMENT_VALUES
            ):  # before anything walks it value by value
                raise SpecError(
                    f"expands to more than {MAX_DOCUMENT_VALUES:,} values (YAML aliases repeating aliases?)",
                    source,
                )
            data = json.loads(
                json.dumps(data, default=str)
            )  # YAML's integer keys (200:) become strings
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"not valid JSON: {exc.msg}", f"{source} line {exc.lineno}, column {exc.colno}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source} line {mark.line + 1}, column {mark.column + 1}" if mark else source
        raise SpecError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", where) from None
    if not isinstance(data, dict):
        raise SpecError(
            f"an OpenAPI document is an object, this is a {type(data).__name__}", source
        )
    if "swagger" in data:
        raise SpecError(
            f"is a Swagger {data.get('swagger')} document; this adapter reads OpenAPI 3.0 and 3.1 "
            "(convert it first, e.g. with swagger2openapi)",
            f"{source} $.swagger",
        )
    version = data.get("openapi")
    if not isinstance(version, str):
        raise SpecError(
            "has no `openapi` version field (expected e.g. openapi: 3.1.0)", f"{source} $"
        )
    if version.startswith("3.0"):
        kind: Literal["3.0", "3.1"] = "3.0"
    elif version.startswith("3.1"):
        kind = "3.1"
    else:
        raise SpecError(
            f"OpenAPI {version} is not supported (supported: 3.0.x and 3.1.x)",
            f"{source} $.openapi",
        )
    if not isinstance(data.get("paths", {}), dict):
        raise SpecError("`paths` must be an object", f"{source} $.paths")
    return Document(
        data=data,
        uri=uri,
        source=source,
        version=kind,
        fetch_timeout=fetch_timeout,
        size=len(text),
        tls=tls,
    )
