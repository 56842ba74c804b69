"""Text side of tool search: splitting names into words, reading a query (conversational
filler set aside, identifiers kept whole), the description text an upstream's tools share, and
the short search hint derived for tools whose upstream gave none. No index."""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from bridge.model import ToolDeclaration
from bridge.search.static import STATIC_TABLE

__all__ = [
    "ANALYZER_NAME",
    "AnalyzedQuery",
    "FILLER_WORDS",
    "MAX_QUERY_CHARS",
    "SharedText",
    "analyzer",
    "shared_runs",
    "analyze_query",
    "query_parts",
    "related_words",
    "term_stems",
    "title_terms",
    "derive_search_hint",
    "identifier_words",
    "input_heads",
    "looked_up",
    "name_tokens",
    "searched_description",
    "split_identifiers",
    "spelled_words",
    "cjk_pairs",
]

log = logging.getLogger("bridge.search")

# Name of the text analyzer registered on the index: simple tokenizer, long tokens dropped,
# lower case, ASCII folding, English stemming. No stop-word filter: a tool named `get`,
# `who_is` or `all` stays findable by every one of its words.
ANALYZER_NAME = "bridge_text"

_NAME_SPLIT = re.compile(r"[_.\-/:\s]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# `[a-z0-9][A-Z]` or `[A-Z][A-Z][a-z]`, written to start at capitals only (four times faster)
_CAMEL_PRESENT = re.compile(r"[A-Z](?:(?<=[a-z0-9][A-Z])|[A-Z][a-z])")
_CAMEL_LOWER_UPPER = re.compile(r"([a-z0-9])(?=[A-Z])")
_CAMEL_ACRONYM = re.compile(r"([A-Z])(?=[A-Z][a-z])")
# Tried only where a word starts, without backtracking: a run of letters with no separator fails
# once, not once for each of its letters (a 20,000-letter query took 12 s).
_IDENTIFIER = re.compile(r"(?<![A-Za-z0-9])(?:[A-Za-z][A-Za-z0-9]*+(?:[_.\-/][A-Za-z0-9]++)+|[a-z]++[A-Z][A-Za-z0-9]*+)")
# Chinese and Japanese end a sentence with a full-width mark and no space after it.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n")
_MARKUP = re.compile(r"[`*#>\[\]]+|\((?:https?://)[^)]*\)")
# Chinese and Japanese write no space between words, and a Korean word carries its particles
# (날씨를, 날씨는): a run of these scripts is indexed and searched as its overlapping pairs of
# characters (天气预报 as 天气 气预 预报), as CJK analyzers do. Han with its extensions and
# compatibility forms, kana (not the middle dot) and Hangul syllables.
_CJK_RUN = re.compile("[\u3005\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                      "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]+")

# Words that carry the request's tone, not its subject. A query is matched without them (unless
# it has nothing else: then by them); the index keeps every word. The last two lines are the
# connectives of a conversation's later turns ("Alright, go ahead and afterwards..."): measured
# +0.1 recall@5 on the development set (both halves) and +0.5 nDCG@10 on the conversation turns.
# A query word is filler as written (lower case), or as an inflection of a listed base form
# (`needed`, `liked`, `ways`: its stem is a listed word), never by its stem alone: the stemmer
# makes `current`, `final`, `additional`, `basic` and `actual` of `currently`, `finally`,
# `additionally`, `basically` and `actually`, and `doe` (John Doe) of `does` (_filler_forms).
# Measured against matching by stem: keywords alone +0.5 recall@1, +0.2 recall@5, +0.3 nDCG@10 on
# the development set's odd half (even half: +0.1 / +0.3 / +0.1), conversation turns unchanged.
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
    things way lot bit know tell give let's i'd i'm i've i'll you're can't don't
    ahead alright anyway afterwards awesome great oops perfect proceed meanwhile additionally
    finally moreover furthermore""".split()
)


def name_tokens(name: str) -> list[str]:
    """`getUserById`, `get_user_by_id` and `users/get-by.id` all give their lower-case words."""
    return [t.lower() for t in _NAME_SPLIT.split(name) if t]


@lru_cache(maxsize=65536)
def name_words(name: str) -> str:
    """`name_tokens` joined by spaces, kept for the last 65,536 names: the same parameter and
    function names recur across a catalog's tools (a million tools ask about 12 million times)."""
    return " ".join(name_tokens(name))


def split_identifiers(text: str) -> str:
    """Text with camelCase words split (`getUserById` -> `get User By Id`); the index's tokenizer
    already splits on `_ . - /`."""
    if not _CAMEL_PRESENT.search(text):
        return text
    return _CAMEL_ACRONYM.sub(r"\1 ", _CAMEL_LOWER_UPPER.sub(r"\1 ", text))


def _pairs(match: re.Match[str]) -> str:
    run = match.group(0)
    return " " + (run if len(run) < 3 else " ".join(run[i:i + 2] for i in range(len(run) - 1))) + " "


def cjk_pairs(text: str) -> str:
    """`text` with each run of CJK characters (`_CJK_RUN`) written as its overlapping pairs of
    characters, set apart by spaces (`mbox系统` -> `mbox 系统`); a run of one or two stays as
    it is. Text without them is returned as it is, ASCII text without a look."""
    return text if text.isascii() else _CJK_RUN.sub(_pairs, text)


def _analyzer(stem: bool) -> tantivy.TextAnalyzer:
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    return (builder.filter(tantivy.Filter.stemmer("english")) if stem else builder).build()


@lru_cache(maxsize=1)
def analyzer() -> tantivy.TextAnalyzer:
    """The analyzer of every text field, also used to stem query words the same way."""
    return _analyzer(stem=True)


@lru_cache(maxsize=1)
def _word_analyzer() -> tantivy.TextAnalyzer:
    """`analyzer()` without its stemmer: a query's words as written, lower case and folded."""
    return _analyzer(stem=False)


@lru_cache(maxsize=65536)
def term_stems(word: str) -> tuple[str, ...]:
    """The index terms of one word of `_word_analyzer()` (the stemmer works word by word; one
    term, unless folding made two words of it: `½` is `1/2`)."""
    return tuple(analyzer().analyze(word))


RELATED_TABLE = Path(__file__).with_name("data") / "minilm-related.npz"
# A query of more content words than this is not expanded: its rarest words decide its ranking.
RELATED_MAX_TERMS = 32


@lru_cache(maxsize=1)
def related_words() -> dict[str, tuple[str, ...]]:
    """Each whole word of the static table's vocabulary with the words nearest to it by the
    table's rows (`bridge.search.static.related_arrays`): *folder* with *directory*, *car* with
    *vehicle* and *automobile*. Empty, with a warning, when the shipped file cannot be read."""
    try:
        with np.load(RELATED_TABLE, allow_pickle=False) as data:
            words, related = data["words"], data["related"]
    except (OSError, KeyError, ValueError) as exc:
        log.warning("related words of query expansion cannot be read from %s (%s); queries are not expanded",
                    RELATED_TABLE, exc)
        return {}
    return {str(word): tuple(str(r) for r in row if r) for word, row in zip(words.tolist(), related.tolist(), strict=True)}


@lru_cache(maxsize=1)
def spelled_words() -> frozenset[str]:
    """The whole words of the static table's vocabulary (BERT's uncased WordPiece: 24,694 words
    of English text, names and numbers, lower case): a query word among them is taken as
    written, never as a typing error (`AnalyzedQuery.spelled`). *monkey* is a word, not a
    misspelt *money*; *califronia* is not. Empty, with a warning, when the shipped table cannot
    be read (every unknown word may then be a typing error, as before)."""
    try:
        with np.load(STATIC_TABLE, allow_pickle=False) as data:
            vocab = data["vocab"].tolist()
    except (OSError, KeyError, ValueError) as exc:
        log.warning("the vocabulary of typing errors cannot be read from %s (%s); every unknown word may be one",
                    STATIC_TABLE, exc)
        return frozenset()
    return frozenset(str(token) for token in vocab if not token.startswith(("##", "[")))


# A capitalised word other than a sentence's first is a name (*Washington*, *Santa Barbara*): its
# nearest words are other names, not other ways to say it.
_CAPITALISED = re.compile(r"(^|[.!?\n])?\s*\b([A-Z][a-z]+)\b")  # group 1: what opens a sentence


def _names(text: str) -> set[str]:
    """The query's capitalised words that do not open a sentence, lower case."""
    return {m.group(2).lower() for m in _CAPITALISED.finditer(_squeeze_space(text)) if m.group(1) is None}


_SPACE_RUN = re.compile(r"\s{2,}")


def _squeeze_space(text: str) -> str:
    """`text` with each run of white space made one character: a line break when the run holds
    one, else a space. The patterns that look past white space (`\\s*` before a word) then try
    each place once; over a run of 20,000 spaces they took seconds."""
    return _SPACE_RUN.sub(lambda m: "\n" if "\n" in m.group(0) else " ", text)


@lru_cache(maxsize=1)
def _filler_forms() -> tuple[frozenset[str], frozenset[str]]:
    """(the filler words as the query's words are read, the stems of those that are their own
    stem: a base form whose inflections are filler too)."""
    words: set[str] = set()
    for word in FILLER_WORDS:
        words.update(_word_analyzer().analyze(word))
    return frozenset(words), frozenset(w for w in words if term_stems(w) == (w,))


def identifier_words(text: str) -> list[str]:
    """Words of a query written like a tool name (`lawyer.find_nearby`, `getUserById`), lower case."""
    return list(dict.fromkeys(m.group(0).lower().strip("._-/") for m in _IDENTIFIER.finditer(text)))


# The longest query the frontends take (REST `q`, MCP `search_tools`, `bridge search`); a longer
# one given to `analyze_query` directly is read by its beginning. About 2,500 words: far more than
# a request, or the turns of a conversation that tell what it needs, and its first 128 distinct
# words decide anyway.
MAX_QUERY_CHARS = 16_384


# A request names the file it means (*show me report.md*, *search server.log*); the tools say
# *file*. A word with one of these extensions adds the word *file* to a query that has content
# words. Only the start of a run of name characters is tried, and the run once (possessive): a
# long run without a dot fails in one pass.
_FILE_NAME = re.compile(
    r"(?<![\w.\-])[\w\-]++\.(?:txt|md|log|csv|tsv|json|ya?ml|xml|html?|pdf|docx?|xlsx?|pptx?|py|js|ts|java|cpp|"
    r"rb|go|sh|sql|ini|cfg|conf|toml|zip|gz|tar|png|jpe?g|gif|svg|mp3|mp4|wav|bak|tmp|dat)\b",
    re.IGNORECASE,
)


# A file the request names by its name and extension (*quarterly.txt*) is an argument value, as a
# number is: its words tell which file, not which tool (*show me what's in quarterly.txt* is no
# request for `quarterly_earnings`). Words said only in such names weigh FILE_NAME_WEIGHT of a
# word in the keyword query, and the semantic stage embeds each such name as the word *file*
# (`meaning_text`).
FILE_NAME_WEIGHT = 0.25


def meaning_text(text: str) -> str:
    """A request as the semantic stage embeds it: each file it names by name and extension read
    as the word *file*."""
    return _FILE_NAME.sub("file", text)


@dataclass
class AnalyzedQuery:
    """A free-text query as the index reads it: stemmed terms with their weight, and the words
    written like tool names, matched whole against names."""

    text: str
    terms: dict[str, float] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)
    # a term's related words (`related_words`), as terms: the index matches those the catalog
    # uses more often than the term itself, at a lower weight
    related: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # two adjacent content words written as one (*zip code*: `zipcod`), as terms: the index
    # matches those the catalog uses
    joined: tuple[str, ...] = ()
    # the terms of words the language knows (`spelled_words`): never read as typing errors
    spelled: frozenset[str] = frozenset()
    # the query is filler alone (*ok thanks*): `identifiers` are the names it may mean (`filler_names`)
    filler: bool = False

    @property
    def empty(self) -> bool:
        return not self.terms and not self.identifiers


