"""Places of a request (a header, its name compared without case; a query name; a cookie name)
that two of an OpenAPI upstream's credentials and configured headers claim, found at start for
each operation: a request carries one value there, so which one is sent is said once."""

from __future__ import annotations

from collections.abc import Iterable

from adapters.openapi_auth import Credentials, shown_place
from adapters.openapi_operations import Operation
from bridge.model import BridgeError

__all__ = ["place_overrides"]


def _listed(operations: list[str], which: str = "") -> str:
    """`2 operation(s) <which> (GET /a, GET /b)`: the first three named."""
    return f"{len(operations)} operation(s) {which}{' ' if which else ''}({', '.join(operations[:3])}{', ...' if len(operations) > 3 else ''})"


def place_overrides(credentials: Credentials, operations: Iterable[Operation], headers: dict[str, str]) -> list[str]:
    """A warning for each place two credentials, or a credential and a configured header, claim
    in the calls of `operations`: which is sent, and where."""
    unbound: dict[tuple[int, int, str | None], tuple[str, list[str]]] = {}  # (set aside, sent, its scheme): (place, operations)
    configured: dict[tuple[str, int], list[str]] = {}  # (header, credential sent in its stead): operations
    always = credentials.always
    header_places = {("header", name.lower()): name for name in headers}
    if always or header_places:
        for op in operations:
            try:
                chosen = credentials.choose(op.security, "")
            except BridgeError:  # such a call fails before any request
                continue
            places = {bound.place: bound for bound in chosen}
            shown = f"{op.method} {op.path}"
            for bound in always:
                if not any(bound is c for c in chosen):
                    sent = places[bound.place]
                    key = (bound.index, sent.index, sent.scheme)
                    unbound.setdefault(key, (shown_place(bound.place, bound.name), []))[1].append(shown)
            for place, name in header_places.items():
                if place in places:
                    configured.setdefault((name, places[place].index), []).append(shown)
    messages = list(credentials.overrides)
    kinds = {bound.index: bound.config.kind for bound in always}
    for (aside, sent, scheme), (where, ops) in unbound.items():
        messages.append(
            f"auth[{aside}] ({kinds[aside]}, sent with every call: it fits no security scheme of the document) and "
            f"auth[{sent}] (scheme {scheme}) put their credentials in one place, {where}, which a request carries once: "
            f"auth[{sent}]'s is sent in the {_listed(ops, 'whose security requirement it meets')}, "
            f"auth[{aside}]'s in the others")
    for (name, sent), ops in configured.items():
        messages.append(
            f"the configured header {name} is where auth[{sent}]'s credential goes: the credential is sent in the "
            f"{_listed(ops, 'that carry it')}, the configured header in the others")
    return messages
