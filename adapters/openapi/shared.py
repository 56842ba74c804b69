"""Equal schemas held once. An OpenAPI document's operations answer a few schemas many times over
(Microsoft Graph v1.0: 7,444 output schemas, 922 distinct), and each operation's is built on
its own: its top level, its `$defs`, its properties cut to their type and description past the
bound (adapters/openapi/bounds.py). `SharedSchemas.intern` gives equal schemas, and equal parts
of schemas, as one object, which the tools (and their declarations, bridge/model.py's `Schema`)
then share; so none of them may be changed in place."""

from __future__ import annotations

from typing import Any

__all__ = ["SharedSchemas"]


def _scalar_token(value: Any) -> Any:
    """What stands for a scalar in its parent's key: its type and value (`1`, `1.0` and `true` are
    equal in Python, not in a schema; a float by its repr: `-0.0` is written so)."""
    kind = type(value)
    return (kind, repr(value) if kind is float else value)


class SharedSchemas:
    """Hash-consing of JSON values, for the tools of one document: `intern(value)` is a value
    equal to `value`, keys in the same order and scalars of the same types, and the same object
    for every equal value interned before; a value whose every part is new is itself kept. The
    table is let go with the mapping: the tools keep what they hold."""

    def __init__(self) -> None:
        self._held: dict[tuple[Any, ...], Any] = {}  # key -> the object held for it
        # id -> the object held: an object held is found at once (the expanded schemas the
        # tools share are walked once)
        self._ids: dict[int, Any] = {}

    def __len__(self) -> int:
        """Objects and arrays held."""
        return len(self._held)

    def intern(self, value: Any) -> Any:
        if type(value) is not dict and type(value) is not list:
            return value
        # what this value's own parts were found to be; let go after it, so that the parts of
        # each tool's schema that equal one held before are freed with it
        return self._intern(value, {})

    def _intern(self, value: dict[str, Any] | list[Any], seen: dict[int, Any]) -> Any:
        found = self._ids.get(id(value))
        if found is None:
            found = seen.get(id(value))
        if found is not None:
            return found
        # the key: each part in order (with its name), an object or array by its identity (the
        # one held), a string as it is, another scalar by `_scalar_token`
        key: list[Any] = [type(value)]
        unchanged = True
        parts: Any
        if type(value) is dict:
            parts = {}
            for name, child in value.items():
                part, token = self._part(child, seen)
                unchanged = unchanged and part is child
                parts[name] = part
                key += (name, token) if type(name) is str else ((type(name), name), token)
        else:
            parts = []
            for child in value:
                part, token = self._part(child, seen)
                unchanged = unchanged and part is child
                parts.append(part)
                key.append(token)
        frozen = tuple(key)
        held = self._held.get(frozen)
        if held is None:
            held = self._held[frozen] = value if unchanged else parts
            self._ids[id(held)] = held
        seen[id(value)] = held  # `value` outlives this call: the tool's schema holds it
        return held

    def _part(self, child: Any, seen: dict[int, Any]) -> tuple[Any, Any]:
        """A part of an object or array, as held, and its token in the key: a string as it is, an
        object or array by the identity of the one held, another scalar by `_scalar_token`."""
        kind = type(child)
        if kind is str:
            return child, child
        if kind is dict or kind is list:
            part = self._ids.get(id(child)) or self._intern(child, seen)
            return part, id(part)
        return child, _scalar_token(child)
