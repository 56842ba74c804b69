"""Configuration: the schema of a bridge config file (YAML or JSON) and its loading, with errors
that name the file, the field and the fix (bridge.config_problems); `${ENV}` interpolation and
the `mcpServers` block MCP clients already use are bridge.config_sources'."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bridge.config_problems import ConfigError, join_path, problems_of
from bridge.config_sources import (
    DuplicateYamlKey,
    UniqueKeyLoader,
    interpolate,
    mcp_servers_to_upstreams,
)
from bridge.documents import RepeatedKey, expanded_size, unique_object
from bridge.exchange_config import ActingConfig, exchange_problems, take_exchange
from bridge.limits_config import RateLimitConfig
from bridge.oauth_config import OAuthConfig
from bridge.redis_config import RedisConfig
from bridge.telemetry_config import AuditConfig, LoggingConfig, TelemetryConfig, audit_problems
from bridge.upstream import ConfigValueError, UpstreamConfig, known_kinds, upstream_class

__all__ = [
    "DEFAULT_CONFIG",
    "AuditConfig",
    "AuthToken",
    "BridgeConfig",
    "ConfigError",
    "InvokeConfig",
    "LoggingConfig",
    "OAuthConfig",
    "Rule",
    "SearchConfig",
    "ServerConfig",
    "StoreConfig",
    "SurfaceConfig",
    "TelemetryConfig",
    "load_config",
    "parse_config",
]

DEFAULT_CONFIG = "configs/demo.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_flag_for_a_number(cls, data: Any) -> Any:
        """`port: true` is no port (pydantic would read it as 1): a flag where a number goes is refused."""
        if isinstance(data, dict):
            for name, field_info in cls.model_fields.items():
                value = data.get(field_info.alias or name)
                if isinstance(value, bool) and field_info.annotation in (
                    int,
                    float,
                    int | None,
                    float | None,
                ):
                    raise ConfigValueError(
                        f"{name} is {str(value).lower()}, a flag where a number goes",
                        f"write a number for `{name}`",
                    )
        return data


class Rule(_Strict):
    """Matches tools; every given field must match (AND). A bare string in a rule list is a
    name glob."""

    name: str | None = Field(default=None, description="glob over exposed names")
    upstream: str | None = Field(default=None, description="glob over upstream names")
    tag: str | None = None
    kind: str | None = Field(default=None, description="tool kind, e.g. openapi_operation")
    read_only: bool | None = None
    destructive: bool | None = None
    open_world: bool | None = None
    requires_user_interaction: bool | None = None
    reason: str | None = Field(
        default=None, description="machine reason given when this rule blocks"
    )


RuleSpec = str | Rule


class SurfaceConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    load: list[RuleSpec] = Field(default_factory=list, description="always loaded, full schema")
    defer: list[RuleSpec] = Field(default_factory=list, description="found through search")
    block: list[RuleSpec] = Field(default_factory=list, description="invisible and uncallable")
    allow: list[RuleSpec] = Field(default_factory=list, description="allowed although destructive")
    allow_destructive: bool = False
    read_only: bool = Field(default=False, description="only read-only tools are visible")
    auto_load_threshold: int = Field(
        default=40, ge=0, description="rule-less surfaces load all up to this"
    )

    @field_validator("load", "defer", "block", "allow", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, dict)) else value

    @field_validator("load", "defer", "block", "allow")
    @classmethod
    def _rules_say_something(cls, rules: list[RuleSpec], info: ValidationInfo) -> list[RuleSpec]:
        """A rule with no condition would match every tool (`allow: [{}]` lifting every block),
        and a `reason` is what a block rule gives: both are said rather than taken."""
        for i, rule in enumerate(rules):
            if isinstance(rule, Rule) and not (rule.model_fields_set - {"reason"}):
                raise ConfigValueError(
                    f"rule {i} has no condition, so it would match every tool",
                    "give it a condition (name, upstream, tag, kind, ...), or write name: '*' to mean every tool",
                )
            if isinstance(rule, Rule) and rule.reason is not None and info.field_name != "block":
                raise ConfigValueError(
                    f"rule {i} gives a reason, which only a block rule gives",
                    "remove `reason`, or move the rule to block",
                )
        return rules


class AuthToken(_Strict):
    token: str = Field(min_length=8)
    surface: str = "default"
    name: str | None = None


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    # client connections (bridge/serve/http_protocol.py, connections.py): the seconds a
    # connection may wait for a request, a request's head and its body may take to arrive,
    # how many connections are held in all and from one address, and the descriptors they
    # leave free under the open-file limit
    idle_timeout: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    header_timeout: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    body_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    max_connections: int = Field(default=1024, ge=1)
    max_connections_per_address: int = Field(default=256, ge=1)
    fd_reserve: int = Field(default=128, ge=0)
    tokens: list[AuthToken] = Field(default_factory=list)
    oauth: OAuthConfig | None = None
    default_surface: str = "default"
    public_url: str | None = None
    # MCP over HTTP: sessions open at once, in all and for one client (a static token, an OAuth
    # subject, else an address), an initialize past a cap ending an idle session or else refused
    # (mcp_quota.py); and the idle time after which a session a client left open is closed
    mcp_max_sessions: int = Field(default=10_000, ge=1)
    mcp_max_sessions_per_client: int = Field(default=1_000, ge=1)
    mcp_session_idle_timeout: float = Field(default=1800.0, gt=0, allow_inf_nan=False)
    # `bridge serve`'s event loop: uvloop when it is installed ("auto"), or asyncio's own
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # seconds the requests in flight get to finish once SIGTERM or SIGINT has stopped `bridge serve` listening
    shutdown_timeout: float = Field(default=5.0, ge=0, allow_inf_nan=False)


class StoreConfig(_Strict):
    path: str = ".bridge-data/bridge.db"
    # postgresql://USER:PASSWORD@HOST:PORT/DATABASE: the store in that database, shared by
    # replicas (bridge/store/postgres.py); `path` then only places the search index
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _a_postgresql_url(cls, url: str | None) -> str | None:
        """A postgresql:// URL naming a host and a database; the refusal never quotes the URL,
        whose password it may hold."""
        if url is None:
            return None
        fix = "write postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        try:
            parts = urlsplit(url)
            port = parts.port  # a port that is no number raises here
        except ValueError as exc:
            raise ConfigValueError(f"is no URL ({exc})", fix) from None
        if parts.scheme not in ("postgresql", "postgres"):
            scheme = repr(parts.scheme) if parts.scheme else "missing"
            raise ConfigValueError(f"its scheme is {scheme}, not postgresql", fix)
        if not parts.hostname or port == 0:
            raise ConfigValueError("names no host (or port 0)", fix)
        if not parts.path.strip("/"):
            raise ConfigValueError("names no database", fix)
        return url


class InvokeConfig(_Strict):
    inline_result_limit: int = Field(default=50_000, ge=256, description="characters kept inline")
    preview_chars: int = Field(default=2_000, ge=0)
    max_result_chars: int = Field(
        default=64_000_000, ge=1024, description="larger results are refused"
    )
    default_timeout: float | None = Field(
        default=None, gt=0, description="overrides upstream timeouts"
    )
    log_keep: int = Field(
        default=1_000_000, ge=1000, description="invocation log rows kept; the oldest are dropped"
    )
    results_keep: int = Field(
        default=10_000, ge=10, description="persisted large results kept; the oldest are dropped"
    )
    results_keep_mb: int = Field(
        default=1024,
        ge=1,
        description="megabytes of persisted large results kept; the oldest are dropped",
    )


class SearchConfig(_Strict):
    path: str | None = Field(default=None, description="index folder; default beside the store")
    # keep the index on disk (reopened at the next start) or, false, in memory (rebuilt at each
    # start); search works either way. `enabled` is the older name of this key.
    persist: bool = True
    # rerank free-text results by meaning (docs/search.md): `static` with the token table shipped
    # with the bridge, `model` with the sentence model of the `semantic` extra, `auto` the model
    # when it is installed and else the table, `off` keywords only (true: auto, false: off)
    semantic: Literal["auto", "model", "static", "off"] = "auto"
    # tools of several upstreams with one native name and a similar meaning take one place in a
    # free-text search, the others named in its `alternatives`; false lists each as a match
    fold_alternatives: bool = True
    # `bridge serve` started while another process holds the on-disk index answers at once with an
    # index of its own in memory, and for this many seconds looks every 0.1 s (then every 10 s)
    # whether the index is free, to move its own there (0: every 10 s from the start)
    lock_wait: float = Field(default=15.0, ge=0, le=3600)

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "enabled" in data:
            data = dict(data)
            enabled = data.pop("enabled")
            if "persist" in data and data["persist"] != enabled:
                raise ConfigValueError(
                    "`enabled` is the older name of `persist`, and they disagree",
                    "give only `persist`",
                )
            data["persist"] = enabled
        return data

    @field_validator("semantic", mode="before")
    @classmethod
    def _semantic_flag(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "auto" if value else "off"
        return value


class BridgeConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    invoke: InvokeConfig = Field(default_factory=InvokeConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    # what replicas share while they run (docs/deploy.md); none: MCP sessions in this process
    redis: RedisConfig | None = None
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    mcpServers: dict[str, Any] = Field(default_factory=dict)
    surfaces: list[SurfaceConfig] = Field(default_factory=list)
    rate_limits: list[RateLimitConfig] = Field(default_factory=list)
    source: str = Field(default="<memory>", exclude=True)
    base_dir: str = Field(default=".", exclude=True)
    # each upstream's `auth` acting for the caller (`token_exchange`, `user_oauth`), which the
    # loader takes out of its entry
    upstream_exchanges: dict[str, ActingConfig] = Field(default_factory=dict, exclude=True)

    def surface(self, name: str) -> SurfaceConfig | None:
        return next((s for s in self.surfaces if s.name == name), None)

    def surface_names(self) -> list[str]:
        """Every surface a caller may name: the configured ones and `default` (always there)."""
        return sorted({s.name for s in self.surfaces} | {"default"})

    def resolve_path(self, path: str) -> str:
        """A path from the config, relative to the config file's folder."""
        p = Path(os.path.expanduser(path))
        return str(p if p.is_absolute() else Path(self.base_dir) / p)


