"""The cover of a request asking for several things (bridge.search.analysis.query_parts): each
part's keyword score of the candidates, and the order that gives the first places to the tools
answering a part no place above answers yet."""

from __future__ import annotations

import numpy as np

from bridge.search.analysis import AnalyzedQuery
from bridge.search.index import ToolIndex

__all__ = ["COVER_PLACES", "COVER_WEIGHT", "cover_order", "over_best", "part_scores"]

# A request asking for several things (bridge.search.analysis.query_parts) is answered so that its
# parts are covered: the ranking's first places go to the tools that answer a part no place above
# answers yet (`cover_order`). The weight of that cover against the whole request's score, chosen
# among 0.3, 0.5 and 0.7 on the development set (docs/search.md, Quality).
COVER_WEIGHT = 0.5
# The places the cover gives out one by one, whatever the search's limit (so its first matches do not
# depend on it); the page's other candidates follow by their score after them. Ten is what a search
# answers by default; giving out all 50 places costs 0.3-0.5 ms more on a request of several parts.
COVER_PLACES = 10


def over_best(scores: np.ndarray) -> np.ndarray:
    """Keyword scores over the best of them (all zero when none is above zero)."""
    return scores / max(float(scores.max(initial=0.0)), 1e-9)


def part_scores(
    index: ToolIndex,
    parts: list[AnalyzedQuery],
    tool_ids: list[str],
    weights: dict[str, float] | None = None,
) -> list[dict[str, float]]:
    """Each part's keyword score of each of these tools that has one of its words (the index
    query of the part, limited to the tools; no word widened as a typing error)."""
    among = index.among(tool_ids)
    return [
        dict(
            index.search(
                index.query(part, weights=weights, widen=False, among=among), limit=len(tool_ids)
            )
        )
        for part in parts
    ]


def cover_order(
    overall: np.ndarray, parts: np.ndarray, weight: float = COVER_WEIGHT, places: int | None = None
) -> tuple[list[int], list[float]]:
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
