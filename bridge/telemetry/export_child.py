"""The span export child: a process begun with the bridge's tracing and ended with it, which
takes the bridge's ended spans as compact tuples (pickled in batches through a pipe), rebuilds
them as the SDK's `ReadableSpan` and exports them with the SDK's OTLP/HTTP exporter behind the
SDK's batch span processor (which reads the `OTEL_BSP_*` and `OTEL_EXPORTER_OTLP_*` variables).

The SDK's OTLP encoder is pure Python, about 50 to 90 µs a span on 2 shared cores, and in the
bridge's process it holds the interpreter against the event loop; here the bridge pays a tuple
a span, and a pickle and a pipe write a batch. The child stops when the pipe closes (the bridge stops, or dies), once
it has exported what it took; it ignores Ctrl-C and SIGTERM, which reach the bridge, so that the
spans the bridge still holds are taken on its way out. If the child dies, the bridge drops its
spans from then on and says so once.

Run by `ChildProcessor` as `python -P export_child.py ENDPOINT` (empty: the `OTEL_*` variables);
it imports nothing of the bridge, so that it starts in the time the SDK takes to import."""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import pickle
import signal
import struct
import subprocess
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import (
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

if TYPE_CHECKING:
    from bridge.telemetry.spans import BridgeSpan

__all__ = ["ChildProcessor"]

log = logging.getLogger("bridge.telemetry")

SCOPE = "a2t-bridge"  # the instrumentation scope of the bridge's spans
STOP_SECONDS = 30.0  # how long the bridge waits, stopping, for the child to export what it took
BATCH = 512  # spans a message to the child holds at most
DELAY_SECONDS = 0.2  # how long a span waits to be written to the child, at most
_LENGTH = struct.Struct(">I")  # each message: its length, then its pickle
MAX_WAITING = 8192  # spans waiting for the child, at most (it is stuck): later ones are dropped
# (name, trace id, span id, flags, tracestate header, parent span id or 0, parent remote, kind,
# attributes, status code, status description, start ns, end ns): built-in types only
Compact = tuple[
    str, int, int, int, str, int, bool, int, dict[str, Any], int, str | None, int | None, int | None
]


def compact(span: BridgeSpan, end: int) -> Compact:
    ctx, parent, status = span.context, span.parent, span.status
    return (
        span.name,
        ctx.trace_id,
        ctx.span_id,
        int(ctx.trace_flags),
        ctx.trace_state.to_header() if ctx.trace_state else "",
        parent.span_id if parent is not None else 0,
        parent is not None and parent.is_remote,
        span.kind.value,
        span.attributes,  # no longer changed: the span ended
        status.status_code.value if status is not None else 0,
        status.description if status is not None else None,
        span.start,
        end,
    )


class ChildProcessor(SpanProcessor):
    """The bridge's side: takes each span that ends (`take`, on the event loop) into a queue,
    which a thread of its own writes to the export child (`process`) in batches, at once when
    a batch is full, else every 0.2 s; a span provider's `force_flush` and `shutdown` write
    what waits. `lost` counts the spans the child did not take: it had stopped, or too many
    were waiting for it."""

    def __init__(self, endpoint: str | None, resource: Resource) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-P", __file__, endpoint or ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the bridge's stdout may be an MCP stdio stream
            stderr=subprocess.PIPE,  # its log lines become the bridge's records (`_relay_logs`)
            start_new_session=True,  # out of reach of the terminal's Ctrl-C
        )
        self._queue: collections.deque[Compact] = collections.deque()
        self._overflowed = 0  # spans not queued, the queue full (counted on the event loop)
        self._unsent = 0  # spans the child did not take (counted by the writer)
        self._gone = False  # the child's end of the pipe closed
        self._closing = False
        self._writing = threading.Lock()  # one writer at a time: the thread, a flush, the stop
        self._wake = threading.Event()
        self._send(("resource", dict(resource.attributes), resource.schema_url))
        self._writer = threading.Thread(target=self._run, name="span-export-writer", daemon=True)
        self._writer.start()
        self._logs = threading.Thread(target=self._relay_logs, name="span-export-logs", daemon=True)
        self._logs.start()

    @property
    def lost(self) -> int:
        return self._overflowed + self._unsent

    def take(self, span: BridgeSpan, end: int) -> None:
        queue = self._queue
        if len(queue) >= MAX_WAITING:
            if not self._overflowed:
                log.warning(
                    "%d spans wait for the span export child: later ones are dropped until it "
                    "takes them",
                    MAX_WAITING,
                )
            self._overflowed += 1
            return
        queue.append(compact(span, end))
        if len(queue) >= BATCH:
            self._wake.set()

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(DELAY_SECONDS)
            self._wake.clear()
            self._write_waiting()

    def _write_waiting(self) -> None:
        with self._writing:
            queue = self._queue
            while queue:
                batch = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
                if not self._send(batch):
                    self._unsent += len(batch)

    def _send(self, message: Any) -> bool:
        """Write one message to the child; False (and a warning, the first time) when it is
        gone."""
        if self._gone:
            return False
        assert self.process.stdin is not None
        try:
            data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
            self.process.stdin.write(_LENGTH.pack(len(data)) + data)
            self.process.stdin.flush()
            return True
        except (OSError, ValueError):  # its end of the pipe closed
            self._gone = True
            log.warning(
                "the span export child stopped (exit code %s): spans are dropped from now on",
                self.process.poll(),
            )
            return False

    def _relay_logs(self) -> None:
        """Log each line the child writes on stderr as a record of the bridge's, so that it
        takes the bridge's log format (JSON lines with `logging.format: json`)."""
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            name, _, text = line.partition(" ")
            level = logging.getLevelName(name)  # the child's lines begin with their level
            if not isinstance(level, int):  # a line of its own (a traceback's)
                level, text = logging.WARNING, line
            if line:
                log.log(level, "span export child: %s", text)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._write_waiting()
        return True

    def shutdown(self) -> None:
        """Write what waits, close the pipe and wait for the child to export what it took."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        self._writer.join()
        self._write_waiting()
        self._gone = True
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):  # it is gone: what it did not take is lost
            self.process.stdin.close()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("the span export child took over %gs to stop: ended", STOP_SECONDS)
            self.process.kill()
            self.process.wait()
        self._logs.join(STOP_SECONDS)  # its stderr ends with it


class _Plain(pickle.Unpickler):
    """Reads built-in types only: a message names no class to load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not a span's field")


