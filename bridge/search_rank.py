"""Text side of tool search: splitting names into words, reading a query (conversational
filler set aside, identifiers kept whole), and the short search hint derived for tools whose
upstream gave none. Pure functions, no index."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import tantivy

from bridge.model import ToolDeclaration

__all__ = [
    "ANALYZER_NAME",
    "AnalyzedQuery",
    "FILLER_WORDS",
    "analyzer",
    "analyze_query",
    "derive_search_hint",
    "identifier_words",
    "name_tokens",
    "split_identifiers",
    "stems",
]

# Name of the text analyzer registered on the index: simple tokenizer, long tokens dropped,
# lower case, ASCII folding, English stemming. No stop-word filter: a tool named `get`,
# `who_is` or `all` stays findable by every one of its words.
ANALYZER_NAME = "bridge_text"

_NAME_SPLIT = re.compile(r"[_.\-/:\s]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# `[a-z0-9][A-Z]` or `[A-Z][A-Z][a-z]`, written to start at capitals only (four times faster)
_CAMEL_PRESENT = re.compile(r"[A-Z](?:(?<=[a-z0-9][A-Z])|[A-Z][a-z])")
_CAMEL_LOWER_UPPER = re.compile(r"([a-z0-9])(?=[A-Z])")
_CAMEL_ACRONYM = re.compile(r"([A-Z])(?=[A-Z][a-z])")
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.\-/][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_MARKUP = re.compile(r"[`*#>\[\]]+|\((?:https?://)[^)]*\)")

# Words that carry the request's tone, not its subject. A query is matched without them (unless
# it has nothing else: then by them); the index keeps every word.
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
    if not _CAMEL_PRESENT.search(text):
        return text
    return _CAMEL_ACRONYM.sub(r"\1 ", _CAMEL_LOWER_UPPER.sub(r"\1 ", text))


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
    """A free-text query as the index reads it: stemmed terms with their weight, and the words
    written like tool names, matched whole against names."""

    text: str
    terms: dict[str, float] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.terms and not self.identifiers


def analyze_query(text: str, *, max_terms: int = 128) -> AnalyzedQuery:
    """Stem the query's words and set aside conversational filler (kept when nothing else is
    left); pure numbers are argument values, not subjects, and are dropped; repeated words count
    once. A very long query (a whole conversation) keeps its first `max_terms` distinct words
    (the index then matches by the rarest of them)."""
    filler = _filler_stems()
    content: dict[str, float] = {}
    fill: dict[str, float] = {}
    for term in stems(text):
        if term.isdigit() or term in content or term in fill:
            continue
        if term in filler or len(term) < 2:
            fill[term] = 1.0
        elif len(content) < max_terms:
            content[term] = 1.0
    return AnalyzedQuery(text=text, terms=content or fill, identifiers=identifier_words(text))


# ---------------------------------------------------------------- search hints

_HINT_MIN, _HINT_MAX = 3, 10


def _words(text: str) -> list[str]:
    return [w for w in _MARKUP.sub(" ", text).split() if any(c.isalnum() for c in w)]


def _first_sentence(text: str) -> str:
    text = text.strip()
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def derive_search_hint(decl: ToolDeclaration) -> str:
    """The tool's search hint: the upstream's own when it gave one, else 3-10 words from its
    title or the first sentence of its description, completed with its name's words (then its
    namespace) when that is shorter than three words."""
    if decl.search_hint and decl.search_hint.strip():
        return decl.search_hint.strip()
    candidates = [_words(decl.title or ""), _words(_first_sentence(decl.description))]
    chosen = next((c for c in candidates if len(c) >= _HINT_MIN), max(candidates, key=len))
    words = [w.rstrip(".,;:") for w in chosen[:_HINT_MAX]]
    seen = {w.lower() for w in words}
    if len(words) < _HINT_MIN:
        for word in name_tokens(decl.native_name or decl.name):
            if len(words) < _HINT_MAX and word not in seen:
                seen.add(word)
                words.append(word)
    for word in (decl.namespace or "", "tool"):
        if len(words) < _HINT_MIN and word and word.lower() not in seen:
            seen.add(word.lower())
            words.append(word)
    return " ".join(words)
