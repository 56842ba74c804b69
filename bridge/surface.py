"""Surfaces: what one consumer sees of the catalog. Each tool is loaded (full schema listed),
deferred (found through search) or blocked (invisible and uncallable, with a machine reason). A
tool the surface's own rules block is hidden besides: answered as one that does not exist."""

from __future__ import annotations

import difflib
import fnmatch
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from bridge.catalog import Catalog
from bridge.config import Rule, RuleSpec, SurfaceConfig
from bridge.model import BlockedTool, DeferredToolRef, ToolDeclaration, ToolSurface
from bridge.text import quoted

log = logging.getLogger("bridge.surface")

__all__ = ["Placement", "Surface", "Surfaces", "deferred_ref", "rule_matches"]


@dataclass(frozen=True)
class Placement:
    """Where a tool is on a surface. `hidden`: blocked by the surface's own rule (`block:`,
    `read_only: true`), which is access control: callers are answered as for a tool that does
    not exist, and only the log says why. Other blocks (the upstream's reason, the tool's
    lifecycle, a need of user interaction) are told to the caller, who can act on them."""

    state: Literal["loaded", "deferred", "blocked"]
    reason: str | None = None
    hidden: bool = False


LOADED = Placement("loaded")
DEFERRED = Placement("deferred")
HIDDEN_NOT_READ_ONLY = Placement("blocked", "policy_blocked", hidden=True)
# lifecycle states that keep a tool off every surface, with the machine reason given
_LIFECYCLE_BLOCKS = {
    "requires_setup": "setup_required",
    "disabled": "policy_blocked",
    "retired": "policy_blocked",
}


@lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


def rule_matches(rule: RuleSpec, decl: ToolDeclaration) -> bool:
    if isinstance(rule, str):
        return bool(_glob(rule).match(decl.name))
    safety = decl.safety
    checks = (
        rule.name is None or _glob(rule.name).match(decl.name) is not None,
        rule.upstream is None or _glob(rule.upstream).match(decl.upstream) is not None,
        rule.tag is None or rule.tag in decl.tags,
        rule.kind is None or rule.kind == decl.tool_kind,
        rule.read_only is None or rule.read_only == safety.read_only,
        rule.destructive is None or rule.destructive == safety.destructive,
        rule.open_world is None or rule.open_world == safety.open_world,
        rule.requires_user_interaction is None
        or rule.requires_user_interaction == safety.requires_user_interaction,
    )
    return all(checks)


def _any(rules: list[RuleSpec], decl: ToolDeclaration) -> RuleSpec | None:
    return next((r for r in rules if rule_matches(r, decl)), None)


def deferred_ref(decl: ToolDeclaration, loading_state: str | None = None) -> DeferredToolRef:
    return DeferredToolRef(
        tool_id=decl.tool_id,
        name=decl.name,
        namespace=decl.namespace,
        search_hint=decl.search_hint,
        description=decl.description,
        source=decl.upstream_kind or None,
        schema_visibility="deferred",
        loading_state=loading_state
        or ("deferred" if decl.loading_state == "loaded" else decl.loading_state),
        reason=decl.loading_reason,
        pending_provider_or_server=decl.upstream if decl.loading_state != "loaded" else None,
        native_ref=decl.external_mappings[0] if decl.external_mappings else None,
    )


