"""The stdio transport of MCP upstreams: one child process per session.

The child's stdin/stdout carry newline-delimited JSON-RPC, one message a line of at most
`max_line` bytes (a longer line is skipped, never held whole); an answer that cannot be read
fails the request it names at once, with an error saying why, instead of leaving it to time
out (text that is not valid Unicode is repaired with U+FFFD and the answer kept); its stderr
goes to the log and to a bounded tail kept for error reports; its end (exit code or signal) is
observed and reported; and its whole process group is stopped and reaped when the session
closes, so no process outlives its session and none is left a zombie.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
import pydantic_core
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from adapters.mcp.sdk import TransportStreams
from bridge.masking import masked
from bridge.processes import death_guard, runnable, spawn_turn

__all__ = ["LINE_LIMIT", "MAX_LINE", "UNREADABLE", "StdioChild"]

log = logging.getLogger("bridge.adapters.mcp")

TAIL_LINES = 50
LINE_LIMIT = 1000  # characters kept of one stderr line (or log message of the server)
REASON_LINES = 5  # stderr lines quoted in an exit reason
MAX_LINE = 64 * 1024 * 1024  # bytes: the longest stdout line (one message) read by default
# The `data` key of the errors this transport makes up for answers it could not read; its value
# says why: "too_long" (over `max_line`) or "invalid" (not valid JSON, or not JSON-RPC).
UNREADABLE = "a2t-bridge/unreadable"
_POLL = 0.02
_KILL_WAIT = 2.0
_ID_SCAN = 64 * 1024  # bytes at either end of an unreadable message searched for its request id
# JSON strings and brackets: enough to follow an object's nesting and find its own keys.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\]]')  # a cut-off string runs to the end
_KEY_END = re.compile(rb"\s*:\s*")
_ID_VALUE = re.compile(rb'-?\d+|"(?:[^"\\]|\\.)*"')
_TAIL_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*}\s*$')
_SURROGATE = re.compile("[\ud800-\udfff]")


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
        max_line: int = MAX_LINE,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.shutdown_timeout = shutdown_timeout
        self.secrets = [s for s in secrets if s]
        self.on_lost = on_lost
        self.max_line = max_line
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
        # started as `launch:` processes are: through setpriv --pdeathsig where it works, so a
        # server that ignores the end of its stdin still ends when the bridge is killed
        guard = await death_guard()
        argv = (
            [
                *guard,
                runnable(self.argv[0], self.cwd, (self.env or os.environ).get("PATH", os.defpath)),
                *self.argv[1:],
            ]
            if guard
            else self.argv
        )
        async with (
            spawn_turn()
        ):  # released without a pause: nothing awaits between the spawn and the task group
            self.process = process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # its own process group: stopping it reaches every descendant
            )
        log.info(
            "mcp upstream %s: started pid %s: %s", self.name, process.pid, " ".join(self.argv[:1])
        )
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
        self,
        process: anyio.abc.Process,
        writer: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        scanned = 0  # bytes of `buffer` already searched for a newline: each byte is searched once
        dropping: _LongLine | None = None  # a line over max_line, skipped up to its end
        deliver = True
        try:
            async for chunk in process.stdout:
                if not deliver:
                    continue  # the session is gone: drain, so a chatty child never blocks on a full pipe
                if dropping is not None:
                    end = chunk.find(b"\n")
                    dropping.add(chunk if end < 0 else chunk[:end])
                    if end < 0:
                        continue
                    deliver = await self._deliver(writer, dropping.answer(self, ended=True))
                    dropping, chunk = None, chunk[end + 1 :]
                buffer += chunk
                while deliver and (end := buffer.find(b"\n", scanned)) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    scanned = 0
                    if len(line) > self.max_line:
                        long_line = _LongLine(line[:_ID_SCAN])
                        long_line.add(line)
                        message = long_line.answer(self, ended=True)
                    else:
                        message = self._parse(line)
                    deliver = await self._deliver(writer, message)
                scanned = len(buffer)
                if deliver and len(buffer) > self.max_line:
                    # No end in sight: keep its head and tail only, answer now if the head names
                    # the request, and skip the rest of the line.
                    dropping = _LongLine(bytes(buffer[:_ID_SCAN]))
                    dropping.add(buffer)
                    buffer.clear()
                    scanned = 0
                    deliver = await self._deliver(writer, dropping.answer(self, ended=False))
                if not deliver:
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

    async def _deliver(
        self,
        writer: anyio.abc.ObjectSendStream[SessionMessage | Exception],
        message: SessionMessage | None,
    ) -> bool:
        """Hand `message` to the session; False once the session is gone."""
        if message is None:
            return True
        try:
            await writer.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    def _parse(self, line: bytes) -> SessionMessage | None:
        if not line.strip():
            return None
        try:
            # parsed, then validated: the same JSON parser and the same checks as validate_json,
            # in a third of its time (a page of 20,000 tools, 13 MB: 0.2 s against 0.5-0.8 s, during
            # which the event loop waits)
            return SessionMessage(
                types.jsonrpc_message_adapter.validate_python(
                    pydantic_core.from_json(line), by_name=False
                )
            )
        except ValueError:
            pass
        try:  # in its own words, what is wrong
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:
            problem = _problem(exc)
        # Not readable as it came. Text that is not valid Unicode (a lone surrogate escape,
        # bytes that are not UTF-8) is repaired with U+FFFD and the message kept; anything else
        # (JSON nested deeper than the parser allows, a shape that is not JSON-RPC) is answered
        # with an error for the request it names, so its caller learns now, not at its timeout.
        text = line.decode(errors="replace")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if data is not None:
            count = text.count("\ufffd") - line.count(
                "\ufffd".encode()
            )  # bytes that were not UTF-8
            try:
                repaired, surrogates = _repair_text(data)
            except RecursionError:
                repaired, surrogates = data, 0
            if count + surrogates:
                try:
                    fixed = json.dumps(repaired, ensure_ascii=False).encode()
                    message = SessionMessage(
                        types.jsonrpc_message_adapter.validate_json(fixed, by_name=False)
                    )
                except (ValueError, RecursionError) as exc:
                    problem = _problem(exc)
                else:
                    log.warning(
                        "mcp upstream %s: %d character(s) that are not valid Unicode in a message from the server were replaced by U+FFFD",
                        self.name,
                        count + surrogates,
                    )
                    return message
            request_id = _response_id(data)
            if request_id is not None and "result" not in data and "error" not in data:
                problem = "an answer needs a `result` or an `error`, and this one has neither"
            elif request_id is not None and not problem.startswith("Invalid JSON"):
                # a shape error: say what is wrong with it as an answer, not as any message
                shape = types.JSONRPCResponse if "result" in data else types.JSONRPCError
                try:
                    shape.model_validate(data, by_name=False)
                except ValidationError as exc:
                    problem = _problem(exc)
        else:
            request_id = _find_id(line[:_ID_SCAN], line[-_ID_SCAN:])
        if request_id is None:
            # A server printing to stdout breaks the protocol; say so, keep the session alive.
            text = masked(line[:200].decode(errors="replace"), self.secrets)
            log.warning(
                "mcp upstream %s: not a JSON-RPC message on stdout (%s): %r",
                self.name,
                problem,
                text,
            )
            return None
        log.warning(
            "mcp upstream %s: the answer to request %r cannot be read: %s",
            self.name,
            request_id,
            problem,
        )
        return _error_answer(
            request_id, f"the server's answer could not be read: {problem}", "invalid"
        )

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
        line = masked(raw.decode(errors="replace").rstrip(), self.secrets)
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
                log.warning(
                    "mcp upstream %s: pid %s survived SIGKILL; abandoning it",
                    self.name,
                    process.pid,
                )
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


class _LongLine:
    """A stdout line over `max_line`: its head and tail (where its request id can be) and its
    size; the rest is never kept."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.tail = b""
        self.size = 0
        self.answered = False

    def add(self, data: bytes | bytearray) -> None:
        self.tail = (self.tail + bytes(data[-_ID_SCAN:]))[-_ID_SCAN:]
        self.size += len(data)

    def answer(self, child: StdioChild, *, ended: bool) -> SessionMessage | None:
        """The error for the request this line answers, as soon as its id is known: from the
        head (most servers write `id` first) when the line is found too long, else from the
        tail when it ends."""
        if self.answered:
            return None
        request_id = _find_id(self.head, self.tail if ended else b"")
        if request_id is None:
            if ended:
                log.warning(
                    "mcp upstream %s: skipped a %d-byte message from the server (longer than max_line_bytes=%d)",
                    child.name,
                    self.size,
                    child.max_line,
                )
            return None
        self.answered = True
        log.warning(
            "mcp upstream %s: the answer to request %r is longer than max_line_bytes=%d; skipped",
            child.name,
            request_id,
            child.max_line,
        )
        text = f"the server's answer is longer than max_line_bytes={child.max_line} bytes; it was dropped unread"
        return _error_answer(request_id, text, "too_long")


