"""The lock of an on-disk search index: `<index>.lock` beside its folder, held by the one process
that writes it, and naming that process for the others."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt
else:
    msvcrt = None  # type: ignore[assignment]

__all__ = ["lock_holder", "name_holder", "take_lock"]


def take_lock(path: str, note: bool = True) -> Any:
    """An exclusive lock on `<index>.lock` beside the index folder, held by the open file this
    returns (None when another process holds it). One process writes an index; Tantivy would
    refuse a second writer anyway, but only after this one had touched the folder. With `note`,
    the file then names this process (`name_holder`)."""
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
    if note:
        name_holder(handle)
    return handle


def name_holder(handle: Any) -> None:
    """The lock file `handle` holds names this process, for the warning of one that cannot."""
    with contextlib.suppress(OSError):
        handle.seek(0)
        handle.truncate()
        command = " ".join([os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]])
        handle.write(f"{os.getpid()} {command}"[:300].encode())
        handle.flush()


def lock_holder(path: str) -> str:
    """What the lock file says of the process holding it: `pid command`, or nothing."""
    with contextlib.suppress(OSError):
        text = Path(path).with_name(Path(path).name + ".lock").read_text(errors="replace").strip()
        if text:
            return (
                f"process {text.split(' ', 1)[0]} (`{text.split(' ', 1)[1].strip()}`)"
                if " " in text
                else f"process {text}"
            )
    return "another process"
