"""The federated catalog: every upstream's tools merged under namespaces with stable ids and
names, versioned, kept in step with the upstreams (re-listing, outages, reconnects with backoff),
and announced to listeners as change events."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bridge import names as naming
from bridge.model import (
    SCHEMA_VERSION,
    InputContract,
    OutputContract,
    ToolDeclaration,
    UpstreamState,
    UpstreamTool,
    now_iso,
    takes_objects,
    tool_uuid,
)
from bridge.names import MAX_NAME, RESERVED_NAMES, exposed_name, pick_name
from bridge.store import Store, StoreInterface
from bridge.supervisor import NAME_SEPARATOR, UpstreamSlot, UpstreamSupervisor
from bridge.text import has_surrogates, without_surrogates
from bridge.versions import Signed, UnencodableText, VersionRegistry, sign

__all__ = [
    "MAX_NAME",
    "NAME_SEPARATOR",
    "UNSUPPORTED_INPUT",
    "Catalog",
    "CatalogChange",
    "exposed_name",
]

# The blocked reason of a tool whose input schema cannot accept an object (`{"type": "string"}`):
# every frontend passes arguments as an object, so no caller could reach it.
UNSUPPORTED_INPUT = "unsupported_input_schema"

log = logging.getLogger("bridge.catalog")
T = TypeVar("T")

# Longest tool description kept (characters). Real ones run to a few thousand; a longer one (a
# whole manual, or a runaway upstream) would be sent in every listing and indexed whole, so it is
# cut here, with a warning, and ends in "…".
MAX_DESCRIPTION_CHARS = 32_768
# A listing of this many tools or more is declared on a worker thread (`Catalog._take`): about
# 40 µs a tool, so a smaller one holds the event loop under 10 ms.
OFF_LOOP_TOOLS = 200
# Tools of a listing declared, signed and versioned together (`Catalog._prepare`).
SIGN_BATCH = 1000
# The ids of the tools each recent change touched, kept for `changed_since` (a surface then
# places again only those, not a million tools after each change): up to JOURNAL_IDS ids in all
# (800 KB); a change of more tools is kept as "many" (look at every tool).
JOURNAL_IDS = 100_000


# pydantic gives every record a set of the names of the fields it was given: 2.2 KB for a
# declaration, a third of its memory. `_declare` gives every field, so its declarations share one
# set of them (pydantic adds a field's name to it when the field is assigned: already there).
_DECLARED_FIELDS = set(ToolDeclaration.model_fields)
_CONTRACT_FIELDS = {"model_input_schema"}


@dataclass
class CatalogChange:
    """One step of the catalog. `upstream` is the namespace it concerns (None for several), and
    `state` that upstream's state after the step (its `UpstreamHealth.state`; `ready` once it
    has listed its tools), so that a listener follows the catalog from its changes alone."""

    upstream: str | None
    added: list[ToolDeclaration] = field(default_factory=list)
    updated: list[ToolDeclaration] = field(default_factory=list)
    removed: list[ToolDeclaration] = field(default_factory=list)
    state_changed: bool = False
    state: UpstreamState | None = None

    @property
    def empty(self) -> bool:
        return not (self.added or self.updated or self.removed or self.state_changed)


class Catalog(UpstreamSupervisor):
    """The merged catalog. Lookups are dictionary reads; changes come from the upstream
    supervisors (one asyncio task per upstream) or from `apply_tools`."""

    def __init__(self, store: StoreInterface | None = None) -> None:
        super().__init__()
        self.store: StoreInterface = store or Store()
        self.versions = VersionRegistry(self.store)
        self._by_id: dict[str, ToolDeclaration] = {}
        self._by_name: dict[str, str] = {}  # exposed name or alias -> tool_id
        self._kinds: Counter[str] = Counter()  # tool_kind -> its tools
        self._assigned = self.store.assigned_names()
        self._holders: dict[str, str] | None = None  # name -> the tool given it, when asked
        self._listeners: list[Callable[[CatalogChange], None]] = []
        self.generation = 0
        self._journal: deque[tuple[int, tuple[str, ...] | None]] = (
            deque()
        )  # (generation, ids it touched)
        self._journal_ids = 0

    # ---------------------------------------------------------------- merging

    def _drop_tools(self, slot: UpstreamSlot) -> None:
        removed = list(slot.tools.values())
        slot.tools = {}
        slot.health.tool_count = 0
        for decl in removed:
            self._forget(decl)
        self._emit(CatalogChange(upstream=slot.name, removed=removed, state_changed=True))

    def _mark(
        self, slot: UpstreamSlot, state: UpstreamState, reason: str, next_retry: float | None = None
    ) -> None:
        """An upstream went down: its tools stay listed, marked with the reason."""
        slot.health.state = state
        slot.health.reason = reason
        slot.health.next_retry_in = next_retry
        updated = []
        for decl in slot.tools.values():
            if decl.loading_state != "unavailable" or decl.loading_reason != reason:
                decl.loading_state = "unavailable"
                decl.loading_reason = reason
                updated.append(decl)
        self._emit(CatalogChange(upstream=slot.name, updated=updated, state_changed=True))

    def apply_tools(self, upstream_name: str, tools: list[UpstreamTool]) -> CatalogChange:
        """Replace an upstream's tool set (what a listing does). Public for tests and benches."""
        return self._apply(self.slots[upstream_name], tools, ready=True)

    async def take_tools(self, upstream_name: str, tools: list[UpstreamTool]) -> CatalogChange:
        """`apply_tools` as a listing is taken while serving: a large one is declared off the
        event loop (`_take`). Public for tests and benches."""
        return await self._take(self.slots[upstream_name], tools)

    def _declare(self, slot: UpstreamSlot, tool: UpstreamTool) -> ToolDeclaration:
        """The declaration of one upstream tool (validated construction: with pydantic-core it is
        several times faster than `model_construct`, which this hot path must avoid)."""
        namespace = slot.name
        output = OutputContract(output_schema=tool.output_schema) if tool.output_schema else None
        contract = InputContract(model_input_schema=tool.input_schema)
        object.__setattr__(contract, "__pydantic_fields_set__", _CONTRACT_FIELDS)
        decl = ToolDeclaration(
            schema_version=SCHEMA_VERSION,
            tool_id=tool_uuid(namespace, tool.native_id),
            namespace=namespace,
            name="",
            aliases=[],
            title=tool.title,
            description=tool.description
            if len(tool.description) <= MAX_DESCRIPTION_CHARS
            else _cut_description(slot, tool),
            search_hint=tool.search_hint,
            lifecycle=tool.lifecycle,
            tool_kind=tool.tool_kind,
            capability_refs=None,
            input_contract=contract,
            output_contract=output,
            external_mappings=[_mapping(slot, tool)],
            annotations=dict(tool.annotations),
            upstream=namespace,
            upstream_kind=slot.upstream.kind,
            native_id=tool.native_id,
            native_name=tool.name,
            tags=_tags(slot, tool),
            safety=tool.safety,
            version=1,
            signature_digest="",
            loading_state="loaded",
            loading_reason=None,
            blocked_reason=_blocked_reason(tool),
            blocked_detail=tool.blocked_detail,
            timeout=tool.timeout,
        )
        object.__setattr__(decl, "__pydantic_fields_set__", _DECLARED_FIELDS)
        return decl

    def _name(self, decl: ToolDeclaration, prefix: str = "always") -> str:
        """The name a tool is given (`bridge.names.pick_name`): with `prefix: always` a name is
        free when no other tool has it now; otherwise also when none was given it before."""
        taken, tool_id = self._by_name, decl.tool_id
        if prefix == "always":
            free: Callable[[str], bool] = lambda name: taken.get(name, tool_id) == tool_id  # noqa: E731
        else:
            free = lambda name: self._free(name, tool_id)  # noqa: E731
        name, own = pick_name(
            decl.namespace,
            decl.native_name,
            prefix,
            self._assigned.get(tool_id),
            free,
            tool_id,
            lambda name: taken.get(name, tool_id) == tool_id,
        )
        if not own and prefix == "never":
            log.warning(
                "upstream %s (prefix: never): tool %s is named %s, as another tool holds "
                "its own name",
                decl.namespace,
                decl.native_name,
                name,
            )
        return name

    def _free(self, name: str, tool_id: str) -> bool:
        """Whether `name` may be given to `tool_id`: no other tool has it now, nor was given it
        before (the store's names, looked up by name once a `prefix` asks for it), and it is
        not reserved."""
        if name in RESERVED_NAMES or self._by_name.get(name, tool_id) != tool_id:
            return False
        if self._holders is None:
            self._holders = {given: holder for holder, given in self._assigned.items()}
        return self._holders.get(name, tool_id) == tool_id

    def _apply(
        self,
        slot: UpstreamSlot,
        tools: list[UpstreamTool] | None,
        ready: bool,
        *,
        added: list[UpstreamTool] | None = None,
    ) -> CatalogChange:
        """Take a listing (or the tools announced, `added`) at once, on the calling thread
        (`apply_tools`, and small listings)."""
        with _collector_paused(len(tools if tools is not None else added or ())):
            change, names = self._commit(slot, *self._prepare(slot, tools, added), ready)
            self.store.save_names(names)
            return change

    async def _take(
        self,
        slot: UpstreamSlot,
        tools: list[UpstreamTool] | None = None,
        *,
        added: list[UpstreamTool] | None = None,
    ) -> CatalogChange:
        """Take an upstream's listing (`tools`), or the tools it announced (`added`) merged into
        its current ones. A large one is declared and signed on a worker thread, and only merged
        on the event loop: declaring 100,000 tools held the loop, and every call it serves,
        for 3.6 s, even when none of them had changed (under 25 ms now: bench/bench_catalog.py)."""
        size = len(
            tools if tools is not None else added or ()
        )  # the tools to compare, and declare if changed
        if size < OFF_LOOP_TOOLS:
            return self._apply(slot, tools, ready=True, added=added)
        with _collector_paused(size):
            slot.phase = f"declaring and versioning {size:,} tools"
            try:
                prepared = await self._off_loop(self._prepare, slot, tools, added)
            finally:
                slot.phase = None
            change, names = self._commit(slot, *prepared, ready=True, claim_now=False)
        if names and self.store.shared:  # claimed off the loop, and renamed where another named
            held = await self._off_loop(naming.claim, self.store, names, self._by_id, self._by_name)
            renamed = naming.adopt(held, names, self._by_id, self._by_name, self._assigned)
            self._holders = None
            self._emit(CatalogChange(upstream=slot.name, updated=renamed))
        elif names:  # kept for the next start; meanwhile the catalog has them
            await self._off_loop(self.store.save_names, names)
        return change

    async def _off_loop(self, func: Callable[..., T], *args: Any) -> T:
        """`func(*args)` on a worker thread, run to its end even when the task awaiting it is
        cancelled (a listing's versions and names are not left half written); `close` waits
        for it."""
        job = asyncio.ensure_future(asyncio.to_thread(func, *args))
        self._off_loop_jobs.add(job)
        job.add_done_callback(self._off_loop_jobs.discard)
        return await asyncio.shield(job)

    def _prepare(
        self,
        slot: UpstreamSlot,
        tools: list[UpstreamTool] | None,
        added: list[UpstreamTool] | None = None,
    ) -> tuple[set[str], list[ToolDeclaration]]:
        """The native ids listed, and the declarations (sorted by native id) of its tools that
        are new or changed, versioned: work that reads nothing the event loop changes meanwhile
        (the slot's tools change only when this upstream's listing is merged, which waits for
        this). With `added` instead of `tools`, the upstream's current tools stay as they are."""
        seen: dict[str, UpstreamTool] = {}
        for tool in tools if tools is not None else added or []:
            if has_surrogates(
                tool.native_id
            ):  # cleaned before it is a key, so each listing finds it again
                tool = _cleaned(slot, tool)
            seen.setdefault(tool.native_id, tool)  # a native id listed twice counts once
        listed = set(seen) if tools is not None else {*slot.tools, *seen}
        # a tool listed as it was keeps its declaration (and version) without being declared
        # again: re-listing 100,000 unchanged tools took 4.1 s when each was declared and signed
        # to be compared, about 0.5 s now (bench/bench_catalog.py)
        # named in the order of their ids, those whose id is their name first: of two OpenAPI
        # operations given one operationId, the one it routes to keeps the clean name (the
        # other, whose id is its method and path, gets a suffix)
        order = sorted(
            (n for n, tool in seen.items() if not _listed_as(slot, tool, slot.tools.get(n))),
            key=lambda n: (seen[n].name != n, n),
        )
        # declared, signed and versioned a batch at a time: the canonical text of every signature
        # of a listing, held at once, was Microsoft Graph beta's 217 MB (and the process kept it)
        changed: list[ToolDeclaration] = []
        for start in range(0, len(order), SIGN_BATCH):
            changed.extend(self._versioned(slot, seen, order[start : start + SIGN_BATCH]))
        return listed, changed

    def _versioned(
        self, slot: UpstreamSlot, seen: dict[str, UpstreamTool], order: list[str]
    ) -> list[ToolDeclaration]:
        """The declarations of the tools `order` names that are new or changed, their versions
        written to the store."""
        fresh = [self._declare(slot, seen[n]) for n in order]
        try:
            signed = sign(fresh)
        except UnencodableText as exc:
            for i in exc.indices:
                fresh[i] = self._declare(slot, _cleaned(slot, seen[order[i]]))
            signed = sign(fresh)
        # a declaration equal to the one the tool has (its text cleaned as before) changes nothing;
        # those made again are let go here, one at a time (100,000 let go at once, as the lists
        # died, held the event loop 0.2 s)
        changed: list[ToolDeclaration] = []
        changed_signed: list[Signed] = []
        while fresh:
            decl, signature = fresh.pop(), signed.pop()
            old = slot.tools.get(decl.native_id)
            if (
                old is not None
                and old.loading_state == "loaded"
                and _declared_facts(old) == _declared_facts(decl)
            ):
                continue
            changed.append(decl)
            changed_signed.append(signature)
        changed.reverse()
        changed_signed.reverse()
        # their versions, in the store before the catalog shows them (only this upstream's
        # listings change its tools' versions, and they are taken one after the other)
        self.versions.assign(changed, changed_signed)
        return changed

    def _commit(
        self,
        slot: UpstreamSlot,
        seen: set[str],
        changed: list[ToolDeclaration],
        ready: bool,
        claim_now: bool = True,
    ) -> tuple[CatalogChange, list[tuple[str, str, str, str]]]:
        """Merge prepared declarations (those new or changed, versioned) into the catalog: names,
        maps, change event; `seen` is every native id listed. Returns the change and the names
        given, for the store (a shared one has them already, unless not `claim_now`)."""
        change = CatalogChange(
            upstream=slot.name, state_changed=ready and slot.health.state != "ready"
        )
        if ready:
            slot.health.state = "ready"
            slot.health.reason = None
            slot.health.next_retry_in = None
            slot.health.last_ok = now_iso()
        for native_id in [n for n in slot.tools if n not in seen]:
            decl = slot.tools.pop(native_id)
            self._forget(decl)
            change.removed.append(decl)
        new_names: list[tuple[str, str, str, str]] = []
        for decl in changed:
            old = slot.tools.get(decl.native_id)
            if old is not None:
                decl.name, decl.aliases = old.name, old.aliases
                change.updated.append(decl)
                self._kinds[old.tool_kind] -= 1
            else:
                decl.name = self._name(decl, slot.upstream.config.prefix)
                if self._assigned.get(decl.tool_id) != decl.name:
                    self._assigned[decl.tool_id] = decl.name
                    if self._holders is not None:
                        self._holders[decl.name] = decl.tool_id
                    new_names.append((decl.namespace, decl.tool_id, decl.name, decl.native_id))
                change.added.append(decl)
            slot.tools[decl.native_id] = decl
            self._by_id[decl.tool_id] = decl
            self._kinds[decl.tool_kind] += 1
            self._by_name[decl.name] = decl.tool_id
            for alias in decl.aliases:
                self._by_name.setdefault(alias, decl.tool_id)
        slot.health.tool_count = len(slot.tools)
        if new_names and self.store.shared and claim_now:  # the store then holds the names
            held = naming.claim(self.store, new_names, self._by_id, self._by_name)
            naming.adopt(held, new_names, self._by_id, self._by_name, self._assigned)
            self._holders, new_names = None, []
        self._emit(change)
        return change, new_names

    def _forget(self, decl: ToolDeclaration) -> None:
        if self._by_id.pop(decl.tool_id, None) is not None:
            self._kinds[decl.tool_kind] -= 1
        for name in (decl.name, *decl.aliases):
            if self._by_name.get(name) == decl.tool_id:
                del self._by_name[name]

    def _emit(self, change: CatalogChange) -> None:
        if change.empty:
            return
        if change.upstream is not None and (slot := self.slots.get(change.upstream)) is not None:
            change.state = slot.health.state
        self.generation += 1
        touched = [d.tool_id for d in (*change.added, *change.updated, *change.removed)]
        ids = tuple(touched) if len(touched) <= JOURNAL_IDS else None
        self._journal.append((self.generation, ids))
        self._journal_ids += len(ids or ())
        while (
            self._journal_ids > JOURNAL_IDS or len(self._journal) > JOURNAL_IDS
        ):  # changes of no tool count too
            self._journal_ids -= len(self._journal.popleft()[1] or ())
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a listener's bug must not stop the catalog
                log.exception("catalog listener failed")

    def subscribe(
        self, listener: Callable[[CatalogChange], None], *, replay: bool = False
    ) -> Callable[[], None]:
        """Call `listener` with each change from now on, on the catalog's thread; returns the
        function that stops it. With `replay`, the listener is first told what the catalog holds
        now: a change per upstream, in the order they were added, with its tools as added and its
        state, so that it needs nothing else of the catalog to follow it."""
        if replay:
            for slot in list(self.slots.values()):
                listener(
                    CatalogChange(
                        upstream=slot.name, added=list(slot.tools.values()), state=slot.health.state
                    )
                )
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ---------------------------------------------------------------- lookups

    def get(self, tool_id: str) -> ToolDeclaration | None:
        return self._by_id.get(tool_id)

    def resolve(self, ref: str) -> ToolDeclaration | None:
        """By exposed name, alias or tool_id (a UUID, in either case: `A1B2…` is `a1b2…`)."""
        tool_id = self._by_name.get(ref, ref)
        found = self._by_id.get(tool_id)
        if found is None and len(ref) == 36 and not ref.islower():
            found = self._by_id.get(ref.lower())
        return found

    def declarations(self) -> Iterable[ToolDeclaration]:
        return self._by_id.values()

    def kinds(self) -> list[str]:
        """The `tool_kind`s of the catalog's tools, sorted."""
        return sorted(kind for kind, count in self._kinds.items() if count > 0)

    def changed_since(self, generation: int) -> set[str] | None:
        """The ids of the tools added, updated or removed after `generation`; None when that is
        not known (too long ago, or too many tools): look at every tool then."""
        if generation < 0 or generation > self.generation:
            return None
        ids: set[str] = set()
        if generation == self.generation:
            return ids
        if not self._journal or self._journal[0][0] > generation + 1:
            return None
        for at, touched in reversed(self._journal):
            if at <= generation:
                break
            if touched is None:
                return None
            ids.update(touched)
        return ids

    def __len__(self) -> int:
        return len(self._by_id)


