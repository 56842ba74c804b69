"""The errors of the store, whichever database keeps it."""

from __future__ import annotations

from bridge.model import BridgeError, ErrorClass, Recoverability

__all__ = ["StoreError", "StoreFull", "StoreUnavailable"]


class StoreError(Exception):
    """A store this bridge cannot use; the message names the file (or database) and the fix."""


class StoreFull(StoreError):
    """A write the store's disk refused (full, or past the process's file size limit)."""


class StoreUnavailable(StoreFull, BridgeError):
    """The store's database is away: a read that needs it, or a result that cannot be kept (the
    caller then gets the result whole, as for a full disk). The message names the store; as a
    BridgeError it is answered as `dependency_unavailable`, to retry later."""

    default_class: ErrorClass = "dependency_unavailable"
    default_recoverability: Recoverability = "retry_later"
