"""The ranking stages of a free-text search, each a step over a page of keyword candidates (best
first, with their vectors' rows): titles said by the request, the gain of another tool of the
same API, a tool's own words against its API's blurb, the cover of a request's parts, the
lookups a match needs placed after it; and the folding of one function listed by several
upstreams into one match's alternatives."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from cachetools import LRUCache

from bridge.catalog import Catalog
from bridge.model import ToolDeclaration
from bridge.search.analysis import AnalyzedQuery
from bridge.search.cover import COVER_PLACES, COVER_WEIGHT, cover_order, over_best, part_scores
from bridge.search.document import CHANGES_PREFIX
from bridge.search.index import ToolIndex
from bridge.search.query import LOOKUP_LIMIT
from bridge.search.semantic import SemanticStage
from bridge.search.sources import SOURCE_DEPTH, name_key, named_sources
from bridge.search.tooltext import (
    SharedText,
    acts_in_current,
    changes_current,
    derive_search_hint,
    described_schema,
    function_name,
    here_words,
    input_heads,
    looked_up,
    place_terms,
    searched_description,
    title_terms,
    tool_text,
)
from bridge.surface import Surface

__all__ = ["LOOKUP_PLACES", "OWN_WEIGHT", "SIBLING_WEIGHT", "TITLE_WEIGHT", "RankingStages"]

# A tool gains this share of the best score that another tool of its API (the tools opening with
# one shared blurb, in whichever namespace: bridge.search.tooltext.SharedText.api) has among a
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


class RankingStages:
    """The ranking stages, mixed into `ToolSearch` (bridge.search.service), which runs them in
    turn over each page of candidates (`ToolSearch._rank_page`) and sets the state below. Each
    weight is 0 to turn its stage off."""

    cover_weight = COVER_WEIGHT  # of the parts of a request asking for several things (`_cover`)
    sibling_weight = (
        SIBLING_WEIGHT  # of the best score of another tool of a candidate's API (`_siblings`)
    )
    own_weight = OWN_WEIGHT  # of the cosine with a tool's own words among its API's candidates (`_own_words`)
    lookup_places = (
        LOOKUP_PLACES  # first matches whose lookups are placed after them (`_lookups`); 0: none
    )
    title_weight = TITLE_WEIGHT  # of how closely the request says a candidate's title (`_titled`)

    catalog: Catalog
    index: ToolIndex
    shared: SharedText
    field_weights: dict[str, float] | None
    semantic: (
        SemanticStage | None
    )  # the semantic stage (`ToolSearch`), and with `auto` and the full
    fallback: (
        SemanticStage | None
    )  # model, the static table's until the model has embedded the candidates
    _own_lock: threading.Lock  # around the caches below
    _own_kept: LRUCache[str, tuple[ToolDeclaration, int, np.ndarray]]  # `_own_vectors`
    _places_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]]  # `_places`
    _hints_kept: LRUCache[str, tuple[ToolDeclaration, int, str]]  # `_hint`
    _titles_kept: LRUCache[str, tuple[ToolDeclaration, int, frozenset[str]]]  # `_titled`

    @property
    def _stages(self) -> list[SemanticStage]:
        return [stage for stage in (self.semantic, self.fallback) if stage is not None]

    def _titled(
        self,
        analyzed: AnalyzedQuery,
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None,
        scale: float = 1.0,
    ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
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
        groups = {
            ns: places for ns, places in groups.items() if len(places) > 1
        }  # only these can trade places
        several = [i for places in groups.values() for i in places]
        titles = dict(
            zip(
                several,
                self._kept_all(self._titles_kept, [ranked[i][0] for i in several], 0, title_terms),
                strict=True,
            )
        )
        groups = {
            ns: places for ns, places in groups.items() if any(asked & titles[i] for i in places)
        }
        if not groups:
            return ranked, vectors
        weight = self.index.term_weights(
            asked.union(*(titles[i] for places in groups.values() for i in places))
        )
        asked_weight = sum(weight[term] for term in asked)

        def raised(i: int) -> float:
            shared = asked & titles[i]
            gain = (
                2
                * sum(weight[t] for t in shared)
                / (asked_weight + sum(weight[t] for t in titles[i]))
                if shared
                else 0.0
            )
            return ranked[i][1] / scale + self.title_weight * gain

        order = list(range(len(ranked)))
        for places in groups.values():
            for place, i in zip(
                places, sorted(places, key=lambda i: -raised(i)), strict=True
            ):  # stable
                order[place] = i
        if order == list(range(len(ranked))):
            return ranked, vectors
        return (
            [(ranked[i][0], ranked[place][1]) for place, i in enumerate(order)],
            None if vectors is None else vectors[order],
        )

    def _siblings(
        self,
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None,
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
            ahead = firsts.get(api) if api is not None else None
            if ahead and len(ahead) > 1:
                other = ahead[1] if ahead[0] == i else ahead[0]
                raised[i] += self.sibling_weight * max(float(scores[other]), 0.0)
        order = np.argsort(-raised, kind="stable")
        return [
            (ranked[i][0], float(raised[i])) for i in order
        ], None if vectors is None else vectors[order]

    def _own_words(
        self,
        query: str,
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None,
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
            by = sorted(
                group, key=lambda i: -(ranked[i][1] + self.own_weight * (cosine[i] - mean))
            )  # stable
            for place, i in zip(group, by, strict=True):
                order[place] = i
        if order == list(range(len(ranked))):
            return ranked, vectors
        return (
            [(ranked[i][0], ranked[place][1]) for place, i in enumerate(order)],
            None if vectors is None else vectors[order],
        )

    def _own_vectors(self, stage: SemanticStage, decls: list[ToolDeclaration]) -> np.ndarray:
        """The vectors of these tools' own words (`_own_words`), embedded by `stage` when not
        kept: the last OWN_KEPT are, each for as long as its declaration and every shared text
        stay as they were."""
        version = self.shared.version
        with self._own_lock:
            kept = [self._own_kept.get(decl.tool_id) for decl in decls]
        rows = [
            k[2] if k is not None and k[0] is decl and k[1] == version else None
            for k, decl in zip(kept, decls, strict=True)
        ]
        fresh = [i for i, row in enumerate(rows) if row is None]
        if fresh:
            texts = [
                tool_text(decls[i], self.shared.own(searched_description(decls[i]))) for i in fresh
            ]
            with self._own_lock:
                for i, row in zip(fresh, stage.text_vectors(texts), strict=True):
                    rows[i] = row
                    self._own_kept[decls[i].tool_id] = (decls[i], version, row)
        filled = [row for row in rows if row is not None]
        assert len(filled) == len(rows)  # each row kept or embedded above
        return np.stack(filled)

    def _lookups(
        self,
        analyzed: AnalyzedQuery,
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None,
        surface: Surface,
        filters: dict[str, Any],
    ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` with, right after each of its first `lookup_places` tools, the tools of its API
        that look up by name what one of its required parameters is (bridge.search.tooltext.looked_up):
        `get_user_id` after `send_message(receiver_id: "User ID of the user ...")`, for an agent
        told a name. A lookup keeps its place when it is already above the tool, and takes the
        tool's score; it is asked of the index (`ToolIndex.lookups`), in the tool's upstream
        first, then (finding none there) in any the search's filters allow, and must be visible on
        the caller's surface. So are the tools of its API that change a current place it acts in
        (bridge.search.tooltext.acts_in_current, changes_current) when the request names such a place
        (place_terms, but for what it says of where it is: here_words): `cd` after `wc` for *in the
        logs directory, count the lines of access.log*. The rows of `vectors` are dropped when a
        tool was moved."""
        out = list(ranked)
        moved = False
        asked = frozenset(analyzed.terms) - here_words(
            analyzed.text
        )  # what a place the request names could be
        changers: dict[tuple[str, int, frozenset[str]], list[ToolDeclaration]] = {}
        for decl, score in ranked[: self.lookup_places]:
            found = self._sources(decl, surface, filters)
            api = self.shared.api(searched_description(decl))
            if api is None:
                if found:
                    moved = _place_after(out, decl, found, score) or moved
                continue
            heads = input_heads(described_schema(decl))
            found += self._api_tools(
                decl,
                api,
                frozenset().union(*heads),
                surface,
                filters,
                functools.partial(_looks_up_one_of, heads),
            )
            places = self._places(decl) if asked else frozenset()
            if places:  # the first matches are often of one API and act in one place: asked once
                key = (decl.namespace, api, places)
                if key not in changers:
                    changers[key] = self._api_tools(
                        decl,
                        api,
                        [CHANGES_PREFIX + place for place in places],
                        surface,
                        filters,
                        lambda other: bool(asked & place_terms(other)),
                    )
                found += [
                    other for other in changers[key] if function_name(other) != function_name(decl)
                ]
            moved = _place_after(out, decl, found, score) or moved
        return out, None if moved else vectors

    def _sources(
        self, decl: ToolDeclaration, surface: Surface, filters: dict[str, Any]
    ) -> list[ToolDeclaration]:
        """The tools that `decl`'s required parameters name as their sources
        (bridge.search.sources.named_sources: a parameter's first name the catalog holds), and
        theirs in turn, SOURCE_DEPTH steps deep; asked of the index (`ToolIndex.lookups`), a
        tool of the match's own upstream taken before another's, within the filters and visible
        on the surface."""
        found: dict[str, ToolDeclaration] = {}
        seen, todo = {function_name(decl)}, [decl]
        for _ in range(SOURCE_DEPTH):
            step = []
            for tool in todo:
                for other in self._named(tool, surface, filters):
                    name = function_name(other)
                    if name not in seen:
                        seen.add(name)
                        found[other.tool_id] = other
                        step.append(other)
            todo = step
        return list(found.values())

    def _named(
        self, decl: ToolDeclaration, surface: Surface, filters: dict[str, Any]
    ) -> list[ToolDeclaration]:
        """The first tool each required parameter of `decl` names that the catalog holds."""
        params = named_sources(decl)
        if not params:
            return []
        asked = list(dict.fromkeys(key for keys in params for key in keys))
        hits = self.index.lookups(asked, **filters)
        if len(hits) >= LOOKUP_LIMIT and filters["namespace"] is None:  # many vendors name them
            hits = self.index.lookups(asked, **{**filters, "namespace": decl.namespace}) + hits
        held: dict[str, ToolDeclaration] = {}  # a name's tool: of the tool's upstream first
        for tool_id in hits:
            other = self.catalog.get(tool_id)
            if other is not None and self._passes(other, filters) and surface.visible(other):
                key = name_key(function_name(other))
                if key not in held or (other.namespace == decl.namespace != held[key].namespace):
                    held[key] = other
        out: dict[str, ToolDeclaration] = {}
        for keys in params:
            source = next((held[key] for key in keys if key in held), None)
            if source is not None:
                out[source.tool_id] = source
        return list(out.values())

    def _kept(
        self,
        kept: LRUCache[str, tuple[ToolDeclaration, int, Any]],
        decl: ToolDeclaration,
        version: int,
        compute: Callable[[ToolDeclaration], Any],
    ) -> Any:
        """`compute(decl)`, kept in `kept` (bounded) while the tool's declaration and `version` stay."""
        return self._kept_all(kept, [decl], version, compute)[0]

    def _kept_all(
        self,
        kept: LRUCache[str, tuple[ToolDeclaration, int, Any]],
        decls: list[ToolDeclaration],
        version: int,
        compute: Callable[[ToolDeclaration], Any],
    ) -> list[Any]:
        """`_kept` of each of `decls`, with one turn of the lock to look them up and one to keep
        those computed."""
        with self._own_lock:
            found = [kept.get(decl.tool_id) for decl in decls]
        current = [
            entry is not None and entry[0] is decl and entry[1] == version
            for decl, entry in zip(decls, found, strict=True)
        ]
        out = [
            entry[2] if ok and entry is not None else None
            for entry, ok in zip(found, current, strict=True)
        ]
        fresh = {i: compute(decls[i]) for i, ok in enumerate(current) if not ok}
        if fresh:
            with self._own_lock:
                for i, value in fresh.items():
                    kept[decls[i].tool_id] = (decls[i], version, value)
                    out[i] = value
        return out

    def _places(self, decl: ToolDeclaration) -> frozenset[str]:
        """The current places a tool acts in but does not change (bridge.search.tooltext.acts_in_current,
        changes_current), kept for the last OWN_KEPT tools, each while its declaration stays."""
        return self._kept(
            self._places_kept, decl, 0, lambda d: acts_in_current(d) - changes_current(d)
        )

    def _hint(self, decl: ToolDeclaration) -> str:
        """A match's search hint: from the tool's own words, not from the blurb its API's tools
        share (derive_search_hint). Kept for the last OWN_KEPT tools, each while its declaration
        and every shared text stay as they were."""

        def derive(d: ToolDeclaration) -> str:
            shared, own = self.shared.split(d.namespace, searched_description(d))
            return derive_search_hint(d, own, shared)

        return self._kept(self._hints_kept, decl, self.shared.version, derive)

    def _api_tools(
        self,
        decl: ToolDeclaration,
        api: int,
        terms: Iterable[str],
        surface: Surface,
        filters: dict[str, Any],
        serves: Callable[[ToolDeclaration], bool],
    ) -> list[ToolDeclaration]:
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
                if (
                    other is not None
                    and function_name(other) != name
                    and self.shared.api(searched_description(other)) == api
                    and self._passes(other, filters)
                    and surface.visible(other)
                    and serves(other)
                ):
                    found.append(other)
            if found:
                break
        return found

    def _cover(
        self,
        parts: list[AnalyzedQuery],
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None,
        reranked_by: SemanticStage | None,
    ) -> tuple[list[tuple[ToolDeclaration, float]], np.ndarray | None]:
        """`ranked` (best first, with its `vectors` rows) reordered to cover the request's parts
        (`cover_order`), each with its cover score. A part's relevance to a candidate is scored
        like a request's: its keyword score among the candidates (over the best candidate's)
        mixed with the cosine of its vector by the cheap encoder (the static table), when one is
        on; the whole request's score is the reranked score (or the keyword score over the best)."""
        decls = [decl for decl, _ in ranked]
        ids = [decl.tool_id for decl in decls]
        scores = np.array([score for _, score in ranked], np.float32)
        overall = np.clip(scores, 0.0, 1.0) if reranked_by is not None else over_best(scores)
        cheap = next((stage for stage in self._stages if stage.encoder.cheap), None)
        tools = None if cheap is None else vectors if reranked_by is cheap else cheap.vectors(decls)
        relevance = []
        for part, hits in zip(
            parts, part_scores(self.index, parts, ids, self.field_weights), strict=True
        ):
            keyword = [(decl, hits.get(decl.tool_id, 0.0)) for decl in decls]
            if cheap is not None and tools is not None:
                _, mixed = cheap.mix(part.text, keyword, tools)
            else:
                mixed = over_best(np.array([score for _, score in keyword], np.float32))
            relevance.append(np.clip(mixed, 0.0, 1.0))
        order, cover = cover_order(overall, np.stack(relevance), self.cover_weight, COVER_PLACES)
        return (
            [(decls[i], cover[k]) for k, i in enumerate(order)],
            None if vectors is None else vectors[order],
        )

    def _fold(
        self,
        ranked: list[tuple[ToolDeclaration, float]],
        vectors: np.ndarray | None = None,
        threshold: float | None = None,
    ) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
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

    def _shown_hit(
        self, tool_id: str, surface: Surface, filters: dict[str, Any]
    ) -> ToolDeclaration | None:
        """The declaration of an index hit when the catalog still has it, it still passes the
        filters (the index may be a commit behind the catalog) and the surface shows it."""
        decl = self.catalog.get(tool_id)
        return (
            decl
            if decl is not None and self._passes(decl, filters) and surface.visible(decl)
            else None
        )

    @staticmethod
    def _passes(decl: ToolDeclaration, filters: dict[str, Any]) -> bool:
        tags: Iterable[str] = filters["tags"] or ()
        return (
            (filters["namespace"] is None or decl.namespace == filters["namespace"])
            and all(t in decl.tags for t in tags)
            and (filters["kind"] is None or decl.tool_kind == filters["kind"])
            and (filters["read_only"] is None or decl.safety.read_only == filters["read_only"])
        )


def _place_after(
    out: list[tuple[ToolDeclaration, float]],
    decl: ToolDeclaration,
    found: list[ToolDeclaration],
    score: float,
) -> bool:
    """`found` placed in `out` right after `decl`, with its score, but those already above it;
    whether a tool moved (one already right after `decl` only takes its score)."""
    moved = False
    at = next(i for i, (d, _) in enumerate(out) if d is decl)
    for other in sorted(found, key=function_name, reverse=True):
        where = next((i for i, (d, _) in enumerate(out) if d.tool_id == other.tool_id), None)
        if where is not None and where < at:
            continue
        if where is not None:
            del out[where]
        out.insert(at + 1, (other, score))
        moved = moved or where != at + 1
    return moved


def _looks_up_one_of(heads: list[frozenset[str]], other: ToolDeclaration) -> bool:
    """Whether `other` looks up by name what one of `heads` (a tool's required inputs) names."""
    what = looked_up(other)
    return bool(what) and any(what <= head for head in heads)
