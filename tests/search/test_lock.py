"""The on-disk search index's lock held by another process (a `bridge search` running, another
`bridge serve`) as `bridge serve` starts: the server answers at once with an index of its own in
memory, saying so, and moves it to disk once the lock is free, looking for it often for its first
`search.lock_wait` seconds. Real processes on both sides."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bridge.search.lock import take_lock
from tests.conftest import ROOT
from tests.servers import TINY_MCP_SERVER

# holds the index's lock as a `bridge search` on the same config does, until a line comes on its stdin
HOLDER = (
    "import sys; from bridge.search.lock import take_lock; held = take_lock(sys.argv[1]); "
    "print('held' if held else 'busy', flush=True); sys.stdin.readline()"
)


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
                    raise AssertionError(
                        f"ended ({self.process.returncode}) before saying {text!r}:\n{self.stderr}"
                    )
                await asyncio.sleep(0.05)

    async def stop(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), 30)
        await self.reader
        return code


async def start(*args: str, stdin: int | None = asyncio.subprocess.DEVNULL) -> Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=ROOT,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
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
    """A config on a store in `tmp_path`, with one MCP upstream (the tiny server's `echo`)."""
    path = tmp_path / "bridge.yaml"
    tiny = {
        "name": "tiny",
        "kind": "mcp",
        "command": sys.executable,
        "args": [str(TINY_MCP_SERVER)],
    }
    path.write_text(
        yaml.safe_dump(
            {
                "store": {"path": str(tmp_path / "bridge.db")},
                "search": {"lock_wait": lock_wait},
                "upstreams": [tiny],
            }
        )
    )
    return str(path)


async def send(process: Process, message: dict[str, Any]) -> None:
    process.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    await process.process.stdin.drain()


INITIALIZE = {
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


async def test_bridge_serve_stdio_beside_a_bridge_serve_answers_initialize_at_once(tmp_path):
    # the MCP Inspector gives a server 15 s to answer initialize: the stdio bridge waited out
    # search.lock_wait (15 s) for the index the HTTP server holds for its whole life
    path = config(tmp_path, 60)
    http = await start("-m", "bridge.cli", "serve", "-c", path, "--port", "0")
    stdio: Process | None = None
    try:
        await http.said("bridge: upstreams started")  # it holds the on-disk index
        began = time.monotonic()
        stdio = await start(
            "-m", "bridge.cli", "serve", "--stdio", "-c", path, stdin=asyncio.subprocess.PIPE
        )
        await send(stdio, INITIALIZE)
        answer = json.loads(await asyncio.wait_for(stdio.process.stdout.readline(), 50))
        # the process's start (its imports, 20 s and more on a loaded machine) included: well
        # before lock_wait ends
        answered = time.monotonic() - began
        assert answer["id"] == 1 and "result" in answer, answer
        assert answered < 45, f"initialize answered after {answered:.1f} s (lock_wait 60 s)"
        await send(stdio, {"method": "notifications/initialized"})
        await send(stdio, {"id": 2, "method": "tools/list"})
        listing = json.loads(await asyncio.wait_for(stdio.process.stdout.readline(), 30))
        assert [t["name"] for t in listing["result"]["tools"]] == ["tiny__echo"]
        await stdio.said("this process keeps its own index in memory")
        assert f"is in use by process {http.process.pid} (" in stdio.stderr
        assert "looking every 0.1 s for 60 s, then every 10 s" in stdio.stderr
    finally:
        if stdio is not None:
            stdio.process.stdin.close()
            assert await stdio.stop() == 0
        assert await http.stop() == 0


async def test_bridge_serve_beside_a_command_holding_the_index_moves_it_to_disk_after(tmp_path):
    index = tmp_path / "bridge.index"
    holder = await hold(index)  # a `bridge search` on the same config, say
    serve = await start("-m", "bridge.cli", "serve", "-c", config(tmp_path, 30), "--port", "0")
    try:
        await serve.said("bridge: upstreams started")  # searchable, the command still running
        assert f"in use by process {holder.process.pid} (" in serve.stderr
        assert "keeps its own index in memory" in serve.stderr
        assert not index.exists()
        await release(holder)  # the command ends
        await serve.said("is free now: the 1 tools of the index kept in memory were written to it")
        assert (index / "bridge-search.json").exists()  # on disk from now on
        lock = tmp_path / "bridge.index.lock"
        assert lock.read_text().startswith(f"{serve.process.pid} ")  # and held by the server
    finally:
        assert await serve.stop() == 0
        await holder.stop()


async def test_bridge_serve_stdio_beside_a_command_holding_the_index_stops_on_a_signal(tmp_path):
    index = tmp_path / "bridge.index"
    holder = await hold(index)
    serve = await start(
        "-m",
        "bridge.cli",
        "serve",
        "--stdio",
        "-c",
        config(tmp_path, 30),
        stdin=asyncio.subprocess.PIPE,
    )
    try:
        await send(serve, INITIALIZE)
        assert json.loads(await asyncio.wait_for(serve.process.stdout.readline(), 30))["id"] == 1
        await serve.said("keeps its own index in memory")
    finally:
        assert await serve.stop() == 0  # stdin still open: a signal alone ends it, status 0
        await holder.stop()
    assert not index.exists()  # the index stayed in memory: nothing written where the command's is


def test_an_index_kept_in_memory_moves_to_disk_once_the_lock_is_free_losing_no_change_and_always_answering(
    tmp_path, monkeypatch, caplog
):
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
        if (
            tool_id == "t100"
            and threading.current_thread().name == "search-index-compaction"
            and not changed
        ):
            # the move is under way: the catalog changes (a tool changed, one added, one removed)
            changed.append(
                index.submit(
                    [indexed("t5", "forecast of the weather"), indexed("new", "fresh ledger")],
                    deletes=[("ns", "t7")],
                )
            )
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
        assert sorted(p.name for p in Path(path).iterdir()) == [
            "bridge-search.json",
            "g2",
        ]  # the stale g1 gone
        assert (tmp_path / "bridge.index.lock").read_text().startswith(f"{os.getpid()} ")
        assert (
            caplog.text.count(
                "is free now: the 300 tools of the index kept in memory were written to it"
            )
            == 1
        )
        index.submit([indexed("later", "later ledger")])  # and changes go to disk from now on
        assert index.flush() and hits(index, "later") == ["later"]
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        stop.set()
        holder.close()
        index.close()
    assert_reopens_as(path, digests, 301)


async def test_a_bridge_whose_index_was_kept_in_memory_moves_it_and_its_vectors_to_disk_and_reopens_both(
    tmp_path, monkeypatch, caplog
):
    from bridge.search.vectorfile import vector_path
    from tests.fakes import FakeUpstream, tool
    from tests.search.support import start_env
    from tests.servers import until

    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 0.2)
    path = str(tmp_path / "bridge.index")
    listing = [
        tool(f"{word}_report", description=f"Report the {word} of an account.")
        for word in ("invoice", "refund", "weather")
    ]
    holder = take_lock(path)  # a `bridge search` on the same store
    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=path, semantic="static")
    try:
        assert env.search.index.path is None and env.search.semantic.path is None
        assert env.search.semantic.flush() and env.search.semantic.embedded == 3
        holder.close()  # it ends
        await until(
            lambda: env.search.index.path == path and env.search.index.compacted(0), timeout=10
        )
        assert env.search.semantic.flush()
        vectors = vector_path(path, static=True)
        assert env.search.path == path and env.search.semantic.path == vectors
        assert env.names("weather report")[:1] == ["ops__weather_report"]
        assert (
            "is free now: the 3 tools of the index kept in memory were written to it" in caplog.text
        )
    finally:
        holder.close()
        await env.close()
    env = await start_env(
        [FakeUpstream(name="ops", tools=listing)], path=path, semantic="static"
    )  # the next start
    try:
        assert env.search.index.opened_existing and env.search.index.documents_written == 0
        assert (
            env.search.semantic.flush() and env.search.semantic.embedded == 0
        )  # read from the file, not embedded again
        assert env.names("weather report")[:1] == ["ops__weather_report"]
    finally:
        await env.close()


