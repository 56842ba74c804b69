"""Tool search over the catalog: exact selection (`select:a,b`) and ranked keyword search with
filters, restricted to a surface, answered as an Agent Tool `tool_search_result`. The index
(bridge.search.index) follows the catalog's change events; query and name text handling lives in
bridge.search.rank."""

from __future__ import annotations

import asyncio
import difflib
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from cachetools import LRUCache

from bridge.catalog import Catalog, CatalogChange
from bridge.model import DeferredToolRef, ToolDeclaration, ToolSearchResult
from bridge.search.index import (
    CHANGES_PREFIX,
    Foreground,
    IndexedTool,
    ToolIndex,
    exact_names,
    name_text,
)
from bridge.search.rank import (
    MAX_QUERY_CHARS,
    AnalyzedQuery,
    SharedText,
    acts_in_current,
    analyze_query,
    changes_current,
    derive_search_hint,
    described_schema,
    function_name,
    here_words,
    input_heads,
    looked_up,
    name_tokens,
    name_words,
    place_terms,
    query_parts,
    related_words,
    searched_description,
    spelled_words,
    title_terms,
    unsaid,
)
from bridge.search.semantic import CANDIDATES as SEMANTIC_CANDIDATES
from bridge.search.semantic import SemanticStage, tool_text
from bridge.surface import Surface, deferred_ref

__all__ = ["MAX_LIMIT", "MAX_QUERY_CHARS", "ToolSearch", "name_tokens", "derive_search_hint", "indexed_tool", "SELECT_PREFIX"]

log = logging.getLogger("bridge.search")

SELECT_PREFIX = "select:"
# Most matches a search returns, whatever the caller asks (the frontends cap lower: REST 100, MCP 50).
MAX_LIMIT = 1000
# Names of missing tools a `select:` hint spells out; `missing_names` lists them all.
HINT_NAMES = 10
# A listing by filters alone asks the index for this many candidates (at least) before surface
# filtering. A free-text search ranks its first SEMANTIC_CANDIDATES in every mode: the steps after
# the keyword score (the rerank, the gain of another tool of the API, the cover of a request's
# parts, the lookups) read the same candidates with or without a semantic stage. Further
# candidates are ranked in pages below them, so a search's first matches do not depend on its limit.
CANDIDATES = 20
# A match names at most this many alternatives (`alternatives_total` counts them all when there are more).
MAX_ALTERNATIVES = 20
# A request asking for several things (bridge.search.rank.query_parts) is answered so that its
# parts are covered: the ranking's first places go to the tools that answer a part no place above
# answers yet (`cover_order`). The weight of that cover against the whole request's score, chosen
# among 0.3, 0.5 and 0.7 on the development set (docs/search.md, Quality).
COVER_WEIGHT = 0.5
# The places the cover gives out one by one, whatever the search's limit (so its first matches do not
# depend on it); the page's other candidates follow by their score after them. Ten is what a search
# answers by default; giving out all 50 places costs 0.3-0.5 ms more on a request of several parts.
COVER_PLACES = 10
# A tool gains this share of the best score that another tool of its API (the tools opening with
# one shared blurb, in whichever namespace: bridge.search.rank.SharedText.api) has among a
# search's candidates (`_siblings`): a request matched by several tools of one API is likely
# about that API. Chosen among 0.05, 0.1, 0.15 and 0.2 (docs/search.md, Quality): the largest whose cost on
# the development set stays within half a point.
SIBLING_WEIGHT = 0.1
# Among the first OWN_PLACES candidates, the tools of one API trade places by the cosine of the
# request with their own words (without the API's shared text), counted OWN_WEIGHT times against
# their score (`_own_words`): the shared text tells which API, the own words which of its tools.
# Chosen among 0.3, 0.45, 0.5, 0.6, 0.8 and 1 on the hand-written conversation sets
# (docs/search.md, Tools of one API); 5, 10 and 20 places scored alike.
OWN_WEIGHT = 0.5
OWN_PLACES = 10
OWN_KEPT = 4096
# A tool among the first LOOKUP_PLACES matches brings the lookups its API offers for what it
# needs (`_lookups`), placed right after it.
LOOKUP_PLACES = 3
# An upstream's candidates trade places by their score plus TITLE_WEIGHT times how closely
# the request says their title (`_titled`): the Dice coefficient of their content terms, each
# weighted by its inverse document frequency. Among the many tools of one large API (GitHub's
# 1,223 operations: *List branches*, *Update a pull request branch*, *List branches for HEAD
# commit*) the request's words are in many and the meaning of each is near; the label its vendor
# gave each tells them apart. Chosen on the GitHub requests of the vendors' set (0.15, 0.3, 0.45,
# 0.6 read nDCG@10 0.556, 0.617, 0.624, 0.609 within GitHub: 0.3, the smaller of the two alike)
# and checked on its other vendors' (0.681 without, 0.726 at 0.3); docs/search.md, Titles.
TITLE_WEIGHT = 0.3
# A free-text search that no tool matches by its words answers, beside its empty `matches`, the
# SUGGESTIONS tools nearest to it in meaning (`_suggestions`, by the static table's cosine) among
# the tools it could have matched, when those are at most SUGGEST_POOL (gathering them and their
# vectors costs about 3.5 µs a tool: 7 ms for 2,000; a larger catalog has words for almost any
# request), and with a cosine of at least SUGGEST_COSINE: over the demo's and the development
# set's tools, requests for no tool reach cosines as high as requests a tool answers (0.4-0.6),
# so the floor only drops the nearest of unrelated words (docs/search.md, The answer).
SUGGESTIONS = 3
SUGGEST_POOL = 2_000
SUGGEST_COSINE = 0.25
# A search no tool matched, with filters, says which filter no tool on the caller's surface passes
# on its own (`_filter_hints`): it reads at most FILTER_PROBE of the tools each passes (a filter
# whose first FILTER_PROBE tools are all blocked here counts as passed by none), and names at most
# FILTER_NEAR namespaces written like a wrong one, or the kinds shown here, each with a tool here.
FILTER_PROBE = 2_000
FILTER_NEAR = 3
_PARAM_DEPTH = 2
_MAX_ENUM = 20


