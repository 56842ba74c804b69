"""How tool search keeps in step with the catalog: from its change events alone (replayed when
search starts), it keeps its own record of what each upstream lists (`Listings`) and hands the
index and the semantic stages what changed. An upstream's first listing since the index opened
is compared with what the index holds (reconciled), and its namespace's shared description text
is looked at again on the index's writer thread. No thread of search reads the catalog's
upstreams: the writer thread reads the record, which the catalog's thread keeps."""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable

from bridge.catalog import Catalog, CatalogChange
from bridge.model import ToolDeclaration
from bridge.search.index import ToolIndex
from bridge.search.semantic import SemanticStage
from bridge.search.tooltext import SharedText, function_name, searched_description

__all__ = ["CatalogFeed", "Listings"]

_TOOL_ID = operator.attrgetter("tool_id")


def _by_namespace(
    upstream: str | None, decls: list[ToolDeclaration]
) -> dict[str, list[ToolDeclaration]]:
    """The declarations of a change by namespace: all of them its upstream's, when it names one."""
    if upstream is not None:
        return {upstream: decls} if decls else {}
    out: dict[str, list[ToolDeclaration]] = {}
    for decl in decls:
        out.setdefault(decl.namespace, []).append(decl)
    return out


class Listings:
    """What each upstream lists and its state, as the catalog's change events say: changed on
    the catalog's thread (`take`), read from any thread. A namespace's tools stay in the order
    the catalog holds them: a tool keeps its place when changed, a new one comes last."""

    def __init__(self) -> None:
        # namespace -> tool_id -> declaration
        self._tools: dict[str, dict[str, ToolDeclaration]] = {}
        self._states: dict[str, str] = {}  # namespace -> its upstream's state
        self._lock = threading.Lock()

    def take(self, change: CatalogChange) -> None:
        """Record a change of the catalog (a change of one upstream's tools, as the catalog
        makes them, in a few passes in C: 100,000 tools one at a time cost several times more)."""
        removed = _by_namespace(change.upstream, change.removed)
        upserts = _by_namespace(change.upstream, [*change.added, *change.updated])
        with self._lock:
            if change.upstream is not None:
                self._tools.setdefault(change.upstream, {})  # known also while it lists no tool
                if change.state is not None:
                    self._states[change.upstream] = change.state
            for namespace, decls in removed.items():
                tools = self._tools.get(namespace, {})
                for tool_id in map(_TOOL_ID, decls):
                    tools.pop(tool_id, None)
            for namespace, decls in upserts.items():
                self._tools.setdefault(namespace, {}).update(
                    zip(map(_TOOL_ID, decls), decls, strict=True)
                )

    def ready(self, namespace: str) -> bool:
        """Whether the namespace's upstream has listed its tools and is up, as last told."""
        with self._lock:
            return self._states.get(namespace) == "ready"

    def namespaces(self) -> list[str]:
        """Every namespace a change has named, in the order they first came."""
        with self._lock:
            return list(self._tools)

    def of(self, namespace: str) -> list[ToolDeclaration]:
        """The tools the namespace's upstream lists now."""
        with self._lock:
            return list(self._tools.get(namespace, {}).values())

    def all(self) -> list[ToolDeclaration]:
        """Every tool listed now, namespace after namespace."""
        with self._lock:
            return [decl for tools in self._tools.values() for decl in tools.values()]


