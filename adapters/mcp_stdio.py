"""The stdio transport of MCP upstreams: one child process per session.

The child's stdin/stdout carry newline-delimited JSON-RPC; its stderr goes to the log and to a
bounded tail kept for error reports; its end (exit code or signal) is observed and reported;
and its whole process group is stopped and reaped when the session closes, so no process
outlives its session and none is left a zombie.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import mcp.types as types
from mcp.client._transport import TransportStreams
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

__all__ = ["StdioChild", "redact"]

log = logging.getLogger("bridge.adapters.mcp")

TAIL_LINES = 50
LINE_LIMIT = 1000  # characters kept of one stderr line
REASON_LINES = 5  # stderr lines quoted in an exit reason
_POLL = 0.02
_KILL_WAIT = 2.0


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every configured secret value (env values, header values) masked."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, "***")
    return text


class StdioChild:
    """One MCP server process and its pipes. `connect()` is the transport handed to the MCP
    client; it must be entered and left in the same task (the session's owner task)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        shutdown_timeout: float,
        secrets: Iterable[str] = (),
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.shutdown_timeout = shutdown_timeout
        self.secrets = [s for s in secrets if s]
        self.on_lost = on_lost
        self.process: anyio.abc.Process | None = None
        self.stderr_tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.lost_reason: str | None = None
        self._stopping = False
        self._stderr_done = anyio.Event()

    # ------------------------------------------------------------------ facts

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def describe_exit(self) -> str:
        """What ended the process, with its last stderr lines."""
        code = self.returncode
        if code is None:
            what = "the server closed its stdout"
        elif code < 0:
            try:
                what = f"the server process was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"the server process was killed by signal {-code}"
        else:
            what = f"the server process exited with code {code}"
        tail = [line for line in self.stderr_tail if line.strip()][-REASON_LINES:]
        return what + (f"; stderr: {' | '.join(tail)}" if tail else "")

    # ------------------------------------------------------------------ transport

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[TransportStreams]:
        if not os.path.isdir(self.cwd):
            raise FileNotFoundError(f"cwd {self.cwd!r} is not a folder")
        self.process = process = await anyio.open_process(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group: stopping it reaches every descendant
        )
        log.info("mcp upstream %s: started pid %s: %s", self.name, process.pid, " ".join(self.argv[:1]))
        # No await between the spawn and the task group, so a cancellation cannot leak the child.
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_stdout, process, read_writer)
            tg.start_soon(self._write_stdin, process, write_reader)
            tg.start_soon(self._read_stderr, process)
            try:
                yield read_stream, write_stream
            finally:
                self._stopping = True
                with anyio.CancelScope(shield=True):
                    await self._stop(process)
                    for stream in (read_stream, write_stream, read_writer, write_reader):
                        await stream.aclose()
                tg.cancel_scope.cancel()

    async def _read_stdout(
        self, process: anyio.abc.Process, writer: anyio.abc.ObjectSendStream[SessionMessage | Exception]
    ) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        deliver = True
        try:
            async for chunk in process.stdout:
                if not deliver:
                    continue  # the session is gone: drain, so a chatty child never blocks on a full pipe
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    message = self._parse(line)
                    if message is not None and deliver:
                        try:
                            await writer.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            deliver = False
                            buffer.clear()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass
        if not self._stopping:
            # The server is gone (or closed its stdout): find out how, before the session
            # learns the connection closed, so its callers get the reason.
            await self._wait_exit(1.0)
            with anyio.move_on_after(0.5):
                await self._stderr_done.wait()
            self.lost_reason = self.describe_exit()
            log.warning("mcp upstream %s: %s", self.name, self.lost_reason)
        await writer.aclose()
        if not self._stopping and self.on_lost is not None:
            self.on_lost(self.lost_reason or "the server closed its stdout")

    def _parse(self, line: bytes) -> SessionMessage | None:
        if not line.strip():
            return None
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError:
            # A server printing to stdout breaks the protocol; say so, keep the session alive.
            text = redact(line[:200].decode(errors="replace"), self.secrets)
            log.warning("mcp upstream %s: not a JSON-RPC message on stdout: %r", self.name, text)
            return None

    async def _write_stdin(
        self, process: anyio.abc.Process, reader: anyio.abc.ObjectReceiveStream[SessionMessage]
    ) -> None:
        assert process.stdin is not None
        try:
            async for message in reader:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async def _read_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        buffer = bytearray()
        try:
            async for chunk in process.stderr:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    self._stderr_line(bytes(buffer[:end]))
                    del buffer[: end + 1]
                if len(buffer) > 8 * LINE_LIMIT:  # a line without end: keep its head only
                    self._stderr_line(bytes(buffer[:LINE_LIMIT]))
                    buffer.clear()
            if buffer:
                self._stderr_line(bytes(buffer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass
        finally:
            self._stderr_done.set()

    def _stderr_line(self, raw: bytes) -> None:
        line = redact(raw.decode(errors="replace").rstrip(), self.secrets)
        if len(line) > LINE_LIMIT:
            line = line[: LINE_LIMIT - 3] + "..."
        self.stderr_tail.append(line)
        log.info("mcp upstream %s stderr: %s", self.name, line)

    # ------------------------------------------------------------------ shutdown

    async def _wait_exit(self, timeout: float) -> bool:
        """Whether the process ended within `timeout` (polls returncode: process.wait() may
        also wait for pipes a descendant still holds)."""
        assert self.process is not None
        with anyio.move_on_after(timeout):
            while self.process.returncode is None:
                await anyio.sleep(_POLL)
        return self.process.returncode is not None

    async def _stop(self, process: anyio.abc.Process) -> None:
        """Close stdin (the MCP way to ask a stdio server to exit), wait `shutdown_timeout`, then
        SIGTERM and SIGKILL the process group; always reap the child."""
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        if not await self._wait_exit(self.shutdown_timeout) or _group_alive(process.pid):
            await terminate_posix_process_tree(process, _KILL_WAIT)
            if not await self._wait_exit(_KILL_WAIT):
                log.warning("mcp upstream %s: pid %s survived SIGKILL; abandoning it", self.name, process.pid)
        with anyio.move_on_after(_KILL_WAIT):
            await process.aclose()  # closes the pipes and reaps the child
        log.info("mcp upstream %s: pid %s ended (%s)", self.name, process.pid, process.returncode)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
