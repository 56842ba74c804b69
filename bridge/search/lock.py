"""The lock of an on-disk search index: `<index>.lock` beside its folder, held by the one process
that writes it, and naming that process for the others."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt
else:
    msvcrt = None  # type: ignore[assignment]

__all__ = ["index_released", "lock_holder", "take_lock"]

log = logging.getLogger("bridge.search")


def take_lock(path: str, note: bool = True) -> Any:
    """An exclusive lock on `<index>.lock` beside the index folder, held by the open file this
    returns (None when another process holds it). One process writes an index; Tantivy would
    refuse a second writer anyway, but only after this one had touched the folder. With `note`,
    the file then names this process, for the warning of one that cannot take it."""
    lock_path = Path(path).with_name(Path(path).name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path, "a+b")  # noqa: SIM115 - held open as the lock
    try:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        elif msvcrt is not None:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
    except OSError:
        handle.close()
        return None
    if not note:
        return handle
    with contextlib.suppress(OSError):  # who holds it, for the warning of a process that cannot
        handle.seek(0)
        handle.truncate()
        command = " ".join([os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]])
        handle.write(f"{os.getpid()} {command}"[:300].encode())
        handle.flush()
    return handle


async def index_released(path: str, timeout: float, poll: float = 0.1) -> bool:
    """Wait, without blocking the event loop, until no other process holds the on-disk index's
    lock (`<index>.lock`), at most `timeout` seconds; True when none holds it now. `bridge serve`
    waits so before it opens the index: a `bridge search` (or `tools`, `check`, `call`) holding
    the lock for the few seconds it runs would otherwise leave the server's index in memory,
    built again, until the server moves it to disk (`DISK_RETRY`). Said with a warning when it has to wait."""
    started = time.monotonic()
    waiting = False
    while True:
        try:
            handle = take_lock(path, note=False)
        except OSError:  # a folder that cannot be made: said by the index's opening, not here
            return True
        if handle is not None:
            handle.close()  # taken again by the index (`ToolIndex`) right after
            if waiting:
                log.warning("search index %s is free after %.1f s; it is kept on disk", path, time.monotonic() - started)
            return True
        if time.monotonic() - started >= timeout:
            log.warning("search index %s is still in use by %s after %.0f s (search.lock_wait)", path, lock_holder(path), timeout)
            return False
        if not waiting:
            waiting = True
            log.warning("search index %s is in use by %s; waiting up to %.0f s for it (search.lock_wait)", path,
                        lock_holder(path), timeout)
        await asyncio.sleep(poll)


def lock_holder(path: str) -> str:
    """What the lock file says of the process holding it: `pid command`, or nothing."""
    with contextlib.suppress(OSError):
        text = Path(path).with_name(Path(path).name + ".lock").read_text(errors="replace").strip()
        if text:
            return f"process {text.split(' ', 1)[0]} (`{text.split(' ', 1)[1].strip()}`)" if " " in text else f"process {text}"
    return "another process"
