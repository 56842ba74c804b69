"""Permission decisions: whether one call of a visible tool may run on a surface.

Only facts the upstream declared deny on their own; facts the bridge inferred (from HTTP
methods, say) inform surfaces and search filters but never deny a call by themselves.
"""

from __future__ import annotations

from bridge.catalog import Catalog
from bridge.model import BridgeError, ToolDeclaration
from bridge.surface import Surface
from bridge.text import quoted

__all__ = ["blocked_error", "check_permission", "unknown_tool"]

_BLOCK_CLASSES = {"credential_missing": "credential_missing", "setup_required": "setup_required"}


def unknown_tool(ref: str, catalog: Catalog) -> BridgeError:
    """The refusal of a call naming no tool the caller's surface may know: a name the catalog
    does not hold, or a tool a rule of the surface hides (`Surface.resolve`). Told by `ref`
    alone, so the two read the same."""
    starting = catalog.still_starting(ref)
    return BridgeError(
        f"no tool named {quoted(ref)}; search the catalog for the right name{starting}",
        error_class="unknown_tool",
    )


def blocked_error(decl: ToolDeclaration, reason: str) -> BridgeError:
    """The refusal of a call of a blocked tool; when the block is the upstream's own reason, its
    detail (what is missing and how to give it; adapters put no secret values in it) follows."""
    detail = (
        f": {decl.blocked_detail}" if decl.blocked_detail and reason == decl.blocked_reason else ""
    )
    return BridgeError(
        f"tool {decl.name!r} is blocked on this surface ({reason}){detail}",
        error_class=_BLOCK_CLASSES.get(reason, "policy_blocked"),  # type: ignore[arg-type]
        error_code=reason,
        recoverability="setup" if reason in _BLOCK_CLASSES else "change_arguments_or_policy",
        status="denied",
    )


def check_permission(decl: ToolDeclaration, surface: Surface) -> None:
    """Raise `permission_denied` when the call may not run; return otherwise."""
    safety = decl.safety
    if (
        safety.destructive
        and safety.source_of("destructive") == "declared"
        and not surface.allows_destructive(decl)
    ):
        raise BridgeError(
            f"tool {decl.name!r} is declared destructive by its upstream and surface {surface.name!r} "
            "does not allow destructive tools (set `allow_destructive: true` or list it under `allow:`)",
            error_class="permission_denied",
            error_code="destructive_not_allowed",
            recoverability="change_arguments_or_policy",
            status="denied",
        )
