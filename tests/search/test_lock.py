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

from bridge.search.lock import take_lock
from tests.conftest import ROOT

# holds the index's lock as a `bridge search` on the same config does, until a line comes on its stdin
HOLDER = ("import sys; from bridge.search.lock import take_lock; held = take_lock(sys.argv[1]); "
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


def test_an_index_kept_in_memory_moves_to_disk_once_the_lock_is_free_losing_no_change_and_always_answering(tmp_path, monkeypatch, caplog):
    """A process that found the on-disk index locked kept its own in memory for its whole life,
    built again at each start. It now looks every DISK_RETRY seconds, and once the lock is free
    writes its tools into the on-disk index (in place of what another process left there) as a
    compaction does: searched in place of the one in memory once written, the changes made
    meanwhile kept, and a search answered all along."""
    import threading
    import time

    import bridge.search.index as si
    from tests.search.support import assert_reopens_as, hits, indexed, written_index

    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 0.2)
    path = str(tmp_path / "bridge.index")
    written_index(path, indexed("stale", "stale ledger"))  # what the other process left there (g1)
    holder = take_lock(path)  # another process holds it
    assert holder is not None
    def word(i: int) -> str:  # a word of its own for each tool
        return "zq" + "".join("abcdefghij"[int(c)] for c in str(i))

    listed = {f"t{i}": f"report {word(i)}" for i in range(300)}
    index: si.ToolIndex
    changed: list[int] = []

    def convert(tool_id: str):
        if tool_id == "t100" and threading.current_thread().name == "search-index-compaction" and not changed:
            # the move is under way: the catalog changes (a tool changed, one added, one removed)
            changed.append(index.submit([indexed("t5", "forecast of the weather"), indexed("new", "fresh ledger")],
                                        deletes=[("ns", "t7")]))
        return indexed(tool_id, listed[tool_id])

    index = si.ToolIndex(path, convert=convert, listing=lambda: list(listed))
    answered: list[int] = []
    stop = threading.Event()
    try:
        assert index.path is None and index.wanted_path == path
        index.submit(list(listed))
        assert index.flush()
        time.sleep(0.5)  # looked at least twice: still held, still in memory
        assert index.path is None and hits(index, word(42)) == ["t42"]

        def search() -> None:  # all along, until the end of the test
            while not stop.is_set():
                answered.append(len(hits(index, word(250))))

        searching = threading.Thread(target=search)
        searching.start()
        holder.close()  # the other process ends
        deadline = time.monotonic() + 10
        while (index.path is None or not index.compacted(0)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index.path == path and index.wanted_path is None and index.compacted()
        assert changed and index.flush()
        stop.set()
        searching.join(10)
        assert answered and all(answered)  # no search found nothing
        assert hits(index, "weather forecast") == ["t5"] and hits(index, "ledger") == ["new"]
        assert hits(index, word(7)) == [] and hits(index, word(8)) == ["t8"]
        assert index.num_docs == index.tool_count == 300
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g2"]  # the stale g1 gone
        assert (tmp_path / "bridge.index.lock").read_text().startswith(f"{os.getpid()} ")
        assert caplog.text.count("is free now: the 300 tools of the index kept in memory were written to it") == 1
        index.submit([indexed("later", "later ledger")])  # and changes go to disk from now on
        assert index.flush() and hits(index, "later") == ["later"]
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        stop.set()
        holder.close()
        index.close()
    assert_reopens_as(path, digests, 301)


async def test_a_bridge_whose_index_was_kept_in_memory_moves_it_and_its_vectors_to_disk_and_reopens_both(tmp_path, monkeypatch, caplog):
    from bridge.search.semantic import vector_path
    from tests.fakes import FakeUpstream, tool
    from tests.search.support import start_env
    from tests.servers import until

    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 0.2)
    path = str(tmp_path / "bridge.index")
    listing = [tool(f"{word}_report", description=f"Report the {word} of an account.") for word in ("invoice", "refund", "weather")]
    holder = take_lock(path)  # a `bridge search` on the same store
    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=path, semantic="static")
    try:
        assert env.search.index.path is None and env.search.semantic.path is None
        assert env.search.semantic.flush() and env.search.semantic.embedded == 3
        holder.close()  # it ends
        await until(lambda: env.search.index.path == path and env.search.index.compacted(0), timeout=10)
        assert env.search.semantic.flush()
        vectors = vector_path(path, static=True)
        assert env.search.path == path and env.search.semantic.path == vectors
        assert env.names("weather report")[:1] == ["ops__weather_report"]
        assert "is free now: the 3 tools of the index kept in memory were written to it" in caplog.text
    finally:
        holder.close()
        await env.close()
    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=path, semantic="static")  # the next start
    try:
        assert env.search.index.opened_existing and env.search.index.documents_written == 0
        assert env.search.semantic.flush() and env.search.semantic.embedded == 0  # read from the file, not embedded again
        assert env.names("weather report")[:1] == ["ops__weather_report"]
    finally:
        await env.close()


def test_a_move_to_disk_that_fails_keeps_the_index_in_memory_lets_the_lock_go_and_leaves_the_disk_as_it_was(tmp_path, monkeypatch, caplog):
    import time

    import bridge.search.index as si
    from tests.search.support import FailingIndex, hits, indexed, written_index

    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 0.1)
    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY_FAILED", 60.0)
    path = str(tmp_path / "bridge.index")
    written_index(path, indexed("stale", "stale ledger"))
    holder = take_lock(path)
    tools = [indexed(f"t{i}", f"report {name}") for i, name in enumerate(["invoice", "refund", "weather"])]
    index = si.ToolIndex(path, listing=lambda: tools)
    new_index_at = index._new_index_at
    index._new_index_at = lambda where, generation: FailingIndex(new_index_at(where, generation))  # a full disk
    try:
        index.submit(tools)
        assert index.flush()
        holder.close()
        deadline = time.monotonic() + 10
        while "compaction left off" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index.compacted(10) and "compaction left off (No space left on device" in caplog.text
        assert index.path is None and index.wanted_path == path and hits(index, "weather") == ["t2"]
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g1"]  # as the other process left it
        other = take_lock(path, note=False)  # the lock is let go
        assert other is not None
        other.close()
        time.sleep(0.3)  # not tried again within DISK_RETRY_FAILED: each try writes every tool
        assert caplog.text.count("compaction left off") == 1
    finally:
        holder.close()
        index.close()
