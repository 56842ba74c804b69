"""The on-disk search index's lock held by another process (a `bridge search` running) as
`bridge serve` starts: the server waits for it, up to `search.lock_wait`, and keeps the index on
disk; past that it keeps an index of its own in memory, saying so. Real processes on both sides."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# holds the index's lock as a `bridge search` on the same config does, until a line comes on its stdin
HOLDER = ("import sys; from bridge.search_index import _take_lock; held = _take_lock(sys.argv[1]); "
          "print('held' if held else 'busy', flush=True); sys.stdin.readline()")


class Process:
    """A child process whose stderr lines are gathered as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process, self.lines = process, []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while raw := await self.process.stderr.readline():
            self.lines.append(raw.decode())

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    async def said(self, text: str, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while text not in self.stderr:
                if self.process.returncode is not None:
                    raise AssertionError(f"ended ({self.process.returncode}) before saying {text!r}:\n{self.stderr}")
                await asyncio.sleep(0.05)

    async def stop(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), 30)
        await self.reader
        return code


async def start(*args: str, stdin: int | None = asyncio.subprocess.DEVNULL) -> Process:
    process = await asyncio.create_subprocess_exec(sys.executable, *args, cwd=ROOT, stdin=stdin, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return Process(process)


async def hold(index: Path) -> Process:
    holder = await start("-c", HOLDER, str(index), stdin=asyncio.subprocess.PIPE)
    assert await holder.process.stdout.readline() == b"held\n"
    return holder


async def release(holder: Process) -> None:
    """The holder lets go of the lock and ends."""
    holder.process.stdin.write(b"done\n")
    await holder.process.stdin.drain()
    assert await asyncio.wait_for(holder.process.wait(), 30) == 0


def config(tmp_path: Path, lock_wait: float) -> str:
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump({"store": {"path": str(tmp_path / "bridge.db")}, "search": {"lock_wait": lock_wait}}))
    return str(path)


async def test_bridge_serve_waits_for_a_command_holding_the_index_and_keeps_it_on_disk(tmp_path):
    index = tmp_path / "bridge.index"
    holder = await hold(index)
    serve = await start("-m", "bridge.cli", "serve", "-c", config(tmp_path, 30), "--port", "0")
    try:
        await serve.said("waiting up to 30 s for it")
        assert f"in use by process {holder.process.pid} (" in serve.stderr and "bridge: serving" not in serve.stderr
        await release(holder)  # the command ends
        await serve.said("bridge: serving")
        assert "is free after" in serve.stderr and "in memory" not in serve.stderr
        assert (index / "bridge-search.json").exists()  # opened on disk
        assert (tmp_path / "bridge.index.lock").read_text().startswith(f"{serve.process.pid} ")  # and held by the server
    finally:
        assert await serve.stop() == 0
        await holder.stop()


async def test_bridge_serve_keeps_its_index_in_memory_when_the_lock_is_held_past_its_wait_and_a_signal_meanwhile_ends_it(tmp_path):
    index = tmp_path / "bridge.index"
    holder = await hold(index)
    serve = await start("-m", "bridge.cli", "serve", "-c", config(tmp_path, 0.5), "--port", "0")
    try:
        await serve.said("bridge: serving")
        assert f"still in use by process {holder.process.pid} (" in serve.stderr and "after 0 s (search.lock_wait)" in serve.stderr
        assert "this process keeps its own index in memory" in serve.stderr
        assert not index.exists()
    finally:
        assert await serve.stop() == 0
    # stopped while it waits: at once, status 0, nothing opened
    serve = await start("-m", "bridge.cli", "serve", "-c", config(tmp_path, 30), "--port", "0")
    try:
        await serve.said("waiting up to 30 s")
    finally:
        assert await serve.stop() == 0
        await holder.stop()
    assert "bridge: serving" not in serve.stderr and not index.exists()


async def test_bridge_serve_over_stdio_waits_too_and_a_signal_while_it_waits_ends_it(tmp_path):
    index = tmp_path / "bridge.index"
    holder = await hold(index)
    serve = await start("-m", "bridge.cli", "serve", "--stdio", "-c", config(tmp_path, 30), stdin=asyncio.subprocess.PIPE)
    try:
        await serve.said("waiting up to 30 s")
        await release(holder)
        await serve.said("is free after")
        async with asyncio.timeout(30):
            while not (index / "bridge-search.json").exists():
                await asyncio.sleep(0.05)
    finally:
        serve.process.stdin.close()
        assert await serve.stop() == 0
        await holder.stop()
    # stopped while it waits: at once, status 0, nothing opened
    holder = await hold(index)
    serve = await start("-m", "bridge.cli", "serve", "--stdio", "-c", config(tmp_path, 30), stdin=asyncio.subprocess.PIPE)
    try:
        await serve.said("waiting up to 30 s")
    finally:
        assert await serve.stop() == 0
        await holder.stop()
