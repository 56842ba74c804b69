"""Exposed tool names: the upstream's name cleaned to `^[A-Za-z0-9_.-]{1,64}$`, prefixed with its
namespace or not (an upstream's `prefix`), and told apart by a suffix derived from the tool's id
when two tools would share one; and the names a store that replicas share gives (the first
replica to name a tool names it for all)."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable

from bridge.model import ToolDeclaration
from bridge.store import StoreInterface
from bridge.supervisor import NAME_SEPARATOR

__all__ = [
    "MAX_NAME",
    "RESERVED_NAMES",
    "adopt",
    "bare_name",
    "claim",
    "claimed_names",
    "exposed_name",
    "pick_name",
    "suffixed",
]

log = logging.getLogger("bridge.catalog")

MAX_NAME = 64
# Names no tool is given: the MCP frontend's meta tools have them.
RESERVED_NAMES = frozenset({"search_tools", "call_tool"})
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
# other names a tool tries when the one it was to have is another tool's in a shared store
CLAIM_ATTEMPTS = 8


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


def suffixed(base: str, tool_id: str, attempt: int = 0) -> str:
    """`base` with a suffix derived from the tool's id and the attempt: alike on every replica."""
    return _head(base) + _short_hash(f"{tool_id}:{attempt}")


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
    name it was given before) while that still follows `prefix` and is `unused` by another tool:
    with `always`, any name in its namespace (`<namespace>__...`, whatever rule once gave it);
    else it gets the first `free` one of its base names: `<namespace>__<native>` with `always`,
    the native name then that with `never` and `when_needed`; else the last base name with a
    suffix derived from its id (deterministic, whatever the order)."""
    prefixed = exposed_name(namespace, native_name)
    bases = [prefixed] if prefix == "always" else [bare_name(native_name), prefixed]
    if previous and unused(previous):
        first = _follows(previous, bases[:1]) or (
            prefix == "always" and previous.startswith(namespace + NAME_SEPARATOR)
        )
        if first or (_follows(previous, bases) and not free(bases[0])):
            return previous, first
    for base in bases:
        if free(base):
            return base, base is bases[0]
    attempt = 0
    while True:
        candidate = suffixed(bases[-1], tool_id, attempt)
        if unused(candidate):
            return candidate, False
        attempt += 1


def claimed_names(
    store: StoreInterface,
    rows: list[tuple[str, str, str, str]],
    bases: dict[str, str],
    unused: Callable[[str, str], bool],
) -> dict[str, str]:
    """tool_id -> the name `store` holds for each tool of `rows` (namespace, tool_id, proposed
    name, native_id) once claimed: the proposed one, or the one another replica gave the tool
    first. A tool whose proposed name is another tool's there tries the suffixes of its last
    base name (`bases`) that no other tool holds here (`unused(name, tool_id)`) or there; past
    CLAIM_ATTEMPTS it keeps the proposed name (said)."""
    held = store.claim_names(rows)
    waiting = [row for row in rows if row[1] not in held]
    for attempt in range(CLAIM_ATTEMPTS):
        if not waiting:
            break
        retry = []
        for namespace, tool_id, _, native_id in waiting:
            candidate = suffixed(bases[tool_id], tool_id, attempt)
            if unused(candidate, tool_id):
                retry.append((namespace, tool_id, candidate, native_id))
        if retry:
            held.update(store.claim_names(retry))
        waiting = [row for row in waiting if row[1] not in held]
    for _, tool_id, name, _ in waiting:
        log.warning(
            "tool %s: no name of its own in the store after %d tries; named %s here only",
            tool_id,
            CLAIM_ATTEMPTS,
            name,
        )
        held[tool_id] = name
    return held


def claim(
    store: StoreInterface,
    given: list[tuple[str, str, str, str]],
    by_id: dict[str, ToolDeclaration],
    by_name: dict[str, str],
) -> dict[str, str]:
    """`claimed_names` of the tools just named (`given`: namespace, tool_id, name, native_id),
    with `by_id` and `by_name` the catalog's maps (only read: it may run off the event loop)."""
    bases = {row[1]: exposed_name(row[0], by_id[row[1]].native_name) for row in given}
    return claimed_names(
        store, given, bases, lambda name, tool_id: by_name.get(name, tool_id) == tool_id
    )


def adopt(
    held: dict[str, str],
    given: list[tuple[str, str, str, str]],
    by_id: dict[str, ToolDeclaration],
    by_name: dict[str, str],
    assigned: dict[str, str],
) -> list[ToolDeclaration]:
    """Adopt the names a shared store holds (`held`, from `claim`) for the tools of `given`
    still named so: another replica may have named one first, or given its name to
    another tool. The catalog's maps (`by_id`, `by_name`, `assigned`: tool_id -> name given)
    change in place; returns the tools renamed."""
    moves = {
        tool_id: held[tool_id]
        for _, tool_id, name, _ in given
        if held.get(tool_id, name) != name and tool_id in by_id and by_id[tool_id].name == name
    }
    for tool_id in moves:  # every old name is let go first: two tools may swap theirs
        del by_name[by_id[tool_id].name]
    renamed = []
    for tool_id, name in moves.items():
        decl = by_id[tool_id]
        if by_name.get(name, tool_id) == tool_id:  # else it keeps its own (held by another here)
            decl.name = name
            renamed.append(decl)
        by_name[decl.name] = tool_id
    assigned.update(
        (tool_id, by_id[tool_id].name) for _, tool_id, _, _ in given if tool_id in by_id
    )
    return renamed
