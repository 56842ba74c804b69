"""Local processes the bridge starts for an upstream (`launch:` in its config): spawned with an
argv list (no shell) in a process group of their own, output logged, stopped with that group
(terminate, then kill) when the upstream closes. On Linux each is started through util-linux's
`setpriv --pdeathsig TERM`, so it is told to end when the bridge dies without closing (a kill -9)
instead of holding its port for ever; setting the signal in the child ourselves would take a
`preexec_fn`, which is unsafe in a process with threads."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import sys
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path

from bridge.upstream import LaunchConfig

__all__ = ["SPAWNS_AT_ONCE", "Sidecar", "death_guard", "runnable", "spawn_turn"]

log = logging.getLogger("bridge.sidecar")

READ_BYTES = 65_536
LINE_CHARS = 2_000  # of a line of output, kept and logged


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


def _signal_group(process: asyncio.subprocess.Process, sig: int) -> None:
    """Signal the process's group (it leads one of its own): the processes it started go too,
    where a shell or a runner between would leave them holding the port."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # the group is gone and its id taken: the process alone
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)


class Sidecar:
    """`on_exit` is told (with `describe_exit`'s reason) when the process ends on its own, not
    stopped by `stop`."""

    def __init__(self, name: str, config: LaunchConfig, base_dir: str = ".", on_exit: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.config = config
        self.base_dir = base_dir
        self.on_exit = on_exit
        self.process: asyncio.subprocess.Process | None = None
        self.tail: deque[str] = deque(maxlen=20)
        self._drain: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def describe_exit(self) -> str | None:
        if self.process is None or self.process.returncode is None:
            return None
        tail = " | ".join(list(self.tail)[-3:])
        return f"launched process exited with code {self.process.returncode}" + (f": {tail}" if tail else "")

    async def start(self) -> None:
        if self.running:
            return
        command = sys.executable if self.config.command in ("python", "python3") else self.config.command
        # a relative cwd starts from the config file's folder, like every path in the config
        cwd = str(Path(self.base_dir) / self.config.cwd) if self.config.cwd else self.base_dir
        env = {**os.environ, **self.config.env}
        try:
            guard = await death_guard()
            async with spawn_turn():
                self.process = await asyncio.create_subprocess_exec(
                    *guard,
                    runnable(command, cwd, env.get("PATH", os.defpath)) if guard else command,
                    *self.config.args,
                    cwd=cwd,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:  # no such command or cwd, not executable: said in the upstream's reason
            why = exc.strerror or type(exc).__name__
            where = f" in {cwd}, which is not a folder" if not Path(cwd).is_dir() else ""
            raise ConnectionError(f"launch: cannot start {command!r}{where}: {why}; fix launch.command, "
                                  f"launch.cwd or PATH") from None
        self._drain = asyncio.create_task(self._read_output(self.process))

    async def _read_output(self, process: asyncio.subprocess.Process) -> None:
        """Read the process's output until it ends, in chunks: a line of any length is read (one
        over the stream reader's 64 KiB once ended this reader, and the process, its pipe full,
        then hung), kept and logged by its first LINE_CHARS characters."""
        assert process.stdout is not None
        pending = b""
        while chunk := await process.stdout.read(READ_BYTES):
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                self._said(raw)
            if len(pending) > READ_BYTES:  # a line still going: keep its beginning only
                pending = pending[:READ_BYTES]
        if pending:
            self._said(pending)
        code = await process.wait()
        if self.process is process and self.on_exit is not None:  # ended on its own
            self.on_exit(self.describe_exit() or f"launched process exited with code {code}")

    def _said(self, raw: bytes) -> None:
        line = raw[: LINE_CHARS * 4].decode(errors="replace").rstrip()
        line = line if len(line) <= LINE_CHARS else f"{line[:LINE_CHARS]}… (a longer line)"
        self.tail.append(line)
        log.info("[%s] %s", self.name, line)

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.returncode is None:
            _signal_group(process, signal.SIGTERM)
            try:
                async with asyncio.timeout(3):
                    await process.wait()  # what it started was told at once, and ends on its own
            except TimeoutError:
                _signal_group(process, signal.SIGKILL)
                await process.wait()
        if self._drain is not None:
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(1):
                    await self._drain
            self._drain = None
