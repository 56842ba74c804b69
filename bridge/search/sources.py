"""The tools a tool's parameters name as where their values come from: `hotel_id` described as
*can be retrieved from `api/v1/hotels/searchHotels` (Search Hotels)* names `Search_Hotels`, and
*the page index from list_pages* names `list_pages`. A search places such a source right after a
first match that needs it (bridge.search.stages, `_lookups`): an agent calls it first."""

from __future__ import annotations

import re
from typing import Any

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


def name_key(name: str) -> str:
    """The lookups' field term of a tool named `name`: `Search_Car_Location`, `searchCarLocation`
    and *Search Car Location* give one term."""
    return NAMED_PREFIX + name_words(name)


def named_sources(decl: ToolDeclaration) -> tuple[tuple[str, ...], ...]:
    """For each required top-level parameter whose description names tools, the `name_key` of
    each name it says (of two words or more, other than the tool's own), in the order said. A
    parameter's source is the first of them the catalog holds."""
    schema: Any = described_schema(decl)
    if not isinstance(schema, dict):
        return ()
    props, required = schema.get("properties"), schema.get("required")
    if not isinstance(props, dict) or not isinstance(required, list):
        return ()
    own = name_key(function_name(decl))
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
            if key != own:
                keys[key] = None
            if len(keys) == _NAMES_PER_PARAM:
                break
        if keys:
            out.append(tuple(keys))
    return tuple(out)
