"""Local processes the bridge starts for an upstream (`launch:` in its config): spawned with an
argv list (no shell) and a minimal environment in a process group of their own, output logged,
stopped with that group (terminate, then kill) when the upstream closes. On Linux each is
started through util-linux's `setpriv --pdeathsig TERM`, so it is told to end when the bridge
dies without closing (a kill -9) instead of holding its port for ever; setting the signal in the
child ourselves would take a `preexec_fn`, which is unsafe in a process with threads."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import urllib.parse
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bridge.processes import death_guard, minimal_environment, runnable, signal_group, spawn_turn
from bridge.upstream import LaunchConfig, UpstreamConfig

__all__ = ["Sidecar", "with_free_port"]

Config = TypeVar("Config", bound=UpstreamConfig)

log = logging.getLogger("bridge.sidecar")

READ_BYTES = 65_536
LINE_CHARS = 2_000  # of a line of output, kept and logged


def with_free_port(config: Config) -> Config:
    """`config`, or, where it has `launch:` and URLs naming port 0, a copy in which they name a
    free port of their loopback host, given to the launched process as `PORT`. Picked once for
    the upstream and kept across relaunches; the config read from the file keeps port 0, so a
    reload finds the upstream unchanged. Between the pick and the process's listen another
    process may take the port, as rarely as an outgoing connection is given it: the launched
    process then exits, saying why, in the upstream's reason."""
    keys = config.port_zero_urls()
    if config.launch is None or not keys:
        return config
    host = urllib.parse.urlsplit(getattr(config, keys[0])).hostname or "127.0.0.1"
    host = "127.0.0.1" if host.lower().removesuffix(".") == "localhost" else host
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    update: dict[str, object] = {key: _with_port(getattr(config, key), port) for key in keys}
    update["launch"] = config.launch.model_copy(
        update={"env": {**config.launch.env, "PORT": str(port)}}
    )
    return config.model_copy(update=update)


def _with_port(url: str, port: int) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition(":")[0]  # what comes before the port, user and brackets kept
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{host}:{port}"))


class Sidecar:
    """`on_exit` is told (with `describe_exit`'s reason) when the process ends on its own, not
    stopped by `stop`."""

    def __init__(
        self,
        name: str,
        config: LaunchConfig,
        base_dir: str = ".",
        on_exit: Callable[[str], None] | None = None,
    ) -> None:
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
        return f"launched process exited with code {self.process.returncode}" + (
            f": {tail}" if tail else ""
        )

    async def start(self) -> None:
        if self.running:
            return
        command = (
            sys.executable if self.config.command in ("python", "python3") else self.config.command
        )
        # a relative cwd starts from the config file's folder, like every path in the config
        cwd = str(Path(self.base_dir) / self.config.cwd) if self.config.cwd else self.base_dir
        env = minimal_environment() | self.config.env
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
        except (
            OSError
        ) as exc:  # no such command or cwd, not executable: said in the upstream's reason
            why = exc.strerror or type(exc).__name__
            where = f" in {cwd}, which is not a folder" if not Path(cwd).is_dir() else ""
            raise ConnectionError(
                f"launch: cannot start {command!r}{where}: {why}; fix launch.command, "
                f"launch.cwd or PATH"
            ) from None
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
            signal_group(process, signal.SIGTERM)
            try:
                async with asyncio.timeout(3):
                    await process.wait()  # what it started was told at once, and ends on its own
            except TimeoutError:
                signal_group(process, signal.SIGKILL)
                await process.wait()
        if self._drain is not None:
            with contextlib.suppress(BaseException):
                async with asyncio.timeout(1):
                    await self._drain
            self._drain = None
