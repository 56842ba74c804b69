"""Reading an HTTP answer's body with a size cap, the same way for every HTTP upstream."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from bridge.model import BridgeError

__all__ = ["read_body"]


async def read_body(
    response: aiohttp.ClientResponse, limit: int, what: str | Callable[[], str]
) -> bytes:
    """The whole body, refused with `result_too_large` once it passes `limit` bytes as the caller
    gets them (decompressed); `what`, or what it returns, names the request in the message. An
    answer that declares a length within the limit is read in one call; one without a length, with
    too large a one, or compressed (its length is the compressed size: a small gzip body can
    inflate a thousandfold) is counted as it arrives."""
    declared = response.content_length
    encoded = response.headers.get("Content-Encoding", "identity").strip().lower() not in (
        "",
        "identity",
    )
    if declared is not None and declared <= limit and not encoded:
        return await response.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise BridgeError(
                f"{what() if callable(what) else what} answered more than max_response_bytes={limit}",
                error_class="result_too_large",
                recoverability="change_arguments",
                status="too_large",
            )
        chunks.append(chunk)
    return b"".join(chunks)