def _query_words(text: str) -> list[str]:
    """A query's words as the index's documents are read (camelCase split, CJK runs as pairs),
    lower case and folded, not stemmed."""
    return _word_analyzer().analyze(cjk_pairs(split_identifiers(text)))


# A query of filler alone (*ok thanks*, *yes please do that*) asks for nothing a description
# says: its words are in most descriptions and parameters, and matched there they answered a tool
# at random (*ok* found the tool with a parameter `missing_ok`). It is matched against whole names
# only: a run of up to FILLER_NAME_WORDS of its first FILLER_NAME_READ words, written as one name
# (`who`, `who_is`, `whoIs`, `who-is`), as a query word written like a tool name is.
FILLER_NAME_WORDS = 3
FILLER_NAME_READ = 8
_NAME_JOINS = ("", "_", "-")


def filler_names(words: Sequence[str]) -> list[str]:
    """The whole names a query of filler alone may mean (`FILLER_NAME_WORDS`), lower case."""
    words = words[:FILLER_NAME_READ]
    runs = (words[i:i + n] for n in range(1, FILLER_NAME_WORDS + 1) for i in range(len(words) - n + 1))
    return list(dict.fromkeys(join.join(run) for run in runs for join in (_NAME_JOINS if len(run) > 1 else ("",))))


