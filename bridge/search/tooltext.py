"""What tool search reads of a tool's declaration, beside its words: the blurb an API's tools
share (`SharedText`), the text searched (a description an adapter cut short, read whole), the
lookups a tool needs and the tools that are lookups, the current place a tool acts in or
changes, its title's terms, and the search hint derived when its upstream gave none."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from bridge.model import ToolDeclaration
from bridge.search.analysis import (
    MAX_QUERY_CHARS,
    SENTENCE_END,
    content_terms,
    name_tokens,
    name_words,
    query_words,
    term_stems,
)

__all__ = [
    "FULL_DESCRIPTION_MAX",
    "TITLE_WORDS",
    "SharedText",
    "acts_in_current",
    "changes_current",
    "derive_search_hint",
    "described_schema",
    "function_name",
    "here_words",
    "input_heads",
    "looked_up",
    "place_terms",
    "searched_description",
    "shared_runs",
    "title_terms",
    "unsaid",
]

_MARKUP = re.compile(r"[`*#>\[\]]+|\((?:https?://)[^)]*\)")


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
            out.append((hash(text[: sep.start()]), end))
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
    return (
        hash(text[: sep.start()])
        if sep is not None and sep.start() > 0 and sep.end() < len(text)
        else None
    )


def shared_runs(
    tools: Iterable[tuple[str, str]], min_tools: int = SHARED_MIN_TOOLS
) -> frozenset[int]:
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
        fingerprint = hash(
            (len(pairs), sum(hash(n) ^ hash(d) for n, d in pairs) & 0xFFFFFFFFFFFFFFFF)
        )
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
        return description[_shared_end(description, self._apis) :]

    def api(self, description: str) -> int | None:
        """Which API the description's tool belongs to: the key of the shortest shared text it
        starts with (its API's blurb, shared in some namespace), the same for every tool of that
        API in whichever namespace, also one served apart from the rest of its API; None when it
        starts with no shared text."""
        runs = self._apis
        if not runs or not description:
            return None
        key = _first_key(
            description
        )  # a shared run's first segment is shared too (`shared_runs` groups tools by it)
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
        origin = (
            next(
                (
                    m
                    for m in mappings
                    if isinstance(m, dict)
                    and isinstance(m.get("upstream_native_name"), str)
                    and m["upstream_native_name"]
                ),
                None,
            )
            if isinstance(mappings, list)
            else None
        )
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
        summary, description = (
            value.strip() if isinstance(value := kept.get(key), str) else ""
            for key in ("summary", "description")
        )
        # as the adapter joins them: the description alone when it opens with the summary
        wholes = (
            description,
            f"{summary}\n\n{description}" if summary and description else summary,
        )
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
READ_VERBS = frozenset(
    {"get", "find", "lookup", "search", "fetch", "retrieve", "resolve", "query", "read"}
)
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
            head = _stems(
                [
                    *name_tokens(pname),
                    *(_WORD.findall(desc[:200])[:HEAD_WORDS] if isinstance(desc, str) else ()),
                ]
            )
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
_CHANGES_CURRENT = re.compile(
    r"(?:^|[.!?:]\s+)(?:change|set|switch|select)(?:e?s)?\s+(?:the\s+)?(?:current|active)\s+([a-z]+(?:\s+[a-z]+){0,2})",
    re.IGNORECASE,
)
_CURRENT = re.compile(r"\b(?:current|active)\s+([a-z]+(?:\s+[a-z]+){0,2})", re.IGNORECASE)
_PLACE_END = frozenset(
    {
        "to",
        "for",
        "of",
        "in",
        "on",
        "at",
        "into",
        "with",
        "from",
        "by",
        "and",
        "or",
        "that",
        "which",
        "as",
        "is",
    }
)
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
    return _stems(
        word
        for match in _HERE.finditer(text[:MAX_QUERY_CHARS])
        for word in _place_words(match.group(1))
    )


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
        texts += [
            p["description"][:_CURRENT_CHARS]
            for p in props.values()
            if isinstance(p, dict) and isinstance(p.get("description"), str)
        ]
    return _stems(
        word
        for text in texts
        for match in _CURRENT.finditer(text)
        for word in _place_words(match.group(1))
    )


# ---------------------------------------------------------------- titles

# Characters of a title read for its words, and the most words a title may have to count as a
# label (*List branches*, *Create a meeting*): a longer one is a sentence, as a description opens.
# Given as titles, the development set's first sentences lowered its nDCG@10 by 0.015 and 0.025
# when those of up to 8 and 10 words counted (at a weight of 0.45), and not at all at 6 (at 0.3).
_TITLE_CHARS = 200
TITLE_WORDS = 6


def title_terms(decl: ToolDeclaration) -> frozenset[str]:
    """The content terms of a tool's title: the short label its upstream gives what the tool
    does (an OpenAPI operation's summary, an MCP tool's `title`, an A2A skill's name), of at most
    TITLE_WORDS words. None without one, or when the title is the tool's name written otherwise, its words in the
    same order (`addCards()` for `addCards`, `Get Weather` for `get_weather`, an ATIP command
    line): on the development set, weighing tools' names so lowered the rankings. A title in
    words of its own (*Create a meeting* for `meetingCreate`) counts."""
    title = (decl.title or "").strip()[:_TITLE_CHARS]
    words = query_words(title)
    if (
        not words
        or len(words) > TITLE_WORDS
        or words == query_words(name_words(function_name(decl)))
    ):
        return frozenset()
    return content_terms(title)


# ---------------------------------------------------------------- search hints

_HINT_MIN, _HINT_MAX = 3, 10


def _words(text: str) -> list[str]:
    return [w for w in _MARKUP.sub(" ", text).split() if any(c.isalnum() for c in w)]


def _first_sentence(text: str) -> str:
    text = text.strip()
    return SENTENCE_END.split(text, maxsplit=1)[0] if text else ""


def derive_search_hint(
    decl: ToolDeclaration, description: str | None = None, shared: str = ""
) -> str:
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


# the beginning of a parameter's description embedded with its name (`tool_text`)
_PARAM_TEXT_CHARS = 160


def tool_text(decl: ToolDeclaration, description: str | None = None) -> str:
    """What is embedded of a tool: its name's words, title, description (or `description` in its
    place: the tool's own words, without its API's shared text), and each parameter's name with
    the beginning of its description."""
    described = searched_description(decl)
    if description is None:
        description = described
    schema = described_schema(decl)
    props = schema.get("properties") if isinstance(schema, dict) else None
    params: list[str] = []
    if isinstance(props, dict):
        for pname, pschema in props.items():
            desc = pschema.get("description") if isinstance(pschema, dict) else None
            words = name_words(str(pname))
            params.append(
                f"{words} ({desc.strip()[:_PARAM_TEXT_CHARS]})"
                if isinstance(desc, str) and desc.strip()
                else words
            )
    # a title the whole description says (the blurb's first sentence, say) is not the own words either
    parts = [
        name_words(function_name(decl)) + ":",
        unsaid(decl.title, described),
        description.strip(),
    ]
    if params:
        parts.append("Parameters: " + "; ".join(params))
    return " ".join(p for p in parts if p)
