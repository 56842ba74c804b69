"""Guards for documents read from files and the network (configs, API descriptions): how large a
YAML or JSON value is once its shared parts are counted at each place they appear."""

from __future__ import annotations

from typing import Any

__all__ = ["expanded_size"]


def expanded_size(value: Any, sizes: dict[int, int]) -> int:
    """How many values `value` holds once its shared parts (YAML aliases) are counted at each
    place they appear: each distinct list or mapping is measured once (`sizes`, by id)."""
    if not isinstance(value, dict | list):
        return 1
    known = sizes.get(id(value))
    if known is None:
        sizes[id(value)] = 1  # a cycle (which safe YAML cannot build) counts once
        children = value.values() if isinstance(value, dict) else value
        known = sizes[id(value)] = 1 + sum(expanded_size(child, sizes) for child in children)
    return known