@contextlib.contextmanager
def _collector_paused(tools: int) -> Iterator[None]:
    """Building many long-lived objects triggers full cyclic-GC passes over the whole catalog
    again and again; nothing built for a listing is cyclic, so collection waits until the end."""
    pause = tools > 2000 and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause:
            gc.enable()


def _cut_description(slot: UpstreamSlot, tool: UpstreamTool) -> str:
    """The first MAX_DESCRIPTION_CHARS characters of a longer description, said once a tool."""
    if tool.native_id not in slot.long_warned:
        slot.long_warned.add(tool.native_id)
        log.warning(
            "upstream %s: tool %r has a description of %d characters; it is cut to %d",
            slot.name,
            tool.name,
            len(tool.description),
            MAX_DESCRIPTION_CHARS,
        )
    return _cut(tool.description)


def _cut(description: str) -> str:
    return (
        description
        if len(description) <= MAX_DESCRIPTION_CHARS
        else description[: MAX_DESCRIPTION_CHARS - 1] + "…"
    )


def _declared_facts(decl: ToolDeclaration) -> tuple[Any, ...]:
    """What a declaration took from its upstream's tool (`Catalog._declare`): equal facts, the
    same declaration but for the names, versions and loading state the catalog gives it."""
    return (
        decl.native_name,
        decl.description,
        decl.title,
        decl.tool_kind,
        decl.input_schema,
        decl.output_schema,
        decl.safety,
        decl.tags,
        decl.search_hint,
        decl.external_mappings,
        decl.annotations,
        decl.lifecycle,
        decl.blocked_reason,
        decl.blocked_detail,
        decl.timeout,
    )