class Surface:
    """A surface over a catalog. Placements are cached; after a catalog change only the tools it
    touched are placed again (`Catalog.changed_since`), unless the auto-load rule turns."""

    def __init__(self, config: SurfaceConfig, catalog: Catalog) -> None:
        self.config = config
        self.catalog = catalog
        self.name = config.name
        self._generation = -1
        self._placements: dict[str, Placement] = {}
        self._loaded: list[ToolDeclaration] | None = None
        self._counts: dict[str, int] | None = None  # once counted, every tool has its placement
        self._blocked_ids: set[str] | None = None  # the tools blocked here, once counted
        self._auto: bool | None = None  # whether the auto-load rule held for the placements made
        self._shown: tuple[int, list[str]] | None = (
            None  # (catalog generation, the ids of the tools shown)
        )

    def _fresh(self) -> None:
        generation = self.catalog.generation
        if self._generation == generation:
            return
        changed = self.catalog.changed_since(self._generation)
        self._generation = generation
        if changed is None:
            self._forget(blocked=True)
            return
        if self._blocked_ids is not None:
            for tool_id in changed:
                decl = self.catalog.get(tool_id)
                if decl is not None and self._blocked(decl) is not None:
                    self._blocked_ids.add(tool_id)
                else:
                    self._blocked_ids.discard(tool_id)
        if self._auto is not None and self._auto != self._auto_load():
            self._forget(blocked=False)  # every tool without a rule of its own changes place
            return
        counts = self._counts
        for tool_id in changed:
            before = self._placements.pop(tool_id, None)
            if counts is None:
                continue
            if before is not None:
                counts[before.state] -= 1
            decl = self.catalog.get(tool_id)
            after = None
            if decl is not None:
                after = self._placements[tool_id] = self._classify(decl)
                counts[after.state] += 1
            if (before is not None and before.state == "loaded") or (
                after is not None and after.state == "loaded"
            ):
                self._loaded = None  # made again when asked, with the tool's new declaration

    def _forget(self, *, blocked: bool) -> None:
        self._placements.clear()
        self._loaded = self._counts = self._auto = None
        if blocked:
            self._blocked_ids = None

    def place(self, decl: ToolDeclaration) -> Placement:
        if self._generation != self.catalog.generation:  # as `_fresh` tells, without a call
            self._fresh()
        placement = self._placements.get(decl.tool_id)
        if placement is None:
            placement = self._placements[decl.tool_id] = self._classify(decl)
        return placement

    def _classify(self, decl: ToolDeclaration) -> Placement:
        blocked = self._blocked(decl)
        if blocked is not None:
            return blocked
        cfg = self.config
        if _any(cfg.load, decl) is not None:
            return LOADED
        if _any(cfg.defer, decl) is not None:
            return DEFERRED
        if self._auto is None:
            self._auto = self._auto_load()
        return LOADED if self._auto else DEFERRED

    def _auto_load(self) -> bool:
        """With neither `load` nor `defer` rules, every visible tool is loaded while the catalog,
        or the part of it not blocked here, is within the auto-load threshold."""
        cfg = self.config
        return (
            not cfg.load
            and not cfg.defer
            and (
                len(self.catalog) <= cfg.auto_load_threshold
                or self._visible_count() <= cfg.auto_load_threshold
            )
        )

    def _blocked(self, decl: ToolDeclaration) -> Placement | None:
        """Why a tool is invisible on this surface, or None. The surface's own rules decide
        first, so that a tool they block is hidden whatever else blocks it. An `allow` rule lifts
        every block except the surface-wide `read_only` switch."""
        cfg = self.config
        if cfg.read_only and not decl.safety.read_only:
            return HIDDEN_NOT_READ_ONLY
        if _any(cfg.allow, decl) is not None:
            return None
        blocking = _any(cfg.block, decl)
        if blocking is not None:
            given = blocking.reason if isinstance(blocking, Rule) else None
            return Placement("blocked", given or "policy_blocked", hidden=True)
        if decl.blocked_reason:
            return Placement("blocked", decl.blocked_reason)
        if decl.lifecycle in _LIFECYCLE_BLOCKS:
            return Placement("blocked", _LIFECYCLE_BLOCKS[decl.lifecycle])
        if decl.safety.requires_user_interaction:
            # no frontend can hand a prompt or a terminal to the user, so the call would hang
            return Placement("blocked", "requires_user_interaction")
        return None

    def _visible_count(self) -> int:
        """Tools not blocked here: what the auto-load threshold compares against."""
        if self._blocked_ids is None:
            self._blocked_ids = {
                d.tool_id for d in self.catalog.declarations() if self._blocked(d) is not None
            }
        return len(self.catalog) - len(self._blocked_ids)

    def visible(self, decl: ToolDeclaration) -> bool:
        return self.place(decl).state != "blocked"

    def lookup(self, ref: str) -> ToolDeclaration | None:
        """The tool `ref` names (exposed name, alias or tool_id) as this surface's callers may
        know it: None for a name the catalog does not hold and for a tool hidden here alike. A
        tool blocked for a reason the caller can act on is returned (a call refuses it)."""
        decl = self.catalog.resolve(ref)
        if decl is None or self.place(decl).hidden:
            return None
        return decl

    def resolve(self, ref: str) -> ToolDeclaration | None:
        """`lookup` for a call, which is refused when None comes back. The log (INFO) says why,
        for a name no tool has as for a tool hidden here: both refusals write one line."""
        decl = self.catalog.resolve(ref)
        if decl is None:
            log.info(
                "surface %s: a call names %s, which no tool has; answered unknown_tool",
                self.name,
                quoted(ref),
            )
            return None
        placement = self.place(decl)
        if placement.hidden:
            log.info(
                "surface %s: a call names %s, tool %s, which a rule of this surface blocks "
                "(%s); answered unknown_tool, as for a tool that does not exist",
                self.name,
                quoted(ref),
                decl.name,
                placement.reason,
            )
            return None
        return decl

    def loaded(self) -> list[ToolDeclaration]:
        """Loaded tools in a stable order (by name)."""
        self._fresh()
        if self._loaded is None:
            self._count_all()
        assert self._loaded is not None
        return self._loaded

    def counts(self) -> dict[str, int]:
        self._fresh()
        if self._counts is None:
            self._count_all()
        assert self._counts is not None
        return dict(self._counts)

    def shown(self, most: int) -> list[str] | None:
        """The ids of the tools this surface shows (loaded or deferred) when they are at most
        `most`, else None: read from the placements (about 45 ns a tool of the catalog) and kept
        until the catalog changes."""
        counts = self.counts()  # every tool placed, and kept in step
        if counts["loaded"] + counts["deferred"] > most:
            return None
        if self._shown is None or self._shown[0] != self._generation:
            self._shown = (
                self._generation,
                [
                    tool_id
                    for tool_id, placement in self._placements.items()
                    if placement.state != "blocked"
                ],
            )
        return self._shown[1]

    def _count_all(self) -> None:
        if (
            self._counts is not None
        ):  # counted, and kept in step since: only the loaded list is made again
            loaded = [
                d
                for d in self.catalog.declarations()
                if self._placements[d.tool_id].state == "loaded"
            ]
        else:
            counts = {"loaded": 0, "deferred": 0, "blocked": 0}
            loaded = []
            for decl in self.catalog.declarations():
                placement = self.place(decl)
                counts[placement.state] += 1
                if placement.state == "loaded":
                    loaded.append(decl)
            self._counts = counts
        loaded.sort(key=lambda d: d.name)
        self._loaded = loaded

    def allows_destructive(self, decl: ToolDeclaration) -> bool:
        return self.config.allow_destructive or _any(self.config.allow, decl) is not None

    def record(self, include_deferred: bool = True, limit: int | None = None) -> ToolSurface:
        """The Agent Tool `tool_surface` record of this surface now, as its callers may read it:
        the tools hidden here are neither listed nor counted."""
        deferred: list[DeferredToolRef] = []
        blocked: list[BlockedTool] = []
        for decl in self.catalog.declarations():
            placement = self.place(decl)
            if (
                placement.state == "deferred"
                and include_deferred
                and (limit is None or len(deferred) < limit)
            ):
                deferred.append(deferred_ref(decl))
            elif placement.state == "blocked" and not placement.hidden:
                blocked.append(
                    BlockedTool(
                        tool_id=decl.tool_id,
                        name=decl.name,
                        reason=placement.reason or "policy_blocked",
                    )
                )
        counts = {**self.counts(), "blocked": len(blocked)}
        return ToolSurface(
            surface_id=self.name,
            loaded_tools=[d.name for d in self.loaded()],
            deferred_tools=deferred,
            blocked_tools=blocked,
            selection_policy={
                "auto_load_threshold": self.config.auto_load_threshold,
                "counts": counts,
            },
        )


