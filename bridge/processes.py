"""Spawning child processes: the start of a spawn paced per event loop, the `setpriv
--pdeathsig` guard that ends a child with the bridge (a kill -9 too), the executable a command
names found before anything starts, and signals sent to a child's whole process group. Every
layer that starts processes (launch: sidecars, stdio MCP servers, ATIP commands) uses these."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import sys
import weakref

__all__ = ["SPAWNS_AT_ONCE", "death_guard", "runnable", "signal_group", "spawn_turn"]


_death_guard: list[str] | None = None  # the setpriv prefix, once found to work
_death_guard_probe: tuple[asyncio.AbstractEventLoop, asyncio.Task[list[str]]] | None = None  # the probe under way
_spawn_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
SPAWNS_AT_ONCE = 4  # spawns in one go: the hold grows with it, the start shortens little past it


def spawn_turn() -> asyncio.Semaphore:
    """What a process spawn holds on this event loop, so that at most SPAWNS_AT_ONCE spawn in one
    go, with the loop free between. Under uvloop a spawn holds the loop 5 to 30 ms (libuv forks
    the bridge's whole memory map, then waits for the exec), and the stdio upstreams of a start
    spawn at once: 60 of them held it 1.2 to 2.0 s in one go, in which the server, already
    listening, answered nothing; four at a time, the longest hold was 130 to 160 ms, and the start
    took about a tenth longer (one at a time: 50 to 65 ms, and a third longer)."""
    loop = asyncio.get_running_loop()
    turn = _spawn_turns.get(loop)
    if turn is None:
        turn = _spawn_turns[loop] = asyncio.Semaphore(SPAWNS_AT_ONCE)
    return turn


async def death_guard() -> list[str]:
    """`[setpriv, --pdeathsig, TERM, --]` where setpriv is on PATH and takes the option (util-linux
    2.33 and later), else nothing: a launched process then outlives a bridge that is killed.
    Probed once: the stdio upstreams of a start ask all at once, and each ran a probe of its own
    (a spawn holds the event loop 10 to 20 ms, in which the server, already listening, answers
    nothing)."""
    global _death_guard_probe
    if _death_guard is not None:
        return _death_guard
    loop = asyncio.get_running_loop()
    if _death_guard_probe is None or _death_guard_probe[0] is not loop:
        _death_guard_probe = (loop, loop.create_task(_probe_death_guard()))
    return await asyncio.shield(_death_guard_probe[1])  # a caller cancelled leaves the probe to the others


async def _probe_death_guard() -> list[str]:
    global _death_guard
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    if guard:
        try:
            probe = await asyncio.create_subprocess_exec(*guard, setpriv, "--version", stdin=asyncio.subprocess.DEVNULL,
                                                         stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
            guard = guard if await probe.wait() == 0 else []
        except OSError:
            guard = []
    _death_guard = guard
    return guard


def runnable(command: str, cwd: str, path: str | None) -> str:
    """The file `command` runs, found as exec would (by PATH, or from `cwd` when it names a
    folder), so a missing or non-executable command is said before anything starts (setpriv
    would only print it and exit 127)."""
    if os.sep not in command:
        found = shutil.which(command, path=path)
        if found is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        return found
    file = command if os.path.isabs(command) else os.path.join(cwd, command)
    if not os.path.exists(file):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), file)
    if os.path.isdir(file) or not os.access(file, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), file)
    return file


def signal_group(process: asyncio.subprocess.Process, sig: int) -> None:
    """Signal the process's group (it leads one of its own): the processes it started go too,
    where a shell or a runner between would leave them holding the port."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # the group is gone and its id taken: the process alone
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