def _listed_as(slot: UpstreamSlot, tool: UpstreamTool, decl: ToolDeclaration | None) -> bool:
    """Whether `decl`, loaded, is the declaration `Catalog._declare` makes of `tool` (its
    `_declared_facts` equal), told without making one: a few comparisons instead of a
    declaration and its signature."""
    if decl is None or decl.loading_state != "loaded":
        return False
    return _declared_facts(decl) == (
        tool.name,
        _cut(tool.description),
        tool.title,
        tool.tool_kind,
        tool.input_schema,
        tool.output_schema or None,
        tool.safety,
        _tags(slot, tool),
        tool.search_hint,
        [_mapping(slot, tool)],
        tool.annotations,
        tool.lifecycle,
        _blocked_reason(tool),
        tool.blocked_detail,
        tool.timeout,
    )


def _tags(slot: UpstreamSlot, tool: UpstreamTool) -> list[str]:
    """A tool's tags and then its upstream's own, each once."""
    extra = slot.upstream.config.tags
    return list(dict.fromkeys([*tool.tags, *extra])) if extra else list(tool.tags)


def _mapping(slot: UpstreamSlot, tool: UpstreamTool) -> dict[str, Any]:
    """A tool's external mapping, naming its upstream's kind as `source` when it names none."""
    mapping = dict(tool.external_mapping)
    mapping.setdefault("source", slot.upstream.kind)
    return mapping


def _blocked_reason(tool: UpstreamTool) -> str | None:
    """The upstream's reason, or UNSUPPORTED_INPUT for a tool whose input cannot be an object."""
    return tool.blocked_reason or (None if takes_objects(tool.input_schema) else UNSUPPORTED_INPUT)


def _cleaned(slot: UpstreamSlot, tool: UpstreamTool) -> UpstreamTool:
    """The tool with its lone surrogates replaced (see `without_surrogates`), said once a tool."""
    cleaned: UpstreamTool = without_surrogates(tool)
    if cleaned.native_id not in slot.unicode_warned:
        slot.unicode_warned.add(cleaned.native_id)
        log.warning(
            "upstream %s: tool %r has text that is not valid Unicode (a lone surrogate escape); "
            "it is listed with U+FFFD in its place",
            slot.name,
            cleaned.name,
        )
    return cleaned
