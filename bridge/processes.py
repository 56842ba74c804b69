"""Spawning child processes: the start of a spawn paced per event loop, the minimal environment
a child gets, the `setpriv --pdeathsig` guard that ends a child with the bridge (a kill -9
too), the watcher that ends whole process groups with it, the executable a command names found
before anything starts, and signals sent to a child's whole process group. Every layer that
starts processes (launch: sidecars, stdio MCP servers, ATIP commands) uses these."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import threading
import weakref

__all__ = [
    "INHERITED",
    "SPAWNS_AT_ONCE",
    "death_guard",
    "hold_group",
    "minimal_environment",
    "release_group",
    "runnable",
    "signal_group",
    "spawn_turn",
]


_death_guard: list[str] | None = None  # the setpriv prefix, once found to work
_death_guard_probe: tuple[asyncio.AbstractEventLoop, asyncio.Task[list[str]]] | None = (
    None  # the probe under way
)
_spawn_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)
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
    return await asyncio.shield(
        _death_guard_probe[1]
    )  # a caller cancelled leaves the probe to the others


async def _probe_death_guard() -> list[str]:
    global _death_guard
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    if setpriv:
        try:
            probe = await asyncio.create_subprocess_exec(
                *guard,
                setpriv,
                "--version",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            guard = guard if await probe.wait() == 0 else []
        except OSError:
            guard = []
    _death_guard = guard
    return guard


INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")  # see minimal_environment


def minimal_environment() -> dict[str, str]:
    """What a launched process and a stdio MCP server get of the bridge's environment, before
    the variables their config names: the rest of it holds other upstreams' secrets. The names
    are those the MCP SDK's stdio client passes on POSIX; a value that is a shell function
    (`() {...}`) is left out, as the SDK does."""
    found = {name: os.environ.get(name) for name in INHERITED}
    return {
        name: value
        for name, value in found.items()
        if value is not None and not value.startswith("()")
    }


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


# Process groups that end with the bridge, however it ends: a watcher process, told each group as
# it starts and ends through a pipe only the bridge writes to, kills the groups still running
# when that pipe closes, which the kernel does when the bridge dies (a kill -9 included). The
# death guard signals only the process it starts, and what that process started lives on; a
# group reaches them all.
_group_lock = threading.Lock()
_groups_held: set[int] = set()  # the groups the watcher kills if the bridge dies now
_group_watcher: subprocess.Popen[bytes] | None = None
# The watcher: follows `+pgid` and `-pgid` lines until the bridge's end of the pipe closes, then
# kills every group still held. A few lines of the standard library only, so that it starts with
# the interpreter alone (`python -I -S -c`); its first line names it in `ps`.
GROUP_WATCHER = """# a2t-bridge: kills the process groups a bridge killed without closing left running
import os, signal, sys
held = set()
for line in sys.stdin.buffer:
    sign, pgid = line[:1], line[1:].strip()
    if pgid.isdigit():
        if sign == b"+":
            held.add(int(pgid))
        elif sign == b"-":
            held.discard(int(pgid))
for pgid in held:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


def hold_group(pgid: int) -> None:
    """Have process group `pgid` killed if the bridge dies before `release_group(pgid)`."""
    with _group_lock:
        _groups_held.add(pgid)
        _tell_watcher(f"+{pgid}\n")


def release_group(pgid: int) -> None:
    """The group has ended (or was killed): the watcher forgets it, so that a later group given
    the same id is never killed for it."""
    with _group_lock:
        if pgid in _groups_held:
            _groups_held.discard(pgid)
            _tell_watcher(f"-{pgid}\n")


def _tell_watcher(line: str) -> None:
    """Write `line` to the watcher; one that is gone or stuck is replaced by a new one, told every
    group held. A write never blocks the event loop: the pipe does not block, and a watcher too
    far behind to take a line is as good as gone."""
    global _group_watcher
    if _group_watcher is not None:
        try:
            _write_watcher(_group_watcher, line)
            return
        except OSError:
            _end_watcher(_group_watcher)
    _group_watcher = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", GROUP_WATCHER],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,  # the bridge's stdout may be an MCP stdio stream
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,  # out of reach of the terminal's Ctrl-C, which the bridge handles
    )
    assert _group_watcher.stdin is not None
    os.set_blocking(_group_watcher.stdin.fileno(), False)
    with contextlib.suppress(OSError):  # unlikely with a fresh pipe; the next line tries again
        _write_watcher(_group_watcher, "".join(f"+{pgid}\n" for pgid in _groups_held))


def _write_watcher(watcher: subprocess.Popen[bytes], text: str) -> None:
    assert watcher.stdin is not None
    data = text.encode()
    if os.write(watcher.stdin.fileno(), data) != len(data):
        raise BlockingIOError("the watcher took part of a line")


def _end_watcher(watcher: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        watcher.kill()
        watcher.wait(timeout=1)
    with contextlib.suppress(OSError):
        assert watcher.stdin is not None
        watcher.stdin.close()