def _set_aside(word: str, term: str) -> bool:
    """Whether a query's word (as read, and one of its terms) is filler, a number or a single
    character: no content word."""
    filler, bases = _filler_forms()
    return term.isdigit() or word in filler or term in bases or len(term) < 2


def analyze_query(text: str, *, max_terms: int = 128) -> AnalyzedQuery:
    """Stem the query's words and set aside conversational filler and pure numbers (argument
    values, not subjects); numbers are kept when nothing else is left ("404"), and a query of
    filler alone is matched against whole names only (`filler_names`); repeated words count
    once. A content word the language knows (`spelled_words`) is never read as a typing error.
    A very long query (a whole conversation) is read by its first MAX_QUERY_CHARS characters
    and keeps its first `max_terms` distinct words (the index then matches by the rarest of
    them). A query of at most RELATED_MAX_TERMS content words also gets the related
    words of each (`related_words`), but for names (`_names`), and each two adjacent content words
    written as one (`joined`: *zip code* as *zipcode*). A query naming a file (`report.md`,
    `_FILE_NAME`) also gets the word *file*, and the words said only in such names weigh
    FILE_NAME_WEIGHT."""
    text = text[:MAX_QUERY_CHARS]
    filler, bases = _filler_forms()
    content: dict[str, float] = {}
    fill: dict[str, float] = {}  # numbers and single characters other than filler
    tone: list[str] = []  # the filler words, as written
    known, spelled = spelled_words(), set()
    words: dict[str, str] = {}  # content word as written -> its term
    joined: dict[str, None] = {}
    before = ""  # the content word just before, as written ("" after filler or a number)
    for word in _query_words(text):
        stems = term_stems(word)
        content_word = not all(_set_aside(word, term) for term in stems)
        if content_word and word in known:
            spelled.update(stems)
        # a pair of CJK characters is no word of its own, to be written as one with the next
        joinable = content_word and (word.isascii() or not _CJK_RUN.match(word))
        if before and joinable and len(content) <= RELATED_MAX_TERMS:
            joined.update(dict.fromkeys(term_stems(before + word)))
        before = word if joinable else ""
        for term in stems:
            if term in content:
                continue
            if _set_aside(word, term):
                if word not in filler and term not in bases:
                    fill[term] = 1.0
                elif not tone or tone[-1] != word:
                    tone.append(word)
            elif len(content) < max_terms:
                content[term] = 1.0  # also written as filler elsewhere in the query: it counts
                fill.pop(term, None)
                words.setdefault(word, term)
    related: dict[str, tuple[str, ...]] = {}
    if content and len(content) <= RELATED_MAX_TERMS:
        table, names, taken = related_words(), _names(text), set(content)
        for word, term in words.items():
            if word in names:
                continue
            others = [t for other in table.get(word, ()) for t in term_stems(other) if t not in taken and t not in bases]
            if others:
                related[term] = tuple(others)  # a term is reached by one word only: the first to give it
                taken.update(others)
    if content and _FILE_NAME.search(text):
        outside = {term for word in _query_words(_FILE_NAME.sub(" ", text)) for term in term_stems(word)}
        for term in content:
            if term not in outside:  # said only in the name of a file: a value, as a number is
                content[term] = FILE_NAME_WEIGHT
        for term in term_stems("file"):
            content[term] = 1.0
    joined_terms = tuple(t for t in joined if t not in content) if content and len(content) <= RELATED_MAX_TERMS else ()
    identifiers = identifier_words(text)
    filler_only = not content and not fill and bool(tone)
    if filler_only:
        identifiers += [name for name in filler_names(tone) if name not in identifiers]
    return AnalyzedQuery(text=text, terms=content or fill, identifiers=identifiers, related=related,
                         joined=joined_terms, spelled=frozenset(spelled & content.keys()), filler=filler_only)


