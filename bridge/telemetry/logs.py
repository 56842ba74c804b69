"""The bridge's logs on stderr, as text (the default) or one JSON object a line, and the access
line each call writes at INFO (logger `bridge.access`: tool, surface, outcome, durations, trace
id; never arguments or results).

The format is the process's, as logging's handlers are: `configure_logging` sets it once the
config is read, and `say` writes the lines the `bridge` command addresses to its operator (the
start-up banner) in the same format."""

from __future__ import annotations

import datetime
import json
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "ACCESS_LOGGER",
    "TEXT_FORMAT",
    "JsonFormatter",
    "access_fields",
    "configure_logging",
    "json_logs",
    "say",
]

ACCESS_LOGGER = "bridge.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The attributes every LogRecord has: anything else on a record came as `extra` and is a field.
_RECORD_KEYS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}

_format: Literal["text", "json"] = "text"
# The trace and span ids of the span current where a record is made, as hex (the tracer sets it
# while tracing is on); None: no span is current.
current_trace: Callable[[], tuple[str, str] | None] | None = None


def json_logs() -> bool:
    return _format == "json"


def _now(created: float | None = None) -> str:
    moment = (
        datetime.datetime.fromtimestamp(created, datetime.UTC)
        if created is not None
        else datetime.datetime.now(datetime.UTC)
    )
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: `time` (UTC), `level`, `logger`, `message`, the fields it
    was given as `extra`, `trace_id` and `span_id` of the span current when tracing is on, and
    `exception` with the traceback when it carries one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _now(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_KEYS and not key.startswith("_"):
                entry[key] = value
        if (
            "trace_id" not in entry
            and current_trace is not None
            and (ids := current_trace()) is not None
        ):
            entry["trace_id"], entry["span_id"] = ids
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(
    format: Literal["text", "json"] = "text", level: int = logging.WARNING
) -> None:
    """Log at `level` and above on stderr, in `format`: the root logger's stream handler (the
    one `logging.basicConfig` made) gets the format, or one is made. Handlers of other kinds (a
    test's capture) are left as they are."""
    global _format
    _format = format
    root = logging.getLogger()
    formatter = JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT)
    streams = [handler for handler in root.handlers if type(handler) is logging.StreamHandler]
    if not root.handlers:
        streams = [logging.StreamHandler(sys.stderr)]
        root.addHandler(streams[0])
    for handler in streams:
        handler.setFormatter(formatter)
    root.setLevel(level)


def say(line: str, level: int = logging.INFO, logger: str = "bridge.serve") -> None:
    """A line for the operator on stderr, whatever the log level: as it is in the text format,
    as a JSON record in the JSON one."""
    if _format == "json":
        entry = {
            "time": _now(),
            "level": logging.getLevelName(level),
            "logger": logger,
            "message": line.strip(),
        }
        print(json.dumps(entry, ensure_ascii=False), file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def access_fields(
    invocation_id: str,
    tool: str | None,
    version: int | None,
    surface: str,
    frontend: str | None,
    caller: str | None,
    outcome: str,
    seconds: float,
    upstream_seconds: float | None,
    trace_id: str | None,
) -> dict[str, Any]:
    """The fields of one call's access line (JSON keys, and `key=value` in the text line)."""
    fields: dict[str, Any] = {
        "event": "call",
        "invocation_id": invocation_id,
        "tool": tool,
        "version": version,
        "surface": surface,
        "frontend": frontend,
        "caller": caller,
        "outcome": outcome,
        "duration_ms": round(seconds * 1000, 3),
    }
    if upstream_seconds is not None:
        fields["upstream_ms"] = round(upstream_seconds * 1000, 3)
    if trace_id is not None:
        fields["trace_id"] = trace_id
    return fields


def access_text(fields: dict[str, Any]) -> str:
    """The access line in the text format: `call tool=... outcome=ok duration_ms=1.2 ...`."""
    return "call " + " ".join(
        f"{key}={value}" for key, value in fields.items() if key != "event" and value is not None
    )
