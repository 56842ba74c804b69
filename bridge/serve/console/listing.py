"""What the console's catalog page lists for one surface: a filtered, sorted listing of the tools
the surface shows (or those it blocks and tells of, with their reasons), paged by offset, and a
free-text search through the same tool search as `GET /search`. Filtered listings are kept until
the catalog or the surface changes, so the next pages of a listing of 100,000 tools are cut from
a list made once."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from bridge.model import ToolDeclaration
from bridge.runtime import Bridge
from bridge.surface import Surface

__all__ = ["SEARCH_WINDOW", "CatalogFilters", "CatalogListing", "tool_summary"]

# A free-text search ranks at most this many tools; the console pages through them.
SEARCH_WINDOW = 200
# Tags offered as a filter: the most used ones.
FACET_TAGS = 200
_DESCRIPTION_CHARS = 240


@dataclass(frozen=True)
class CatalogFilters:
    """The catalog page's filters; None filters nothing."""

    upstream: str | None = None
    kind: str | None = None
    tag: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    placement: str | None = None  # loaded, deferred or blocked

    def checks(self) -> list[Callable[[ToolDeclaration], bool]]:
        """One test per filter given (a listing applies them one after the other, each pass over
        what the one before kept)."""
        given: tuple[tuple[Any, Callable[[Any, ToolDeclaration], bool]], ...] = (
            (self.upstream, _in_upstream),
            (self.kind, _of_kind),
            (self.tag, _tagged),
            (self.read_only, _read_only_is),
            (self.destructive, _destructive_is),
        )
        return [functools.partial(test, value) for value, test in given if value is not None]

    def keeps(self, decl: ToolDeclaration) -> bool:
        return all(check(decl) for check in self.checks())


def _in_upstream(name: str, decl: ToolDeclaration) -> bool:
    return decl.namespace == name


def _of_kind(kind: str, decl: ToolDeclaration) -> bool:
    return decl.tool_kind == kind


def _tagged(tag: str, decl: ToolDeclaration) -> bool:
    return tag in decl.tags


def _read_only_is(value: bool, decl: ToolDeclaration) -> bool:
    return decl.safety.read_only == value


def _destructive_is(value: bool, decl: ToolDeclaration) -> bool:
    return decl.safety.destructive == value


def tool_summary(decl: ToolDeclaration, surface: Surface) -> dict[str, Any]:
    """One row of the catalog page."""
    placement = surface.place(decl)
    description = decl.description
    if len(description) > _DESCRIPTION_CHARS:
        description = description[: _DESCRIPTION_CHARS - 1] + "…"
    row: dict[str, Any] = {
        "tool_id": decl.tool_id,
        "name": decl.name,
        "title": decl.title,
        "namespace": decl.namespace,
        "tool_kind": decl.tool_kind,
        "upstream_kind": decl.upstream_kind,
        "description": description,
        "tags": decl.tags,
        "read_only": decl.safety.read_only,
        "destructive": decl.safety.destructive,
        "placement": placement.state,
        "loading_state": decl.loading_state,
        "version": decl.version,
    }
    if placement.reason:
        row["reason"] = placement.reason
    return row