def test_a_move_to_disk_that_fails_keeps_the_index_in_memory_lets_the_lock_go_and_leaves_the_disk_as_it_was(
    tmp_path, monkeypatch, caplog
):
    import time

    import bridge.search.index as si
    from tests.search.support import FailingIndex, hits, indexed, written_index

    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 0.1)
    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY_FAILED", 60.0)
    path = str(tmp_path / "bridge.index")
    written_index(path, indexed("stale", "stale ledger"))
    holder = take_lock(path)
    tools = [
        indexed(f"t{i}", f"report {name}")
        for i, name in enumerate(["invoice", "refund", "weather"])
    ]
    index = si.ToolIndex(path, listing=lambda: tools)
    new_index_at = index._new_index_at
    index._new_index_at = lambda where, generation: FailingIndex(
        new_index_at(where, generation)
    )  # a full disk
    try:
        index.submit(tools)
        assert index.flush()
        holder.close()
        deadline = time.monotonic() + 10
        while "compaction left off" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index.compacted(10) and "compaction left off (No space left on device" in caplog.text
        assert index.path is None and index.wanted_path == path and hits(index, "weather") == ["t2"]
        assert sorted(p.name for p in Path(path).iterdir()) == [
            "bridge-search.json",
            "g1",
        ]  # as the other process left it
        other = take_lock(path, note=False)  # the lock is let go
        assert other is not None
        other.close()
        time.sleep(0.3)  # not tried again within DISK_RETRY_FAILED: each try writes every tool
        assert caplog.text.count("compaction left off") == 1
    finally:
        holder.close()
        index.close()