# A request asking for several things ("Find the airport closest to Boston. Also book me a flight
# from there.") is read part by part as well: its sentences, and the clauses a connective opens.
# The connectives are those that add a task; `next`, `later`, `second` or `plus` also qualify a
# value ("the next 10 days", "the second largest") and do not split.
_PART_SPLIT = re.compile(
    r"(?<=[.!?;])\s+|(?<=[。！？；])\s*|\n+|,\s+and\s+|,?\s*\b(?:also|additionally|then|after that|afterwards|in addition|"
    r"as well as|moreover|furthermore|secondly|thirdly|finally|lastly)\b,?\s*",
    re.IGNORECASE,
)
# A part counts when it has this many content words; a request gives at most MAX_PARTS parts
# (those with the most content words).
PART_MIN_TERMS = 2
MAX_PARTS = 4


# A sentence that only sets the scene ("I've been putting together the quarterly review all
# morning.") asks for nothing, so it is no part of its own when another sentence of the request
# asks. Such a sentence opens with a subject, a determiner or a narrating adverb
# (_TELLING_OPENERS) and says none of the words that ask (_ASKING); one opening otherwise (a verb:
# "Book me a flight") asks.
_TELLING_OPENERS = frozenset(
    """i i've i'm i'll we we're we've we'll he she it it's they they're there there's this that these those
    someone somebody everyone everybody nobody the a an my our his her their yesterday today recently lately
    earlier last honestly apparently unfortunately luckily basically currently""".split()
)
_ASKING = re.compile(
    r"\?|\b(?:please|kindly|(?:can|could|would|will)\s+(?:you|u)|i\s+(?:want|need|wish)|i['’]d\s+(?:like|love)|"
    r"i\s+would\s+(?:like|love)|(?:i['’]m|i\s+am)\s+(?:looking|trying)|help\s+me|let\s+me|let['’]s|we\s+(?:need|want)|"
    r"i\s+(?:have|must)\s+to)\b",
    re.IGNORECASE,
)
_OPENING_WORD = re.compile("[A-Za-z][A-Za-z'’]*")


def asks(sentence: str) -> bool:
    """Whether a sentence of a request asks for something (see _TELLING_OPENERS)."""
    if _ASKING.search(sentence):
        return True
    opening = _OPENING_WORD.search(sentence)
    return opening is None or opening.group(0).lower().replace("’", "'") not in _TELLING_OPENERS


def query_parts(text: str) -> list[AnalyzedQuery]:
    """The parts of a request asking for several things, each read like a query (`analyze_query`),
    in the order written; [] when the request has fewer than two parts of PART_MIN_TERMS content
    words (filler does not count). A part of the same words as an earlier one counts once. The
    sentences that only set the scene (`asks`) give no part when another sentence asks."""
    text = _squeeze_space(text)
    sentences = [sentence for sentence in _SENTENCE_END.split(text) if sentence.strip()]
    asking = [sentence for sentence in sentences if asks(sentence)]
    if asking and len(asking) < len(sentences):
        text = "\n".join(asking)
    pieces = [piece.strip() for piece in _PART_SPLIT.split(text) if piece and piece.strip()]
    if len(pieces) < 2:  # one piece: the request itself, already read by `analyze_query`
        return []
    parts: list[AnalyzedQuery] = []
    seen: set[frozenset[str]] = set()
    for piece in pieces:
        part = analyze_query(piece)
        words = frozenset(part.terms)
        if _content_words(part) >= PART_MIN_TERMS and words not in seen:
            seen.add(words)
            parts.append(part)
    if len(parts) < 2:
        return []
    if len(parts) > MAX_PARTS:
        keep = set(sorted(range(len(parts)), key=lambda i: (-_content_words(parts[i]), i))[:MAX_PARTS])
        parts = [part for i, part in enumerate(parts) if i in keep]
    return parts


