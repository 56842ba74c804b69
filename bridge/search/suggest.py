"""The suggestions of a free-text search that no tool matched by its words: the tools nearest to
it in meaning, by the static table's cosine, among the few it could have matched."""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge.model import ToolDeclaration
from bridge.search.analysis import AnalyzedQuery
from bridge.search.stages import RankingStages
from bridge.surface import Surface

__all__ = ["SUGGESTIONS", "SUGGEST_COSINE", "SUGGEST_POOL", "suggestions"]


# A free-text search that no tool matches by its words answers, beside its empty `matches`, the
# SUGGESTIONS tools nearest to it in meaning (`suggestions`, by the static table's cosine) among
# the tools it could have matched, when those are at most SUGGEST_POOL (gathering them and their
# vectors costs about 3.5 µs a tool: 7 ms for 2,000; a larger catalog has words for almost any
# request), and with a cosine of at least SUGGEST_COSINE: over the demo's and the development
# set's tools, requests for no tool reach cosines as high as requests a tool answers (0.4-0.6),
# so the floor only drops the nearest of unrelated words (docs/search.md, The answer).
SUGGESTIONS = 3
SUGGEST_POOL = 2_000
SUGGEST_COSINE = 0.25


def suggestions(
    search: RankingStages,
    analyzed: AnalyzedQuery,
    surface: Surface,
    filters: dict[str, Any],
    filtered: bool,
    limit: int,
    fold: bool,
) -> list[tuple[ToolDeclaration, float, list[ToolDeclaration]]]:
    """For a free-text search no tool matched: the `limit` tools nearest to the request in
    meaning (the static table's cosine, at least SUGGEST_COSINE), best first, among the
    visible tools passing the filters (`filtered`: some are set), with their alternatives
    folded as in a ranking. None when the surface shows more than SUGGEST_POOL tools and
    more than SUGGEST_POOL of the catalog's pass the filters, or without the static table
    (`semantic: off` or `model`)."""
    stage = next((stage for stage in search._stages if stage.encoder.cheap), None)
    if stage is None:
        return []
    shown = surface.shown(SUGGEST_POOL)
    if shown is not None:  # a surface showing few tools, of however large a catalog
        decls = [
            decl
            for tool_id in shown
            if (decl := search.catalog.get(tool_id)) is not None and search._passes(decl, filters)
        ]
    elif not filtered:
        return []  # known too many without asking the index
    else:
        hits = search.index.search(
            search.index.query(None, weights=search.field_weights, **filters),
            limit=SUGGEST_POOL + 1,
        )
        if len(hits) > SUGGEST_POOL:
            return []
        decls = [
            decl
            for tool_id, _ in hits
            if (decl := search._shown_hit(tool_id, surface, filters)) is not None
        ]
    tools = stage.vectors(decls) if decls else None
    if tools is None:
        return []
    cosine = tools @ stage.query_vector(analyzed.text)
    order = [i for i in np.argsort(-cosine, kind="stable") if cosine[i] >= SUGGEST_COSINE]
    ranked = [(decls[i], float(cosine[i])) for i in order]
    if not fold:
        return [(decl, score, []) for decl, score in ranked[:limit]]
    return search._fold(ranked, tools[order], stage.encoder.same_tool_cosine)[:limit]
