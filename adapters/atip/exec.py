"""Running ATIP commands: the argv built from validated input only (no shell, values never
become flags), the child process in its own process group (killed whole on timeout, cancel,
exit, or the bridge's death), capped stdout/stderr capture, and the mapping of an outcome to a
result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Literal

from adapters.atip.commands import ATIPCommand, Param
from bridge.model import BridgeError, ToolError, UpstreamResult
from bridge.processes import hold_group, release_group

__all__ = [
    "OptionStyle",
    "ProcessOutcome",
    "build_argv",
    "result_of",
    "run_process",
    "tail",
]

OptionStyle = Literal["equals", "separate"]
_CHUNK = 65536
# After the main process exits, how long its pipes may stay open (a child still writing).
_PIPE_GRACE = 0.2


def _invalid(message: str, prop: str) -> BridgeError:
    return BridgeError(
        message,
        error_class="invalid_arguments",
        recoverability="change_arguments",
        details={"errors": [{"path": f"/{prop}", "message": message}]},
    )


def _text(value: Any, prop: str) -> str:
    """One argv word from a JSON scalar; objects and NUL bytes have no argv form."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(f"{prop}: {value} is not a finite number", prop)
        text = str(int(value)) if value.is_integer() else repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise _invalid(f"{prop}: expected a scalar value, got {type(value).__name__}", prop)
    if "\x00" in text:
        raise _invalid(f"{prop}: NUL characters cannot be passed on a command line", prop)
    return text


def _option_words(param: Param, value: str, style: OptionStyle) -> list[str]:
    flag = param.flag or ""
    if style == "separate":
        if value.startswith("-"):
            raise _invalid(
                f"{param.prop}: a value starting with '-' cannot follow {flag} as a separate word "
                "(option_style: separate); use option_style: equals",
                param.prop,
            )
        return [flag, value]
    # Attached forms: the parser reads the rest of the word as the value, whatever it holds.
    return [f"{flag}={value}"] if flag.startswith("--") else [f"{flag}{value}"]


def build_argv(
    prefix: list[str],
    command: ATIPCommand,
    arguments: dict[str, Any],
    *,
    extra_flags: list[str] | None = None,
    option_style: OptionStyle = "equals",
) -> list[str]:
    """`[*prefix, *path, options..., extra flags, "--", positionals...]`.

    Only properties of the command's parameter table are read. Options use their long flag with
    the value attached (`--title=VALUE`), booleans are a bare flag when true, arrays repeat the
    option once per item, and positionals come after `--`, so no value can be read as a flag."""
    argv = [*prefix, *command.path]
    positionals: list[str] = []
    for param in command.params:
        value = arguments.get(param.prop)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        if param.is_array and not isinstance(value, list):
            raise _invalid(f"{param.prop}: expected an array", param.prop)
        if not param.is_array and isinstance(value, list):
            raise _invalid(f"{param.prop}: expected a single value", param.prop)
        if param.kind == "argument":
            positionals.extend(_text(v, param.prop) for v in values if v is not None)
            continue
        if param.atip_type == "boolean" and not param.is_array:
            if not isinstance(value, bool):
                raise _invalid(f"{param.prop}: expected true or false", param.prop)
            if value:
                argv.append(param.flag or "")
            continue
        for item in values:
            if item is not None:
                argv.extend(_option_words(param, _text(item, param.prop), option_style))
    argv.extend(extra_flags or [])
    if positionals:
        argv.append("--")
        argv.extend(positionals)
    return argv


@dataclass
class ProcessOutcome:
    argv: list[str]
    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    timed_out: bool
    duration: float

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


