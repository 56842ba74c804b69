"""Configuration: the schema of a bridge config file (YAML or JSON), `${ENV}` interpolation, the
`mcpServers` block MCP clients already use, and errors that name the file, the field and the fix."""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

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

from bridge.documents import RepeatedKey, expanded_size, unique_object
from bridge.oauth_config import OAuthConfig
from bridge.telemetry_config import AuditConfig, LoggingConfig, TelemetryConfig
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


class ConfigError(Exception):
    """A config problem, or several: each names where (file and field path), what and the fix."""

    def __init__(self, file: str, problems: list[tuple[str, str, str]]) -> None:
        self.file = file
        self.problems = problems
        lines = [f"{file}: {len(problems)} problem{'s' if len(problems) != 1 else ''} in the config"]
        for path, what, fix in problems:
            where = path or "(top level)"
            lines.append(f"  {where}: {what}" + (f"\n    fix: {fix}" if fix else ""))
        super().__init__("\n".join(lines))

    def one_line(self) -> str:
        """The same on one line (for a log)."""
        return f"{self.file}: " + "; ".join(f"{path or '(top level)'}: {what}" + (f" (fix: {fix})" if fix else "")
                                            for path, what, fix in self.problems)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_flag_for_a_number(cls, data: Any) -> Any:
        """`port: true` is no port (pydantic would read it as 1): a flag where a number goes is refused."""
        if isinstance(data, dict):
            for name, field_info in cls.model_fields.items():
                value = data.get(field_info.alias or name)
                if isinstance(value, bool) and field_info.annotation in (int, float, int | None, float | None):
                    raise ConfigValueError(f"{name} is {str(value).lower()}, a flag where a number goes", f"write a number for `{name}`")
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
    reason: str | None = Field(default=None, description="machine reason given when this rule blocks")


RuleSpec = str | Rule


class SurfaceConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    load: list[RuleSpec] = Field(default_factory=list, description="always loaded, full schema")
    defer: list[RuleSpec] = Field(default_factory=list, description="found through search")
    block: list[RuleSpec] = Field(default_factory=list, description="invisible and uncallable")
    allow: list[RuleSpec] = Field(default_factory=list, description="allowed although destructive")
    allow_destructive: bool = False
    read_only: bool = Field(default=False, description="only read-only tools are visible")
    auto_load_threshold: int = Field(default=40, ge=0, description="rule-less surfaces load all up to this")

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
                raise ConfigValueError(f"rule {i} has no condition, so it would match every tool",
                                       "give it a condition (name, upstream, tag, kind, ...), or write name: '*' to mean every tool")
            if isinstance(rule, Rule) and rule.reason is not None and info.field_name != "block":
                raise ConfigValueError(f"rule {i} gives a reason, which only a block rule gives", "remove `reason`, or move the rule to block")
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


