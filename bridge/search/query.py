"""Queries of the search index: a free-text search as Tantivy term clauses (weighted by field and
by term, common words left out in a large catalog, unknown words widened as typing errors,
related and joined words, quoted names matched whole), the filters, the lookups' field, term
weights, and reading the hits back as tool ids."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tantivy

from bridge.search.analysis import AnalyzedQuery
from bridge.search.document import FIELD_WEIGHTS
from bridge.search.storage import IndexStorage

__all__ = ["EXACT_NAME_WEIGHT", "LOOKUP_LIMIT", "TIE_MARGIN", "IndexQueries", "IndexQuery"]

WEIGHTS_KEPT = 65_536  # terms whose `term_weights` are kept
EXACT_NAME_WEIGHT = 10.0
# A longer query is matched by its rarest words only: they decide the ranking, and every word
# costs a posting list walk (measured on the development set: no loss down to 32).
MAX_QUERY_TERMS = 32
# In a large catalog, a word found in more than COMMON_SHARE of the tools (and in more than
# COMMON_MIN_DOCS of them) is left out of the query, which always keeps its MIN_QUERY_TERMS
# rarest words: its BM25 weight is low, but its long posting list is most of the query's cost (at 1,000,000
# tools: p95 from 12 ms to under 3 ms of CPU, with no loss in finding the development set's
# answers among them). Smaller catalogs, the development set's included, keep every word.
COMMON_SHARE = 0.03
COMMON_MIN_DOCS = 20_000
MIN_QUERY_TERMS = 3
# In a query of at most FUZZY_MAX_TERMS words, a word of letters alone, at least FUZZY_MIN_CHARS
# long (as stemmed), that no tool has is taken for a typing error: it matches the words one edit
# away (a letter added, dropped or changed, or two swapped: `califronia`, `restuarant`), at
# FUZZY_WEIGHT of a word as written; at most FUZZY_MAX_WORDS such words, the longest. A word some
# tool has is never widened, nor one the language knows (bridge.search.analysis.spelled_words: *monkey*
# found `convert_currency` by *money*). Each widened word walks the index's whole word list:
# widening every query's unknown words cost 1 ms at p95 over a million tools, and in a longer
# request they are mostly names and values (`philadelphia`, `15th`) while its other words find
# its tools. On the development set neither rule changed a ranking.
FUZZY_MAX_TERMS = 4
FUZZY_MIN_CHARS = 6
FUZZY_WEIGHT = 0.5
FUZZY_MAX_WORDS = 2
# Two adjacent words of a query written as one (*zip code*: `zipcode`, *pre heat*: `preheat`;
# bridge.search.analysis.AnalyzedQuery.joined) are matched, at this weight, when the catalog uses the
# word (and, in a large catalog, not in more tools than COMMON_SHARE): the catalog's way of writing
# what the request says in two.
JOINED_WEIGHT = 1.0
# A query word's related words (bridge.search.analysis.related_words) that more tools use than the
# word itself are matched at this share of its weight. Measured among 0.2, 0.3 and 0.5
# (docs/search.md, *What is indexed*, related words).
RELATED_WEIGHT = 0.3
# Tools asked for by `lookups`: the lookups of a word in one upstream are few (the search asks
# the match's own upstream first).
LOOKUP_LIMIT = 50
# Tools scoring alike stand in the order of their keys (`tool_key`), not in the order they came
# into the index (which follows the order the upstreams' listings arrived in, until a compaction
# rewrites it): a search reads TIE_MARGIN hits past those it answers and orders them all. A tie
# running on past those is cut among the ones read. Reading and ordering 64 more of a million
# tools' hits costs about 0.1 ms a search; asking the index again for more while the last still
# tied cost 1 ms at the 95th percentile (half the synthetic million's requests tied past 16).
TIE_MARGIN = 64


@dataclass(frozen=True)
class IndexQuery:
    """A free-text search as the index runs it: `main` ranks every tool (by its words, filters
    required); `exact`, when the query quotes tool names, ranks the tools having one of them by
    all their clauses."""

    main: tantivy.Query
    exact: tantivy.Query | None = None
    scored: bool = True  # False for a listing by the filters alone: every tool scores alike


class IndexQueries(IndexStorage):
    """What a search asks of the index (`ToolIndex` is made of this and the writer). The state
    below is set by `ToolIndex.__init__`."""

    # (what the index held when they were read: `_held`, term -> `term_weights`)
    _weights: tuple[tuple[int, int, int], dict[str, float]]

    def _held(self, searcher: tantivy.Searcher) -> tuple[int, int, int]:
        """What tells one state of the index from another for what is read of it: its tools, the
        documents its segments hold (deleted ones too: fewer after a merge), and our commits."""
        return (
            searcher.num_docs,
            searcher.doc_freq("f_ro", "0") + searcher.doc_freq("f_ro", "1"),
            self.commits,
        )

    def term_weights(self, terms: Iterable[str]) -> dict[str, float]:
        """Each term's inverse document frequency over the tools' text, `log(1 + N / (df + 1))`:
        how much a word tells a tool from the others. Kept until the index changes (up to
        WEIGHTS_KEPT terms): the same titles' words are asked again and again. Kept by the count
        of tools alone, they outlived a change of a tool's words, a merge of segments or a
        compaction, none of which changes it."""
        searcher = self._index.searcher()
        count = searcher.num_docs
        held = self._held(searcher)
        kept_held, kept = self._weights
        if kept_held != held or len(kept) > WEIGHTS_KEPT:
            kept = {}
            self._weights = (
                held,
                kept,
            )  # a search in another thread may fill the old one meanwhile
        out = {}
        for term in terms:
            weight = kept.get(term)
            if weight is None:
                weight = kept[term] = math.log(1.0 + count / (searcher.doc_freq("all", term) + 1))
            out[term] = weight
        return out

    def query(
        self,
        analyzed: AnalyzedQuery | None,
        *,
        namespace: str | None = None,
        tags: Sequence[str] | None = None,
        kind: str | None = None,
        read_only: bool | None = None,
        weights: dict[str, float] | None = None,
        exact_weight: float = EXACT_NAME_WEIGHT,
        widen: bool = True,
        among: tantivy.Query | None = None,
    ) -> IndexQuery:
        """The index query of a free-text search: each term in each field, weighted by field and
        by term, whole identifiers against names, filters required. No text: every tool.

        A tool's score is the sum of its matching clauses, as one boolean query would give, but
        asked as two queries: the words alone (plain term clauses, which Tantivy answers with
        block-max WAND), and the few tools whose names the query quotes, scored with every
        clause. The best of both are merged by `search`. `widen=False` reads no word as a
        typing error (each one widened walks the index's word list); `among` (`among()`) limits
        the query to those tools."""
        schema, Q, occur = self.schema, tantivy.Query, tantivy.Occur
        weights = weights or FIELD_WEIGHTS
        words: list[tuple[tantivy.Occur, tantivy.Query]] = []
        named: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if analyzed is not None:
            terms = analyzed.terms
            short = (
                widen and len(terms) <= FUZZY_MAX_TERMS
            )  # as written, before the common words are left out
            informative = len(terms) > MAX_QUERY_TERMS or (
                len(terms) > MIN_QUERY_TERMS and self.num_docs > COMMON_MIN_DOCS
            )
            freq: dict[str, int] = {}
            if short or informative or analyzed.related or analyzed.joined:
                searcher = self._index.searcher()
                freq = {t: searcher.doc_freq("all", t) for t in terms}
            if informative:
                terms = self._informative(terms, freq, searcher.num_docs)
            unknown = [
                t
                for t in terms
                if short
                and not freq[t]
                and len(t) >= FUZZY_MIN_CHARS
                and t.isalpha()
                and t not in analyzed.spelled
            ]
            typos = set(sorted(unknown, key=len, reverse=True)[:FUZZY_MAX_WORDS])
            common = (
                max(COMMON_SHARE * searcher.num_docs, COMMON_MIN_DOCS) if informative else math.inf
            )
            if analyzed.related:
                terms = {**terms, **self._related(terms, analyzed.related, freq, searcher, common)}
            if (
                analyzed.joined
            ):  # those the catalog uses, but not too common to matter (as the query's own words)
                terms = {
                    **terms,
                    **{
                        t: JOINED_WEIGHT
                        for t in analyzed.joined
                        if t not in terms and 0 < searcher.doc_freq("all", t) <= common
                    },
                }
            for term, term_weight in terms.items():
                for name, field_weight in weights.items():
                    if field_weight > 0:
                        weight = field_weight * term_weight
                        if term in typos:
                            clause = Q.fuzzy_term_query(
                                schema, name, term, distance=1, transposition_cost_one=True
                            )
                            weight *= FUZZY_WEIGHT
                        else:
                            clause = Q.term_query(schema, name, term)
                        words.append(
                            (
                                occur.Should,
                                clause if weight == 1.0 else Q.boost_query(clause, weight),
                            )
                        )
            for ident in analyzed.identifiers:
                named.append(
                    (
                        occur.Should,
                        Q.boost_query(Q.term_query(schema, "exact", ident), exact_weight),
                    )
                )
        must = self._filters(namespace, tags, kind, read_only)
        if among is not None:
            must.append((occur.Must, among))

        def filtered(text: tantivy.Query) -> tantivy.Query:
            return Q.boolean_query([(occur.Must, text), *must]) if must else text

        if not named:
            return (
                IndexQuery(filtered(Q.boolean_query(words)))
                if words
                else IndexQuery(filtered(Q.all_query()), scored=False)
            )
        # the quoted names' tools: required to match one name, scored by every clause
        quoted = Q.const_score_query(Q.boolean_query(named), 0.0)
        exact = filtered(Q.boolean_query([(occur.Must, quoted), *named, *words]))
        if not words:
            return IndexQuery(exact)
        return IndexQuery(filtered(Q.boolean_query(words)), exact)

    def _filters(
        self,
        namespace: str | None,
        tags: Sequence[str] | None,
        kind: str | None,
        read_only: bool | None,
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """The clauses a search's filters require."""
        schema, Q, must = self.schema, tantivy.Query, tantivy.Occur.Must
        clauses = [(must, Q.term_query(schema, "f_ns", namespace))] if namespace is not None else []
        clauses += [(must, Q.term_query(schema, "f_tag", tag)) for tag in tags or ()]
        if kind is not None:
            clauses.append((must, Q.term_query(schema, "f_kind", kind)))
        if read_only is not None:
            clauses.append((must, Q.term_query(schema, "f_ro", "1" if read_only else "0")))
        return clauses

    def lookups(
        self,
        words: Iterable[str],
        *,
        namespace: str | None = None,
        tags: Sequence[str] | None = None,
        kind: str | None = None,
        read_only: bool | None = None,
        limit: int | None = None,
    ) -> list[str]:
        """The tools that look up one of these stemmed words by name (`IndexedTool.looks_up`),
        those looking up more of them first, within the filters: at most `limit` tool ids
        (LOOKUP_LIMIT)."""
        Q, should = tantivy.Query, tantivy.Occur.Should
        clauses = [(should, Q.term_query(self.schema, "f_lookup", word)) for word in words]
        if not clauses or (limit is not None and limit < 1):  # Tantivy panics on a limit of 0
            return []
        query = Q.boolean_query(clauses)
        must = self._filters(namespace, tags, kind, read_only)
        if must:
            query = Q.boolean_query([(tantivy.Occur.Must, query), *must])
        return [
            tool_id
            for tool_id, _ in self.search(
                IndexQuery(query), LOOKUP_LIMIT if limit is None else limit
            )
        ]

    def among(self, tool_ids: Iterable[str]) -> tantivy.Query:
        """A filter for `query(among=...)`: these tools only, scoring nothing. Each tool is one
        term lookup (Tantivy's term-set query was 5 times slower over 3,000 tools)."""
        Q, should = tantivy.Query, tantivy.Occur.Should
        ids = [(should, Q.term_query(self.schema, "tool_id", tool_id)) for tool_id in tool_ids]
        return Q.const_score_query(Q.boolean_query(ids), 0.0)

    @staticmethod
    def _related(
        terms: dict[str, float],
        related: dict[str, tuple[str, ...]],
        freq: dict[str, int],
        searcher: tantivy.Searcher,
        common: float,
    ) -> dict[str, float]:
        """The related words to match (`AnalyzedQuery.related`) of the query's `terms`: those in
        more of the tools than the term itself (the catalog's way of saying it, not a rarer
        look-alike), and no more than `common` of them, each at RELATED_WEIGHT of its term's weight."""
        extra: dict[str, float] = {}
        for term, others in related.items():
            if term not in terms:  # left out as too common
                continue
            for other in others:
                if (
                    other not in terms
                    and other not in extra
                    and freq[term] < searcher.doc_freq("all", other) <= common
                ):
                    extra[other] = RELATED_WEIGHT * terms[term]
        return extra

    @staticmethod
    def _informative(
        terms: dict[str, float], freq: dict[str, int], num_docs: int
    ) -> dict[str, float]:
        """The query's terms without those too common to matter (see COMMON_SHARE), at most
        MAX_QUERY_TERMS of them, the rarest (`freq`: each term's document frequency)."""
        common = max(COMMON_SHARE * num_docs, COMMON_MIN_DOCS)
        rarest = sorted(terms, key=freq.__getitem__)[:MAX_QUERY_TERMS]
        kept = [t for i, t in enumerate(rarest) if i < MIN_QUERY_TERMS or freq[t] <= common]
        return {t: terms[t] for t in kept}

    def search(self, query: IndexQuery, limit: int, offset: int = 0) -> list[tuple[str, float]]:
        """(tool_id, score) of the best `limit` documents after `offset` (none for a limit
        under 1, which Tantivy would answer by panicking), best first, those scoring alike by
        their keys (TIE_MARGIN); a listing (no words) in the index's order. Pages asked by
        `offset` follow on from one another while no tie runs on past TIE_MARGIN."""
        if limit < 1:
            return []
        searcher = self._index.searcher()
        end = offset + limit
        if not query.scored:
            hits = searcher.search(query.main, limit=limit, offset=offset, count=False).hits
            addresses = [address for _, address in hits]
            return list(
                zip(
                    self._tool_ids(searcher, addresses),
                    (float(score) for score, _ in hits),
                    strict=True,
                )
            )
        hits = self._best(searcher, query, end + TIE_MARGIN)
        keys = searcher.fast_field_values("key", [address for _, address in hits])
        ranked = sorted(
            zip(hits, keys, strict=True),
            key=lambda hit: (-hit[0][0], hit[1] if hit[1] is not None else -1),
        )[offset:end]
        addresses = [address for (_, address), _ in ranked]
        return list(
            zip(
                self._tool_ids(searcher, addresses, [key for _, key in ranked]),
                (float(score) for (score, _), _ in ranked),
                strict=True,
            )
        )

    @staticmethod
    def _best(searcher: tantivy.Searcher, query: IndexQuery, limit: int) -> list[tuple[float, Any]]:
        """(score, address) of the best `limit` documents, as Tantivy orders them."""
        if query.exact is None:
            return searcher.search(query.main, limit=limit, count=False).hits
        # a tool matching a quoted name scores at least as much in `exact` as in `main`
        best: dict[tuple[int, int], tuple[float, Any]] = {}
        for part in (query.main, query.exact):
            for score, address in searcher.search(part, limit=limit, count=False).hits:
                key = (address.segment_ord, address.doc)
                if key not in best or score > best[key][0]:
                    best[key] = (score, address)
        return [
            hit for _, hit in sorted(best.items(), key=lambda item: (-item[1][0], item[0]))[:limit]
        ]

    def _tool_ids(
        self, searcher: tantivy.Searcher, addresses: list[Any], keys: list[int | None] | None = None
    ) -> list[str]:
        """The tool ids of these hits: by their keys (read here unless given), or (a key two ids
        share) their stored id."""
        if not addresses:
            return []
        by_key = self._by_key
        found: list[Any] = (
            keys if keys is not None else searcher.fast_field_values("key", addresses)
        )
        ids = [by_key.get(key) if key is not None else None for key in found]
        return [
            tool_id if tool_id is not None else searcher.doc(address)["tool_id"][0]
            for tool_id, address in zip(ids, addresses, strict=True)
        ]
