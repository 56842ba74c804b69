"""The tools a tool's parameters name as where their values come from: `hotel_id` described as
*can be retrieved from `api/v1/hotels/searchHotels` (Search Hotels)* names `Search_Hotels`, and
*the page index from list_pages* names `list_pages`. A search places such a source right after a
first match that needs it (bridge.search.stages, `_lookups`): an agent calls it first."""

from __future__ import annotations

import re
import threading
from typing import Any

from cachetools import LRUCache

from bridge.model import ToolDeclaration
from bridge.search.analysis import name_words
from bridge.search.tooltext import described_schema, function_name

__all__ = ["NAMED_PREFIX", "SOURCE_DEPTH", "name_key", "named_sources"]

# A tool's function name is kept in the lookups' field as this prefix and its words
# (`name_key`): a stemmed word holds no space and a place is kept as `current …`, so none meet.
NAMED_PREFIX = "named "
# A source brings its own sources in turn, down to this many steps from the match: `Booking_Summary`
# needs `Search_Car_Rentals`, which needs `Search_Car_Location`.
SOURCE_DEPTH = 2
# What is read of a parameter's description, and the most names kept of one parameter.
_DESCRIPTION_CHARS = 600
_NAMES_PER_PARAM = 8
# A name written as code (`list_pages`, `searchHotels`, `files.read`) or a phrase in parentheses
# (`(Search Car Location)`), in the order the description says them. A name of one word
# (`search`, `(optional)`) names no tool reliably and is left out.
_MENTION = re.compile(
    r"\(([A-Za-z][A-Za-z0-9 _\-\n]{2,58}[A-Za-z0-9])\s*\)"
    r"|\b([A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)\b"
)
_PHRASE_WORDS = 8
# The sources read of the last tools asked, each kept while its declaration stays: the first
# matches of one request recur in the next ones, and reading a tool's parameters costs about
# 70 µs.
_KEPT = 4096
_kept: LRUCache[str, tuple[ToolDeclaration, tuple[tuple[str, ...], ...]]] = LRUCache(_KEPT)
_kept_lock = threading.Lock()


def name_key(name: str) -> str:
    """The lookups' field term of a tool named `name`: `Search_Car_Location`, `searchCarLocation`
    and *Search Car Location* give one term."""
    return NAMED_PREFIX + name_words(name)


def named_sources(decl: ToolDeclaration) -> tuple[tuple[str, ...], ...]:
    """For each required top-level parameter whose description names tools, the `name_key` of
    each name it says (of two words or more, other than the tool's own and its parameters'), in
    the order said. A parameter's source is the first of them the catalog holds."""
    with _kept_lock:
        entry = _kept.get(decl.tool_id)
    if entry is not None and entry[0] is decl:
        return entry[1]
    found = _read_sources(decl)
    with _kept_lock:
        _kept[decl.tool_id] = (decl, found)
    return found


def _read_sources(decl: ToolDeclaration) -> tuple[tuple[str, ...], ...]:
    schema: Any = described_schema(decl)
    if not isinstance(schema, dict):
        return ()
    props, required = schema.get("properties"), schema.get("required")
    if not isinstance(props, dict) or not isinstance(required, list):
        return ()
    # the tool's own name and its parameters' (`vehicle_id` can be retrieved from …) name none
    own = {name_key(function_name(decl)), *(name_key(str(p)) for p in props)}
    out: list[tuple[str, ...]] = []
    for pname in dict.fromkeys(p for p in required if isinstance(p, str)):
        pschema = props.get(pname)
        desc = pschema.get("description") if isinstance(pschema, dict) else None
        if not isinstance(desc, str):
            continue
        keys: dict[str, None] = {}
        for match in _MENTION.finditer(desc[:_DESCRIPTION_CHARS]):
            phrase, code = match.groups()
            words = name_words(phrase or code)
            if words.count(" ") < 1 or (phrase and words.count(" ") >= _PHRASE_WORDS):
                continue
            key = NAMED_PREFIX + words
            if key not in own:
                keys[key] = None
            if len(keys) == _NAMES_PER_PARAM:
                break
        if keys:
            out.append(tuple(keys))
    return tuple(out)
