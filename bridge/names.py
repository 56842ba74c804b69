"""Exposed tool names: the upstream's name cleaned to `^[A-Za-z0-9_.-]{1,64}$`, prefixed with its
namespace or not (an upstream's `prefix`), and told apart by a suffix derived from the tool's id
when two tools would share one."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from bridge.supervisor import NAME_SEPARATOR

__all__ = ["MAX_NAME", "RESERVED_NAMES", "bare_name", "exposed_name", "pick_name"]

MAX_NAME = 64
# Names no tool is given: the MCP frontend's meta tools have them.
RESERVED_NAMES = frozenset({"search_tools", "call_tool"})
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _clean(raw: str) -> str:
    name = _INVALID.sub("_", raw).strip("_") or _short_hash(raw)
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 9].rstrip("_.-") + "_" + _short_hash(raw)
    return name


def exposed_name(namespace: str, native_name: str) -> str:
    """`<namespace>__<native name>` cleaned to `^[A-Za-z0-9_.-]{1,64}$`; a longer name keeps its
    head and gets a short hash of the whole, so distinct long names stay distinct."""
    return _clean(f"{namespace}{NAME_SEPARATOR}{native_name}")


def bare_name(native_name: str) -> str:
    """A tool's native name as an exposed name (`prefix: never`), cleaned as `exposed_name`."""
    return _clean(native_name)


def _head(base: str) -> str:
    return base[: MAX_NAME - 9].rstrip("_.-") + "_"


def _follows(name: str, bases: list[str]) -> bool:
    """Whether `name` is one of `bases` or one of them with a collision suffix."""
    return any(
        name == base or (name.startswith(_head(base)) and len(name) == len(_head(base)) + 8)
        for base in bases
    )


def pick_name(
    namespace: str,
    native_name: str,
    prefix: str,
    previous: str | None,
    free: Callable[[str], bool],
    tool_id: str,
    unused: Callable[[str], bool],
) -> tuple[str, bool]:
    """The name of a tool, and whether it is its first base name. A tool keeps `previous` (the
    name it was given before) while that still follows `prefix` and is `unused` by another tool;
    else it gets the first `free` one of its base names: `<namespace>__<native>` with `always`,
    the native name then that with `never` and `when_needed`; else the last base name with a
    suffix derived from its id (deterministic, whatever the order)."""
    prefixed = exposed_name(namespace, native_name)
    bases = [prefixed] if prefix == "always" else [bare_name(native_name), prefixed]
    if (
        previous
        and unused(previous)
        and _follows(previous, bases)
        and (_follows(previous, bases[:1]) or not free(bases[0]))
    ):
        return previous, _follows(previous, bases[:1])
    for base in bases:
        if free(base):
            return base, base is bases[0]
    attempt = 0
    while True:
        candidate = _head(bases[-1]) + _short_hash(f"{tool_id}:{attempt}")
        if unused(candidate):
            return candidate, False
        attempt += 1