class InvokeConfig(_Strict):
    inline_result_limit: int = Field(default=50_000, ge=256, description="characters kept inline")
    preview_chars: int = Field(default=2_000, ge=0)
    max_result_chars: int = Field(default=64_000_000, ge=1024, description="larger results are refused")
    default_timeout: float | None = Field(default=None, gt=0, description="overrides upstream timeouts")
    log_keep: int = Field(default=1_000_000, ge=1000, description="invocation log rows kept; the oldest are dropped")
    results_keep: int = Field(default=10_000, ge=10, description="persisted large results kept; the oldest are dropped")
    results_keep_mb: int = Field(default=1024, ge=1, description="megabytes of persisted large results kept; the oldest are dropped")


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
                raise ConfigValueError("`enabled` is the older name of `persist`, and they disagree", "give only `persist`")
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
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    mcpServers: dict[str, Any] = Field(default_factory=dict)
    surfaces: list[SurfaceConfig] = Field(default_factory=list)
    source: str = Field(default="<memory>", exclude=True)
    base_dir: str = Field(default=".", exclude=True)

    def surface(self, name: str) -> SurfaceConfig | None:
        return next((s for s in self.surfaces if s.name == name), None)

    def surface_names(self) -> list[str]:
        """Every surface a caller may name: the configured ones and `default` (always there)."""
        return sorted({s.name for s in self.surfaces} | {"default"})

    def resolve_path(self, path: str) -> str:
        """A path from the config, relative to the config file's folder."""
        p = Path(os.path.expanduser(path))
        return str(p if p.is_absolute() else Path(self.base_dir) / p)


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def _interpolate(value: Any, path: str, problems: list[tuple[str, str, str]], taken: set[str]) -> Any:
    """`value` with each `${VAR}` replaced; `taken` gets the values read from the environment,
    which an error never shows (a secret may land in a field whose name does not say so)."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            var, default = match.group(1), match.group(2)
            found = os.environ.get(var)
            if found is not None and (found or default is None):
                taken.add(found)
                return found
            if default is not None:
                return default
            problems.append((path, f"environment variable {var} is not set", f"export {var}=... or write ${{{var}:-default}}"))
            return ""

        if "$" not in value:
            return value
        parts = value.split("$${")  # `$${` writes a literal `${`
        done = [_ENV.sub(sub, part) for part in parts]
        for part in parts:
            left = _ENV.sub("", part)  # what no reference matched (a value read may hold `${` itself)
            if "${" in left:
                at = left[left.index("${"):][:40]
                problems.append((path, f"holds {at!r}, which is no ${{NAME}} or ${{NAME:-default}} (a NAME is letters, "
                                 "digits and _, not first a digit)", "write ${NAME} or ${NAME:-default}, or $${ for a literal ${"))
                break
        return "${".join(done)
    if isinstance(value, dict):
        return {k: _interpolate(v, _join(path, k), problems, taken) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{path}[{i}]", problems, taken) for i, v in enumerate(value)]
    return value


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _loc(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, part)
    return out


def _fields_of(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Known keys at a location inside a model, for 'did you mean' suggestions."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        current = None
        for candidate in (ann, *getattr(ann, "__args__", ())):
            for inner in (candidate, *getattr(candidate, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    current = inner
    return list(getattr(current, "model_fields", {})) if current else []


_SECRET_WORDS = ("token", "secret", "password", "key", "auth", "env", "header", "credential")


def _shown_input(loc: tuple[Any, ...], value: Any, hidden: set[str]) -> str:
    """The offending value, unless it is a whole mapping or list (which may carry secrets such
    as env or headers), sits under a key that names a secret, or holds a value read from the
    environment (`hidden`)."""
    if isinstance(value, (dict, list)) or any(w in str(part).lower() for part in loc for w in _SECRET_WORDS):
        return ""
    if isinstance(value, str) and any(h and h in value for h in hidden):
        return " (a value read from the environment, not shown)"
    return f" (got {value!r})"


def _problems_of(exc: ValidationError, prefix: str, model: type[BaseModel], hidden: set[str],
                 doc: str = "docs/config.md") -> list[tuple[str, str, str]]:
    """Each validation error as (path, what, fix); `doc` is the page a fix points to when the
    error itself names none (an upstream's keys are on its kind's page)."""
    problems = []
    errors = exc.errors()
    locs = [tuple(p for p in e["loc"] if not (isinstance(p, str) and p in ("str", "Rule", "function-after"))) for e in errors]
    paths = [_loc(prefix, loc) for loc in locs]
    for err, loc, path in zip(errors, locs, paths, strict=True):
        kind = err["type"]
        if kind == "string_type" and any(other.startswith(path + ".") for other in paths):
            continue  # a mapping where a string or a mapping may go: its own errors say what is wrong
        if kind == "extra_forbidden":
            key = str(loc[-1])
            known = [k for k in _fields_of(model, loc) if k not in ("source", "base_dir")]
            if prefix.startswith("mcpServers.") and len(loc) == 1:  # an entry's key names it, and it is always mcp
                known = [k for k in known if k not in ("name", "kind")]
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            fix = f"did you mean `{close[0]}`?" if close else f"remove it; known keys: {', '.join(known)}"
            problems.append((path, f"unknown key `{key}`", fix))
        elif kind == "missing":
            problems.append((path, "is required", f"add `{loc[-1]}:` here"))
        elif isinstance(err.get("ctx", {}).get("error"), ConfigValueError):
            refusal = err["ctx"]["error"]
            problems.append((path, refusal.what, refusal.fix))
        else:
            expected = err.get("ctx", {}).get("expected") or err.get("ctx", {}).get("pattern")
            common = loc and loc[0] in UpstreamConfig.model_fields  # a key every upstream has: on config.md
            fix = f"expected {expected}" if expected else f"see {'docs/config.md' if common else doc}"
            what = err["msg"].removeprefix("Value error, ")
            problems.append((path, f"{what}{_shown_input(loc, err.get('input'), hidden)}", fix))
    return problems


def _mcp_servers_to_upstreams(servers: Any, problems: list[tuple[str, str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """Entries of the Claude Desktop / Cursor / VS Code `mcpServers` block as `kind: mcp` upstreams."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(servers, dict):
        problems.append(("mcpServers", "must be a mapping of server name to server entry", 'write {"name": {"command": ...}}'))
        return out
    for name, entry in servers.items():
        path = f"mcpServers.{name}"
        if not isinstance(entry, dict):
            problems.append((path, "must be a mapping", "give `command` (stdio) or `url` (HTTP)"))
            continue
        entry = dict(entry)
        given = {key: entry.pop(key) for key in ("type", "transport") if key in entry}
        _http = {"http": "http", "streamable-http": "http", "streamableHttp": "http"}  # three spellings of one transport
        if len({_http.get(str(v), str(v)) for v in given.values()}) > 1:
            problems.append((f"{path}.transport", f"`type` says {given['type']!r} and `transport` says {given['transport']!r}", "keep one of them"))
            continue
        key, transport = next(iter(given.items()), ("type", None))
        if transport == "sse":
            problems.append((f"{path}.{key}", "the legacy HTTP+SSE transport is not supported", "point `url` at the server's streamable HTTP endpoint and use `type: http`"))
            continue
        if transport not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
            problems.append((f"{path}.{key}", f"unknown transport {transport!r}", "use stdio or http"))
            continue
        if (transport == "stdio" and "command" not in entry) or (transport not in (None, "stdio") and "url" not in entry):
            needs = "command" if transport == "stdio" else "url"
            problems.append((f"{path}.{key}", f"transport {transport!r} needs `{needs}`", f"give `{needs}`, or change `{key}`"))
            continue
        for own in ("name", "kind"):
            if own in entry:
                problems.append((f"{path}.{own}", "an mcpServers entry takes its name from its key and is always an MCP server",
                                 "remove it, or declare the upstream under `upstreams:`"))
        disabled = entry.pop("disabled", False)
        if not isinstance(disabled, bool):
            problems.append((f"{path}.disabled", f"must be true or false, not {disabled!r}", "write disabled: true"))
            continue
        for ignored in ("autoApprove", "alwaysAllow", "envFile", "description", "timeout_ms"):
            entry.pop(ignored, None)
        entry = {**entry, "name": re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))[:48], "kind": "mcp"}
        if disabled:
            entry["enabled"] = False
        out.append((path, entry))
    return out


