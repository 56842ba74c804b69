"""Reading an HTTP answer's body with a size cap, the same way for every HTTP upstream."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from bridge.model import BridgeError

__all__ = ["read_body"]


async def read_body(response: aiohttp.ClientResponse, limit: int, what: str | Callable[[], str]) -> bytes:
    """The whole body, refused with `result_too_large` once it passes `limit` bytes (`what`, or
    what it returns, names the request in the message). An answer that declares a length within
    the limit is read in one call; one without a length (or with too large a one) is counted as
    it arrives."""
    declared = response.content_length
    if declared is not None and declared <= limit:
        return await response.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise BridgeError(f"{what() if callable(what) else what} answered more than max_response_bytes={limit}", error_class="result_too_large",
                              recoverability="change_arguments", status="too_large")
        chunks.append(chunk)
    return b"".join(chunks)