class Surfaces:
    """Every configured surface by name; `default` always exists."""

    def __init__(self, configs: list[SurfaceConfig], catalog: Catalog) -> None:
        self.catalog = catalog
        self._by_name: dict[str, Surface] = {}
        self.update(configs)

    def update(self, configs: list[SurfaceConfig]) -> list[str]:
        """Take the surfaces of a new config: one whose config is unchanged stays as it is (its
        placements kept), the others are made anew; a caller holding a surface from before
        (a request in flight) keeps it to its end. Returns the names of the surfaces added,
        changed or removed."""
        configs = [
            *configs,
            *([] if any(c.name == "default" for c in configs) else [SurfaceConfig(name="default")]),
        ]
        before = self._by_name
        self._by_name = {
            c.name: before[c.name]
            if c.name in before and before[c.name].config == c
            else Surface(c, self.catalog)
            for c in configs
        }
        _say_unmatched_upstreams(configs, list(self.catalog.slots))
        return sorted(
            name
            for name in {*before, *self._by_name}
            if before.get(name) is not self._by_name.get(name)
        )

    def get(self, name: str | None) -> Surface | None:
        return self._by_name.get(name or "default")

    def require(self, name: str | None) -> Surface:
        """A surface the config was checked to define (KeyError otherwise)."""
        surface = self.get(name)
        if surface is None:
            raise KeyError(f"no surface named {name!r}")
        return surface

    def names(self) -> list[str]:
        return sorted(self._by_name)


def _say_unmatched_upstreams(configs: list[SurfaceConfig], names: list[str]) -> None:
    """A rule whose `upstream` matches no upstream (`demo-mcp` for `demo_mcp`) would block, load
    or allow nothing, silently: said once, when the surfaces are made."""
    for surface in configs:
        for kind in ("load", "defer", "block", "allow"):
            for i, rule in enumerate(getattr(surface, kind)):
                pattern = getattr(rule, "upstream", None)
                if pattern and not any(_glob(pattern).match(name) for name in names):
                    close = difflib.get_close_matches(pattern, names, n=1)
                    log.warning(
                        "surface %s: %s rule %d names upstream %r, which matches no upstream%s; it matches no tool",
                        surface.name,
                        kind,
                        i,
                        pattern,
                        f" (did you mean {close[0]!r}?)" if close else "",
                    )
