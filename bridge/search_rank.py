"""Text side of tool search: splitting names into words, reading a query (conversational
filler weighed down, identifiers kept whole), the reranking of the index's candidates, and the
short search hint derived for tools whose upstream gave none. Pure functions, no index."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import tantivy

from bridge.model import ToolDeclaration

__all__ = [
    "ANALYZER_NAME",
    "AnalyzedQuery",
    "FILLER_WORDS",
    "RerankWeights",
    "analyzer",
    "analyze_query",
    "derive_search_hint",
    "identifier_words",
    "idf_of",
    "name_tokens",
    "rerank",
    "split_identifiers",
    "stems",
]

# Name of the text analyzer registered on the index: simple tokenizer, long tokens dropped,
# lower case, ASCII folding, English stemming. No stop-word filter: a tool named `get`,
# `who_is` or `all` stays findable by every one of its words.
ANALYZER_NAME = "bridge_text"

_NAME_SPLIT = re.compile(r"[_.\-/:\s]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.\-/][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_MARKUP = re.compile(r"[`*_#>\[\]]+|\((?:https?://)[^)]*\)")

# Words that carry the request's tone, not its subject. In a query they weigh little (never
# nothing: a query made only of them still matches by them); in the index they stay.
FILLER_WORDS = frozenset(
    """a about above after again all also am an and any are as at be because been before being
    below between both but by can cannot could did do does doing done down during each else even
    ever few for from further had has have having he her here hers herself him himself his how i
    if in into is it its itself just kindly let lets like may me might more most must my myself
    need needs no nor not now of off on once only or other ought our ours ourselves out over own
    please same shall she should so some such than thank thanks that the their theirs them
    themselves then there these they this those through to too under until up us very want wanted
    wants was we were what whatever when where whether which while who whom whose why will with
    would yes yet you your yours yourself yourselves hi hello hey ok okay sure able assist
    assistance really actually currently basically something anything someone somebody thing
    things way lot bit know tell give let's i'd i'm i've i'll you're can't don't""".split()
)


def name_tokens(name: str) -> list[str]:
    """`getUserById`, `get_user_by_id` and `users/get-by.id` all give their lower-case words."""
    return [t.lower() for t in _NAME_SPLIT.split(name) if t]


def split_identifiers(text: str) -> str:
    """Text with camelCase words split (`getUserById` -> `get User By Id`); the index's tokenizer
    already splits on `_ . - /`."""
    return _CAMEL.sub(" ", text)


@lru_cache(maxsize=1)
def analyzer() -> tantivy.TextAnalyzer:
    """The analyzer of every text field, also used to stem query words the same way."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def stems(text: str) -> list[str]:
    """Index terms of a text: split identifiers, tokenize, fold, stem."""
    return analyzer().analyze(split_identifiers(text))


@lru_cache(maxsize=1)
def _filler_stems() -> frozenset[str]:
    out: set[str] = set()
    for word in FILLER_WORDS:
        out.update(analyzer().analyze(word))
    return frozenset(out)


def identifier_words(text: str) -> list[str]:
    """Words of a query written like a tool name (`lawyer.find_nearby`, `getUserById`), lower case."""
    return list(dict.fromkeys(m.group(0).lower().strip("._-/") for m in _IDENTIFIER.finditer(text)))


@dataclass
class AnalyzedQuery:
    """A free-text query as the index reads it: terms with their weight (filler weighs
    `filler_weight`), and identifier-like words matched whole against tool names."""

    text: str
    terms: dict[str, float] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)

    @property
    def content_terms(self) -> set[str]:
        return {t for t, w in self.terms.items() if w >= 1.0}

    @property
    def empty(self) -> bool:
        return not self.terms and not self.identifiers


def analyze_query(text: str, *, filler_weight: float = 0.1, max_terms: int = 64) -> AnalyzedQuery:
    """Stem the query's words; pure numbers are values, not subjects, and are dropped; repeated
    words count once. Very long queries (whole conversations) keep their first `max_terms`
    distinct content words, the later ones being more often quotes and details."""
    filler = _filler_stems()
    terms: dict[str, float] = {}
    content = 0
    for term in stems(text):
        if term.isdigit() or term in terms:
            continue
        is_filler = term in filler or len(term) < 2
        if not is_filler:
            if content >= max_terms:
                continue
            content += 1
        terms[term] = filler_weight if is_filler else 1.0
    return AnalyzedQuery(text=text, terms=terms, identifiers=identifier_words(text))


@dataclass(frozen=True)
class RerankWeights:
    """How the reranking step mixes its signals; each is in [0, 1] before weighting."""

    bm25: float = 1.0  # index score over the best candidate's
    name_coverage: float = 0.5  # share of the tool name's words the query mentions
    query_coverage: float = 0.3  # share of the query's content words (by rarity) the tool has


def rerank(
    query: AnalyzedQuery,
    candidates: Sequence[tuple[str, float]],
    name_stems: dict[str, set[str]],
    doc_stems: dict[str, set[str]],
    idf: dict[str, float],
    weights: RerankWeights = RerankWeights(),
) -> list[tuple[str, float]]:
    """Reorder `(tool_id, index score)` candidates. `name_stems`/`doc_stems` give each candidate's
    name words and all its words (stemmed); `idf` the rarity of each query term."""
    if not candidates:
        return []
    top = max(score for _, score in candidates) or 1.0
    content = query.content_terms or set(query.terms)
    total_idf = sum(idf.get(t, 1.0) for t in content) or 1.0
    out: list[tuple[str, float]] = []
    for tool_id, score in candidates:
        names = name_stems.get(tool_id, set())
        words = doc_stems.get(tool_id, set())
        name_cov = len(names & content) / len(names) if names else 0.0
        query_cov = sum(idf.get(t, 1.0) for t in content & words) / total_idf
        final = weights.bm25 * score / top + weights.name_coverage * name_cov + weights.query_coverage * query_cov
        out.append((tool_id, final))
    out.sort(key=lambda item: -item[1])
    return out


def idf_of(doc_freq: int, num_docs: int) -> float:
    """BM25's inverse document frequency."""
    return math.log(1.0 + (num_docs - doc_freq + 0.5) / (doc_freq + 0.5))


# ---------------------------------------------------------------- search hints

_HINT_MIN, _HINT_MAX = 3, 10


def _words(text: str) -> list[str]:
    return [w for w in _MARKUP.sub(" ", text).split() if any(c.isalnum() for c in w)]


def _first_sentence(text: str) -> str:
    text = text.strip()
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def derive_search_hint(decl: ToolDeclaration) -> str:
    """The tool's search hint: the upstream's own when it gave one, else 3-10 words from its
    title or the first sentence of its description, padded with its name's words when short."""
    if decl.search_hint and decl.search_hint.strip():
        return decl.search_hint.strip()
    words: list[str] = []
    for source in (decl.title or "", _first_sentence(decl.description)):
        words = _words(source)
        if len(words) >= _HINT_MIN:
            break
    words = [w.rstrip(".,;:") for w in words[:_HINT_MAX]]
    if len(words) < _HINT_MIN:
        extra = name_tokens(decl.native_name or decl.name)
        words = list(dict.fromkeys([*words, *extra]))[:_HINT_MAX]
    padding: Iterable[str] = (decl.namespace or "", "tool")
    for word in padding:
        if len(words) >= _HINT_MIN:
            break
        if word and word not in words:
            words.append(word)
    return " ".join(words)