def parse_config(data: Any, source: str = "<memory>", base_dir: str = ".") -> BridgeConfig:
    """Validate a parsed config document. Raises ConfigError with every problem found."""
    problems: list[tuple[str, str, str]] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "the config must be a mapping", "start with `upstreams:`")])
    taken: set[str] = set()
    data = _interpolate(data, "", problems, taken)
    listed = data.get("upstreams")
    upstream_entries: list[tuple[str, Any]] = [(f"upstreams[{i}]", e) for i, e in enumerate(listed)] if isinstance(listed, list) else []
    if listed is not None and not isinstance(listed, list):
        problems.append(("upstreams", "must be a list", "write `upstreams:` followed by `- {name: ..., kind: ...}` items"))
    upstream_entries += _mcp_servers_to_upstreams(data.get("mcpServers") or {}, problems)

    upstreams: list[UpstreamConfig] = []
    names: dict[str, str] = {}
    for path, entry in upstream_entries:
        if not isinstance(entry, dict):
            problems.append((path, "must be a mapping", "write `{name: ..., kind: ...}`"))
            continue
        kind = entry.get("kind")
        if kind not in known_kinds():
            close = difflib.get_close_matches(str(kind).lower(), known_kinds(), n=1)  # `MCP`: mcp
            fix = f"did you mean `{close[0]}`?" if close else f"use one of: {', '.join(known_kinds())}"
            problems.append((_join(path, "kind"), f"unknown upstream kind {kind!r}" if kind else "is required", fix))
            continue
        try:
            model = upstream_class(kind).config_model
        except ImportError as exc:
            problems.append((_join(path, "kind"), f"kind {kind!r} cannot be loaded: {exc}", "reinstall the bridge (make setup)"))
            continue
        entry = {**entry, "base_dir": base_dir}
        try:
            cfg = model.model_validate(entry)
        except ValidationError as exc:
            problems.extend(_problems_of(exc, path, model, taken, doc=f"docs/upstreams/{kind}.md"))
            continue
        if cfg.name in names:
            problems.append((_join(path, "name"), f"name {cfg.name!r} is already used by {names[cfg.name]}", "give each upstream its own name"))
            continue
        names[cfg.name] = path
        upstreams.append(cfg)

    rest = {k: v for k, v in data.items() if k not in ("upstreams", "mcpServers", "source", "base_dir")}
    for key in ("source", "base_dir"):  # the bridge's own fields, set from the file read
        if key in data:
            problems.append((key, f"unknown key `{key}`", "remove it; the bridge sets it from the file it reads"))
    try:
        config = BridgeConfig.model_validate(rest)
    except ValidationError as exc:
        problems.extend(_problems_of(exc, "", BridgeConfig, taken))
        config = None
    # the checks across sections run on every section that is valid on its own: one problem
    # elsewhere (a port out of range) does not hide these
    surfaces = config.surfaces if config is not None else _valid_alone(_SURFACES, rest.get("surfaces", []))
    server = config.server if config is not None else _valid_alone(ServerConfig, rest.get("server", {}))
    if surfaces is not None:
        first: dict[str, int] = {}
        for i, surface in enumerate(surfaces):
            if surface.name in first:
                problems.append((f"surfaces[{i}].name", f"surface {surface.name!r} is already defined at surfaces[{first[surface.name]}]",
                                 "give each surface its own name, or merge the two definitions"))
            first.setdefault(surface.name, i)
    if server is not None:
        seen: dict[str, int] = {}
        for i, token in enumerate(server.tokens):
            if token.token != token.token.strip() or any(c.isspace() for c in token.token):
                problems.append((f"server.tokens[{i}].token", "holds white space (a `|` block adds a line end), so no "
                                 "Authorization header can match it", "write the token on one line, without spaces"))
            elif token.token in seen:
                problems.append((f"server.tokens[{i}].token", f"is the same token as server.tokens[{seen[token.token]}], which "
                                 "it would never win against", "give each token its own value"))
            seen.setdefault(token.token, i)
    if surfaces is not None:
        known = sorted({s.name for s in surfaces} | {"default"})
        if server is not None:
            named = [("server.default_surface", server.default_surface)]
            named += [(f"server.tokens[{i}].surface", token.surface) for i, token in enumerate(server.tokens)]
            if server.oauth is not None:
                named += [(f"server.oauth.surfaces.{value}", surface) for value, surface in server.oauth.surfaces.items()]
        else:  # the server section has a problem of its own: its surface name as written
            raw = rest.get("server")
            written = raw.get("default_surface") if isinstance(raw, dict) else None
            named = [("server.default_surface", written)] if isinstance(written, str) else []
        for where, name in named:
            if name not in known:
                problems.append((where, f"no surface named {name!r}", f"define it under `surfaces:` or use one of {known}"))
    if problems:
        raise ConfigError(source, problems)
    assert config is not None
    config.upstreams = upstreams
    config.mcpServers = {}
    config.source = source
    config.base_dir = base_dir
    return config


