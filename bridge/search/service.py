"""Tool search over the catalog: exact selection (`select:a,b`) and ranked keyword search with
filters, restricted to a surface, answered as an Agent Tool `tool_search_result`. The index
(bridge.search.index) follows the catalog's change events (bridge.search.feed); a free-text
search reads its keyword candidates a page at a time and runs the ranking stages
(bridge.search.stages) over each."""

from __future__ import annotations

import asyncio
import difflib
import itertools
import logging
import threading
from typing import Any

import numpy as np
from cachetools import LRUCache

from bridge.catalog import Catalog
from bridge.model import DeferredToolRef, ToolDeclaration, ToolSearchResult
from bridge.search.analysis import (
    MAX_QUERY_CHARS,
    AnalyzedQuery,
    analyze_query,
    query_parts,
    related_words,
    spelled_words,
)
from bridge.search.dense import DenseCandidates
from bridge.search.document import IndexedTool, indexed_tool
from bridge.search.feed import CatalogFeed
from bridge.search.foreground import Foreground
from bridge.search.index import ToolIndex
from bridge.search.semantic import CANDIDATES as SEMANTIC_CANDIDATES
from bridge.search.semantic import SemanticStage
from bridge.search.stages import OWN_KEPT, RankingStages
from bridge.search.suggest import SUGGESTIONS, suggestions
from bridge.search.tooltext import SharedText
from bridge.surface import Surface, deferred_ref

__all__ = ["HINT_NAMES", "MAX_LIMIT", "MAX_QUERY_CHARS", "SELECT_PREFIX", "ToolSearch"]

log = logging.getLogger("bridge.search")

SELECT_PREFIX = "select:"
# Most matches a search returns, whatever the caller asks (the frontends cap lower: REST 100, MCP 50).
MAX_LIMIT = 1000
# Names of missing tools a `select:` hint spells out; `missing_names` lists them all.
HINT_NAMES = 10
# A listing by filters alone asks the index for this many candidates (at least) before surface
# filtering. A free-text search ranks its first SEMANTIC_CANDIDATES in every mode: the steps after
# the keyword score (rerank, API siblings, cover of parts, lookups) read the same candidates either
# way; later ones are ranked in pages below them, so the first matches do not depend on the limit.
CANDIDATES = 20
# A match names at most this many alternatives (`alternatives_total` counts them all when there are more).
MAX_ALTERNATIVES = 20
# A search no tool matched, with filters, says which filter no tool on the caller's surface passes
# on its own (`_filter_hints`): it reads at most FILTER_PROBE of the tools each passes (a filter
# whose first FILTER_PROBE tools are all blocked here counts as passed by none), and names at most
# FILTER_NEAR namespaces written like a wrong one, or the kinds shown here, each with a tool here.
FILTER_PROBE = 2_000
FILTER_NEAR = 3