def _param_text(schema: Any, depth: int = 0) -> tuple[list[str], list[str]]:
    """Parameter names and their descriptions (and short enum values), nested objects included."""
    names: list[str] = []
    texts: list[str] = []
    if not isinstance(schema, dict) or depth > _PARAM_DEPTH:
        return names, texts
    props = schema.get("properties")
    if isinstance(props, dict):
        for pname, pschema in props.items():
            names.append(name_words(str(pname)))
            if isinstance(pschema, dict):
                desc = pschema.get("description") or pschema.get("title")
                if isinstance(desc, str):
                    texts.append(desc)
                enum = pschema.get("enum")
                if isinstance(enum, list):
                    texts.extend(str(v) for v in enum[:_MAX_ENUM] if isinstance(v, str))
                sub_names, sub_texts = _param_text(pschema, depth + 1)
                names += sub_names
                texts += sub_texts
                items = pschema.get("items")
                if isinstance(items, dict):
                    sub_names, sub_texts = _param_text(items, depth + 1)
                    names += sub_names
                    texts += sub_texts
    return names, texts


def indexed_tool(decl: ToolDeclaration, shared: SharedText | None = None) -> IndexedTool:
    """The index document of a declaration; with `shared`, the description's text shared by many
    tools of its namespace is kept apart from the tool's own."""
    param_names, param_texts = _param_text(described_schema(decl))
    native = function_name(decl)
    described = searched_description(decl)
    common, own = shared.split(decl.namespace, described) if shared is not None else ("", described)
    return IndexedTool(
        tool_id=decl.tool_id,
        namespace=decl.namespace,
        name=name_text(native, *(a for a in decl.aliases if a != native)),
        exact_names=exact_names(native, decl.native_name or "", decl.name, *decl.aliases),
        title=unsaid(decl.title, described),
        description=own or "",
        shared=common,
        hint=unsaid(decl.search_hint, described, decl.title),
        tags=list(decl.tags),
        params=" ".join(param_names),
        param_text=" ".join(param_texts),
        kind=decl.tool_kind,
        read_only=decl.safety.read_only,
        looks_up=sorted(looked_up(decl, native)),
        changes=sorted(changes_current(decl)),
    )