def _content_words(part: AnalyzedQuery) -> int:
    """How many of a part's terms are neither filler nor numbers (`analyze_query` falls back to
    those when a text has nothing else)."""
    filler, bases = _filler_forms()
    return sum(1 for term in part.terms if len(term) >= 2 and not term.isdigit() and term not in filler and term not in bases)


# ---------------------------------------------------------------- shared description text

# A description's leading segments end at a sentence end, a colon or a line break ("This tool
# belongs to the X API. It lets users ... Tool description: Send a message." has four). Only the
# first SHARED_SCAN characters are read: a blurb is short, and the scan is per tool.
_SEGMENT_END = re.compile(r"[.!?:]\s+|[。！？：]\s*|\n\s*")
SHARED_SCAN = 1000
# How many leading segments may be shared text, and by how many differently named tools of one
# namespace a run of leading segments must be written to count as shared.
SHARED_MAX_SEGMENTS = 4
SHARED_MIN_TOOLS = 3


def _runs(text: str) -> list[tuple[int, int]]:
    """(key, end) of each run of the description's first segments that leaves text after it:
    the key identifies the run's exact text, `end` is where the rest starts."""
    out: list[tuple[int, int]] = []
    for sep in _SEGMENT_END.finditer(text, 0, SHARED_SCAN):
        end = sep.end()
        if end >= len(text):  # something must remain after the shared text
            break
        if sep.start() > 0:
            out.append((hash(text[:sep.start()]), end))
            if len(out) == SHARED_MAX_SEGMENTS:
                break
    return out


def _shared_end(text: str, runs: Collection[int] | None) -> int:
    """Where the text's longest run of leading segments among `runs` (keys, `_runs`) ends; 0
    when it starts with none of them."""
    cut = 0
    if runs and text:
        for key, end in _runs(text):
            if key in runs:
                cut = end
    return cut


def _first_key(text: str) -> int | None:
    """The key of the description's first segment as a run (`_runs`), None when it has none."""
    sep = _SEGMENT_END.search(text, 0, SHARED_SCAN)
    return hash(text[:sep.start()]) if sep is not None and 0 < sep.start() and sep.end() < len(text) else None


def shared_runs(tools: Iterable[tuple[str, str]], min_tools: int = SHARED_MIN_TOOLS) -> frozenset[int]:
    """The keys of the runs of leading segments that SHARED_MIN_TOOLS or more differently named
    tools start their description with, from (name, description) pairs of one namespace. Only
    tools whose first segment is written by that many names are looked at further."""
    first: dict[int, list[tuple[str, str]]] = {}
    for name, text in tools:
        key = _first_key(text)
        if key is not None:
            first.setdefault(key, []).append((name, text))
    shared: set[int] = set()
    for group in first.values():
        if len(group) < min_tools or len({name for name, _ in group}) < min_tools:
            continue
        names: dict[int, set[str]] = {}
        for name, text in group:
            for key, _ in _runs(text):
                names.setdefault(key, set()).add(name)
        shared.update(key for key, named in names.items() if len(named) >= min_tools)
    return frozenset(shared)