def test_an_index_kept_in_memory_looks_for_the_lock_often_for_lock_wait(tmp_path, monkeypatch):
    """A server answers at once beside a command holding the index: within `lock_wait` it finds
    the lock free within LOCK_POLL of the command's end, and moves its index there."""
    import time

    import bridge.search.index as si
    from tests.search.support import hits, indexed

    # only the looks of the first `lock_wait` seconds can find it free
    monkeypatch.setattr("bridge.search.compaction.DISK_RETRY", 3600.0)
    tools = [indexed("t1", "weather report")]
    for lock_wait, moves in ((30.0, True), (0.2, False)):
        path = str(tmp_path / f"w{lock_wait}" / "bridge.index")
        holder = take_lock(path)
        index = si.ToolIndex(path, listing=lambda: tools, lock_wait=lock_wait)
        try:
            index.submit(tools)
            assert index.flush() and index.path is None and hits(index, "weather") == ["t1"]
            if not moves:
                time.sleep(0.4)  # past its lock_wait: the next look is DISK_RETRY away
            holder.close()
            deadline = time.monotonic() + (10 if moves else 0.5)
            while (index.path is None or not index.compacted(0)) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert (index.path == path) is moves and hits(index, "weather") == ["t1"]
        finally:
            holder.close()
            index.close()


async def test_an_index_in_memory_reads_the_holders_vectors_and_leaves_them(tmp_path):
    from bridge.search.vectorfile import vector_path
    from tests.fakes import FakeUpstream, tool
    from tests.search.support import start_env
    from tests.servers import until

    path = str(tmp_path / "bridge.index")
    listing = [
        tool(f"{word}_report", description=f"Report the {word} of an account.")
        for word in ("invoice", "refund", "weather")
    ]
    # a `bridge serve`, holding the index
    holding = await start_env(
        [FakeUpstream(name="ops", tools=listing)], path=path, semantic="static"
    )
    kept, holds = None, True
    try:
        assert holding.search.semantic.flush() and holding.search.semantic.embedded == 3
        vectors = Path(vector_path(path, static=True))
        written = await asyncio.to_thread(vectors.read_bytes)
        more = [*listing, tool("parcel_report", description="Report the parcels of an account.")]
        # a `bridge serve --stdio` on the same config
        kept = await start_env(
            [FakeUpstream(name="ops", tools=more)], path=path, semantic="static", lock_wait=30
        )
        assert kept.search.index.path is None and kept.search.semantic.path is None
        # the one tool the holder has no vector of
        assert kept.search.semantic.flush() and kept.search.semantic.embedded == 1
        assert await asyncio.to_thread(vectors.read_bytes) == written
        assert kept.names("weather report")[:1] == ["ops__weather_report"]
        holds = False
        await holding.close()  # it ends: the index in memory moves to disk, its vectors with it
        await until(lambda: kept.search.semantic.path is not None, timeout=10)
        assert kept.search.semantic.flush()
        record = 16 + 2 * kept.search.semantic.encoder.dim
        # the holder's vectors and the one it embedded
        assert (await asyncio.to_thread(vectors.stat)).st_size == len(written) + record
    finally:
        if holds:
            await holding.close()
        if kept is not None:
            await kept.close()