class ToolSearch:
    """The search index of one catalog, kept in step through the catalog's change events.

    `path` is the index folder (reopened when it still matches the catalog), None for an index
    in memory. Writes happen on a background thread in batched commits; `wait_indexed()` (or
    `flush()`) waits until every change so far is searchable. With `semantic` (`auto`, `model`,
    `static`; True is `auto`), free-text results are reranked by meaning by
    bridge.search.semantic (`self.semantic`, and with `auto` and the full model, `self.fallback`:
    the static table, used until the model has embedded a search's candidates); False or `off`
    ranks by keywords alone. With `fold_alternatives`, a free-text match whose native name and
    meaning repeat a better match's (likely one function listed by several upstreams) is named in
    that match's `alternatives` instead of taking a place of its own (`_fold`).
    """

    cover_weight = COVER_WEIGHT  # of the parts of a request asking for several things (`_cover`)
    sibling_weight = SIBLING_WEIGHT  # of the best score of another tool of a candidate's API (`_siblings`)
    own_weight = OWN_WEIGHT  # of the cosine with a tool's own words among its API's candidates (`_own_words`)
    lookup_places = LOOKUP_PLACES  # first matches whose lookups are placed after them (`_lookups`); 0: none
    title_weight = TITLE_WEIGHT  # of how closely the request says a candidate's title (`_titled`)

    def __init__(self, catalog: Catalog, path: str | None = None, *, field_weights: dict[str, float] | None = None,
                 semantic: bool | str = False, fold_alternatives: bool = True) -> None:
        self.catalog = catalog
        self.fold_alternatives = fold_alternatives
        self.path = path
        self.shared = SharedText()
        # tool_id -> (declaration, SharedText.version, vector of its own words): `_own_vectors`
        self._own_kept: LRUCache[str, tuple[ToolDeclaration, int, np.ndarray]] = LRUCache(OWN_KEPT)
        self._own_lock = threading.Lock()
        # the current places a tool acts in (`_places`), for the last OWN_KEPT tools asked
        self._places_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]] = LRUCache(OWN_KEPT)
        # a match's search hint (`_hint`), for the last OWN_KEPT tools answered
        self._hints_kept: LRUCache[str, tuple[ToolDeclaration, int, str]] = LRUCache(OWN_KEPT)
        # a tool's title terms (`_titled`), for the last OWN_KEPT tools ranked
        self._titles_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]] = LRUCache(OWN_KEPT)
        # a compaction and the semantic stages step aside for searches (`Foreground`)
        self.foreground = Foreground()
        self._settled = False  # every upstream has listed since the start (`_settle_when_listed`)
        self.index = ToolIndex(path, convert=self._indexed, foreground=self.foreground, listing=self._listed_when_settled,
                               moved=self._moved)
        self.field_weights = field_weights
        related_words()  # the query expansion's table (20 ms), read now rather than by the first search
        spelled_words()  # the words never read as typing errors (20 ms), likewise
        kind = ("auto" if semantic else "off") if isinstance(semantic, bool) else semantic
        path = self.path = self.index.path  # None when another process holds the on-disk index
        self.semantic = SemanticStage.open(path, kind, after=self._index_first)
        # `auto` with the full model: the static table reranks a search until the model has
        # embedded its candidates (the first hour of a large catalog)
        self.fallback = (SemanticStage.open(path, "static", after=self._index_first)
                         if kind == "auto" and self.semantic is not None and not self.semantic.encoder.cheap else None)
        self._reconciled: set[str] = set()
        self._refreshes: dict[str, int] = {}  # namespace -> its changes submitted to the index (`_refresh`)
        self._unsubscribe = catalog.subscribe(self._on_change)
        # tools of upstreams no longer configured go; the others are compared with their listing
        self.index.submit(keep_namespaces=catalog.slots)
        for namespace, slot in catalog.slots.items():
            if slot.health.state == "ready":
                self._reconcile(namespace)
        tools = self._listed()  # handed to the stages after the index's batches: they wait for those
        for stage in self._stages:
            stage.submit(tools)
        self._settle_when_listed()

    @property
    def _stages(self) -> list[SemanticStage]:
        return [stage for stage in (self.semantic, self.fallback) if stage is not None]

    # ---------------------------------------------------------------- keeping in step

    def _indexed(self, decl: ToolDeclaration) -> IndexedTool:
        return indexed_tool(decl, self.shared)

    def _on_change(self, change: CatalogChange) -> None:
        """Hand the change to the index's writer thread; documents are built there, and so is
        the namespace's shared description text looked at again (a pass over its listing)."""
        touched = (*change.added, *change.updated, *change.removed)
        namespaces = {change.upstream} if change.upstream else {d.namespace for d in touched}
        done: set[str] = set()
        for namespace in namespaces - self._reconciled:
            slot = self.catalog.slots.get(namespace)
            if slot is not None and slot.health.state == "ready":
                self._reconcile(namespace)  # the whole listing: covers this change too
                done.add(namespace)
        for namespace in (namespaces & self._reconciled) - done:
            upserts = [d for d in (*change.added, *change.updated) if d.namespace == namespace]
            deletes = [(d.namespace, d.tool_id) for d in change.removed if d.namespace == namespace]
            if upserts or deletes:
                self.index.submit(upserts, deletes, prepare=self._refresh(namespace, self._listing(namespace), True))
        for stage in self._stages:  # after the index's batches, which the stages wait for (`_index_first`)
            stage.submit((*change.added, *change.updated), [d.tool_id for d in change.removed])
        self._settle_when_listed()

    def _index_first(self, timeout: float) -> bool:
        """For the semantic stages (`SemanticStage.after`): wait up to `timeout` seconds for the
        keyword index to take in every change so far but the last; True once it has, or while
        its commits fail (the stages then go on rather than wait for a disk to come back). One
        change waiting is let be: the index commits it within its commit window, and a stage
        waiting for it would sit idle for that window after each change. First, the stage steps
        aside for the searches running (`Foreground.pause`)."""
        self.foreground.pause()
        return self.index.failing or self.index.flush(timeout, behind=1)

    def _settle_when_listed(self) -> None:
        """Once no upstream is still connecting or down (each has listed since the start), the
        semantic stages may drop the vectors of texts no tool has (`SemanticStage.settle`): until
        then, those of an upstream not back yet are kept, not computed again when it lists. Asked
        where the catalog's changes reach the stages and the index, after them, so none is left
        behind. The index, filled by one commit after another as the upstreams listed, is then
        compacted when a search reads many segments of it (`ToolIndex.compact`)."""
        if not self._settled and not self.catalog.has_pending():
            self._settled = True
            for stage in self._stages:
                stage.settle()
            self.index.compact(self._listed())

    def _reconcile(self, namespace: str) -> None:
        """First listing of an upstream since the index opened: write what differs from the
        index, drop what the upstream no longer has. Tools with unchanged digests cost nothing."""
        self._reconciled.add(namespace)
        listing = self._listing(namespace)
        self.index.submit(listing, reconcile=namespace, prepare=self._refresh(namespace, listing, False))

    def _moved(self, path: str) -> None:
        """The index, kept in memory while another process held the on-disk one, has moved to
        disk (`ToolIndex.moved`): the semantic vectors are kept in their file beside it too."""
        self.path = path
        for stage in self._stages:
            stage.keep_on_disk(path)

    def _listed(self) -> list[ToolDeclaration]:
        """Every tool the catalog's upstreams list now (from any thread: each `list` of a dict is
        one step the catalog's thread cannot change it in the middle of)."""
        return [d for slot in list(self.catalog.slots.values()) for d in list(slot.tools.values())]

    def _listed_when_settled(self) -> list[ToolDeclaration] | None:
        """For the index's compactions (`ToolIndex.listing`): every tool, once every upstream has
        listed since the start (before, a compaction would drop the tools of one not back yet)."""
        return self._listed() if self._settled else None

    def _listing(self, namespace: str) -> list[ToolDeclaration]:
        slot = self.catalog.slots.get(namespace)
        return list(slot.tools.values()) if slot is not None else []

    def _refresh(self, namespace: str, listing: list[ToolDeclaration], relist: bool) -> Callable[[], tuple[str, list[ToolDeclaration]] | None]:
        """The `prepare` of a change of the namespace (`_refresh_shared`), numbered: a change
        submitted after it refreshes from a newer listing."""
        number = self._refreshes[namespace] = self._refreshes.get(namespace, 0) + 1
        return functools.partial(self._refresh_shared, namespace, listing, relist, number)

    def _refresh_shared(self, namespace: str, listing: list[ToolDeclaration], relist: bool,
                        number: int = 0) -> tuple[str, list[ToolDeclaration]] | None:
        """On the writer thread: look at the namespace's shared description text again. When it
        changed (and `relist`), every tool of the namespace is compared with the index again;
        only those whose document changed are written. A change's look is left to a later change
        of the namespace (`number`), which looks at a newer listing: each look is a pass over
        the listing (about 1 ms for 100 tools, 0.1 s for 10,000), and in a burst of 500
        single-tool changes they were half of each commit's work. The later change relists the
        namespace if its shared text changed meanwhile, this change's tool with it."""
        if relist and self._refreshes.get(namespace, 0) > number:
            return None
        changed = self.shared.refresh(namespace, ((function_name(d), searched_description(d)) for d in listing))
        return (namespace, listing) if changed and relist else None

    def reindex(self) -> None:
        """Compare every tool of the catalog with the index again (after a failed commit, say)."""
        self._reconciled.clear()
        self.index.submit(keep_namespaces=self.catalog.slots)
        for namespace, slot in self.catalog.slots.items():
            if slot.health.state == "ready":
                self._reconcile(namespace)

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
        self._unsubscribe()
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
            return self._search(query, surface, limit, namespace, tags, kind, read_only, include_schema, fold_alternatives)

    def _search(self, query: str, surface: Surface, limit: int, namespace: str | None, tags: list[str] | None,
                kind: str | None, read_only: bool | None, include_schema: bool, fold_alternatives: bool | None,
                ) -> ToolSearchResult:
        query = query.strip()
        limit = min(max(1, limit), MAX_LIMIT)  # frontends clamp to their own maximum
        total_deferred = surface.counts()["deferred"]
        pending = self.catalog.pending_providers()
        # an empty namespace or kind filters nothing, as an empty REST parameter does
        filters = dict(namespace=namespace or None, tags=tags or None, kind=kind or None, read_only=read_only)
        if query.lower().startswith(SELECT_PREFIX):
            return self._select(query, surface, filters, include_schema, total_deferred, pending)
        analyzed = analyze_query(query) if query else None
        if analyzed is not None and analyzed.empty:  # "***": nothing to rank by, and not a listing
            return ToolSearchResult(query=query, query_type="keyword", matches=[], total_deferred_tools=total_deferred,
                                    pending_providers=pending, next_action="refine_query",
                                    hint="the query has no word to search for; give keywords, select:<name> for a tool "
                                         "whose name you know, or leave the query out and filter")
        fold = self.fold_alternatives if fold_alternatives is None else fold_alternatives
        # alternatives fold in free-text searches; a filter-only listing lists every tool
        ranked = self._ranked(analyzed, surface, limit, filters, fold and analyzed is not None)
        matches = [self._ref(decl, surface, score, include_schema, alternatives) for decl, score, alternatives in ranked]
        result = ToolSearchResult(query=query, query_type="keyword", matches=matches,
                                  total_deferred_tools=total_deferred, pending_providers=pending)
        if not matches:
            result.next_action = "refine_query"
            used = [k for k, v in filters.items() if v is not None and v != []]
            # a query of filler alone asks for nothing: no tool is nearer to it than another
            suggested = (self._suggestions(analyzed, surface, filters, bool(used), min(limit, SUGGESTIONS), fold)
                         if analyzed is not None and not analyzed.filler else [])
            if suggested:
                result.suggestions = [self._ref(decl, surface, score, include_schema, alternatives)
                                      for decl, score, alternatives in suggested]
            result.hint = (
                "no tool matched" + (f" with the filters {', '.join(used)}" if used else "")
                + ("; the query has only words that say nothing of a task (such as ok, please or that), "
                   "matched against whole tool names alone: say what the tool should do"
                   if analyzed is not None and analyzed.filler else "")
                + ("; suggestions lists the tools nearest in meaning, which share none of the query's words "
                   "(check that one does what is asked before calling it)" if suggested else "")
                + "".join(f"; {said}" for said in self._filter_hints(surface, filters, pending))
                + "; try other or fewer words" + (", fewer filters" if used else "")
                + ", or select:<name> for a tool whose name you know"
                + (f"; still connecting: {', '.join(pending)}" if pending else "")
            )
        return result

    def _filter_hints(self, surface: Surface, filters: dict[str, Any], pending: list[str]) -> list[str]:
        """What a search no tool matched says of each filter that no tool on the surface passes
        on its own (each tag on its own): a namespace with the namespaces written like it, a kind
        with the kinds there are. Only what the surface shows is named: a namespace (or kind) whose
        every tool is blocked here reads as one no tool has. Nothing is said of the namespace of
        an upstream still connecting (`pending`, which the hint names): its tools may come."""
        said = []
        namespace, kind, read_only = filters["namespace"], filters["kind"], filters["read_only"]
        if namespace is not None and namespace not in pending and not self._any_shown(surface, namespace=namespace):
            lowered = {slot.lower(): slot for slot in self.catalog.slots if slot != namespace}
            # no other upstream (difflib refuses n=0): none is written like it
            like = (lowered[n] for n in difflib.get_close_matches(namespace.lower(), lowered, n=len(lowered), cutoff=0.6)) if lowered else ()
            near = list(itertools.islice((n for n in like if self._any_shown(surface, namespace=n)), FILTER_NEAR))
            said.append(f"no tool on this surface is in the namespace {namespace!r}" + (f" (namespaces like it: {', '.join(near)})" if near else ""))
        for tag in filters["tags"] or ():
            if not self._any_shown(surface, tags=[tag]):
                said.append(f"no tool on this surface has the tag {tag!r}")
        if kind is not None and not self._any_shown(surface, kind=kind):
            kinds = [k for k in self.catalog.kinds() if k != kind and self._any_shown(surface, kind=k)]
            said.append(f"no tool on this surface is of the kind {kind!r}" + (f" (kinds on it: {', '.join(kinds)})" if kinds else ""))
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

    def _suggestions(self, analyzed: AnalyzedQuery, surface: Surface, filters: dict[str, Any], filtered: bool,
                     limit: int, fold: bool) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
        """For a free-text search no tool matched: the `limit` tools nearest to the request in
        meaning (the static table's cosine, at least SUGGEST_COSINE), best first, among the
        visible tools passing the filters (`filtered`: some are set), with their alternatives
        folded as in a ranking. None when the surface shows more than SUGGEST_POOL tools and
        more than SUGGEST_POOL of the catalog's pass the filters, or without the static table
        (`semantic: off` or `model`)."""
        stage = next((stage for stage in self._stages if stage.encoder.cheap), None)
        if stage is None:
            return []
        shown = surface.shown(SUGGEST_POOL)
        if shown is not None:  # a surface showing few tools, of however large a catalog
            decls = [decl for tool_id in shown if (decl := self.catalog.get(tool_id)) is not None and self._passes(decl, filters)]
        elif not filtered:
            return []  # known too many without asking the index
        else:
            hits = self.index.search(self.index.query(None, weights=self.field_weights, **filters), limit=SUGGEST_POOL + 1)
            if len(hits) > SUGGEST_POOL:
                return []
            decls = [decl for tool_id, _ in hits if (decl := self._shown_hit(tool_id, surface, filters)) is not None]
        tools = stage.vectors(decls) if decls else None
        if tools is None:
            return []
        cosine = tools @ stage.query_vector(analyzed.text)
        order = [i for i in np.argsort(-cosine, kind="stable") if cosine[i] >= SUGGEST_COSINE]
        ranked = [(decls[i], float(cosine[i])) for i in order]
        if not fold:
            return [(decl, score, []) for decl, score in ranked[:limit]]
        return self._fold(ranked, tools[order], stage.encoder.same_tool_cosine)[:limit]

    def _select(self, query: str, surface: Surface, filters: dict[str, Any], include_schema: bool, total_deferred: int,
                pending: list[str]) -> ToolSearchResult:
        """The named tools, each once, in the order asked. A name unknown or blocked on the surface
        is missing, and so is a tool the filters exclude (the filters narrow a selection as they
        narrow a ranking: an A2T group's `q=select:` names only the group's tools); the hint tells
        the two apart, naming the filters each excluded tool fails, and never reveals a blocked one."""
        names = list(dict.fromkeys(n.strip() for n in query[len(SELECT_PREFIX):].split(",") if n.strip()))
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
        result = ToolSearchResult(query=query, query_type="select", matches=matches, missing_names=missing,
                                  total_deferred_tools=total_deferred, pending_providers=pending)
        if not names:
            result.next_action = "refine_query"
            result.hint = "select: needs tool names, aliases or ids separated by commas"
        elif missing:
            said = []
            if unknown:
                more = f" and {len(unknown) - HINT_NAMES} more (all in missing_names)" if len(unknown) > HINT_NAMES else ""
                said.append(f"not found on this surface: {', '.join(unknown[:HINT_NAMES])}{more}")
            if excluded:
                more = f" and {len(excluded) - HINT_NAMES} more (all in missing_names)" if len(excluded) > HINT_NAMES else ""
                said.append(f"left out by the filters: {', '.join(excluded[:HINT_NAMES])}{more}; "
                            "ask again without those filters to have them")
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

    def _ranked(self, analyzed: AnalyzedQuery | None, surface: Surface, limit: int,
                filters: dict[str, Any], fold: bool) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
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
        kept: list[tuple[ToolDeclaration, float]] = []  # the visible candidates, in the index's order
        read: set[str] = set()  # the ids of the index's hits read so far
        ranked: list[tuple[ToolDeclaration, float]] = []  # the pages ranked so far, best first
        placed: set[str] = set()
        rows: list[np.ndarray] | None = []  # their vectors, a block per page (None once a page has none)
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
                page, page_vectors, page_threshold = self._rank_page(analyzed, page, parts, surface, filters)
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
            goal = max(2 * goal, goal + limit - len(matches))  # alternatives took places: look further down

    def _rank_page(self, analyzed: AnalyzedQuery, ranked: list[tuple[ToolDeclaration, float]], parts: list[AnalyzedQuery],
                   surface: Surface, filters: dict[str, Any],
                   ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None, float | None]:
        """A page of candidates (in the index's order) ranked for the request: reranked by meaning
        (a semantic stage on) and by their titles, raised by another tool of their API, reordered
        to cover the request's parts, with the lookups of the first. With the candidates' vectors
        in the ranking's order (None when a step dropped them) and the cosine at which two are one
        tool."""
        vectors: np.ndarray | None = None  # the candidates' rows, in `ranked`'s order
        threshold: float | None = None
        reranked_by: SemanticStage | None = None
        if self.semantic is not None and ranked:
            decls = [decl for decl, _ in ranked]
            for stage in self._stages:  # the model, then (`auto`) the table until the model has them all
                tools = stage.vectors(decls)
                if tools is not None:
                    order, mixed = stage.mix(analyzed.text, ranked, tools)
                    ranked = [(decls[i], float(mixed[i])) for i in order]
                    vectors, threshold = tools[order], stage.encoder.same_tool_cosine
                    reranked_by = stage
                    break
        if self.title_weight and len(ranked) > 1:  # keyword scores (no stage reranked them) over the best one
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
    def _unplaced(ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None,
                  placed: set[str]) -> np.ndarray | None:
        """The rows of `vectors` (one per entry of `ranked`) of the tools not yet `placed`."""
        if vectors is None or not placed:
            return vectors
        return vectors[[i for i, (decl, _) in enumerate(ranked) if decl.tool_id not in placed]]

    def _titled(self, analyzed: AnalyzedQuery, ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None,
                scale: float = 1.0) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` (best first, with its `vectors` rows) with the candidates of each upstream
        reordered in the places they hold, by their score over `scale` (the best keyword score
        when no semantic stage reranked them, else 1) plus `title_weight` times the Dice
        coefficient of the request's content terms and their title's (`title_terms`), each term
        weighted by its inverse document frequency. Each place keeps its score. Only an upstream's
        own candidates trade places: a vendor whose tools have no titles loses no place to one
        whose tools have. A term said only in a file's name is a value, not asked for."""
        asked = frozenset(term for term, weight in analyzed.terms.items() if weight == 1.0)
        if not asked:
            return ranked, vectors
        groups: dict[str, list[int]] = {}
        for i, (decl, _) in enumerate(ranked):
            groups.setdefault(decl.namespace, []).append(i)
        groups = {ns: places for ns, places in groups.items() if len(places) > 1}  # only these can trade places
        several = [i for places in groups.values() for i in places]
        titles = dict(zip(several, self._kept_all(self._titles_kept, [ranked[i][0] for i in several], 0, title_terms), strict=True))
        groups = {ns: places for ns, places in groups.items() if any(asked & titles[i] for i in places)}
        if not groups:
            return ranked, vectors
        weight = self.index.term_weights(asked.union(*(titles[i] for places in groups.values() for i in places)))
        asked_weight = sum(weight[term] for term in asked)

        def raised(i: int) -> float:
            shared = asked & titles[i]
            gain = 2 * sum(weight[t] for t in shared) / (asked_weight + sum(weight[t] for t in titles[i])) if shared else 0.0
            return ranked[i][1] / scale + self.title_weight * gain

        order = list(range(len(ranked)))
        for places in groups.values():
            for place, i in zip(places, sorted(places, key=lambda i: -raised(i)), strict=True):  # stable
                order[place] = i
        if order == list(range(len(ranked))):
            return ranked, vectors
        return ([(ranked[i][0], ranked[place][1]) for place, i in enumerate(order)],
                None if vectors is None else vectors[order])

    def _siblings(self, ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None,
                  ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` (best first, with its `vectors` rows) with each candidate's score raised by
        `sibling_weight` times the best score of another candidate of its API (SharedText.api),
        and reordered by it (ties keep their order). A tool of no API (its description opens with
        no shared text) gains nothing."""
        apis = [self.shared.api(searched_description(decl)) for decl, _ in ranked]
        firsts: dict[int, list[int]] = {}  # an API's best two candidates, by place
        for i, api in enumerate(apis):
            if api is not None:
                places = firsts.setdefault(api, [])
                if len(places) < 2:
                    places.append(i)
        if not any(len(places) > 1 for places in firsts.values()):
            return ranked, vectors
        scores = np.array([score for _, score in ranked], np.float32)
        raised = scores.copy()
        for i, api in enumerate(apis):
            places = firsts.get(api) if api is not None else None
            if places and len(places) > 1:
                other = places[1] if places[0] == i else places[0]
                raised[i] += self.sibling_weight * max(float(scores[other]), 0.0)
        order = np.argsort(-raised, kind="stable")
        return [(ranked[i][0], float(raised[i])) for i in order], None if vectors is None else vectors[order]

    def _own_words(self, query: str, ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None,
                   ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` (best first, with its `vectors` rows) with the tools of each API among its first
        `OWN_PLACES` reordered in the places they hold, by their score plus `own_weight` times how
        far the cosine of the query with their own words (SharedText.own: the description
        without the blurb every tool of the API opens with) is above the mean of theirs. Each
        place keeps its score. A tool's vector carries its API's blurb, which tells it from other
        vendors' tools but says the same of every tool of the API. Needs the cheap encoder (the
        static table), which embeds the own words as the search runs; without it, `ranked`."""
        stage = next((stage for stage in self._stages if stage.encoder.cheap), None)
        if stage is None:
            return ranked, vectors
        groups: dict[int, list[int]] = {}
        for i, (decl, _) in enumerate(ranked[:OWN_PLACES]):
            api = self.shared.api(searched_description(decl))
            if api is not None:
                groups.setdefault(api, []).append(i)
        groups = {api: places for api, places in groups.items() if len(places) > 1}
        if not groups:
            return ranked, vectors
        places = [i for group in groups.values() for i in group]
        own = self._own_vectors(stage, [ranked[i][0] for i in places])
        cosine = dict(zip(places, (own @ stage.query_vector(query)).tolist(), strict=True))
        order = list(range(len(ranked)))
        for group in groups.values():
            mean = sum(cosine[i] for i in group) / len(group)
            by = sorted(group, key=lambda i: -(ranked[i][1] + self.own_weight * (cosine[i] - mean)))  # stable
            for place, i in zip(group, by, strict=True):
                order[place] = i
        if order == list(range(len(ranked))):
            return ranked, vectors
        return ([(ranked[i][0], ranked[place][1]) for place, i in enumerate(order)],
                None if vectors is None else vectors[order])

    def _own_vectors(self, stage: SemanticStage, decls: list[ToolDeclaration]) -> np.ndarray:
        """The vectors of these tools' own words (`_own_words`), embedded by `stage` when not
        kept: the last OWN_KEPT are, each for as long as its declaration and every shared text
        stay as they were."""
        version = self.shared.version
        with self._own_lock:
            kept = [self._own_kept.get(decl.tool_id) for decl in decls]
        rows = [k[2] if k is not None and k[0] is decl and k[1] == version else None for k, decl in zip(kept, decls, strict=True)]
        fresh = [i for i, row in enumerate(rows) if row is None]
        if fresh:
            texts = [tool_text(decls[i], self.shared.own(searched_description(decls[i]))) for i in fresh]
            with self._own_lock:
                for i, row in zip(fresh, stage.text_vectors(texts), strict=True):
                    rows[i] = row
                    self._own_kept[decls[i].tool_id] = (decls[i], version, row)
        return np.stack(rows)

    def _lookups(self, analyzed: AnalyzedQuery, ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None,
                 surface: Surface, filters: dict[str, Any]) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` with, right after each of its first `lookup_places` tools, the tools of its API
        that look up by name what one of its required parameters is (search_rank.looked_up):
        `get_user_id` after `send_message(receiver_id: "User ID of the user ...")`, for an agent
        told a name. A lookup keeps its place when it is already above the tool, and takes the
        tool's score; it is asked of the index (`ToolIndex.lookups`), in the tool's upstream
        first, then (finding none there) in any the search's filters allow, and must be visible on
        the caller's surface. So are the tools of its API that change a current place it acts in
        (search_rank.acts_in_current, changes_current) when the request names such a place
        (place_terms, but for what it says of where it is: here_words): `cd` after `wc` for *in the
        logs directory, count the lines of access.log*. The rows of `vectors` are dropped when a
        tool was moved."""
        out = list(ranked)
        moved = False
        asked = frozenset(analyzed.terms) - here_words(analyzed.text)  # what a place the request names could be
        changers: dict[tuple[str, int, frozenset[str]], list[ToolDeclaration]] = {}
        for decl, score in ranked[:self.lookup_places]:
            api = self.shared.api(searched_description(decl))
            if api is None:
                continue
            heads = input_heads(described_schema(decl))
            found = self._api_tools(decl, api, frozenset().union(*heads), surface, filters,
                                    lambda other, heads=heads: bool(what := looked_up(other)) and any(what <= head for head in heads))
            places = self._places(decl) if asked else frozenset()
            if places:  # the first matches are often of one API and act in one place: asked once
                key = (decl.namespace, api, places)
                if key not in changers:
                    changers[key] = self._api_tools(decl, api, [CHANGES_PREFIX + place for place in places], surface, filters,
                                                    lambda other: bool(asked & place_terms(other)))
                found += [other for other in changers[key] if function_name(other) != function_name(decl)]
            at = next(i for i, (d, _) in enumerate(out) if d is decl)
            for other in sorted(found, key=function_name, reverse=True):
                where = next((i for i, (d, _) in enumerate(out) if d.tool_id == other.tool_id), None)
                if where is not None and where < at:
                    continue
                if where is not None:
                    del out[where]
                out.insert(at + 1, (other, score))
                moved = moved or where != at + 1  # one already right after the tool only takes its score
        return out, None if moved else vectors

    def _kept(self, kept: LRUCache[str, tuple[ToolDeclaration, int, Any]], decl: ToolDeclaration, version: int,
              compute: Callable[[ToolDeclaration], Any]) -> Any:
        """`compute(decl)`, kept in `kept` (bounded) while the tool's declaration and `version` stay."""
        return self._kept_all(kept, [decl], version, compute)[0]

    def _kept_all(self, kept: LRUCache[str, tuple[ToolDeclaration, int, Any]], decls: list[ToolDeclaration], version: int,
                  compute: Callable[[ToolDeclaration], Any]) -> list[Any]:
        """`_kept` of each of `decls`, with one turn of the lock to look them up and one to keep
        those computed."""
        with self._own_lock:
            found = [kept.get(decl.tool_id) for decl in decls]
        current = [entry is not None and entry[0] is decl and entry[1] == version for decl, entry in zip(decls, found, strict=True)]
        out = [entry[2] if ok else None for entry, ok in zip(found, current, strict=True)]
        fresh = {i: compute(decls[i]) for i, ok in enumerate(current) if not ok}
        if fresh:
            with self._own_lock:
                for i, value in fresh.items():
                    kept[decls[i].tool_id] = (decls[i], version, value)
                    out[i] = value
        return out

    def _places(self, decl: ToolDeclaration) -> frozenset[str]:
        """The current places a tool acts in but does not change (search_rank.acts_in_current,
        changes_current), kept for the last OWN_KEPT tools, each while its declaration stays."""
        return self._kept(self._places_kept, decl, 0, lambda d: acts_in_current(d) - changes_current(d))

    def _hint(self, decl: ToolDeclaration) -> str:
        """A match's search hint: from the tool's own words, not from the blurb its API's tools
        share (derive_search_hint). Kept for the last OWN_KEPT tools, each while its declaration
        and every shared text stay as they were."""
        def derive(d: ToolDeclaration) -> str:
            shared, own = self.shared.split(d.namespace, searched_description(d))
            return derive_search_hint(d, own, shared)
        return self._kept(self._hints_kept, decl, self.shared.version, derive)

    def _api_tools(self, decl: ToolDeclaration, api: int, terms: Iterable[str], surface: Surface, filters: dict[str, Any],
                   serves: Callable[[ToolDeclaration], bool]) -> list[ToolDeclaration]:
        """The tools of `decl`'s API that have one of these terms in the lookups' field and that
        `serves(tool)` accepts, other than `decl`'s function, within the filters and visible on
        the surface: asked of `decl`'s upstream first, then (finding none there) of any the filters
        allow (other vendors may have many lookups of the same words)."""
        terms, name = list(terms), function_name(decl)
        found: list[ToolDeclaration] = []
        if not terms:
            return found
        for namespace in dict.fromkeys([decl.namespace, filters["namespace"]]):
            for tool_id in self.index.lookups(terms, **{**filters, "namespace": namespace}):
                other = self.catalog.get(tool_id)
                if (other is not None and function_name(other) != name and self.shared.api(searched_description(other)) == api
                        and self._passes(other, filters) and surface.visible(other) and serves(other)):
                    found.append(other)
            if found:
                break
        return found

    def _cover(self, parts: list[AnalyzedQuery], ranked: list[tuple[ToolDeclaration, float]],
               vectors: np.ndarray | None, reranked_by: SemanticStage | None,
               ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` (best first, with its `vectors` rows) reordered to cover the request's parts
        (`cover_order`), each with its cover score. A part's relevance to a candidate is scored
        like a request's: its keyword score among the candidates (over the best candidate's)
        mixed with the cosine of its vector by the cheap encoder (the static table), when one is
        on; the whole request's score is the reranked score (or the keyword score over the best)."""
        decls = [decl for decl, _ in ranked]
        ids = [decl.tool_id for decl in decls]
        scores = np.array([score for _, score in ranked], np.float32)
        overall = np.clip(scores, 0.0, 1.0) if reranked_by is not None else _over_best(scores)
        cheap = next((stage for stage in self._stages if stage.encoder.cheap), None)
        tools = None if cheap is None else vectors if reranked_by is cheap else cheap.vectors(decls)
        relevance = []
        for part, hits in zip(parts, part_scores(self.index, parts, ids, self.field_weights), strict=True):
            keyword = [(decl, hits.get(decl.tool_id, 0.0)) for decl in decls]
            if cheap is not None and tools is not None:
                _, mixed = cheap.mix(part.text, keyword, tools)
            else:
                mixed = _over_best(np.array([score for _, score in keyword], np.float32))
            relevance.append(np.clip(mixed, 0.0, 1.0))
        order, cover = cover_order(overall, np.stack(relevance), self.cover_weight, COVER_PLACES)
        return ([(decls[i], cover[k]) for k, i in enumerate(order)],
                None if vectors is None else vectors[order])

    def _fold(self, ranked: list[tuple[ToolDeclaration, float]], vectors: np.ndarray | None = None,
              threshold: float | None = None) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
        """Alternatives folded into the better match: a tool with the native name of a match above it
        and a similar meaning (cosine of their vectors at least the encoder's `same_tool_cosine`;
        the name alone without a semantic stage). Vendors list one function under one name in
        their own words; an agent needs one place for it, with the others named. An alternative
        whose upstream is up takes the place of a match whose upstream is down. `vectors` (one row
        per candidate, as the rerank read them) are read here, at the first repeated name, when
        not given; without any, the name decides."""
        out: list[tuple[ToolDeclaration, float, list[ToolDeclaration]]] = []
        at: list[int] = []  # each match's place in `ranked` (its row of `vectors`)
        by_name: dict[str, list[int]] = {}
        looked = vectors is not None
        for i, (decl, score) in enumerate(ranked):
            places = by_name.setdefault(function_name(decl), [])
            place: int | None = None
            if places:
                if not looked:  # the candidates' vectors, once, at the first repeated name
                    vectors, threshold = self._vectors([d for d, _ in ranked])
                    looked = True
                place = places[0]
                if vectors is not None and threshold is not None:
                    cosine = vectors[[at[p] for p in places]] @ vectors[i]
                    best = int(cosine.argmax())
                    place = places[best] if cosine[best] >= threshold else None
            if place is None:
                places.append(len(out))
                out.append((decl, score, []))
                at.append(i)
                continue
            first, first_score, alternatives = out[place]
            if first.loading_state == "unavailable" and decl.loading_state != "unavailable":
                out[place] = (decl, first_score, [first, *alternatives])
                at[place] = i
            else:
                alternatives.append(decl)
        return out

    def _vectors(self, decls: list[ToolDeclaration]) -> tuple[np.ndarray | None, float | None]:
        """The tools' vectors and the cosine at which two are one tool, from the first semantic
        stage that has them all; (None, None) without one."""
        for stage in self._stages:
            vectors = stage.vectors(decls)
            if vectors is not None:
                return vectors, stage.encoder.same_tool_cosine
        return None, None

    def _shown_hit(self, tool_id: str, surface: Surface, filters: dict[str, Any]) -> ToolDeclaration | None:
        """The declaration of an index hit when the catalog still has it, it still passes the
        filters (the index may be a commit behind the catalog) and the surface shows it."""
        decl = self.catalog.get(tool_id)
        return decl if decl is not None and self._passes(decl, filters) and surface.visible(decl) else None

    @staticmethod
    def _passes(decl: ToolDeclaration, filters: dict[str, Any]) -> bool:
        tags: Iterable[str] = filters["tags"] or ()
        return ((filters["namespace"] is None or decl.namespace == filters["namespace"])
                and all(t in decl.tags for t in tags)
                and (filters["kind"] is None or decl.tool_kind == filters["kind"])
                and (filters["read_only"] is None or decl.safety.read_only == filters["read_only"]))

    def _ref(self, decl: ToolDeclaration, surface: Surface, score: float, include_schema: bool,
             alternatives: list[ToolDeclaration] | None = None) -> DeferredToolRef:
        ref = deferred_ref(decl)
        ref.search_hint = self._hint(decl)
        if surface.place(decl).state == "loaded" and decl.loading_state == "loaded":
            ref.loading_state = "loaded"
            ref.schema_visibility = "loaded"
        ref.score = round(score, 4)
        if alternatives:
            ref.alternatives = [{"tool_id": c.tool_id, "name": c.name, "namespace": c.namespace} for c in alternatives[:MAX_ALTERNATIVES]]
            if len(alternatives) > MAX_ALTERNATIVES:
                ref.alternatives_total = len(alternatives)
        if include_schema:
            ref.input_schema = decl.input_schema
        return ref