def parse_config(data: Any, source: str = "<memory>", base_dir: str = ".") -> BridgeConfig:
    """Validate a parsed config document. Raises ConfigError with every problem found."""
    problems: list[tuple[str, str, str]] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "the config must be a mapping", "start with `upstreams:`")])
    taken: set[str] = set()
    data = interpolate(data, "", problems, taken)
    listed = data.get("upstreams")
    upstream_entries: list[tuple[str, Any]] = (
        [(f"upstreams[{i}]", e) for i, e in enumerate(listed)] if isinstance(listed, list) else []
    )
    if listed is not None and not isinstance(listed, list):
        problems.append(
            (
                "upstreams",
                "must be a list",
                "write `upstreams:` followed by `- {name: ..., kind: ...}` items",
            )
        )
    upstream_entries += mcp_servers_to_upstreams(data.get("mcpServers") or {}, problems)

    upstreams: list[UpstreamConfig] = []
    names: dict[str, str] = {}
    exchanges: dict[str, tuple[str, ActingConfig]] = {}
    for path, entry in upstream_entries:
        if not isinstance(entry, dict):
            problems.append((path, "must be a mapping", "write `{name: ..., kind: ...}`"))
            continue
        entry, exchange, found = take_exchange(entry, path)
        problems.extend(found)
        kind = entry.get("kind")
        if kind not in known_kinds():
            close = difflib.get_close_matches(str(kind).lower(), known_kinds(), n=1)  # `MCP`: mcp
            fix = (
                f"did you mean `{close[0]}`?"
                if close
                else f"use one of: {', '.join(known_kinds())}"
            )
            problems.append(
                (
                    join_path(path, "kind"),
                    f"unknown upstream kind {kind!r}" if kind else "is required",
                    fix,
                )
            )
            continue
        try:
            model = upstream_class(kind).config_model
        except ImportError as exc:
            problems.append(
                (
                    join_path(path, "kind"),
                    f"kind {kind!r} cannot be loaded: {exc}",
                    "reinstall the bridge (make setup)",
                )
            )
            continue
        entry = {**entry, "base_dir": base_dir, "acts_for_caller": exchange is not None}
        try:
            cfg = model.model_validate(entry)
        except ValidationError as exc:
            problems.extend(problems_of(exc, path, model, taken, doc=f"docs/upstreams/{kind}.md"))
            continue
        if cfg.name in names:
            problems.append(
                (
                    join_path(path, "name"),
                    f"name {cfg.name!r} is already used by {names[cfg.name]}",
                    "give each upstream its own name",
                )
            )
            continue
        names[cfg.name] = path
        upstreams.append(cfg)
        if exchange is not None:
            exchanges[cfg.name] = (path, exchange)

    own = ("source", "base_dir", "upstream_exchanges")  # set by the loader, never written
    rest = {k: v for k, v in data.items() if k not in ("upstreams", "mcpServers", *own)}
    for key in own:  # the bridge's own fields, set from the file read
        if key in data:
            problems.append(
                (
                    key,
                    f"unknown key `{key}`",
                    "remove it; the bridge sets it from the file it reads",
                )
            )
    try:
        config = BridgeConfig.model_validate(rest)
    except ValidationError as exc:
        problems.extend(problems_of(exc, "", BridgeConfig, taken))
        config = None
    # the checks across sections run on every section that is valid on its own: one problem
    # elsewhere (a port out of range) does not hide these
    surfaces = (
        config.surfaces if config is not None else _valid_alone(_SURFACES, rest.get("surfaces", []))
    )
    server = (
        config.server if config is not None else _valid_alone(ServerConfig, rest.get("server", {}))
    )
    if surfaces is not None:
        first: dict[str, int] = {}
        for i, surface in enumerate(surfaces):
            if surface.name in first:
                problems.append(
                    (
                        f"surfaces[{i}].name",
                        f"surface {surface.name!r} is already defined at surfaces[{first[surface.name]}]",
                        "give each surface its own name, or merge the two definitions",
                    )
                )
            first.setdefault(surface.name, i)
    if server is not None:
        seen: dict[str, int] = {}
        for i, token in enumerate(server.tokens):
            if token.token != token.token.strip() or any(c.isspace() for c in token.token):
                problems.append(
                    (
                        f"server.tokens[{i}].token",
                        "holds white space (a `|` block adds a line end), so no "
                        "Authorization header can match it",
                        "write the token on one line, without spaces",
                    )
                )
            elif token.token in seen:
                problems.append(
                    (
                        f"server.tokens[{i}].token",
                        f"is the same token as server.tokens[{seen[token.token]}], which "
                        "it would never win against",
                        "give each token its own value",
                    )
                )
            seen.setdefault(token.token, i)
    if surfaces is not None:
        known = sorted({s.name for s in surfaces} | {"default"})
        if server is not None:
            named = [("server.default_surface", server.default_surface)]
            named += [
                (f"server.tokens[{i}].surface", token.surface)
                for i, token in enumerate(server.tokens)
            ]
            if server.oauth is not None:
                named += [
                    (f"server.oauth.surfaces.{value}", surface)
                    for value, surface in server.oauth.surfaces.items()
                ]
        else:  # the server section has a problem of its own: its surface name as written
            raw = rest.get("server")
            written = raw.get("default_surface") if isinstance(raw, dict) else None
            named = [("server.default_surface", written)] if isinstance(written, str) else []
        for where, name in named:
            if name not in known:
                problems.append(
                    (
                        where,
                        f"no surface named {name!r}",
                        f"define it under `surfaces:` or use one of {known}",
                    )
                )
    if config is not None:
        problems += exchange_problems(exchanges, config.server.oauth, config.server.public_url)
        problems += audit_problems(config.audit, config.telemetry)
    if problems:
        raise ConfigError(source, problems)
    assert config is not None
    config.upstreams = upstreams
    config.upstream_exchanges = {name: exchange for name, (_, exchange) in exchanges.items()}
    config.mcpServers = {}
    config.source = source
    config.base_dir = base_dir
    return config