def _message(source: IO[bytes]) -> Any:
    """The next message from the bridge (EOFError: the pipe closed); pickle.UnpicklingError
    for one that holds what is not a built-in type, and then the next one follows."""
    head = source.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    data = source.read(size)
    if len(data) < size:
        raise EOFError
    return _Plain(io.BytesIO(data)).load()


def _rebuilt(item: Compact, resource: Resource, scope: Any) -> ReadableSpan:
    name, trace_id, span_id, flags, state, parent_id, remote, kind, attributes = item[:9]
    code, description, start, end = item[9:]
    trace_state = TraceState.from_header([state]) if state else None
    parent = SpanContext(trace_id, parent_id, remote) if parent_id else None
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, TraceFlags(flags), trace_state),
        parent=parent,
        resource=resource,
        attributes=attributes,
        kind=SpanKind(kind),
        status=Status(StatusCode(code), description),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def main(endpoint: str | None, source: IO[bytes]) -> None:
    """Export the spans read from `source` until it ends, then what is still waiting."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    _, attributes, schema_url = _message(source)
    resource, scope = Resource(attributes, schema_url), InstrumentationScope(SCOPE)
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
    try:
        while True:
            try:
                batch = _message(source)
            except EOFError:
                break
            except pickle.UnpicklingError as exc:  # an attribute of a type of its own
                log.warning("a batch of spans is dropped: %s", exc)
                continue
            for item in batch:
                processor.on_end(_rebuilt(item, resource, scope))
    finally:
        processor.shutdown()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(format="%(levelname)s %(message)s")  # read by _relay_logs
    main(sys.argv[1] or None, sys.stdin.buffer)