class SharedText:
    """Description text that many tools of a namespace start with: a vendor's blurb repeated by
    every operation of its API ("This tool belongs to the Gorilla file system. It is a simple
    file system that ... Tool description: Change the current working directory").

    A run of a description's first segments (up to SHARED_MAX_SEGMENTS, always leaving some
    text after it) is shared when SHARED_MIN_TOOLS or more differently named tools of the
    namespace start with it verbatim: `split` separates it from the tool's own words, which tell
    the API's tools apart. Differently named, because versions of one tool (`set_volume` listed
    by several vendors) share their opening sentence as their own words. `refresh` looks at a
    namespace's listing again after a change (a pass over it only when some name or description
    changed) and says whether its shared text changed, whereupon its documents are to be built
    again. `api` tells which API a description's tool belongs to, by the shared text it opens
    with in whichever namespace. Nothing is kept per tool. Read by the index writer thread and
    the searches while the catalog's listener refreshes: each namespace's set, and the set of
    every namespace's shared runs, is replaced whole."""

    def __init__(self, min_tools: int = SHARED_MIN_TOOLS) -> None:
        self.min_tools = min_tools
        self._shared: dict[str, frozenset[int]] = {}  # namespace -> keys of its shared runs
        self._apis: dict[int, int] = {}  # key of a shared run -> how many namespaces share it
        self._seen: dict[str, int] = {}  # namespace -> fingerprint of its names and descriptions
        self.version = 0  # counts the changes of any namespace's shared text

    def refresh(self, namespace: str, tools: Iterable[tuple[str, str]]) -> bool:
        """Take the namespace's current (name, description) pairs; True when its shared text
        changed."""
        pairs = list(tools)
        # strings cache their hash: this costs a few milliseconds per 100,000 tools
        fingerprint = hash((len(pairs), sum(hash(n) ^ hash(d) for n, d in pairs) & 0xFFFFFFFFFFFFFFFF))
        if self._seen.get(namespace) == fingerprint:
            return False
        self._seen[namespace] = fingerprint
        runs = shared_runs(pairs, self.min_tools) if len(pairs) >= self.min_tools else frozenset()
        before = self._shared.get(namespace, frozenset())
        if runs == before:
            return False
        apis = dict(self._apis)  # replaced whole: read without a lock by `api`
        for key in before - runs:
            if apis[key] > 1:
                apis[key] -= 1
            else:
                del apis[key]
        for key in runs - before:
            apis[key] = apis.get(key, 0) + 1
        if runs:
            self._shared[namespace] = runs
        else:
            self._shared.pop(namespace, None)
        self._apis = apis
        self.version += 1
        return True

    def split(self, namespace: str, description: str) -> tuple[str, str]:
        """(shared text, own text) of a description: the longest run of leading segments that
        is shared in the namespace, and the rest."""
        cut = _shared_end(description, self._shared.get(namespace))
        if not cut:
            return "", description
        return description[:cut].rstrip(), description[cut:]

    def own(self, description: str) -> str:
        """The description without the longest run of its leading segments that is shared in
        any namespace: a tool's own words also when it is served apart from the rest of its API
        (`split` looks at its own namespace alone)."""
        return description[_shared_end(description, self._apis):]

    def api(self, description: str) -> int | None:
        """Which API the description's tool belongs to: the key of the shortest shared text it
        starts with (its API's blurb, shared in some namespace), the same for every tool of that
        API in whichever namespace, also one served apart from the rest of its API; None when it
        starts with no shared text."""
        runs = self._apis
        if not runs or not description:
            return None
        key = _first_key(description)  # a shared run's first segment is shared too (`shared_runs` groups tools by it)
        return key if key in runs else None


# ---------------------------------------------------------------- what a declaration says

_WORD = re.compile(r"\w+")


def _folded(text: str) -> str:
    return " " + " ".join(_WORD.findall(text.lower())) + " "


def unsaid(text: str | None, *said: str | None) -> str:
    """`text`, unless one of `said` already says it, word for word (case and punctuation aside):
    an OpenAPI summary that opens the description, given again as title and hint, counts once, as
    it does for a tool that gives the description alone; a title that only repeats the first
    sentence of the blurb its API's tools share stays shared text."""
    if not text or not text.strip():
        return ""
    folded = _folded(text)
    if folded == "  ":
        return ""
    return "" if any(s and folded in _folded(s) for s in said) else text


def function_name(decl: ToolDeclaration) -> str:
    """The name a tool has where it is defined: its native name, or, for a tool federated from
    another bridge (an A2T upstream), the native name its origin gives it, followed through
    each bridge's mapping (`upstream_native_name`, then its `upstream_mappings`). Tool search
    names, folds and tells apart functions by it, so a catalog reached through a chain of
    bridges ranks as it does at its origin: `cat0__get_weather` of a federated bridge is the
    `get_weather` its MCP server lists, one function with the `get_weather` of other vendors."""
    name = decl.native_name or decl.name
    mappings: Any = decl.external_mappings
    for _ in range(16):  # bridges in a chain; a mapping nested deeper is not followed
        origin = next((m for m in mappings if isinstance(m, dict) and isinstance(m.get("upstream_native_name"), str)
                       and m["upstream_native_name"]), None) if isinstance(mappings, list) else None
        if origin is None:
            break
        name = origin["upstream_native_name"]
        mappings = origin.get("upstream_mappings")
    return name


# Characters of an upstream's whole description that tool search reads when an adapter cut the
# listed one short (searched_description): all of it for all but 2 of the 1,223 operations of
# GitHub's REST API document (254 of them longer than the OpenAPI adapter's 600), bounded so a
# manual written into one operation cannot swell the index.
FULL_DESCRIPTION_MAX = 4000
_CUT_MARK = "…"


def searched_description(decl: ToolDeclaration) -> str:
    """The description tool search reads of a tool: its declaration's, or, when its adapter cut
    that short (it ends in `…`) and kept the upstream's whole text in its annotations (as the
    OpenAPI adapter keeps an operation's `summary` and `description` under `openapi`), the whole
    text, up to FULL_DESCRIPTION_MAX characters. A listing shows an agent the first
    `description_max` characters; search finds the tool by every word its document gives it,
    as it would the same function listed whole by another upstream."""
    text = decl.description or ""
    if not text.endswith(_CUT_MARK):
        return text
    opening = text[: -len(_CUT_MARK)].rstrip()
    for kept in decl.annotations.values():
        if not isinstance(kept, dict):
            continue
        summary, description = (value.strip() if isinstance(value := kept.get(key), str) else "" for key in ("summary", "description"))
        # as the adapter joins them: the description alone when it opens with the summary
        wholes = (description, f"{summary}\n\n{description}" if summary and description else summary)
        whole = next((w for w in wholes if len(w) > len(opening) and w.startswith(opening)), None)
        if whole is not None:
            return whole[:FULL_DESCRIPTION_MAX]
    return text