def _over_best(scores: np.ndarray) -> np.ndarray:
    """Keyword scores over the best of them (all zero when none is above zero)."""
    return scores / max(float(scores.max(initial=0.0)), 1e-9)


def part_scores(index: ToolIndex, parts: list[AnalyzedQuery], tool_ids: list[str],
                weights: dict[str, float] | None = None) -> list[dict[str, float]]:
    """Each part's keyword score of each of these tools that has one of its words (the index
    query of the part, limited to the tools; no word widened as a typing error)."""
    among = index.among(tool_ids)
    return [dict(index.search(index.query(part, weights=weights, widen=False, among=among), limit=len(tool_ids)))
            for part in parts]


def cover_order(overall: np.ndarray, parts: np.ndarray, weight: float = COVER_WEIGHT,
                places: int | None = None) -> tuple[list[int], list[float]]:
    """The candidates in the order that covers a request's parts, and each one's cover score
    (non-increasing). `overall[i]` is candidate i's relevance to the whole request, `parts[p, i]`
    its relevance to part p, all in [0, 1]. Each place goes to the candidate of the greatest
    `(1 - weight) * overall + weight * mean over the parts of relevance * (1 - relevance of each
    place above)`: a part well answered above counts little for the next places (xQuAD, Santos,
    Macdonald and Ounis, 2010). A candidate's score can only fall as places are taken, so the
    scores come out best first; ties keep the given order."""
    count = len(overall)
    left = np.ones(len(parts), np.float32)  # how little each part is answered so far
    base = (1.0 - weight) * np.asarray(overall, np.float32)
    taken = np.zeros(count, bool)
    order: list[int] = []
    scores: list[float] = []
    for _ in range(count if places is None else min(count, places)):
        gain = base + weight * (left @ parts) / len(parts)
        gain[taken] = -np.inf
        best = int(gain.argmax())
        order.append(best)
        scores.append(float(gain[best]))
        taken[best] = True
        left *= 1.0 - parts[:, best]
    if len(order) < count:  # the rest by their score after the first `places`
        gain = base + weight * (left @ parts) / len(parts)
        rest = [i for i in np.argsort(-gain, kind="stable").tolist() if not taken[i]]
        order += rest
        scores += [float(gain[i]) for i in rest]
    return order, scores
