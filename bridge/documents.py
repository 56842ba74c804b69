"""Guards for documents read from files and the network (configs, API descriptions, request
bodies): how large a YAML or JSON value is once its shared parts are counted at each place they
appear, and JSON objects whose keys are each given once (Python's reader keeps the last of a key
given twice, silently; the bridge refuses such a document, naming the key and the object)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["RepeatedKey", "expanded_size", "repeated_key_at", "unique_object"]


def expanded_size(value: Any, sizes: dict[int, int]) -> int:
    """How many values `value` holds once its shared parts (YAML aliases) are counted at each
    place they appear: each distinct list or mapping is measured once (`sizes`, by id)."""
    if not isinstance(value, dict | list):
        return 1
    known = sizes.get(id(value))
    if known is None:
        sizes[id(value)] = 1  # a cycle (which safe YAML cannot build) counts once
        children = value.values() if isinstance(value, dict) else value
        known = sizes[id(value)] = 1 + sum(expanded_size(child, sizes) for child in children)
    return known


class RepeatedKey(ValueError):
    """A key given twice in one JSON object."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice in one object")
        self.key = key


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` of a JSON decoder: the object, or RepeatedKey. A dict of the pairs and
    one length comparison keep the reader's cost per object to a few hundred nanoseconds."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return obj


class _Pairs(list[tuple[str, Any]]):
    """An object as read, its pairs in order, repeats kept."""


_PAIRS = json.JSONDecoder(object_pairs_hook=_Pairs, parse_constant=float)


def repeated_key_at(text: str) -> tuple[str, str] | None:
    """The JSON pointer of the first object of `text` (in document order) that repeats a key, and
    that key; None when none does. Reads `text` again keeping every pair, so it is called only
    once `unique_object` has refused it."""
    try:
        document = _PAIRS.decode(text)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        pointer, value = stack.pop()
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for key, _ in value:
                if key in seen:
                    return pointer, key
                seen.add(key)
            children = [(f"{pointer}/{_escaped(key)}", item) for key, item in value]
        elif isinstance(value, list):
            children = [(f"{pointer}/{i}", item) for i, item in enumerate(value)]
        else:
            continue
        stack.extend(reversed(children))
    return None


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