class ToolSearch(RankingStages, DenseCandidates):
    """The search index of one catalog, kept in step through the catalog's change events.

    `path` is the index folder (reopened when it still matches the catalog), None for an index
    in memory; while another process holds it, the index is kept in memory and moved there once
    it is free (`ToolIndex`, which looks for it often for its first `lock_wait` seconds). Writes
    happen on a background thread in batched commits; `wait_indexed()` (or `flush()`) waits
    until every change so far is searchable. With `semantic` (`auto`, `model`, `static`; True is
    `auto`), free-text results are reranked by meaning by
    bridge.search.semantic (`self.semantic`, and with `auto` and the full model, `self.fallback`:
    the static table, used until the model has embedded a search's candidates); False or `off`
    ranks by keywords alone. With `fold_alternatives`, a free-text match whose native name and
    meaning repeat a better match's (likely one function listed by several upstreams) is named in
    that match's `alternatives` instead of taking a place of its own (`_fold`).
    """

    def __init__(
        self,
        catalog: Catalog,
        path: str | None = None,
        *,
        field_weights: dict[str, float] | None = None,
        semantic: bool | str = False,
        fold_alternatives: bool = True,
        lock_wait: float = 0.0,
    ) -> None:
        self.catalog = catalog
        self.fold_alternatives = fold_alternatives
        self.path = path
        self.shared = SharedText()
        # tool_id -> (declaration, SharedText.version, vector of its own words): `_own_vectors`
        self._own_kept: LRUCache[str, tuple[ToolDeclaration, int, np.ndarray]] = LRUCache(OWN_KEPT)
        self._own_lock = threading.Lock()
        # the current places a tool acts in (`_places`), for the last OWN_KEPT tools asked
        self._places_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]] = LRUCache(
            OWN_KEPT
        )
        # a match's search hint (`_hint`), for the last OWN_KEPT tools answered
        self._hints_kept: LRUCache[str, tuple[ToolDeclaration, int, str]] = LRUCache(OWN_KEPT)
        # a tool's title terms (`_titled`), for the last OWN_KEPT tools ranked
        self._titles_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]] = LRUCache(
            OWN_KEPT
        )
        # a compaction and the semantic stages step aside for searches (`Foreground`)
        self.foreground = Foreground()
        # the catalog's changes, handed to the index and the semantic stages once they are open
        self.feed = CatalogFeed(catalog)
        self.index = ToolIndex(
            path,
            convert=self._indexed,
            foreground=self.foreground,
            listing=self.feed.listed_when_settled,
            moved=self._moved,
            lock_wait=lock_wait,
        )
        self.field_weights = field_weights
        related_words()  # the query expansion's table (20 ms), read now rather than by the first search
        spelled_words()  # the words never read as typing errors (20 ms), likewise
        kind = ("auto" if semantic else "off") if isinstance(semantic, bool) else semantic
        path = self.path = self.index.path  # None when another process holds the on-disk index
        # kept in memory while another process holds the index: the vectors that process keeps
        # are read (not written), and only the tools they miss are embedded
        seed = self.index.wanted_path
        self.semantic = SemanticStage.open(path, kind, after=self._index_first, seed=seed)
        # `auto` with the full model: the static table reranks a search until the model has
        # embedded its candidates (the first hour of a large catalog)
        self.fallback = (
            SemanticStage.open(path, "static", after=self._index_first, seed=seed)
            if kind == "auto" and self.semantic is not None and not self.semantic.encoder.cheap
            else None
        )
        self.feed.start(self.index, self.shared, lambda: self._stages)

    # ---------------------------------------------------------------- keeping in step

    def _indexed(self, decl: ToolDeclaration) -> IndexedTool:
        return indexed_tool(decl, self.shared)

    def _index_first(self, timeout: float) -> bool:
        """For the semantic stages (`SemanticStage.after`): wait up to `timeout` seconds for the
        keyword index to take in every change so far but the last; True once it has, or while
        its commits fail (the stages then go on rather than wait for a disk to come back). One
        change waiting is let be: the index commits it within its commit window, and a stage
        waiting for it would sit idle for that window after each change. First, the stage steps
        aside for the searches running (`Foreground.pause`)."""
        self.foreground.pause()
        return self.index.failing or self.index.flush(timeout, behind=1)

    def _moved(self, path: str) -> None:
        """The index, kept in memory while another process held the on-disk one, has moved to
        disk (`ToolIndex.moved`): the semantic vectors are kept in their file beside it too."""
        self.path = path
        for stage in self._stages:
            stage.keep_on_disk(path)

    def reindex(self) -> None:
        """Compare every tool of the catalog with the index again (after a failed commit, say)."""
        self.feed.reindex()

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Block until every change so far is searchable."""
        return self.index.flush(timeout)

    async def wait_indexed(self, timeout: float = 10.0) -> bool:
        """Wait, without blocking the event loop, until every change so far is searchable. While
        the index's commits fail (`ToolIndex.failing`), answers False at once."""
        if not self.index.pending:
            return True
        if self.index.failing:
            return False
        return await asyncio.to_thread(self.index.flush, timeout)

    def close(self) -> None:
        self.feed.close()
        self.index.close()
        for stage in self._stages:
            stage.close()

    # ---------------------------------------------------------------- queries

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
        fold_alternatives: bool | None = None,
    ) -> ToolSearchResult:
        with self.foreground.running():
            return self._search(
                query,
                surface,
                limit,
                namespace,
                tags,
                kind,
                read_only,
                include_schema,
                fold_alternatives,
            )

    def _search(
        self,
        query: str,
        surface: Surface,
        limit: int,
        namespace: str | None,
        tags: list[str] | None,
        kind: str | None,
        read_only: bool | None,
        include_schema: bool,
        fold_alternatives: bool | None,
    ) -> ToolSearchResult:
        query = query.strip()
        limit = min(max(1, limit), MAX_LIMIT)  # frontends clamp to their own maximum
        total_deferred = surface.counts()["deferred"]
        pending = self.catalog.pending_providers()
        # an empty namespace or kind filters nothing, as an empty REST parameter does
        filters = dict(
            namespace=namespace or None, tags=tags or None, kind=kind or None, read_only=read_only
        )
        if query.lower().startswith(SELECT_PREFIX):
            return self._select(query, surface, filters, include_schema, total_deferred, pending)
        analyzed = analyze_query(query) if query else None
        if analyzed is not None and analyzed.empty:  # "***": nothing to rank by, and not a listing
            return ToolSearchResult(
                query=query,
                query_type="keyword",
                matches=[],
                total_deferred_tools=total_deferred,
                pending_providers=pending,
                next_action="refine_query",
                hint="the query has no word to search for; give keywords, select:<name> for a tool "
                "whose name you know, or leave the query out and filter",
            )
        fold = self.fold_alternatives if fold_alternatives is None else fold_alternatives
        # alternatives fold in free-text searches; a filter-only listing lists every tool
        ranked = self._ranked(analyzed, surface, limit, filters, fold and analyzed is not None)
        matches = [
            self._ref(decl, surface, score, include_schema, alternatives)
            for decl, score, alternatives in ranked
        ]
        result = ToolSearchResult(
            query=query,
            query_type="keyword",
            matches=matches,
            total_deferred_tools=total_deferred,
            pending_providers=pending,
        )
        if not matches:
            result.next_action = "refine_query"
            used = [k for k, v in filters.items() if v is not None and v != []]
            # a query of filler alone asks for nothing: no tool is nearer to it than another
            suggested = (
                suggestions(
                    self, analyzed, surface, filters, bool(used), min(limit, SUGGESTIONS), fold
                )
                if analyzed is not None and not analyzed.filler
                else []
            )
            if suggested:
                result.suggestions = [
                    self._ref(decl, surface, score, include_schema, alternatives)
                    for decl, score, alternatives in suggested
                ]
            result.hint = (
                "no tool matched"
                + (f" with the filters {', '.join(used)}" if used else "")
                + (
                    "; the query has only words that say nothing of a task (such as ok, please or that), "
                    "matched against whole tool names alone: say what the tool should do"
                    if analyzed is not None and analyzed.filler
                    else ""
                )
                + (
                    "; suggestions lists the tools nearest in meaning, which share none of the query's words "
                    "(check that one does what is asked before calling it)"
                    if suggested
                    else ""
                )
                + "".join(f"; {said}" for said in self._filter_hints(surface, filters, pending))
                + "; try other or fewer words"
                + (", fewer filters" if used else "")
                + ", or select:<name> for a tool whose name you know"
                + (f"; still connecting: {', '.join(pending)}" if pending else "")
            )
        return result

    def _filter_hints(
        self, surface: Surface, filters: dict[str, Any], pending: list[str]
    ) -> list[str]:
        """What a search no tool matched says of each filter that no tool on the surface passes
        on its own (each tag on its own): a namespace with the namespaces written like it, a kind
        with the kinds there are. Only what the surface shows is named: a namespace (or kind) whose
        every tool is blocked here reads as one no tool has. Nothing is said of the namespace of
        an upstream still connecting (`pending`, which the hint names): its tools may come."""
        said = []
        namespace, kind, read_only = filters["namespace"], filters["kind"], filters["read_only"]
        if (
            namespace is not None
            and namespace not in pending
            and not self._any_shown(surface, namespace=namespace)
        ):
            lowered = {ns.lower(): ns for ns in self.feed.listings.namespaces() if ns != namespace}
            # no other upstream (difflib refuses n=0): none is written like it
            like = (
                (
                    lowered[n]
                    for n in difflib.get_close_matches(
                        namespace.lower(), lowered, n=len(lowered), cutoff=0.6
                    )
                )
                if lowered
                else ()
            )
            near = list(
                itertools.islice(
                    (n for n in like if self._any_shown(surface, namespace=n)), FILTER_NEAR
                )
            )
            said.append(
                f"no tool on this surface is in the namespace {namespace!r}"
                + (f" (namespaces like it: {', '.join(near)})" if near else "")
            )
        for tag in filters["tags"] or ():
            if not self._any_shown(surface, tags=[tag]):
                said.append(f"no tool on this surface has the tag {tag!r}")
        if kind is not None and not self._any_shown(surface, kind=kind):
            kinds = [
                k for k in self.catalog.kinds() if k != kind and self._any_shown(surface, kind=k)
            ]
            said.append(
                f"no tool on this surface is of the kind {kind!r}"
                + (f" (kinds on it: {', '.join(kinds)})" if kinds else "")
            )
        if read_only is not None and not self._any_shown(surface, read_only=read_only):
            said.append(f"no tool on this surface has read_only {str(read_only).lower()}")
        return said

    def _any_shown(self, surface: Surface, **only: Any) -> bool:
        """Whether the surface shows a tool passing this one filter, among the first FILTER_PROBE
        the index lists for it."""
        filters = {"namespace": None, "tags": None, "kind": None, "read_only": None, **only}
        want = CANDIDATES
        offset = 0
        while offset < FILTER_PROBE:
            hits = self.index.search(self.index.query(None, **only), limit=want, offset=offset)
            if any(self._shown_hit(tool_id, surface, filters) is not None for tool_id, _ in hits):
                return True
            if len(hits) < want:
                return False
            offset += want
            want = min(4 * want, FILTER_PROBE - offset)
        return False

    def _select(
        self,
        query: str,
        surface: Surface,
        filters: dict[str, Any],
        include_schema: bool,
        total_deferred: int,
        pending: list[str],
    ) -> ToolSearchResult:
        """The named tools, each once, in the order asked. A name unknown or blocked on the surface
        is missing, and so is a tool the filters exclude (the filters narrow a selection as they
        narrow a ranking: an A2T group's `q=select:` names only the group's tools); the hint tells
        the two apart, naming the filters each excluded tool fails, and never reveals a blocked one."""
        names = list(
            dict.fromkeys(n.strip() for n in query[len(SELECT_PREFIX) :].split(",") if n.strip())
        )
        matches: list[DeferredToolRef] = []
        missing: list[str] = []
        unknown: list[str] = []
        excluded: list[str] = []  # `name (the filters it fails)`
        seen: set[str] = set()
        for name in names:
            decl = self.catalog.resolve(name)
            if decl is None or not surface.visible(decl):
                missing.append(name)  # a blocked tool is as absent as an unknown one
                unknown.append(name)
            elif failed := self._failed_filters(decl, filters):
                missing.append(name)
                excluded.append(f"{name} ({', '.join(failed)})")
            elif decl.tool_id not in seen:
                seen.add(decl.tool_id)
                matches.append(self._ref(decl, surface, 1.0, include_schema))
        result = ToolSearchResult(
            query=query,
            query_type="select",
            matches=matches,
            missing_names=missing,
            total_deferred_tools=total_deferred,
            pending_providers=pending,
        )
        if not names:
            result.next_action = "refine_query"
            result.hint = "select: needs tool names, aliases or ids separated by commas"
        elif missing:
            said = []
            if unknown:
                more = (
                    f" and {len(unknown) - HINT_NAMES} more (all in missing_names)"
                    if len(unknown) > HINT_NAMES
                    else ""
                )
                said.append(f"not found on this surface: {', '.join(unknown[:HINT_NAMES])}{more}")
            if excluded:
                more = (
                    f" and {len(excluded) - HINT_NAMES} more (all in missing_names)"
                    if len(excluded) > HINT_NAMES
                    else ""
                )
                said.append(
                    f"left out by the filters: {', '.join(excluded[:HINT_NAMES])}{more}; "
                    "ask again without those filters to have them"
                )
            result.hint = "; ".join(said)
            if not matches:
                result.next_action = "refine_query"
        return result

    @staticmethod
    def _failed_filters(decl: ToolDeclaration, filters: dict[str, Any]) -> list[str]:
        """The filters (`namespace`, `tags`, `kind`, `read_only`) a declaration does not pass."""
        failed = []
        if filters["namespace"] is not None and decl.namespace != filters["namespace"]:
            failed.append("namespace")
        if any(t not in decl.tags for t in filters["tags"] or ()):
            failed.append("tags")
        if filters["kind"] is not None and decl.tool_kind != filters["kind"]:
            failed.append("kind")
        if filters["read_only"] is not None and decl.safety.read_only != filters["read_only"]:
            failed.append("read_only")
        return failed

    def _ranked(
        self,
        analyzed: AnalyzedQuery | None,
        surface: Surface,
        limit: int,
        filters: dict[str, Any],
        fold: bool,
    ) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
        """Ranked visible declarations, each with its alternatives. `analyzed` is a query with words
        (`search` answers one without any itself), or None for a listing by the filters alone.

        A free-text search ranks its candidates a page at a time: the first SEMANTIC_CANDIDATES,
        then, while blocked tools (or index entries the catalog no longer has) or folded
        alternatives leave fewer matches than `limit`, the next ones further down the index, each
        page ranked on its own (`_rank_page`) and placed below the pages before it. So a search's
        first matches are the same whatever its limit. A listing is in the index's order."""
        index_query = self.index.query(analyzed, weights=self.field_weights, **filters)
        parts = query_parts(analyzed.text) if analyzed is not None else []
        want = max(SEMANTIC_CANDIDATES if analyzed is not None else CANDIDATES, limit)
        goal = SEMANTIC_CANDIDATES if analyzed is not None else limit
        offset = 0
        exhausted = False
        kept: list[
            tuple[ToolDeclaration, float]
        ] = []  # the visible candidates, in the index's order
        read: set[str] = set()  # the ids of the index's hits read so far
        ranked: list[tuple[ToolDeclaration, float]] = []  # the pages ranked so far, best first
        placed: set[str] = set()
        rows: (
            list[np.ndarray] | None
        ) = []  # their vectors, a block per page (None once a page has none)
        threshold: float | None = None
        start = 0  # where the next page starts in `kept`
        while True:
            while len(kept) < goal and not exhausted:
                # read from the first hit again, the ones read before passed over: tools tied
                # past the index's TIE_MARGIN may stand otherwise among more hits
                hits = self.index.search(index_query, limit=offset + want)
                for tool_id, score in hits:
                    if tool_id in read:
                        continue
                    read.add(tool_id)
                    decl = self._shown_hit(tool_id, surface, filters)
                    if decl is not None:
                        kept.append((decl, score))
                exhausted = len(hits) < offset + want
                offset += want
                want *= 4
            page = [(decl, score) for decl, score in kept[start:goal] if decl.tool_id not in placed]
            start = min(goal, len(kept))
            if analyzed is None:
                page_vectors, page_threshold = None, None
            else:
                page, page_vectors, page_threshold = self._rank_page(
                    analyzed, page, parts, surface, filters
                )
                page_vectors = self._unplaced(page, page_vectors, placed)
                page = [(decl, score) for decl, score in page if decl.tool_id not in placed]
            if ranked and page:  # a page further down scores at most what the pages above it do
                over = max(score for _, score in page) - ranked[-1][1]
                if over > 0:
                    page = [(decl, score - over) for decl, score in page]
            ranked += page
            placed.update(decl.tool_id for decl, _ in page)
            threshold = threshold if threshold is not None else page_threshold
            if rows is not None and page:
                rows = None if page_vectors is None else [*rows, page_vectors]
            vectors = np.concatenate(rows) if rows else None
            if fold and analyzed is not None:
                matches = self._fold(ranked, vectors, threshold if vectors is not None else None)
            else:
                matches = [(decl, score, []) for decl, score in ranked]
            if len(matches) >= limit or (exhausted and start >= len(kept)):
                return matches[:limit]
            goal = max(
                2 * goal, goal + limit - len(matches)
            )  # alternatives took places: look further down

    def _rank_page(
        self,
        analyzed: AnalyzedQuery,
        ranked: list[tuple[ToolDeclaration, float]],
        parts: list[AnalyzedQuery],
        surface: Surface,
        filters: dict[str, Any],
    ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None, float | None]:
        """A page of candidates (in the index's order) ranked for the request: reranked by meaning
        (a semantic stage on) and by their titles, raised by another tool of their API, reordered
        to cover the request's parts, with the lookups of the first. With the candidates' vectors
        in the ranking's order (None when a step dropped them) and the cosine at which two are one
        tool."""
        ranked = self._dense_added(analyzed, ranked, parts, surface, filters)
        vectors: np.ndarray | None = None  # the candidates' rows, in `ranked`'s order
        threshold: float | None = None
        reranked_by: SemanticStage | None = None
        if self.semantic is not None and ranked:
            decls = [decl for decl, _ in ranked]
            # the model, then (`auto`) the table until the model has them all
            for stage in self._stages:
                # a request longer than this encoder says anything of is not reranked by it
                tools = stage.vectors(decls) if stage.weight_for(analyzed.text) else None
                if tools is not None:
                    order, mixed = stage.mix(analyzed.text, ranked, tools)
                    ranked = [(decls[i], float(mixed[i])) for i in order]
                    vectors, threshold = tools[order], stage.encoder.same_tool_cosine
                    reranked_by = stage
                    break
        # keyword scores (no stage reranked them) over the best one
        if self.title_weight and len(ranked) > 1:
            scale = 1.0 if reranked_by is not None else max(score for _, score in ranked) or 1.0
            ranked, vectors = self._titled(analyzed, ranked, vectors, scale)
        if self.sibling_weight and len(ranked) > 1:
            ranked, vectors = self._siblings(ranked, vectors)
        if self.own_weight and reranked_by is not None:
            ranked, vectors = self._own_words(analyzed.text, ranked, vectors)
        if parts and len(ranked) > 1:
            ranked, vectors = self._cover(parts, ranked, vectors, reranked_by)
        if self.lookup_places:
            ranked, vectors = self._lookups(analyzed, ranked, vectors, surface, filters)
        return ranked, vectors, threshold

    @staticmethod
    def _unplaced(
        ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None, placed: set[str]
    ) -> np.ndarray | None:
        """The rows of `vectors` (one per entry of `ranked`) of the tools not yet `placed`."""
        if vectors is None or not placed:
            return vectors
        return vectors[[i for i, (decl, _) in enumerate(ranked) if decl.tool_id not in placed]]

    def _ref(
        self,
        decl: ToolDeclaration,
        surface: Surface,
        score: float,
        include_schema: bool,
        alternatives: list[ToolDeclaration] | None = None,
    ) -> DeferredToolRef:
        ref = deferred_ref(decl)
        ref.search_hint = self._hint(decl)
        if surface.place(decl).state == "loaded" and decl.loading_state == "loaded":
            ref.loading_state = "loaded"
            ref.schema_visibility = "loaded"
        ref.score = round(score, 4)
        if alternatives:
            ref.alternatives = [
                {"tool_id": c.tool_id, "name": c.name, "namespace": c.namespace}
                for c in alternatives[:MAX_ALTERNATIVES]
            ]
            if len(alternatives) > MAX_ALTERNATIVES:
                ref.alternatives_total = len(alternatives)
        if include_schema:
            ref.input_schema = decl.input_schema
        return ref