class CatalogFeed:
    """The catalog's change events, handed to the index and the semantic stages of one search.

    Made before the index (whose compactions ask it for every tool: `listed_when_settled`), and
    started once the index and the stages are open (`start`)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.listings = Listings()
        self.settled = False  # every upstream has listed since the start (`_settle_when_listed`)
        self._following = False  # past the replay of what the catalog held (`start`)
        self._reconciled: set[str] = set()
        # namespace -> its changes submitted to the index (`_refresh`)
        self._refreshes: dict[str, int] = {}
        self._unsubscribe: Callable[[], None] | None = None

    def start(
        self, index: ToolIndex, shared: SharedText, stages: Callable[[], list[SemanticStage]]
    ) -> None:
        """Follow the catalog from now on, into `index` (whose documents read `shared`) and the
        semantic stages `stages()` answers; what it lists now is handed over first."""
        self.index, self.shared, self._stages = index, shared, stages
        # what the catalog holds now comes first, replayed as changes: only recorded (`_following`)
        self._unsubscribe = self.catalog.subscribe(self._on_change, replay=True)
        self._following = True
        # tools of upstreams no longer configured go; the others are compared with their listing
        self.index.submit(keep_namespaces=self.listings.namespaces())
        for namespace in self.listings.namespaces():
            if self.listings.ready(namespace):
                self._reconcile(namespace)
        tools = self.listed()  # handed to the stages after the index's batches: they wait for those
        for stage in self._stages():
            stage.submit(tools)
        self._settle_when_listed()

    def _on_change(self, change: CatalogChange) -> None:
        """Record the change, and hand it to the index's writer thread; documents are built there,
        and so is the namespace's shared description text looked at again (a pass over its
        listing)."""
        self.listings.take(change)  # before the index is told: its compactions read the listings
        if not self._following:
            return
        touched = (*change.added, *change.updated, *change.removed)
        namespaces = {change.upstream} if change.upstream else {d.namespace for d in touched}
        done: set[str] = set()
        for namespace in namespaces - self._reconciled:
            if self.listings.ready(namespace):
                self._reconcile(namespace)  # the whole listing: covers this change too
                done.add(namespace)
        for namespace in (namespaces & self._reconciled) - done:
            upserts = [d for d in (*change.added, *change.updated) if d.namespace == namespace]
            deletes = [(d.namespace, d.tool_id) for d in change.removed if d.namespace == namespace]
            if upserts or deletes:
                refresh = self._refresh(namespace, self.listings.of(namespace), True)
                self.index.submit(upserts, deletes, prepare=refresh)
        # after the index's batches, which the stages wait for (`ToolSearch._index_first`)
        for stage in self._stages():
            stage.submit((*change.added, *change.updated), [d.tool_id for d in change.removed])
        self._settle_when_listed()

    def _settle_when_listed(self) -> None:
        """Once no upstream is still connecting or down (each has listed since the start), the
        semantic stages may drop the vectors of texts no tool has (`SemanticStage.settle`): until
        then, those of an upstream not back yet are kept, not computed again when it lists. Asked
        where the catalog's changes reach the stages and the index, after them, so none is left
        behind. The index, filled by one commit after another as the upstreams listed, is then
        compacted when a search reads many segments of it (`ToolIndex.compact`)."""
        if not self.settled and not self.catalog.has_pending():
            self.settled = True
            for stage in self._stages():
                stage.settle()
            self.index.compact(self.listed())

    def _reconcile(self, namespace: str) -> None:
        """First listing of an upstream since the index opened: write what differs from the
        index, drop what the upstream no longer has. Tools with unchanged digests cost nothing."""
        self._reconciled.add(namespace)
        listing = self.listings.of(namespace)
        refresh = self._refresh(namespace, listing, False)
        self.index.submit(listing, reconcile=namespace, prepare=refresh)

    def listed(self) -> list[ToolDeclaration]:
        """Every tool the upstreams list now, as the catalog's changes said (from any thread)."""
        return self.listings.all()

    def listed_when_settled(self) -> list[ToolDeclaration] | None:
        """For the index's compactions (`ToolIndex.listing`): every tool, once every upstream has
        listed since the start (before, a compaction would drop the tools of one not back yet)."""
        return self.listed() if self.settled else None

    def _refresh(
        self, namespace: str, listing: list[ToolDeclaration], relist: bool
    ) -> Callable[[], tuple[str, list[ToolDeclaration]] | None]:
        """The `prepare` of a change of the namespace (`_refresh_shared`), numbered: a change
        submitted after it refreshes from a newer listing."""
        number = self._refreshes[namespace] = self._refreshes.get(namespace, 0) + 1
        return functools.partial(self._refresh_shared, namespace, listing, relist, number)

    def _refresh_shared(
        self, namespace: str, listing: list[ToolDeclaration], relist: bool, number: int = 0
    ) -> tuple[str, list[ToolDeclaration]] | None:
        """On the writer thread: look at the namespace's shared description text again. When it
        changed (and `relist`), every tool of the namespace is compared with the index again;
        only those whose document changed are written. A change's look is left to a later change
        of the namespace (`number`), which looks at a newer listing: each look is a pass over
        the listing (about 1 ms for 100 tools, 0.1 s for 10,000), and in a burst of 500
        single-tool changes they were half of each commit's work. The later change relists the
        namespace if its shared text changed meanwhile, this change's tool with it."""
        if relist and self._refreshes.get(namespace, 0) > number:
            return None
        texts = ((function_name(d), searched_description(d)) for d in listing)
        changed = self.shared.refresh(namespace, texts)
        return (namespace, listing) if changed and relist else None

    def reindex(self) -> None:
        """Compare every tool listed with the index again (after a failed commit, say); the
        tools of a namespace no change has named are dropped."""
        self._reconciled.clear()
        self.index.submit(keep_namespaces=self.listings.namespaces())
        for namespace in self.listings.namespaces():
            if self.listings.ready(namespace):
                self._reconcile(namespace)

    def close(self) -> None:
        """Follow the catalog no more."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
