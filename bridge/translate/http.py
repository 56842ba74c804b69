"""HTTP header values the adapters and frontends read the same way."""

from __future__ import annotations

import email.utils
import math
import time

__all__ = ["retry_after_seconds"]


# A Retry-After past a day (1e21 seconds, a date years ahead) is read as a day: a caller told to
# wait longer would never call again, and the number is passed on in headers.
MAX_RETRY_AFTER = 86_400.0


def retry_after_seconds(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date, at most
    MAX_RETRY_AFTER; None when absent or unreadable (`inf` and `nan` included, which float()
    would take)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return min(max(0.0, seconds), MAX_RETRY_AFTER) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, round(when.timestamp() - time.time(), 3)), MAX_RETRY_AFTER)
