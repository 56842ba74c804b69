"""Checking a call's arguments before anything runs: the one cache of compiled JSON-schema
validators, validation errors a caller can act on (each with its JSON pointer), and arguments no
upstream could be sent (nested too deep, text that is not valid Unicode)."""

from __future__ import annotations

import json
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jsonschema
import referencing.exceptions

from bridge.model import BridgeError
from bridge.schema_check import QuickCheck, compile_quick_check
from bridge.text import QUOTED_CHARS, has_surrogates, without_surrogates

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "SchemaValidators",
    "invalid_arguments",
    "pointer_token",
    "refuse_unsendable",
    "schema_errors",
]

log = logging.getLogger("bridge.invoke")


class SchemaValidators:
    """The one cache of compiled JSON-schema validators, keyed by (tool_id, version): each a
    `jsonschema` validator and, for a plain schema, the quick check that accepts most valid
    arguments without it (bridge/schema_check.py)."""

    def __init__(self, size: int = 4096) -> None:
        # least recently used first: a hit moves its entry to the end
        self._cache: OrderedDict[
            tuple[str, int], tuple[jsonschema.protocols.Validator, QuickCheck | None]
        ] = OrderedDict()
        self._size = size
        self._unusable: set[tuple[str, int]] = (
            set()
        )  # schemas jsonschema could not apply (said once each)

    def _entry(
        self, key: tuple[str, int], schema: dict[str, Any]
    ) -> tuple[jsonschema.protocols.Validator, QuickCheck | None]:
        cache = self._cache
        entry = cache.get(key)
        if entry is not None:
            cache.move_to_end(key)
        else:
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError:
                cls = (
                    jsonschema.Draft202012Validator
                )  # a sloppy upstream schema still validates what it can
            try:
                quick = compile_quick_check(schema)
            except (
                TypeError,
                ValueError,
                AttributeError,
                LookupError,
                RecursionError,
            ):  # a schema in no shape it reads
                quick = None
            entry = (cls(schema), quick)
            if len(cache) >= self._size:
                cache.popitem(last=False)
            cache[key] = entry
        return entry

    def errors(
        self, key: tuple[str, int], schema: dict[str, Any], arguments: Any
    ) -> list[dict[str, str]]:
        validator, quick = self._entry(key, schema)
        if quick is not None and quick(arguments):
            return []
        try:
            return schema_errors(validator, arguments)
        except (
            jsonschema.exceptions.UnknownType,
            referencing.exceptions.Unresolvable,
            TypeError,
            ValueError,
            LookupError,
            RecursionError,
            AttributeError,
            re.error,
        ) as exc:
            # an upstream schema jsonschema cannot apply ({"type": "bogus"}, `required` holding
            # objects, a dangling $ref, `properties` a list, a `pattern` that is no regular
            # expression): the bridge cannot judge the arguments, the upstream will
            if key not in self._unusable:
                self._unusable.add(key)
                log.warning(
                    "tool %s v%d: its input schema cannot be applied (%s: %s); arguments go to the upstream "
                    "unchecked",
                    key[0],
                    key[1],
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200],
                )
            return []


def schema_errors(
    validator: jsonschema.protocols.Validator, arguments: Any, limit: int = 20
) -> list[dict[str, str]]:
    """Up to `limit` validation errors of `arguments`, in the order of where they are, each as
    `{path (JSON pointer), message}`."""
    found = sorted(
        validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path]
    )
    return [
        {"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": _error_message(e)}
        for e in found[:limit]
    ]


