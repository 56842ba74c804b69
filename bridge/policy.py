"""Permission decisions: whether one call of a visible tool may run on a surface.

Only facts the upstream declared deny on their own; facts the bridge inferred (from HTTP
methods, say) inform surfaces and search filters but never deny a call by themselves.
"""

from __future__ import annotations

from bridge.model import BridgeError, ToolDeclaration
from bridge.surface import Surface

__all__ = ["check_permission", "blocked_error"]

_BLOCK_CLASSES = {"credential_missing": "credential_missing", "setup_required": "setup_required"}


def blocked_error(decl: ToolDeclaration, reason: str) -> BridgeError:
    return BridgeError(
        f"tool {decl.name!r} is blocked on this surface ({reason})",
        error_class=_BLOCK_CLASSES.get(reason, "policy_blocked"),  # type: ignore[arg-type]
        error_code=reason,
        recoverability="setup" if reason in _BLOCK_CLASSES else "change_arguments_or_policy",
        status="denied",
    )


def check_permission(decl: ToolDeclaration, surface: Surface) -> None:
    """Raise `permission_denied` when the call may not run; return otherwise."""
    safety = decl.safety
    if safety.destructive and safety.source_of("destructive") == "declared" and not surface.allows_destructive(decl):
        raise BridgeError(
            f"tool {decl.name!r} is declared destructive by its upstream and surface {surface.name!r} "
            "does not allow destructive tools (set `allow_destructive: true` or list it under `allow:`)",
            error_class="permission_denied",
            error_code="destructive_not_allowed",
            recoverability="change_arguments_or_policy",
            status="denied",
        )