class CatalogListing:
    """The catalog page's answers over one bridge, for any surface. Every list is made from what
    the caller's surface shows or tells of; a tool the surface hides is never read into one."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        # (surface name, catalog generation, filters) -> the sorted declarations that pass
        self._lists: LRUCache[tuple[Any, ...], list[ToolDeclaration]] = LRUCache(maxsize=32)
        self._facets: LRUCache[tuple[Any, ...], dict[str, Any]] = LRUCache(maxsize=16)

    def _key(self, surface: Surface, *rest: Any) -> tuple[Any, ...]:
        return (surface.name, id(surface), self.bridge.catalog.generation, *rest)

    def shown(self, surface: Surface) -> list[ToolDeclaration]:
        """Every tool the surface lists (loaded and deferred), by name."""
        key = self._key(surface, "shown")
        found = self._lists.get(key)
        if found is None:
            found = sorted(
                (d for d in self.bridge.catalog.declarations() if surface.visible(d)),
                key=lambda d: d.name,
            )
            self._lists[key] = found
        return found

    def blocked(self, surface: Surface) -> list[ToolDeclaration]:
        """The tools the surface blocks and tells its callers of (with a reason they can act on),
        by name; those its own rules block are hidden, and left out."""
        key = self._key(surface, "blocked")
        found = self._lists.get(key)
        if found is None:
            found = []
            for decl in self.bridge.catalog.declarations():
                placement = surface.place(decl)
                if placement.state == "blocked" and not placement.hidden:
                    found.append(decl)
            found.sort(key=lambda d: d.name)
            self._lists[key] = found
        return found

    def listed(self, surface: Surface, filters: CatalogFilters) -> list[ToolDeclaration]:
        key = self._key(surface, filters)
        found = self._lists.get(key)
        if found is None:
            found = self.blocked(surface) if filters.placement == "blocked" else self.shown(surface)
            for check in filters.checks():
                found = [d for d in found if check(d)]
            if filters.placement in ("loaded", "deferred"):
                place = surface.place
                found = [d for d in found if place(d).state == filters.placement]
            self._lists[key] = found
        return found

    def page(
        self, surface: Surface, query: str, filters: CatalogFilters, offset: int, limit: int
    ) -> dict[str, Any]:
        """A page of the listing, or of the search for `query` (ranked, the best
        `SEARCH_WINDOW`), as `{items, total, offset, limit, next_offset, ...}`."""
        body: dict[str, Any] = {}
        if query.strip() and filters.placement != "blocked":
            result = self.bridge.find_tools(
                query,
                surface=surface,
                limit=SEARCH_WINDOW,
                namespace=filters.upstream,
                tags=[filters.tag] if filters.tag else None,
                kind=filters.kind,
                read_only=filters.read_only,
            )
            catalog = self.bridge.catalog
            ranked: list[tuple[ToolDeclaration, dict[str, Any]]] = []
            for match in result.matches:
                decl = catalog.get(match.tool_id)
                if decl is None or not surface.visible(decl) or not filters.keeps(decl):
                    continue
                if filters.placement and surface.place(decl).state != filters.placement:
                    continue
                extra: dict[str, Any] = {"score": match.score}
                if match.alternatives:
                    extra["alternatives"] = match.alternatives
                ranked.append((decl, extra))
            window = ranked[offset : offset + limit]
            items = [{**tool_summary(d, surface), **extra} for d, extra in window]
            total = len(ranked)
            body.update(query_type=result.query_type, ranked=True)
            if result.hint:
                body["hint"] = result.hint
            if result.missing_names:
                body["missing_names"] = result.missing_names
        else:
            listed = self.listed(surface, filters)
            items = [tool_summary(d, surface) for d in listed[offset : offset + limit]]
            total = len(listed)
            body["ranked"] = False
        more = offset + limit < total
        body.update(
            items=items,
            total=total,
            offset=offset,
            limit=limit,
            next_offset=offset + limit if more else None,
        )
        return body

    def facets(self, surface: Surface) -> dict[str, Any]:
        """What the filters offer on this surface: its upstreams, tool kinds and most used tags,
        each with the number of tools it shows there."""
        key = self._key(surface, "facets")
        found = self._facets.get(key)
        if found is None:
            shown = self.shown(surface)
            upstreams = Counter(d.namespace for d in shown)
            kinds = Counter(d.tool_kind for d in shown)
            tags = Counter(itertools.chain.from_iterable(d.tags for d in shown))
            found = {
                "upstreams": sorted(upstreams.items()),
                "kinds": sorted(kinds.items()),
                "tags": sorted(tags.most_common(FACET_TAGS)),
            }
            self._facets[key] = found
        return found