def described_schema(decl: ToolDeclaration) -> Any:
    """The input schema whose words describe the tool: none for a peer agent's skill, whose
    parameters are the A2A message envelope every skill has alike (`message`, `data`,
    `context_id`, `task_id`), not words of the skill. Indexed, they made every skill a match for
    *message* or *data*."""
    return {} if decl.tool_kind == "peer_agent_tool" else decl.input_schema


# ---------------------------------------------------------------- lookups a tool needs

# A parameter's head: the words of its name and the first HEAD_WORDS words of its description,
# which say what it is ("receiver_id: User ID of the user to send the message to").
HEAD_WORDS = 4
# The first words of a name that reads, and the words that end what it reads: `get_symbol_by_name`
# looks up a symbol.
READ_VERBS = frozenset({"get", "find", "lookup", "search", "fetch", "retrieve", "resolve", "query", "read"})
_READ_PREFIXES = tuple(READ_VERBS)
_OBJECT_END = frozenset({"by", "based", "from", "for", "with", "using", "via", "in", "on", "of"})
_NAME = "name"  # the stem of *name*, *names* and *named*


def _stems(words: Iterable[str]) -> frozenset[str]:
    return frozenset(stem for word in words for stem in term_stems(word.lower()))


def input_heads(schema: Any, *, having: str | None = None) -> list[frozenset[str]]:
    """The heads of a schema's required top-level parameters, stemmed as the index stems: what
    a caller must know to call the tool. With `having` (a stem), none unless every head has it."""
    if not isinstance(schema, dict):
        return []
    props, required = schema.get("properties"), schema.get("required")
    if not isinstance(props, dict) or not isinstance(required, list):
        return []
    heads = []
    for pname in dict.fromkeys(p for p in required if isinstance(p, str)):
        pschema = props.get(pname)
        if isinstance(pschema, dict):
            desc = pschema.get("description") or pschema.get("title")
            head = _stems([*name_tokens(pname), *(_WORD.findall(desc[:200])[:HEAD_WORDS] if isinstance(desc, str) else ())])
            if having is not None and having not in head:
                return []
            heads.append(head)
    return heads


def looked_up(decl: ToolDeclaration, name: str | None = None) -> frozenset[str]:
    """What a tool looks up by name, as stemmed words; empty for any other tool. A lookup is
    named for reading (its first word is one of READ_VERBS) and asks for names alone (each
    required parameter's head says *name*); it looks up the words of its name after the verb, up
    to a word like *by* or *from* (`get_user_id(user: "User name of the user")`: user id;
    `get_symbol_by_name(name)`: symbol), unless it asks for those itself (`get_tweet(tweet_id)`
    reads a tweet it is given). `name`: its function_name, when known."""
    name = function_name(decl) if name is None else name
    if not name[:8].lower().startswith(_READ_PREFIXES):  # most tools: no need to split the name
        return frozenset()
    tokens = name_tokens(name)
    if len(tokens) < 2 or tokens[0] not in READ_VERBS:
        return frozenset()
    heads = input_heads(described_schema(decl), having=_NAME)
    if not heads:
        return frozenset()
    words = []
    for token in tokens[1:]:
        if token in _OBJECT_END:
            break
        words.append(token)
    what = _stems(words)
    if not what or any(what <= head for head in heads):
        return frozenset()
    return what


# ---------------------------------------------------------------- the current place a tool acts in

# A tool that changes where its API's other tools act says so in a sentence of its description:
# "Change the current working directory to the specified folder." Those other tools say where
# they act: "Create a new directory in the current directory." (*Active* reads as *current*.)
_CHANGES_CURRENT = re.compile(r"(?:^|[.!?:]\s+)(?:change|set|switch|select)(?:e?s)?\s+(?:the\s+)?(?:current|active)\s+([a-z]+(?:\s+[a-z]+){0,2})",
                              re.IGNORECASE)
_CURRENT = re.compile(r"\b(?:current|active)\s+([a-z]+(?:\s+[a-z]+){0,2})", re.IGNORECASE)
_PLACE_END = frozenset({"to", "for", "of", "in", "on", "at", "into", "with", "from", "by", "and", "or", "that", "which", "as", "is"})
# Text read for both: the description's first characters, and each parameter's description's.
_CURRENT_CHARS = 1000


def _place_words(phrase: str) -> list[str]:
    """The words of a phrase after *current*, up to a word like *to* or *of*: "working directory"."""
    words = []
    for word in phrase.lower().split():
        if word in _PLACE_END:
            break
        words.append(word)
    return words


def changes_current(decl: ToolDeclaration) -> frozenset[str]:
    """The stemmed nouns of the places a tool changes, as a sentence of its description opens
    with *change (set, switch, select) the current (active) …*: `cd` ("Change the current working
    directory to the specified folder") changes the current *directory* (the phrase's last word)."""
    found = []
    for match in _CHANGES_CURRENT.finditer(searched_description(decl)[:_CURRENT_CHARS]):
        words = _place_words(match.group(1))
        if words:
            found.append(words[-1])
    return _stems(found)