class _Capped:
    """Reads a pipe to EOF, keeping the first `limit` bytes and counting the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            self.dropped += max(0, len(chunk) - max(room, 0))


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _terminate(process: asyncio.subprocess.Process, pgid: int, grace: float) -> None:
    """SIGTERM to the whole group, SIGKILL after `grace` seconds."""
    _signal_group(pgid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            await process.wait()
    except TimeoutError:
        pass
    _signal_group(pgid, signal.SIGKILL)


async def _exited(process: asyncio.subprocess.Process) -> None:
    """The process's own exit. `Process.wait()` also waits for its pipes to close, which a
    background child still holding them (`tool --agent` starting a daemon) delays for as long
    as that child lives: the exit is also looked for every few milliseconds."""
    waiting = asyncio.ensure_future(process.wait())
    try:
        delay = 0.005
        while process.returncode is None and not waiting.done():
            await asyncio.wait([waiting], timeout=delay)
            delay = min(delay * 2, 0.05)
    finally:
        if not waiting.done():
            waiting.cancel()


async def run_process(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    stdin: str | None = None,
    stdout_limit: int = 1_000_000,
    stderr_limit: int = 65_536,
    kill_grace: float = 0.5,
) -> ProcessOutcome:
    """Run `argv` (never through a shell) in a new session, so the child and everything it
    starts share one process group. On timeout the group gets SIGTERM, then SIGKILL; on
    cancellation SIGKILL at once; after a normal exit whatever is left of the group is killed too;
    if the bridge dies meanwhile, the watcher of `hold_group` kills the group. Raises
    BridgeError(dependency_unavailable) when the program cannot be started."""
    started = time.perf_counter()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise BridgeError(
            f"cannot start {argv[0]!r}: {exc.strerror or exc}",
            error_class="dependency_unavailable",
            recoverability="setup",
        ) from None
    pgid = process.pid  # a new session's leader leads its own process group
    hold_group(pgid)  # killed whole if the bridge dies meanwhile, without a chance to do it
    out, err = _Capped(stdout_limit), _Capped(stderr_limit)
    assert process.stdout is not None and process.stderr is not None
    readers = [
        asyncio.create_task(out.drain(process.stdout)),
        asyncio.create_task(err.drain(process.stderr)),
    ]
    feeder = asyncio.create_task(_feed(process, stdin)) if stdin is not None else None
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                await _exited(process)
        except TimeoutError:
            timed_out = True
            await _terminate(process, pgid, kill_grace)
        # the main process is gone; a descendant still holding the pipes is cut off
        _done, pending = await asyncio.wait(readers, timeout=_PIPE_GRACE)
        if pending:
            _signal_group(pgid, signal.SIGKILL)
            await asyncio.wait(pending, timeout=1.0)
    except asyncio.CancelledError:
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(1.0):
                await process.wait()
        raise
    finally:
        _signal_group(pgid, signal.SIGKILL)
        release_group(pgid)
        for task in (*readers, *([feeder] if feeder else [])):
            if not task.done():
                task.cancel()
        await asyncio.gather(*readers, *([feeder] if feeder else []), return_exceptions=True)
    if process.returncode is None:  # pragma: no cover - SIGKILL was sent above
        await process.wait()
    return ProcessOutcome(
        argv=argv,
        returncode=process.returncode,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        stdout_dropped=out.dropped,
        stderr_dropped=err.dropped,
        timed_out=timed_out,
        duration=time.perf_counter() - started,
    )


async def _feed(process: asyncio.subprocess.Process, text: str) -> None:
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(text.encode())
        await process.stdin.drain()
        process.stdin.close()
        await process.stdin.wait_closed()


def tail(data: bytes, chars: int = 2000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= chars else "..." + text[-chars:]


def _structured(stdout: str) -> Any:
    """JSON stdout as structured content; a non-object value is wrapped as `{"result": value}`."""
    stripped = stdout.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict) else {"result": value}


def result_of(outcome: ProcessOutcome, command_line: str) -> UpstreamResult:
    """Exit 0: stdout as text (and as structured content when it is JSON). Non-zero exit or a
    signal: an error envelope with the exit code and the tail of stderr."""
    stdout = outcome.stdout.decode("utf-8", errors="replace")
    if outcome.stdout_dropped:
        stdout += f"\n[output truncated: {outcome.stdout_dropped} more bytes]"
    meta: dict[str, Any] = {
        "exit_code": outcome.returncode,
        "duration_ms": round(outcome.duration * 1000, 3),
    }
    if outcome.stdout_dropped:
        meta["stdout_truncated_bytes"] = outcome.stdout_dropped
    stderr_tail = tail(outcome.stderr)
    if stderr_tail:
        meta["stderr_tail"] = stderr_tail
    native = {"command": command_line, "exit_code": outcome.returncode}
    structured = None if outcome.stdout_dropped else _structured(stdout)
    if outcome.returncode == 0:
        content = [{"type": "text", "text": stdout}] if stdout else []
        return UpstreamResult(
            content=content, structured_content=structured, native_ref=native, meta=meta
        )
    if outcome.signal is not None:
        what = f"`{command_line}` was killed by signal {outcome.signal}"
        native["signal"] = outcome.signal
    else:
        what = f"`{command_line}` exited with code {outcome.returncode}"
    last_line = stderr_tail.splitlines()[-1] if stderr_tail else ""
    message = f"{what}: {last_line}" if last_line else what
    text = (
        what
        + (f"\nstderr:\n{stderr_tail}" if stderr_tail else "")
        + (f"\nstdout:\n{tail(outcome.stdout)}" if stdout.strip() else "")
    )
    return UpstreamResult(
        is_error=True,
        content=[{"type": "text", "text": text}],
        structured_content=structured,
        error=ToolError(
            error_class="execution_failed",
            message=message,
            error_code="nonzero_exit" if outcome.signal is None else "killed_by_signal",
            recoverability="change_arguments",
            native_error_ref={**native, "stderr_tail": stderr_tail},
        ),
        native_ref=native,
        meta=meta,
    )