_SURFACES: TypeAdapter[list[SurfaceConfig]] = TypeAdapter(list[SurfaceConfig])


def _valid_alone(model: Any, value: Any) -> Any:
    """`value` validated as `model` (a model class or a TypeAdapter), or None when it is not
    (its problems are already reported)."""
    try:
        return (
            model.validate_python(value)
            if isinstance(model, TypeAdapter)
            else model.model_validate(value)
        )
    except ValidationError:
        return None


def load_config(path: str | os.PathLike[str]) -> BridgeConfig:
    """Read, interpolate and validate a config file. Raises ConfigError."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            str(file),
            [
                (
                    "",
                    "file not found",
                    f"create it, or pass -c with an existing file (default {DEFAULT_CONFIG})",
                )
            ],
        )
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(
            str(file),
            [
                (
                    "",
                    f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line})",
                    "save the file as UTF-8",
                )
            ],
        ) from None
    except OSError as exc:
        raise ConfigError(
            str(file),
            [
                (
                    "",
                    f"cannot be read ({exc.strerror or exc})",
                    "make it readable by the user running the bridge",
                )
            ],
        ) from None
    try:
        if file.suffix == ".json":
            data = json.loads(text, object_pairs_hook=unique_object)
        else:
            data = yaml.load(text, Loader=UniqueKeyLoader)
    except RepeatedKey as exc:
        problem = ("", f"not valid JSON: {exc}", "keep one of the two")
        raise ConfigError(str(file), [problem]) from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = (
            f"line {mark.line + 1}, column {mark.column + 1}"
            if mark
            else f"line {getattr(exc, 'lineno', '?')}"
        )
        fix = "keep one of the two" if isinstance(exc, DuplicateYamlKey) else "fix the syntax there"
        raise ConfigError(
            str(file),
            [
                (
                    "",
                    f"not valid {'JSON' if file.suffix == '.json' else 'YAML'} at {where}: {getattr(exc, 'problem', None) or exc}",
                    fix,
                )
            ],
        ) from None
    if expanded_size(data, {}) > MAX_CONFIG_VALUES:
        raise ConfigError(
            str(file),
            [
                (
                    "",
                    f"expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases repeating "
                    "aliases?)",
                    "write the config without nested aliases",
                )
            ],
        )
    return parse_config(data, source=str(file), base_dir=str(file.parent.resolve()))


# A config is small; YAML aliases of aliases (`&a [*b, *b, ...]`) can make a few lines expand
# to billions of values, which reading would walk one by one.
MAX_CONFIG_VALUES = 1_000_000
