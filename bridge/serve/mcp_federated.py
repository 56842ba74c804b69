"""The resources, resource templates and prompts of MCP upstreams, federated for the MCP frontend:
their listings (fetched when first asked, kept until the upstream says they changed or
reconnects), the names and URIs the bridge's clients see, what a surface shows of them, and the
upstream that answers a name or URI.

Names follow the upstream's `prefix`. With `always`, a prompt is `<upstream>__<name>` and a
resource or template URI is `bridge://upstream/<upstream>/<uri as the upstream gave it>`, which
the bridge turns back into the upstream's URI by cutting the head (a template stays a template:
its expansions are namespaced URIs too). With `when_needed` and `never`, the upstream's own name
or URI, unless an upstream before it in the config already lists that one: it is then the
namespaced form (and `never` warns). A namespaced URI always reads from its upstream.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from bridge.catalog import exposed_name
from bridge.config import Rule, RuleSpec
from bridge.model import BridgeError
from bridge.runtime import Bridge
from bridge.supervisor import UpstreamSlot
from bridge.surface import Surface

__all__ = [
    "URI_HEAD",
    "Federated",
    "FederatedItem",
    "ItemKind",
    "namespaced_uri",
    "split_uri",
]

log = logging.getLogger("bridge.serve.mcp")
T = TypeVar("T")

URI_HEAD = "bridge://upstream/"
ItemKind = Literal["resources", "templates", "prompts"]
# the `kind` a surface rule names to match each (a tool's is its tool_kind)
RULE_KINDS: dict[ItemKind, str] = {
    "resources": "mcp_resource",
    "templates": "mcp_resource_template",
    "prompts": "mcp_prompt",
}
# the capability each kind needs, the adapter's method listing it, and the key naming an item
_NEEDS: dict[ItemKind, str] = {
    "resources": "resources",
    "templates": "resources",
    "prompts": "prompts",
}
_LISTS: dict[ItemKind, str] = {
    "resources": "list_resources",
    "templates": "list_resource_templates",
    "prompts": "list_prompts",
}
_KEY: dict[ItemKind, str] = {"resources": "uri", "templates": "uriTemplate", "prompts": "name"}
_RULE_TOOL_FACTS = ("tag", "destructive", "open_world", "requires_user_interaction")
_TEMPLATE_VARIABLE = re.compile(r"\{[^{}]*\}")


def namespaced_uri(upstream: str, uri: str) -> str:
    """The URI a client sees for `uri` of `upstream` under `prefix: always`."""
    return f"{URI_HEAD}{upstream}/{uri}"


def split_uri(uri: str) -> tuple[str, str] | None:
    """(upstream, the upstream's URI) of a namespaced URI, or None."""
    if not uri.startswith(URI_HEAD):
        return None
    upstream, slash, native = uri[len(URI_HEAD) :].partition("/")
    return (upstream, native) if slash and upstream and native else None


def _template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the expansions of a URI template (RFC 6570; a variable
    matches any run of characters, a `{+var}` or `{/var}` one as well)."""
    parts, last = [], 0
    for found in _TEMPLATE_VARIABLE.finditer(template):
        parts.append(re.escape(template[last : found.start()]))
        parts.append(".*?" if found.group()[1:2] in "+#/?&" else "[^/]*?")
        last = found.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts))


@dataclass(frozen=True)
class FederatedItem:
    """One resource, template or prompt as a client sees it: `wire` is the upstream's entry with
    the exposed URI (or name), `native` the upstream's own."""

    upstream: str
    native: str
    exposed: str
    wire: dict[str, Any]


def _rule_matches(rule: RuleSpec, item: FederatedItem, kind: ItemKind) -> bool:
    """A surface rule applied to a resource, template or prompt: its name glob over the exposed
    name (or URI), its upstream glob, its kind; a rule naming a tool's facts (tag, destructive,
    ...) matches none of them, and `read_only: true` matches all (they only read)."""
    if isinstance(rule, str):
        return fnmatch.fnmatchcase(item.exposed, rule)
    if not isinstance(rule, Rule) or any(getattr(rule, f) is not None for f in _RULE_TOOL_FACTS):
        return False
    return (
        (rule.name is None or fnmatch.fnmatchcase(item.exposed, rule.name))
        and (rule.upstream is None or fnmatch.fnmatchcase(item.upstream, rule.upstream))
        and (rule.kind is None or rule.kind == RULE_KINDS[kind])
        and rule.read_only is not False
    )


class Federated:
    """The federated listings of the MCP upstreams of one bridge."""

    def __init__(
        self, bridge: Bridge, on_notice: Callable[[str, str, dict[str, Any]], None]
    ) -> None:
        self.bridge = bridge
        self._on_notice = on_notice
        self._listings: dict[tuple[str, ItemKind], list[dict[str, Any]]] = {}
        self._fetching: dict[tuple[str, ItemKind], asyncio.Future[list[dict[str, Any]]]] = {}
        self._warned: set[tuple[str, str]] = set()
        # (surface, upstream) -> (catalog generation, whether the surface shows the upstream)
        self._upstreams_shown: weakref.WeakKeyDictionary[Surface, dict[str, tuple[int, bool]]] = (
            weakref.WeakKeyDictionary()
        )
        self._unsubscribe = bridge.catalog.subscribe(self._on_catalog_change)

    def close(self) -> None:
        self._unsubscribe()

    # ------------------------------------------------------------------ upstreams

    def _on_catalog_change(self, change: Any) -> None:
        """An upstream that connected again (or went) may list other things: forget its listings."""
        if change.state_changed and change.upstream is not None:
            self.forget(change.upstream)

    def forget(
        self, upstream: str, kinds: Iterable[ItemKind] = ("resources", "templates", "prompts")
    ) -> None:
        for kind in kinds:
            self._listings.pop((upstream, kind), None)

    def slots(self, need: str | None = None) -> list[UpstreamSlot]:
        """The ready upstreams that serve `need` (a capability they declared), in config order;
        each one's notices come to this frontend."""
        found = []
        for slot in list(self.bridge.catalog.slots.values()):
            upstream: Any = slot.upstream
            if not getattr(upstream, "serves_features", False):
                continue
            if upstream.notice_sink is not self._on_notice:
                upstream.notice_sink = self._on_notice
            if slot.health.state != "ready" or slot.stopping is not None:
                continue
            if need is None or need in upstream.feature_set():
                found.append(slot)
        return found

    async def call(self, slot: UpstreamSlot, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """One request to an upstream, within its timeout and concurrency limit."""
        if slot.stopping is not None or slot.health.state != "ready":
            raise BridgeError(
                f"upstream {slot.name!r} is {slot.stopping or slot.health.state}: "
                f"{slot.health.reason or 'starting'}",
                error_class="dependency_unavailable",
                recoverability="retry_later",
                retry_after=slot.retry_after() or 1.0,
            )
        timeout = slot.upstream.config.timeout
        assert slot.semaphore is not None
        try:
            async with asyncio.timeout(timeout):
                async with slot.semaphore:
                    with slot.calling():
                        return await request()
        except TimeoutError:
            raise BridgeError(
                f"upstream {slot.name!r} did not answer {what} within {timeout:g}s",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
            ) from None

    async def _listing(self, slot: UpstreamSlot, kind: ItemKind) -> list[dict[str, Any]]:
        """One upstream's listing of `kind`, kept until it changes; [] while it cannot list."""
        key = (slot.name, kind)
        kept = self._listings.get(key)
        if kept is not None:
            return kept
        pending = self._fetching.get(key)
        if pending is None:
            method = getattr(slot.upstream, _LISTS[kind])
            task = asyncio.ensure_future(self.call(slot, kind, method))
            self._fetching[key] = pending = task

            def done(future: asyncio.Future[list[dict[str, Any]]]) -> None:
                if self._fetching.get(key) is future:
                    del self._fetching[key]
                if not future.cancelled() and future.exception() is None:
                    self._listings[key] = future.result()

            task.add_done_callback(done)
        try:
            return await asyncio.shield(pending)
        except BridgeError as exc:
            log.info("mcp upstream %s: %s not listed: %s", slot.name, kind, exc.message)
            return []

    # ------------------------------------------------------------------ names

    async def items(self, kind: ItemKind) -> list[FederatedItem]:
        """Every upstream's items of `kind` with the names clients see, in config order, before
        any surface is applied (so that one surface's rules never rename another's items)."""
        slots = self.slots(_NEEDS[kind])
        listings = await asyncio.gather(*(self._listing(slot, kind) for slot in slots))
        key = _KEY[kind]
        taken: set[str] = set()
        found: list[FederatedItem] = []
        for slot, listing in zip(slots, listings, strict=True):
            prefix = getattr(slot.upstream.config, "prefix", "always")
            for entry in listing:
                native = entry.get(key)
                if not isinstance(native, str):
                    continue
                namespaced = self._namespaced(kind, slot.name, native)
                exposed = namespaced
                if prefix != "always" and native not in taken and not native.startswith(URI_HEAD):
                    exposed = native
                elif prefix == "never" and (slot.name, native) not in self._warned:
                    self._warned.add((slot.name, native))
                    log.warning(
                        "mcp upstream %s: %s %r is listed by an upstream before it; served as %r",
                        slot.name,
                        kind[:-1],
                        native,
                        exposed,
                    )
                if exposed in taken:
                    continue  # listed twice by one upstream: its first entry is served
                taken.add(exposed)
                found.append(FederatedItem(slot.name, native, exposed, {**entry, key: exposed}))
        return found

    @staticmethod
    def _namespaced(kind: ItemKind, upstream: str, native: str) -> str:
        return (
            exposed_name(upstream, native)
            if kind == "prompts"
            else namespaced_uri(upstream, native)
        )

    # ------------------------------------------------------------------ surfaces

    def shows(self, surface: Surface, item: FederatedItem, kind: ItemKind) -> bool:
        """Whether `surface` shows `item`: not when a block rule matches it (unless an allow rule
        does), nor when the surface hides every tool of its upstream (which hides the
        upstream)."""
        cfg = surface.config
        if any(_rule_matches(rule, item, kind) for rule in cfg.allow):
            return True
        if any(_rule_matches(rule, item, kind) for rule in cfg.block):
            return False
        return self._shows_upstream(surface, item.upstream)

    def _shows_upstream(self, surface: Surface, upstream: str) -> bool:
        """Whether `surface` shows any tool of `upstream` (or it has none), kept until the
        catalog changes: a listing asks it once an item."""
        catalog = self.bridge.catalog
        per_upstream = self._upstreams_shown.setdefault(surface, {})
        kept = per_upstream.get(upstream)
        if kept is not None and kept[0] == catalog.generation:
            return kept[1]
        slot = catalog.slots.get(upstream)
        shown = slot is not None and (
            not slot.tools or any(surface.visible(decl) for decl in slot.tools.values())
        )
        per_upstream[upstream] = (catalog.generation, shown)
        return shown

    async def listing(self, surface: Surface, kind: ItemKind) -> list[FederatedItem]:
        """What `surface` shows of `kind`."""
        return [item for item in await self.items(kind) if self.shows(surface, item, kind)]

    # ------------------------------------------------------------------ routing

    async def prompt(self, surface: Surface, name: str) -> tuple[UpstreamSlot, str] | None:
        """The upstream and its own name of the prompt `name` shown on `surface`, or None."""
        for item in await self.items("prompts"):
            if item.exposed == name and self.shows(surface, item, "prompts"):
                return self._slot(item)
        return None

    async def template(
        self, surface: Surface, uri_template: str
    ) -> tuple[UpstreamSlot, str] | None:
        """The upstream and its own template of an exposed template (completion's reference)."""
        for item in await self.items("templates"):
            if item.exposed == uri_template and self.shows(surface, item, "templates"):
                return self._slot(item)
        return None

    async def resource(self, surface: Surface, uri: str) -> tuple[UpstreamSlot, str] | None:
        """The upstream and its own URI of a resource URI a client gave, or None when no
        upstream shown on `surface` serves it: a namespaced URI names its upstream; any other is
        the URI of a listed resource, else an expansion of a listed template, of an upstream
        not prefixed always."""
        split = split_uri(uri)
        if split is not None:
            upstream, native = split
            item = FederatedItem(upstream, native, uri, {})
            slots = {slot.name: slot for slot in self.slots("resources")}
            slot = slots.get(upstream)
            if slot is None or not self.shows(surface, item, "resources"):
                return None
            return slot, native
        for kind in ("resources", "templates"):
            for item in await self.items(kind):
                if item.exposed == item.native:
                    matched = (
                        item.native == uri
                        if kind == "resources"
                        else _template_pattern(item.native).fullmatch(uri) is not None
                    )
                    slot = self.bridge.catalog.slots.get(item.upstream)
                    if matched and slot is not None and self.shows(surface, item, kind):
                        return slot, uri
        return None

    def _slot(self, item: FederatedItem) -> tuple[UpstreamSlot, str] | None:
        slot = self.bridge.catalog.slots.get(item.upstream)
        return (slot, item.native) if slot is not None else None

    def exposed_uris(self, upstream: str, native: str) -> list[str]:
        """The URIs clients may know `native` of `upstream` by (for its update notices)."""
        uris = [namespaced_uri(upstream, native)]
        for kind in ("resources", "templates"):
            for entry in self._listings.get((upstream, kind), ()):
                if entry.get(_KEY[kind]) == native:
                    uris.append(native)
        return uris
