"""Query analysis of tool search: names split into words, the text analyzer the index and the
queries share, and a request read as the index reads it (stemmed terms, conversational filler
set aside, identifiers kept whole, related and joined words, named files, and the parts of a
request asking for several things). No index, no tool."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import tantivy

from bridge.search.static import STATIC_TABLE

__all__ = [
    "ANALYZER_NAME",
    "FILLER_WORDS",
    "MAX_QUERY_CHARS",
    "SENTENCE_END",
    "AnalyzedQuery",
    "analyze_query",
    "analyzer",
    "asks",
    "cjk_pairs",
    "content_terms",
    "filler_names",
    "identifier_words",
    "meaning_text",
    "name_tokens",
    "name_words",
    "query_parts",
    "query_words",
    "related_words",
    "spelled_words",
    "split_identifiers",
    "term_stems",
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
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z][A-Za-z0-9]*+(?:[_.\-/][A-Za-z0-9]++)+|[a-z]++[A-Z][A-Za-z0-9]*+)"
)
# Chinese and Japanese end a sentence with a full-width mark and no space after it.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n")
# Chinese and Japanese write no space between words, and a Korean word carries its particles
# (날씨를, 날씨는): a run of these scripts is indexed and searched as its overlapping pairs of
# characters (天气预报 as 天气 气预 预报), as CJK analyzers do. Han with its extensions and
# compatibility forms, kana (not the middle dot) and Hangul syllables.
_CJK_RUN = re.compile(
    "[\u3005\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]+"
)

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
    return (
        " " + (run if len(run) < 3 else " ".join(run[i : i + 2] for i in range(len(run) - 1))) + " "
    )


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
    table's rows (`related_arrays` of tools/distill_search_table.py): *folder* with *directory*, *car* with
    *vehicle* and *automobile*. Empty, with a warning, when the shipped file cannot be read."""
    try:
        with np.load(RELATED_TABLE, allow_pickle=False) as data:
            words, related = data["words"], data["related"]
    except (OSError, KeyError, ValueError) as exc:
        log.warning(
            "related words of query expansion cannot be read from %s (%s); queries are not expanded",
            RELATED_TABLE,
            exc,
        )
        return {}
    # tolist() gives Python strings already; an empty one pads a row of fewer related words
    return {
        word: tuple(filter(None, row))
        for word, row in zip(words.tolist(), related.tolist(), strict=True)
    }


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
        log.warning(
            "the vocabulary of typing errors cannot be read from %s (%s); every unknown word may be one",
            STATIC_TABLE,
            exc,
        )
        return frozenset()
    return frozenset(str(token) for token in vocab if not token.startswith(("##", "[")))


# A capitalised word other than a sentence's first is a name (*Washington*, *Santa Barbara*): its
# nearest words are other names, not other ways to say it.
_CAPITALISED = re.compile(r"(^|[.!?\n])?\s*\b([A-Z][a-z]+)\b")  # group 1: what opens a sentence


def _names(text: str) -> set[str]:
    """The query's capitalised words that do not open a sentence, lower case."""
    return {
        m.group(2).lower()
        for m in _CAPITALISED.finditer(_squeeze_space(text))
        if m.group(1) is None
    }


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


def query_words(text: str) -> list[str]:
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
    runs = (
        words[i : i + n] for n in range(1, FILLER_NAME_WORDS + 1) for i in range(len(words) - n + 1)
    )
    return list(
        dict.fromkeys(
            join.join(run) for run in runs for join in (_NAME_JOINS if len(run) > 1 else ("",))
        )
    )


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
    known, spelled = spelled_words(), set[str]()
    words: dict[str, str] = {}  # content word as written -> its term
    joined: dict[str, None] = {}
    before = ""  # the content word just before, as written ("" after filler or a number)
    for word in query_words(text):
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
            others = [
                t
                for other in table.get(word, ())
                for t in term_stems(other)
                if t not in taken and t not in bases
            ]
            if others:
                related[term] = tuple(
                    others
                )  # a term is reached by one word only: the first to give it
                taken.update(others)
    if content and _FILE_NAME.search(text):
        outside = {
            term for word in query_words(_FILE_NAME.sub(" ", text)) for term in term_stems(word)
        }
        for term in content:
            if term not in outside:  # said only in the name of a file: a value, as a number is
                content[term] = FILE_NAME_WEIGHT
        for term in term_stems("file"):
            content[term] = 1.0
    joined_terms = (
        tuple(t for t in joined if t not in content)
        if content and len(content) <= RELATED_MAX_TERMS
        else ()
    )
    identifiers = identifier_words(text)
    filler_only = not content and not fill and bool(tone)
    if filler_only:
        identifiers += [name for name in filler_names(tone) if name not in identifiers]
    return AnalyzedQuery(
        text=text,
        terms=content or fill,
        identifiers=identifiers,
        related=related,
        joined=joined_terms,
        spelled=frozenset(spelled & content.keys()),
        filler=filler_only,
    )


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
    sentences = [sentence for sentence in SENTENCE_END.split(text) if sentence.strip()]
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
        keep = set(
            sorted(range(len(parts)), key=lambda i: (-_content_words(parts[i]), i))[:MAX_PARTS]
        )
        parts = [part for i, part in enumerate(parts) if i in keep]
    return parts


def _content_words(part: AnalyzedQuery) -> int:
    """How many of a part's terms are neither filler nor numbers (`analyze_query` falls back to
    those when a text has nothing else)."""
    filler, bases = _filler_forms()
    return sum(
        1
        for term in part.terms
        if len(term) >= 2 and not term.isdigit() and term not in filler and term not in bases
    )


def content_terms(text: str) -> frozenset[str]:
    """The terms of `text`'s content words, read as a query's are (`analyze_query`): stemmed,
    with filler, numbers and single characters set aside."""
    return frozenset(
        term
        for word in query_words(text)
        for term in term_stems(word)
        if not _set_aside(word, term)
    )