def _error_answer(request_id: types.RequestId, message: str, why: str) -> SessionMessage:
    """A JSON-RPC error for `request_id`, made up by this transport for an answer it could not read."""
    error = types.ErrorData(code=types.PARSE_ERROR, message=message, data={UNREADABLE: why})
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _problem(exc: BaseException) -> str:
    """One line saying what is wrong with a message (never its content)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        text = f"{where}: {first['msg']}" if where else first["msg"]
    elif isinstance(exc, RecursionError):
        text = "JSON nested too deeply"
    else:
        text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _repair_text(value: Any) -> tuple[Any, int]:
    """`value` (parsed JSON) with each lone surrogate in its strings and keys replaced by U+FFFD,
    and how many there were (`json.loads` already joins the valid pairs)."""
    if isinstance(value, str):
        return _SURROGATE.subn("\ufffd", value)
    total = 0
    if isinstance(value, list):
        items = []
        for item in value:
            fixed, count = _repair_text(item)
            items.append(fixed)
            total += count
        return items, total
    if isinstance(value, dict):
        members = {}
        for key, item in value.items():
            fixed_key, key_count = _repair_text(key)
            fixed, count = _repair_text(item)
            members[fixed_key] = fixed
            total += key_count + count
        return members, total
    return value, 0


def _response_id(data: Any) -> types.RequestId | None:
    """The id of the request `data` answers: an object with an `id` and no `method` (a request
    from the server is not ours), which JSON-RPC makes an answer, whatever else it lacks."""
    if isinstance(data, dict) and "method" not in data:
        request_id = data.get("id")
        if isinstance(request_id, int | str) and not isinstance(request_id, bool):
            return request_id
    return None


def _find_id(head: bytes, tail: bytes) -> types.RequestId | None:
    """The `id` of the JSON-RPC answer whose first and last bytes are `head` and `tail`, found
    without parsing it whole (it may be too long, too deep or cut off): only the top-level keys
    of the object are read, and one with a `method` is a request or notification, not an answer."""
    if not head.lstrip().startswith(b"{"):
        return None
    depth, found, keys = 0, None, set()
    for match in _TOKEN.finditer(head):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                break
        elif depth == 1 and (colon := _KEY_END.match(head, match.end())) is not None:
            keys.add(token)
            if token == b'"id"' and (value := _ID_VALUE.match(head, colon.end())) is not None:
                found = value.group()
    if b'"method"' in keys:
        return None
    if found is None and (end := _TAIL_ID.search(tail)) is not None:
        found = end.group(1)
    if found is None:
        return None
    try:
        request_id = json.loads(found)
    except ValueError:
        return None
    return request_id if isinstance(request_id, int | str) else None