def _as_written(value: Any) -> str:
    """`value` as jsonschema's messages write it (Python's repr), but with JSON's words for
    what Python spells otherwise: `null`, `true`, `false`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_as_written(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{_as_written(k)}: {_as_written(v)}" for k, v in value.items()) + "}"
        )
    return repr(value)


def _error_message(error: jsonschema.ValidationError) -> str:
    """The validator's message with the offending value shown by its beginning: a 1 MB string
    that is too long is not sent back in full (twice: in the message and in the details). A
    value holding null, true or false is written so (a caller sent JSON, not Python: `None is
    not of type 'number'` puzzled them)."""
    message, shown = error.message, repr(error.instance)
    for value, python in ((error.instance, shown), (error.validator_value, None)):
        if value is None or isinstance(value, bool | list | dict):
            python = python or repr(value)
            if (
                len(python) <= QUOTED_CHARS
                and python in message
                and python != (written := _as_written(value))
            ):
                message = message.replace(python, written)
    if len(shown) > QUOTED_CHARS and shown in message:
        size = (
            f"{len(error.instance)} characters"
            if isinstance(error.instance, str)
            else f"{len(shown)} characters as written"
        )
        message = message.replace(shown, f"{shown[:QUOTED_CHARS]}… ({size})")
    return message


# Arguments nested deeper than this are refused before anything reads them (`refuse_unsendable`):
# no tool's input needs as many, and what walks them is recursive: the schema validators, the
# adapters' encoders (the A2A SDK's stops at 100 levels of its own, and a Python reader near 1,000).
MAX_ARGUMENT_DEPTH = 64
# the arguments as JSON text, refusing NaN and ±Infinity (json.dumps with these options)
_UNSENDABLE_CHECK = json.JSONEncoder(allow_nan=False, ensure_ascii=False, default=str).encode


def _unsendable(message: str, pointer: str) -> BridgeError:
    return BridgeError(
        f"{message} at {pointer or 'the top'}",
        error_class="invalid_arguments",
        recoverability="change_arguments",
        status="rejected",
        details={"errors": [{"path": pointer, "message": message}]},
    )


def refuse_unsendable(arguments: Any) -> None:
    """Arguments JSON cannot carry on to an upstream, as an invalid_arguments error naming where,
    before anything runs: NaN and ±Infinity (the JSON readers of the MCP SDK and of Python accept
    them); text that is not Unicode, a lone surrogate escape such as `\\ud800` (Python reads it
    into a string no UTF-8 writer takes: an upstream's session would fail on it, and every call
    sharing it); and nesting deeper than MAX_ARGUMENT_DEPTH levels."""
    try:
        text = _UNSENDABLE_CHECK(arguments)
    except RecursionError:
        text = None  # deeper than the encoder goes: found by the walk below
    except ValueError:
        raise _unsendable(
            "the arguments hold NaN or Infinity, which JSON cannot carry; send a finite number or null",
            _first_at(arguments, lambda v, _: isinstance(v, float) and not math.isfinite(v)) or "",
        ) from None
    if text is not None and not text.isascii() and has_surrogates(text):
        pointer = _first_at(arguments, lambda v, _: isinstance(v, str) and has_surrogates(v)) or ""
        raise _unsendable(
            "the arguments hold text that is not valid Unicode (a lone surrogate escape); send the text as "
            "UTF-8, or escape a character outside the Basic Multilingual Plane as a pair",
            without_surrogates(pointer),
        )
    # nesting needs as many brackets as levels: most arguments are told apart without a walk
    if text is None or text.count("{") + text.count("[") > MAX_ARGUMENT_DEPTH:
        deep = _first_at(
            arguments, lambda v, depth: depth > MAX_ARGUMENT_DEPTH and isinstance(v, dict | list)
        )
        if deep is not None:
            raise _unsendable(
                f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels; send flatter arguments",
                deep,
            )


def pointer_token(key: Any) -> str:
    """An object key as one step of a JSON pointer (RFC 6901: `~` and `/` escaped)."""
    return str(key).replace("~", "~0").replace("/", "~1")


def _first_at(value: Any, found: Callable[[Any, int], bool]) -> str | None:
    """The JSON pointer of the first value, or object key, in `value` (depth first, in order) for
    which `found(it, depth)` holds, the arguments object at depth 1; None if none. A pointer may
    hold a key's lone surrogate."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, pointer, depth = stack.pop()
        if found(item, depth):
            return pointer
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                step = f"{pointer}/{pointer_token(key)}"
                if found(key, depth + 1):
                    return step
                children.append((child, step, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(
                (child, f"{pointer}/{i}", depth + 1) for i, child in reversed(list(enumerate(item)))
            )
    return None


def invalid_arguments(what: str, errors: list[dict[str, str]]) -> BridgeError:
    """The one `invalid_arguments` error for schema violations: the first five in the message,
    all of them (up to the limit) in the details."""
    listing = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
    return BridgeError(
        f"arguments do not match the input schema of {what}: {listing}",
        error_class="invalid_arguments",
        recoverability="change_arguments",
        details={"errors": errors},
    )
