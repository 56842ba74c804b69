"""Tool search: exact selection and ranked search over the federated catalog, kept up to date from
the catalog's change events. This face is all that callers outside the package use."""

from __future__ import annotations

from bridge.search.analysis import MAX_QUERY_CHARS
from bridge.search.service import MAX_LIMIT, ToolSearch

__all__ = ["MAX_LIMIT", "MAX_QUERY_CHARS", "ToolSearch"]
