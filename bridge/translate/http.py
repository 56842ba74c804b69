"""HTTP header values the adapters and frontends read the same way."""

from __future__ import annotations

import email.utils
import math
import time

__all__ = ["retry_after_seconds"]


def retry_after_seconds(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date; None when absent or
    unreadable (`inf` and `nan` included, which float() would take)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, round(when.timestamp() - time.time(), 3))