_SURFACES: TypeAdapter[list[SurfaceConfig]] = TypeAdapter(list[SurfaceConfig])


def _valid_alone(model: Any, value: Any) -> Any:
    """`value` validated as `model` (a model class or a TypeAdapter), or None when it is not
    (its problems are already reported)."""
    try:
        return model.validate_python(value) if isinstance(model, TypeAdapter) else model.model_validate(value)
    except ValidationError:
        return None


class _DuplicateYamlKey(yaml.constructor.ConstructorError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (it would keep the last
    silently: a second `store:` replacing the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:  # the mapping's own keys: one may override a merged (`<<`) one
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise _DuplicateYamlKey(None, None, f"the key {key!r} is given twice in one mapping", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | os.PathLike[str]) -> BridgeConfig:
    """Read, interpolate and validate a config file. Raises ConfigError."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(str(file), [("", "file not found", f"create it, or pass -c with an existing file (default {DEFAULT_CONFIG})")])
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(str(file), [("", f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line})",
                                       "save the file as UTF-8")]) from None
    except OSError as exc:
        raise ConfigError(str(file), [("", f"cannot be read ({exc.strerror or exc})",
                                       "make it readable by the user running the bridge")]) from None
    try:
        if file.suffix == ".json":
            data = json.loads(text, object_pairs_hook=unique_object)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RepeatedKey as exc:
        problem = ("", f"not valid JSON: {exc}", "keep one of the two")
        raise ConfigError(str(file), [problem]) from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else f"line {getattr(exc, 'lineno', '?')}"
        fix = "keep one of the two" if isinstance(exc, _DuplicateYamlKey) else "fix the syntax there"
        raise ConfigError(str(file), [("", f"not valid {'JSON' if file.suffix == '.json' else 'YAML'} at {where}: {getattr(exc, 'problem', None) or exc}", fix)]) from None
    if expanded_size(data, {}) > MAX_CONFIG_VALUES:
        raise ConfigError(str(file), [("", f"expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases repeating "
                                       "aliases?)", "write the config without nested aliases")])
    return parse_config(data, source=str(file), base_dir=str(file.parent.resolve()))


# A config is small; YAML aliases of aliases (`&a [*b, *b, ...]`) can make a few lines expand
# to billions of values, which reading would walk one by one.
MAX_CONFIG_VALUES = 1_000_000
