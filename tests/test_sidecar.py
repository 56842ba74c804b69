"""A launched process (`launch:`): its output read whatever its lines, and a command that
cannot start said as such."""

from __future__ import annotations

import asyncio

import pytest

from bridge.sidecar import LINE_CHARS, Sidecar
from bridge.upstream import LaunchConfig

# a 200 KB line, then 4 MB more than a pipe holds, then the last line: a reader that stops
# reading leaves the process blocked on a full pipe
CHATTY = ("import sys; sys.stdout.write('L' * 200_000 + '\\n'); "
          "[sys.stdout.write('line %d ' % i + 'x' * 1000 + '\\n') for i in range(4000)]; print('done'); sys.stdout.flush()")


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
