"""The audit stream: one JSON line per invocation appended to a file (`audit.path`), rotated by
size. A record says who called what and how it ended (time, caller, frontend, surface, tool,
version, outcome, error class, durations, trace id); never arguments, results or secrets.

Records are written in batches on a worker thread (every `FLUSH_SECONDS`, or at `FLUSH_LINES`
records), so a disk never holds the event loop; closing writes what is left."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["FIELDS", "FLUSH_LINES", "FLUSH_SECONDS", "AuditLog"]

log = logging.getLogger("bridge.audit")

FLUSH_SECONDS = 0.1
FLUSH_LINES = 1024
# The keys of a record, in order; `record` takes their values (durations in seconds, written in
# milliseconds), and the worker thread makes the JSON, off the calls' path.
FIELDS = (
    "time",
    "invocation_id",
    "caller",
    "frontend",
    "surface",
    "tool",
    "tool_id",
    "upstream",
    "version",
    "outcome",
    "status",
    "error_class",
    "duration_ms",
    "upstream_ms",
    "trace_id",
)
_DURATIONS = (FIELDS.index("duration_ms"), FIELDS.index("upstream_ms"))


class AuditLog:
    """Appends records to `path` (created 0600 with its folder); once the file would pass
    `max_bytes`, it becomes `path.1` (`path.1` becomes `path.2`, and so on, `keep` kept) and a
    new file begins."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.dropped = 0  # records the disk refused
        self._records: list[tuple[Any, ...]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self._lock = threading.Lock()  # one batch written at a time, in order
        self._file: Any = None
        self._size = 0
        self._failing: str | None = None

    def record(self, values: tuple[Any, ...]) -> None:
        """One invocation's record: the values of FIELDS."""
        self._records.append(values)
        if len(self._records) >= FLUSH_LINES:
            self._schedule(0)
        elif self._handle is None:
            self._schedule(FLUSH_SECONDS)

    def _schedule(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._handle is not None:
            self._handle.cancel()

        def write() -> None:
            self._handle = None
            records, self._records = self._records, []
            future = loop.run_in_executor(None, self._write, records)
            self._writes.add(future)
            future.add_done_callback(self._writes.discard)

        self._handle = loop.call_later(delay, write)

    def flush(self) -> None:
        """Write the records waiting, on this thread."""
        records, self._records = self._records, []
        self._write(records)

    async def aclose(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        await asyncio.to_thread(self.flush)
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    # ------------------------------------------------------------------ on the worker thread

    def _write(self, records: list[tuple[Any, ...]]) -> None:
        if not records:
            return
        lines = []
        for values in records:
            entry = dict(zip(FIELDS, values, strict=True))
            for index in _DURATIONS:
                seconds = values[index]
                entry[FIELDS[index]] = None if seconds is None else round(seconds * 1000, 3)
            lines.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            try:
                if self._file is None:
                    self._open()
                if self._size and self._size + len(data) > self.max_bytes:
                    self._rotate()
                self._file.write(data)
                self._file.flush()
                self._size += len(data)
            except OSError as exc:
                self.dropped += len(records)
                if self._failing != str(exc):
                    log.warning(
                        "audit file %s cannot be written (%s): %d records lost so far, none kept",
                        self.path,
                        exc,
                        self.dropped,
                    )
                self._failing = str(exc)
                with contextlib.suppress(OSError):
                    if self._file is not None:
                        self._file.close()
                self._file = None
                return
            if self._failing is not None:
                log.warning(
                    "audit file %s is written again; %d records were lost", self.path, self.dropped
                )
                self._failing = None

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(descriptor, "ab")
        self._size = os.fstat(descriptor).st_size

    def _rotate(self) -> None:
        self._file.close()
        self._file = None
        oldest = self.path.with_name(f"{self.path.name}.{self.keep}")
        with contextlib.suppress(FileNotFoundError):
            oldest.unlink()
        for n in range(self.keep - 1, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                self.path.with_name(f"{self.path.name}.{n}").rename(
                    self.path.with_name(f"{self.path.name}.{n + 1}")
                )
        self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        self._open()
