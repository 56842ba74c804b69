"""Places of a request (a header, its name compared without case; a query name; a cookie name)
that two of an OpenAPI upstream's credentials, configured headers and operation parameters
claim, found at start for each operation: a request carries one value there, so which one is
sent is said once, and a parameter the configuration fills is not offered to callers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from adapters.openapi.auth import Credentials, shown_place
from adapters.openapi.records import Operation
from bridge.model import BridgeError, UpstreamTool

__all__ = ["Claims", "claimed_places", "served"]


@dataclass
class Claims:
    messages: list[str] = field(default_factory=list)  # what is sent where two claim one place
    covered: dict[str, frozenset[str]] = field(
        default_factory=dict
    )  # native id: input properties the configuration fills


def _listed(operations: list[str], which: str = "") -> str:
    """`2 operation(s) <which> (GET /a, GET /b)`: the first three named."""
    return f"{len(operations)} operation(s) {which}{' ' if which else ''}({', '.join(operations[:3])}{', ...' if len(operations) > 3 else ''})"


def _configured_cookies(headers: dict[str, str]) -> list[str]:
    """The names of the cookies of a configured `Cookie` header (its name in any case)."""
    items = (
        part.strip()
        for key, value in headers.items()
        if key.lower() == "cookie"
        for part in value.split(";")
    )
    return list(dict.fromkeys(item.split("=", 1)[0].strip() for item in items if item))


def _the_others(carried: int, calls: int, configured: str) -> str:
    """What the configured value is sent in, beside the credential sent in `carried` of `calls` operations."""
    return f"{configured} in the others" if carried < calls else f"never {configured}"


def claimed_places(
    credentials: Credentials, operations: Iterable[Operation], headers: dict[str, str]
) -> Claims:
    """For the calls of `operations`: each place two credentials, a credential and a configured
    header, or either and a parameter claim (which is sent, in a warning), and the parameters
    a credential, a configured header or a cookie of a configured `Cookie` header fills, which
    callers are not offered."""
    unbound: dict[
        tuple[int, int, str | None], tuple[str, list[str]]
    ] = {}  # (set aside, sent, its scheme): (place, operations)
    configured: dict[
        tuple[str, int], list[str]
    ] = {}  # (header, credential sent in its stead): operations
    cookies: dict[
        tuple[str, int], list[str]
    ] = {}  # (cookie of the configured Cookie header, credential sent in its stead): operations
    filled: dict[
        tuple[str, str, str], list[str]
    ] = {}  # (location, parameter, what fills it): operations
    claims = Claims()
    always = credentials.always
    header_places = {("header", name.lower()): name for name in headers}
    cookie_places = {("cookie", name): name for name in _configured_cookies(headers)}
    calls = 0  # operations whose calls are sent
    if always or header_places or credentials.binds_schemes:
        for op in operations:
            try:
                chosen = credentials.choose(op.security, "")
            except BridgeError:  # such a call fails before any request
                continue
            calls += 1
            places = {bound.place: bound for bound in chosen}
            shown = f"{op.method} {op.path}"
            for bound in always:
                if not any(bound is c for c in chosen):
                    taker = places[bound.place]
                    key = (bound.index, taker.index, taker.scheme)
                    unbound.setdefault(key, (shown_place(bound.place, bound.name), []))[1].append(
                        shown
                    )
            for place, name in header_places.items():
                if place in places:
                    configured.setdefault((name, places[place].index), []).append(shown)
            for (
                place,
                name,
            ) in cookie_places.items():  # a credential's cookie replaces the configured one
                if place in places:
                    cookies.setdefault((name, places[place].index), []).append(shown)
            covered = set()
            for spec in op.params:
                place = (
                    spec.location,
                    spec.name.lower() if spec.location == "header" else spec.name,
                )
                if place in places:
                    by = f"is where auth[{places[place].index}]'s credential goes: the credential is sent"
                elif place in header_places:
                    by = f"is filled by the configured header {header_places[place]}: the configured value is sent"
                elif place in cookie_places:
                    by = f"is filled by the cookie {cookie_places[place]} of the configured Cookie header: the configured value is sent"
                else:
                    continue
                covered.add(spec.prop)
                filled.setdefault((spec.location, spec.name, by), []).append(shown)
            if covered:
                claims.covered[op.native_id] = frozenset(covered)
    claims.messages = list(credentials.overrides)
    kinds = {bound.index: bound.config.kind for bound in always}
    for (aside, sent, scheme), (where, ops) in unbound.items():
        claims.messages.append(
            f"auth[{aside}] ({kinds[aside]}, sent with every call: it fits no security scheme of the document) and "
            f"auth[{sent}] (scheme {scheme}) put their credentials in one place, {where}, which a request carries once: "
            f"auth[{sent}]'s is sent in the {_listed(ops, 'whose security requirement it meets')}, auth[{aside}]'s in the others"
        )
    for (name, sent), ops in configured.items():
        claims.messages.append(
            f"the configured header {name} is where auth[{sent}]'s credential goes: the credential is sent in the "
            f"{_listed(ops, 'that carry it')}, {_the_others(len(ops), calls, 'the configured header')}"
        )
    for (name, sent), ops in cookies.items():
        claims.messages.append(
            f"the cookie {name} of the configured Cookie header is where auth[{sent}]'s credential goes: the credential is "
            f"sent in the {_listed(ops, 'that carry it')}, {_the_others(len(ops), calls, 'the configured cookie')}"
        )
    for (location, name, by), ops in filled.items():
        claims.messages.append(
            f"the {location} parameter {name} of {_listed(ops)} {by}, and the parameter is left out of "
            "those tools' inputs"
        )
    return claims


def served(
    tools: list[UpstreamTool], operations: dict[str, Operation], covered: dict[str, frozenset[str]]
) -> tuple[list[UpstreamTool], dict[str, Operation]]:
    """The tools and operations without the parameters the configuration fills: not in the
    input schema (nor its `required`), and not sent from an argument that gets past it."""
    if not covered:
        return tools, operations
    operations = dict(operations)
    out = []
    for tool in tools:
        props = covered.get(tool.native_id)
        if props:
            op = operations[tool.native_id]
            operations[tool.native_id] = dataclasses.replace(
                op, params=tuple(p for p in op.params if p.prop not in props)
            )
            schema = dict(tool.input_schema)
            schema["properties"] = {
                k: v for k, v in schema.get("properties", {}).items() if k not in props
            }
            required = [name for name in schema.pop("required", []) if name not in props]
            if required:
                schema["required"] = required
            tool = tool.model_copy(update={"input_schema": schema})
        out.append(tool)
    return out, operations
