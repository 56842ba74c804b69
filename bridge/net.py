"""Network facts every layer may ask: which hosts are this machine's own (loopback)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """`localhost` (any case, `localhost.` too) or a loopback address (127.0.0.0/8, ::1); a name
    such as `127.0.0.1.example` is none: it resolves wherever its DNS says."""
    if host.lower().removesuffix(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False
