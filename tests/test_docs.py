"""The documentation names what the code takes: every config key in the reference and on its
kind's page, every key those pages' tables list is one the code takes, each default those tables
write as a value is the code's and each bound past 0 and 1 is said, and every option of the
`bridge` command is in the README (those of `atip scan` on the ATIP page)."""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from bridge import config as bridge_config
from bridge.cli import build_parser
from bridge.redis_config import RedisConfig
from bridge.upstream import LaunchConfig, UpstreamConfig, known_kinds, upstream_class
from bridge.user_oauth_config import UserOAuthConfig

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"
LOADER_FIELDS = {
    "acts_for_caller",
    "base_dir",
    "source",
    "upstream_exchanges",
}  # set by the loader from the file read, never written


def keys(model: type[BaseModel]) -> set[str]:
    return {
        field.alias or name
        for name, field in model.model_fields.items()
        if name not in LOADER_FIELDS
    }


def nested(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The key of each field that holds a mapping of its own (auth, retries, launch)."""
    out = {}
    for name, field in model.model_fields.items():
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (arg, *typing.get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out[field.alias or name] = inner
    return out


def named(text: str) -> set[str]:
    """Every word written in code style in a page (`key`, `{key: value}`, `key: false`)."""
    spans = [m.group(2) for m in re.finditer(r"(`+)(.+?)\1", text, re.S)]
    return {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


def table_keys(text: str, heading: str) -> set[str]:
    """The keys of the first column of the first table under `heading` (each `key` of the cell)."""
    section = text.split(heading, 1)[1]
    table = re.search(r"^\| key \|.*?\n\| -+ \|.*?\n((?:\|.*\n)+)", section, re.M)
    assert table, f"no key table under {heading!r}"
    return {
        key
        for row in table.group(1).splitlines()
        for key in re.findall(r"`([^`]+)`", row.split("|")[1])
    }


def config_page() -> str:
    return (DOCS / "config.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("heading", "model"),
    [
        ("## Top level", bridge_config.BridgeConfig),
        ("### `server`", bridge_config.ServerConfig),
        ("### `invoke`", bridge_config.InvokeConfig),
        ("### `store`", bridge_config.StoreConfig),
        ("### `search`", bridge_config.SearchConfig),
        ("### `telemetry`", bridge_config.TelemetryConfig),
        ("### `logging`", bridge_config.LoggingConfig),
        ("### `audit`", bridge_config.AuditConfig),
        ("### `redis`", RedisConfig),
        ("## Upstreams", UpstreamConfig),
    ],
)
def test_each_key_table_of_the_config_reference_is_the_models_keys(heading, model):
    assert table_keys(config_page(), heading) == keys(model)


def test_the_identity_pages_table_is_the_oauth_sections_keys():
    text = (DOCS / "identity.md").read_text(encoding="utf-8")
    assert table_keys(text, "## Configuration (`server.oauth`)") == keys(bridge_config.OAuthConfig)


def test_the_identity_pages_tables_are_the_rate_limit_and_token_exchange_keys():
    from bridge.exchange_config import TokenExchangeConfig
    from bridge.limits_config import RateLimitConfig
    from bridge.user_oauth_config import UserOAuthConfig

    text = (DOCS / "identity.md").read_text(encoding="utf-8")
    assert table_keys(text, "## Rate limits and quotas") == keys(RateLimitConfig)
    assert table_keys(text, "## Upstreams that act for the caller") == keys(TokenExchangeConfig)
    assert table_keys(text, "## Users' own accounts at an upstream") == keys(UserOAuthConfig)


def test_the_rest_pages_server_table_is_the_server_sections_keys():
    text = (DOCS / "frontends" / "rest.md").read_text(encoding="utf-8")
    assert table_keys(text, "## Configuration (`server:`)") == keys(bridge_config.ServerConfig)


def test_the_config_reference_names_the_other_sections_keys():
    text = named(config_page())
    for model in (bridge_config.SurfaceConfig, LaunchConfig, bridge_config.AuthToken):
        assert keys(model) <= text, (model.__name__, keys(model) - text)


def test_the_surfaces_page_names_every_surface_key_and_rule_field():
    text = (DOCS / "surfaces.md").read_text(encoding="utf-8")
    assert table_keys(text, "## Keys") == keys(bridge_config.SurfaceConfig)
    assert keys(bridge_config.Rule) <= named(text)


def shipped_kinds() -> list[str]:
    """The kinds the bridge ships (adapters/), not those other tests register."""
    return [
        kind for kind in known_kinds() if upstream_class(kind).__module__.startswith("adapters.")
    ]


@pytest.mark.parametrize("kind", shipped_kinds())
def test_each_kinds_page_lists_the_keys_of_its_kind(kind):
    model = upstream_class(kind).config_model
    own = keys(model) - keys(UpstreamConfig)
    text = (DOCS / "upstreams" / f"{kind}.md").read_text(encoding="utf-8")
    heading = next(h for h in ("## Settings", "## Configuration") if h in text)
    listed = table_keys(text, heading)
    expected = set()
    for key in own:
        inner = nested(model).get(key)
        # a mapping of its own is listed as `key` or key by key (`retries.count`); OpenAPI's
        # auth and include/exclude have tables of their own
        if inner is not None and key not in listed:
            expected |= {f"{key}.{sub}" for sub in keys(inner)}
        else:
            expected.add(key)
    assert listed == expected


def options(parser: argparse.ArgumentParser) -> dict[str, list[tuple[str, ...]]]:
    """Each command (`atip scan` for nested ones) and the option strings of each of its options,
    help aside."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for inner, opts in options(sub).items():
                    out[f"{name} {inner}".strip()] = opts
    own = [
        tuple(a.option_strings)
        for a in parser._actions
        if a.option_strings and "--help" not in a.option_strings
    ]
    if own or not out:
        out[""] = own
    return out


def test_the_readme_names_every_option_of_every_command():
    readme = README.read_text(encoding="utf-8")
    atip = (DOCS / "upstreams" / "atip.md").read_text(encoding="utf-8")
    for command, opts in options(build_parser()).items():
        page = atip + readme if command.startswith("atip") else readme
        assert not command or command.split()[0] in readme
        missing = [
            o
            for o in opts
            if not any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", page) for s in o)
        ]
        assert not missing, (command, missing)


def key_rows(text: str) -> dict[str, tuple[str, str]]:
    """Each `key` of every key table of a page: (its default cell, its meaning cell)."""
    rows: dict[str, tuple[str, str]] = {}
    for table in re.finditer(r"^\| key \| default \|.*\n\| -+ \|.*\n((?:\|.*\n)+)", text, re.M):
        for row in table.group(1).splitlines():
            cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
            for key in re.findall(r"`([^`]+)`", cells[0]):
                rows[key] = (cells[1], cells[2] if len(cells) > 2 else "")
    return rows


def section(text: str, heading: str) -> str:
    """The part of a page from `heading` to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    body = text.split(heading, 1)[1]
    end = re.search(rf"^#{{1,{level}}} ", body, re.M)
    return body[: end.start()] if end else body


def documented_models() -> list[tuple[str, type[BaseModel], str]]:
    """(page, model, prefix of its keys in the page's tables) for every config model with a key table;
    a page may be `page#heading`, the part of the page under that heading."""
    out = [
        ("config.md", model, "")
        for model in (
            bridge_config.BridgeConfig,
            bridge_config.ServerConfig,
            bridge_config.InvokeConfig,
            UpstreamConfig,
        )
    ]
    out += [
        ("config.md#### `store`", bridge_config.StoreConfig, ""),
        ("config.md#### `search`", bridge_config.SearchConfig, ""),
    ]
    out.append(("config.md#### `telemetry`", bridge_config.TelemetryConfig, ""))
    out.append(("config.md#### `logging`", bridge_config.LoggingConfig, ""))
    out.append(("config.md#### `audit`", bridge_config.AuditConfig, ""))
    out.append(("surfaces.md", bridge_config.SurfaceConfig, ""))
    out.append(("identity.md", bridge_config.OAuthConfig, ""))
    out.append(
        ("identity.md### Users' own accounts at an upstream (`user_oauth`)", UserOAuthConfig, "")
    )
    out.append(("frontends/rest.md", bridge_config.ServerConfig, ""))
    for kind in shipped_kinds():
        model = upstream_class(kind).config_model
        out.append((f"upstreams/{kind}.md", model, ""))
        for key, inner in nested(model).items():
            out.append((f"upstreams/{kind}.md", inner, f"{key}."))
    return out


def default_of(model: type[BaseModel], name: str):
    field = model.model_fields[name]
    return field.default_factory() if field.default_factory is not None else field.default


@pytest.mark.parametrize(
    ("page", "model", "prefix"), documented_models(), ids=lambda v: getattr(v, "__name__", v)
)
def test_each_default_a_key_table_writes_as_a_value_is_the_models(page, model, prefix):
    """A default cell holding one value in code style (`30`, `auto`, `[]`) is the field's default, and
    a field bounded by a number other than 0 and 1 says so in its row (`at least 1024`)."""
    import yaml

    page, _, heading = page.partition("#")
    text = (DOCS / page).read_text(encoding="utf-8")
    rows = key_rows(section(text, heading) if heading else text)
    wrong = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        row = rows.get(prefix + key) or (rows.get(key) if prefix else None)
        if row is None or (
            prefix == ""
            and model is not UpstreamConfig
            and key in keys(UpstreamConfig)
            and page != "config.md"
        ):
            continue
        default_cell, meaning = row
        value = re.fullmatch(r"`([^`]+)`(?: \([^)]*\))?(?: \(all\))?", default_cell)
        if value and value.group(1) not in keys(
            model
        ):  # not `max_concurrency`: another key's value
            written = yaml.safe_load(value.group(1))
            actual = default_of(model, name)
            if isinstance(actual, BaseModel):  # a section's default written as the keys it sets
                actual = {k: v for k, v in actual.model_dump().items() if k in written}
            if written != actual:
                wrong.append((prefix + key, f"written {default_cell}, the default is {actual!r}"))
        for bound in field.metadata:
            for attr in ("ge", "gt", "le", "lt"):
                number = getattr(bound, attr, None)
                if number is not None and number not in (0, 1):
                    spelled = {f"{number:g}", f"{number:,g}"}
                    if not any(
                        re.search(rf"(?<![\d,.]){re.escape(s)}(?![\d,])", meaning) for s in spelled
                    ):
                        wrong.append((prefix + key, f"{attr} {number:g} not said in its row"))
    assert not wrong, (page, wrong)


def route_key(method: str, path: str) -> tuple[str, str]:
    """`GET /tools/{toolId}/versions/{n}` and the route `/tools/{tool_id}/versions/{version}` alike."""
    return method, re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])


def test_the_rest_page_lists_every_route_and_no_other():
    from starlette.routing import Route

    from bridge.runtime import Bridge
    from bridge.serve.app import rest_routes

    routes, _ = rest_routes(Bridge(bridge_config.parse_config({"store": {"path": ":memory:"}})))
    served = {
        route_key(method, route.path)
        for route in routes
        if isinstance(route, Route)
        for method in route.methods - {"HEAD"}
    }
    text = (DOCS / "frontends" / "rest.md").read_text(encoding="utf-8")
    named = {
        route_key(*m.groups())
        for m in re.finditer(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)", text)
    }
    listed = {
        route_key(*m.groups())
        for m in re.finditer(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/[^`\s]*)", text, re.M)
    }
    assert served - named == set()
    assert listed - served == set()


def test_the_rest_pages_status_table_gives_each_error_class_its_status():
    from bridge.serve.rest_http import STATUS_BY_CLASS

    text = (DOCS / "frontends" / "rest.md").read_text(encoding="utf-8")
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d{3}) \| (.*)$", text, re.M)}
    wrong = [
        (error_class, status)
        for error_class, status in STATUS_BY_CLASS.items()
        if f"`{error_class}`" not in rows.get(status, "")
    ]
    assert not wrong


def test_the_mcp_page_names_every_method_the_frontend_answers():
    from bridge.runtime import Bridge
    from bridge.serve.mcp import MCPFrontend

    frontend = MCPFrontend(Bridge(bridge_config.parse_config({"store": {"path": ":memory:"}})))
    text = (DOCS / "frontends" / "mcp.md").read_text(encoding="utf-8")
    methods = set(frontend.server._request_handlers)
    assert {"tools/list", "tools/call"} <= methods
    assert {method for method in methods if f"`{method}`" not in text} == set()


def test_the_openapi_selectors_and_atip_answers_are_documented_field_by_field():
    from adapters.atip.upstream import AnswerRule
    from adapters.openapi.operations import Selector

    openapi = (DOCS / "upstreams" / "openapi.md").read_text(encoding="utf-8")
    section = openapi.split("### Selectors", 1)[1]
    table = re.search(r"^\| field \|.*\n\| -+ \|.*\n((?:\|.*\n)+)", section, re.M)
    assert table
    assert {
        key
        for row in table.group(1).splitlines()
        for key in re.findall(r"`([^`]+)`", row.split("|")[1])
    } == keys(Selector)
    assert keys(AnswerRule) <= named((DOCS / "upstreams" / "atip.md").read_text(encoding="utf-8"))


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to
    hyphens, `-1`, `-2` after a repeated one."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_link_between_the_pages_resolves_anchor_included():
    broken = []
    for page in (README, *sorted(DOCS.rglob("*.md"))):
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (
                anchor
                and dest.suffix == ".md"
                and anchor not in anchors(dest.read_text(encoding="utf-8"))
            ):
                broken.append((page.name, target))
    assert not broken


MAX_CELL = 300  # a table row says one thing; its details go in a section the row links to


def test_no_table_cell_of_any_page_holds_a_paragraph():
    long = []
    for page in (README, *sorted(DOCS.rglob("*.md"))):
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for line in text.splitlines():
            if line.startswith("|"):
                # cells split at each `|` not escaped, as GitHub's tables do, code spans included
                for cell in re.split(r"(?<!\\)\|", line.strip().strip("|")):
                    if len(cell.strip()) > MAX_CELL:
                        long.append(
                            (
                                str(page.relative_to(DOCS.parent)),
                                len(cell.strip()),
                                cell.strip()[:60],
                            )
                        )
    assert not long