_HERE = re.compile(r"\b(?:current|active|this)\s+([a-z]+(?:\s+[a-z]+)?)", re.IGNORECASE)


def here_words(text: str) -> frozenset[str]:
    """The stemmed words a request says of the place it is in: *this folder*, *the current
    (working) directory* (up to two words after *this*, *current* or *active*). A request naming
    the current place does not ask to change it."""
    return _stems(word for match in _HERE.finditer(text[:MAX_QUERY_CHARS]) for word in _place_words(match.group(1)))


def place_terms(decl: ToolDeclaration) -> frozenset[str]:
    """The stemmed words a request says when it names a place this tool changes: the places'
    nouns and its required parameters' heads (`cd`: *directory*, *folder*)."""
    return changes_current(decl).union(*input_heads(described_schema(decl)))


def acts_in_current(decl: ToolDeclaration) -> frozenset[str]:
    """The stemmed words that follow *current* (or *active*) in a tool's description or its parameters'
    descriptions (up to three, up to a word like *to*): `mkdir` ("Create a new directory in the
    current directory") acts in the current *directory*. A tool that changes such a place
    (`changes_current`) acts in it too."""
    texts = [searched_description(decl)[:_CURRENT_CHARS]]
    schema = described_schema(decl)
    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(props, dict):
        texts += [p["description"][:_CURRENT_CHARS] for p in props.values()
                  if isinstance(p, dict) and isinstance(p.get("description"), str)]
    return _stems(word for text in texts for match in _CURRENT.finditer(text) for word in _place_words(match.group(1)))


# ---------------------------------------------------------------- titles

# Characters of a title read for its words, and the most words a title may have to count as a
# label (*List branches*, *Create a meeting*): a longer one is a sentence, as a description opens.
# Given as titles, the development set's first sentences lowered its nDCG@10 by 0.015 and 0.025
# when those of up to 8 and 10 words counted (at a weight of 0.45), and not at all at 6 (at 0.3).
_TITLE_CHARS = 200
TITLE_WORDS = 6


def content_terms(text: str) -> frozenset[str]:
    """The terms of `text`'s content words, read as a query's are (`analyze_query`): stemmed,
    with filler, numbers and single characters set aside."""
    return frozenset(term for word in _query_words(text) for term in term_stems(word) if not _set_aside(word, term))


def title_terms(decl: ToolDeclaration) -> frozenset[str]:
    """The content terms of a tool's title: the short label its upstream gives what the tool
    does (an OpenAPI operation's summary, an MCP tool's `title`, an A2A skill's name), of at most
    TITLE_WORDS words. None without one, or when the title is the tool's name written otherwise, its words in the
    same order (`addCards()` for `addCards`, `Get Weather` for `get_weather`, an ATIP command
    line): on the development set, weighing tools' names so lowered the rankings. A title in
    words of its own (*Create a meeting* for `meetingCreate`) counts."""
    title = (decl.title or "").strip()[:_TITLE_CHARS]
    words = _query_words(title)
    if not words or len(words) > TITLE_WORDS or words == _query_words(name_words(function_name(decl))):
        return frozenset()
    return content_terms(title)


# ---------------------------------------------------------------- search hints

_HINT_MIN, _HINT_MAX = 3, 10


def _words(text: str) -> list[str]:
    return [w for w in _MARKUP.sub(" ", text).split() if any(c.isalnum() for c in w)]


def _first_sentence(text: str) -> str:
    text = text.strip()
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def derive_search_hint(decl: ToolDeclaration, description: str | None = None, shared: str = "") -> str:
    """The tool's search hint: the upstream's own when it gave one, else 3-10 words from its
    title or the first sentence of its description (`description`, when given, is the one to
    use: the tool's own text without the text its namespace's tools share), completed with its
    name's words (then its namespace) when that is shorter than three words. A given hint or
    title that only repeats `shared` (the text the namespace's tools share, such as an OpenAPI
    summary that is the first sentence of the API's blurb) is passed over: it tells the
    namespace's tools apart no better than the blurb does."""
    hint = (decl.search_hint or "").strip()
    if hint and unsaid(hint, shared):
        return hint
    own = searched_description(decl) if description is None else description
    candidates = [_words(unsaid(decl.title, shared)), _words(_first_sentence(own))]
    chosen = next((c for c in candidates if len(c) >= _HINT_MIN), max(candidates, key=len))
    words = [w.rstrip(".,;:。，、；：") for w in chosen[:_HINT_MAX]]
    seen = {w.lower() for w in words}
    if len(words) < _HINT_MIN:
        for word in name_tokens(function_name(decl)):
            if len(words) < _HINT_MAX and word not in seen:
                seen.add(word)
                words.append(word)
    for word in (decl.namespace or "", "tool"):
        if len(words) < _HINT_MIN and word and word.lower() not in seen:
            seen.add(word.lower())
            words.append(word)
    return " ".join(words)
