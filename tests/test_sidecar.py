"""A launched process (`launch:`): its output read whatever its lines, a command that cannot
start said as such, and no process of its left running once it is stopped or the bridge killed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from bridge import processes
from bridge.processes import INHERITED
from bridge.sidecar import LINE_CHARS, Sidecar
from bridge.upstream import LaunchConfig
from tests.servers import left_by_a_killed_parent, process_ended, process_running

ROOT = Path(__file__).resolve().parents[1]

# a 200 KB line, then 4 MB more than a pipe holds, then the last line: a reader that stops
# reading leaves the process blocked on a full pipe
CHATTY = (
    "import sys; sys.stdout.write('L' * 200_000 + '\\n'); "
    "[sys.stdout.write('line %d ' % i + 'x' * 1000 + '\\n') for i in range(4000)]; print('done'); sys.stdout.flush()"
)


async def test_output_with_a_line_longer_than_the_reader_takes_is_read_to_the_end() -> None:
    sidecar = Sidecar("chatty", LaunchConfig(command="python", args=["-c", CHATTY]))
    await sidecar.start()
    try:
        assert sidecar.process is not None
        async with asyncio.timeout(20):
            assert await sidecar.process.wait() == 0
            await sidecar._drain
        assert sidecar.tail[-1] == "done" and sidecar.tail[-2].startswith("line 3999 ")
        assert all(len(line) <= LINE_CHARS + 20 for line in sidecar.tail)
    finally:
        await sidecar.stop()


async def test_a_command_that_cannot_start_says_which_and_why() -> None:
    with pytest.raises(ConnectionError, match="cannot start 'no-such-command-here': No such file"):
        await Sidecar("gone", LaunchConfig(command="no-such-command-here")).start()


async def test_a_launched_process_gets_a_minimal_environment_and_what_its_config_names(
    monkeypatch,
) -> None:
    # it got the bridge's whole environment: every other upstream's secrets with it
    monkeypatch.setenv("OTHER_UPSTREAM_TOKEN", "s3cret-of-another-upstream")
    monkeypatch.setenv("PATH", f"/opt/own-tools{os.pathsep}{os.environ['PATH']}")
    said = "import json, os; print(json.dumps(dict(os.environ)), flush=True)"
    sidecar = Sidecar(
        "env",
        LaunchConfig(
            command="python", args=["-c", said], env={"OWN_KEY": "k1", "HOME": "/srv/own"}
        ),
    )
    await sidecar.start()
    try:
        env = json.loads(await _first_line(sidecar))
    finally:
        await sidecar.stop()
    env.pop("LC_CTYPE", None)  # set by Python itself in a C locale (PEP 538)
    assert "OTHER_UPSTREAM_TOKEN" not in env
    inherited = {name: os.environ[name] for name in INHERITED if name in os.environ}
    assert env == inherited | {"OWN_KEY": "k1", "HOME": "/srv/own"}
    assert env["PATH"] == os.environ["PATH"]


# starts a child of its own, says its pid and waits on it: the way a shell or a runner starts a service
RUNNER = (
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print(p.pid, flush=True); p.wait()"
)


async def _first_line(sidecar: Sidecar) -> str:
    async with asyncio.timeout(10):
        while not sidecar.tail:
            await asyncio.sleep(0.01)
    return sidecar.tail[0]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
async def test_stop_ends_the_processes_the_launched_one_started() -> None:
    sidecar = Sidecar("runner", LaunchConfig(command="python", args=["-c", RUNNER]))
    await sidecar.start()
    try:
        child = int(await _first_line(sidecar))
        assert process_running(child)
    finally:
        await sidecar.stop()
    assert await process_ended(child)


# a bridge in miniature: launches a process, says its pid once that process runs, then waits to
# be killed. The process is spawned as setpriv, which sets the death signal only when it runs, a
# moment later; a bridge killed before then (as a loaded machine made it) leaves it unguarded.
# A line of the launched command itself comes after setpriv's work.
PARENT = """
import asyncio
from bridge.sidecar import Sidecar
from bridge.upstream import LaunchConfig

async def main():
    said = "print('up', flush=True); import time; time.sleep(60)"
    sidecar = Sidecar("held", LaunchConfig(command="python", args=["-c", said]))
    await sidecar.start()
    async with asyncio.timeout(20):
        while not sidecar.tail:
            await asyncio.sleep(0.01)
    print(sidecar.process.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("setpriv") is None,
    reason="setpriv --pdeathsig is Linux's",
)
async def test_a_launched_process_ends_when_the_bridge_is_killed() -> None:
    assert await process_ended(await left_by_a_killed_parent(PARENT, ROOT))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="setpriv is used on Linux only")
async def test_setpriv_is_probed_once_when_many_upstreams_start_at_once(
    tmp_path, monkeypatch
) -> None:
    # each stdio upstream of a start probed it: one spawn each, holding the event loop meanwhile
    fake = tmp_path / "setpriv"
    fake.write_text(f"#!/bin/sh\necho probe >> {tmp_path / 'probes'}\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(processes, "_death_guard", None)
    monkeypatch.setattr(processes, "_death_guard_probe", None, raising=False)
    guards = await asyncio.gather(*(processes.death_guard() for _ in range(20)))
    assert guards == [[str(fake), "--pdeathsig", "TERM", "--"]] * 20
    assert (tmp_path / "probes").read_text() == "probe\n"
