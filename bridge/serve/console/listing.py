"""What the console's catalog page lists for one surface: a filtered, sorted listing of the tools
the surface shows (or those it blocks and tells of, with their reasons), paged by offset, and a
free-text search through the same tool search as `GET /search`. Filtered listings are kept until
the catalog or the surface changes, so the next pages of a listing of 100,000 tools are cut from
a list made once."""

from __future__ import annotations

import itertools
import operator
from collections import Counter
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

    def keeps(self, decl: ToolDeclaration) -> bool:
        return (
            (self.upstream is None or decl.namespace == self.upstream)
            and (self.kind is None or decl.tool_kind == self.kind)
            and (self.tag is None or self.tag in decl.tags)
            and (self.read_only is None or decl.safety.read_only == self.read_only)
            and (self.destructive is None or decl.safety.destructive == self.destructive)
        )

    def apply(self, tools: list[ToolDeclaration]) -> list[ToolDeclaration]:
        """The tools that pass, in their order: one pass per filter given, each over what the one
        before kept, with the comparison written out (a call per tool and filter cost as much)."""
        if self.upstream is not None:
            tools = [d for d in tools if d.namespace == self.upstream]
        if self.kind is not None:
            tools = [d for d in tools if d.tool_kind == self.kind]
        if self.tag is not None:
            tools = [d for d in tools if self.tag in d.tags]
        if self.read_only is not None:
            tools = [d for d in tools if d.safety.read_only == self.read_only]
        if self.destructive is not None:
            tools = [d for d in tools if d.safety.destructive == self.destructive]
        return tools


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
        # (surface name, catalog generation) -> (the tools it lists, those it blocks and tells of)
        self._placements: LRUCache[tuple[Any, ...], tuple[list[Any], list[Any]]] = LRUCache(8)

    def _key(self, surface: Surface, *rest: Any) -> tuple[Any, ...]:
        return (surface.name, id(surface), self.bridge.catalog.generation, *rest)

    def _placed(self, surface: Surface) -> tuple[list[ToolDeclaration], list[ToolDeclaration]]:
        """(the tools the surface lists, those it blocks and tells of), each by name, from one
        pass over the catalog."""
        key = self._key(surface)
        found = self._placements.get(key)
        if found is None:
            shown: list[ToolDeclaration] = []
            blocked: list[ToolDeclaration] = []
            place = surface.place
            for decl in self.bridge.catalog.declarations():
                placement = place(decl)
                if placement.state != "blocked":
                    shown.append(decl)
                elif not placement.hidden:
                    blocked.append(decl)
            by_name = operator.attrgetter("name")
            shown.sort(key=by_name)
            blocked.sort(key=by_name)
            found = self._placements[key] = (shown, blocked)
        return found

    def shown(self, surface: Surface) -> list[ToolDeclaration]:
        """Every tool the surface lists (loaded and deferred), by name."""
        return self._placed(surface)[0]

    def blocked(self, surface: Surface) -> list[ToolDeclaration]:
        """The tools the surface blocks and tells its callers of (with a reason they can act on),
        by name; those its own rules block are hidden, and left out."""
        return self._placed(surface)[1]

    def listed(self, surface: Surface, filters: CatalogFilters) -> list[ToolDeclaration]:
        key = self._key(surface, filters)
        found = self._lists.get(key)
        if found is None:
            found = self.blocked(surface) if filters.placement == "blocked" else self.shown(surface)
            found = filters.apply(found)
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
