"""Tool search over the catalog: exact selection (`select:a,b`) and ranked keyword search,
restricted to a surface, answered as an Agent Tool `tool_search_result`."""

from __future__ import annotations

import re
from typing import Any

from bridge.catalog import Catalog, CatalogChange
from bridge.model import ToolDeclaration, ToolSearchResult
from bridge.surface import Surface, deferred_ref

__all__ = ["ToolSearch", "name_tokens"]

_SPLIT = re.compile(r"[_.\-/\s]+|(?<=[a-z0-9])(?=[A-Z])")


def name_tokens(name: str) -> list[str]:
    """`getUserById` and `get_user_by_id` both give get, user, by, id."""
    return [t.lower() for t in _SPLIT.split(name) if t]


class ToolSearch:
    """Simple in-memory token match; kept in step with the catalog through its change events."""

    def __init__(self, catalog: Catalog, path: str | None = None) -> None:
        self.catalog = catalog
        self.path = path
        self._unsubscribe = catalog.subscribe(self._on_change)

    def _on_change(self, change: CatalogChange) -> None:
        return None

    def close(self) -> None:
        self._unsubscribe()

    def search(
        self,
        query: str,
        *,
        surface: Surface,
        limit: int = 10,
        namespace: str | None = None,
        tags: list[str] | None = None,
        kind: str | None = None,
        read_only: bool | None = None,
        include_schema: bool = False,
    ) -> ToolSearchResult:
        query = query.strip()
        total_deferred = surface.counts()["deferred"]
        pending = self.catalog.pending_providers()
        if query.startswith("select:"):
            names = [n.strip() for n in query[len("select:"):].split(",") if n.strip()]
            matches, missing = [], []
            for name in names:
                decl = self.catalog.resolve(name)
                if decl is None or not surface.visible(decl):
                    missing.append(name)
                else:
                    matches.append(self._ref(decl, surface, 1.0, include_schema))
            return ToolSearchResult(query=query, query_type="select", matches=matches, missing_names=missing,
                                    total_deferred_tools=total_deferred, pending_providers=pending)
        terms = set(name_tokens(query))
        scored: list[tuple[float, ToolDeclaration]] = []
        for decl in self.catalog.declarations():
            if not self._filters(decl, namespace, tags, kind, read_only) or not surface.visible(decl):
                continue
            text = set(name_tokens(decl.name)) | set(name_tokens(decl.description)) | set(decl.tags)
            score = float(len(terms & text))
            if score:
                scored.append((score, decl))
        scored.sort(key=lambda item: (-item[0], item[1].name))
        matches = [self._ref(d, surface, s, include_schema) for s, d in scored[:limit]]
        result = ToolSearchResult(query=query, query_type="keyword", matches=matches,
                                  total_deferred_tools=total_deferred, pending_providers=pending)
        if not matches:
            result.next_action = "refine_query"
            result.hint = "no tool matched; try other words, fewer filters, or select:<name>"
        return result

    @staticmethod
    def _filters(decl: ToolDeclaration, namespace: str | None, tags: list[str] | None, kind: str | None,
                 read_only: bool | None) -> bool:
        return ((namespace is None or decl.namespace == namespace)
                and (not tags or all(t in decl.tags for t in tags))
                and (kind is None or decl.tool_kind == kind)
                and (read_only is None or decl.safety.read_only == read_only))

    @staticmethod
    def _ref(decl: ToolDeclaration, surface: Surface, score: float, include_schema: bool) -> Any:
        ref = deferred_ref(decl)
        ref.loading_state = "loaded" if surface.place(decl).state == "loaded" else ref.loading_state
        ref.score = round(score, 4)
        if include_schema:
            ref.input_schema = decl.input_schema
        return ref
