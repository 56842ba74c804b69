"""The audit stream as OTLP logs (`audit: {otlp: true}`): each invocation's record, the same keys
as the audit file's, sent as one OpenTelemetry log record (event `bridge.audit`, its fields as
attributes, its trace id set) to an OTLP/HTTP collector's `/v1/logs`, in protobuf.

Records are sent in batches (every `FLUSH_SECONDS`, or at `FLUSH_LINES` records), one batch at a
time and in order, made on a worker thread; a collector that is down or slow loses records (at
most `MAX_WAITING` wait), counted and warned of once per cause, and the calls go on."""

from __future__ import annotations

import asyncio
import logging
import os
import urllib.parse
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bridge.telemetry.audit import FIELDS

if TYPE_CHECKING:
    import aiohttp

__all__ = ["FLUSH_LINES", "FLUSH_SECONDS", "MAX_WAITING", "OtlpAudit", "logs_endpoint"]

log = logging.getLogger("bridge.audit")

FLUSH_SECONDS = 1.0
FLUSH_LINES = 512
MAX_WAITING = 65_536  # records held while the collector does not take them; the oldest go first
SEND_TIMEOUT = 10.0
EVENT_NAME = "bridge.audit"
_DURATIONS = {FIELDS.index("duration_ms"), FIELDS.index("upstream_ms")}
_TIME, _TRACE = FIELDS.index("time"), FIELDS.index("trace_id")
_INFO = 9  # SeverityNumber INFO


def logs_endpoint(configured: str | None) -> str | None:
    """Where OTLP logs go: `configured` (the collector's base URL, `telemetry.otlp_endpoint`,
    with `/v1/logs` appended), else `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` as it is, else
    `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/logs`; None when none is set."""
    if configured:
        return _with_path(configured)
    named = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
    if named:
        return named
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return _with_path(base) if base else None


def _with_path(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/v1/logs") else f"{base}/v1/logs"


def env_headers() -> dict[str, str]:
    """The headers `OTEL_EXPORTER_OTLP_LOGS_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`) name, as
    `key=value` pairs separated by commas, values URL-encoded (a collector's API key)."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_HEADERS") or os.environ.get(
        "OTEL_EXPORTER_OTLP_HEADERS", ""
    )
    headers = {}
    for pair in raw.split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            headers[key.strip()] = urllib.parse.unquote(value.strip())
    return headers


class OtlpAudit:
    """Sends audit records to `endpoint` (a full `/v1/logs` URL) as `service_name`."""

    def __init__(self, endpoint: str, service_name: str) -> None:
        self.endpoint = endpoint
        self.service_name = service_name
        self.headers = {"Content-Type": "application/x-protobuf", **env_headers()}
        self.dropped = 0  # records the collector did not take
        self._records: list[tuple[Any, ...]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one batch sent at a time, in order
        self._http: aiohttp.ClientSession | None = None
        self._failing: str | None = None

    def record(self, values: tuple[Any, ...]) -> None:
        """One invocation's record: the values of FIELDS."""
        records = self._records
        records.append(values)
        if len(records) > MAX_WAITING:
            del records[: len(records) - MAX_WAITING]
            self.dropped += 1
        if len(records) >= FLUSH_LINES:
            self._schedule(0)
        elif self._handle is None:
            self._schedule(FLUSH_SECONDS)

    def _schedule(self, delay: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        self._handle = None
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send_waiting())
        # else: the running send takes what waits once its batch is sent

    async def _send_waiting(self) -> None:
        while self._records:
            records, self._records = (
                self._records[: FLUSH_LINES * 8],
                self._records[FLUSH_LINES * 8 :],
            )
            await self._send(records)

    async def _send(self, records: list[tuple[Any, ...]]) -> None:
        # aiohttp loads with the first batch: a bridge without an OTLP audit never needs it
        import aiohttp

        async with self._lock:
            body = await asyncio.to_thread(encode, records, self.service_name)
            try:
                if self._http is None:
                    self._http = aiohttp.ClientSession(
                        timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT)
                    )
                async with self._http.post(
                    self.endpoint, data=body, headers=self.headers
                ) as response:
                    await response.read()
                    problem = (
                        None if response.status < 300 else f"it answered HTTP {response.status}"
                    )
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if problem is not None:
                self.dropped += len(records)
                if self._failing != problem:
                    log.warning(
                        "audit records cannot be sent to %s (%s): %d lost so far",
                        self.endpoint,
                        problem,
                        self.dropped,
                    )
                self._failing = problem
            elif self._failing is not None:
                log.warning(
                    "audit records are sent to %s again; %d were lost", self.endpoint, self.dropped
                )
                self._failing = None

    async def flush(self) -> None:
        """Send what waits now (within SEND_TIMEOUT a batch)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._sending is not None:
            await asyncio.gather(self._sending, return_exceptions=True)
        await self._send_waiting()

    async def aclose(self) -> None:
        """Send what waits, then close the connection."""
        await self.flush()
        if self._http is not None:
            await self._http.close()
            self._http = None


# ------------------------------------------------------------------ on the worker thread


def encode(records: list[tuple[Any, ...]], service_name: str) -> bytes:
    """An OTLP `ExportLogsServiceRequest` of `records`, serialized."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value=service_name))
    )
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = "a2t-bridge.audit"
    for values in records:
        item = scope_logs.log_records.add()
        item.event_name = EVENT_NAME
        item.severity_number = _INFO
        item.severity_text = "INFO"
        stamp = _nanoseconds(values[_TIME])
        item.time_unix_nano = item.observed_time_unix_nano = stamp
        trace_id = values[_TRACE]
        if isinstance(trace_id, str) and len(trace_id) == 32:
            item.trace_id = bytes.fromhex(trace_id)
        item.body.string_value = (
            f"call {values[FIELDS.index('tool')]} {values[FIELDS.index('outcome')]}"
        )
        for index, (key, value) in enumerate(zip(FIELDS, values, strict=True)):
            if value is None:
                continue
            if index in _DURATIONS:
                item.attributes.append(
                    KeyValue(key=key, value=AnyValue(double_value=round(value * 1000, 3)))
                )
            elif isinstance(value, bool) or not isinstance(value, int | float):
                item.attributes.append(KeyValue(key=key, value=AnyValue(string_value=str(value))))
            elif isinstance(value, int):
                item.attributes.append(KeyValue(key=key, value=AnyValue(int_value=value)))
            else:
                item.attributes.append(KeyValue(key=key, value=AnyValue(double_value=value)))
    return request.SerializeToString()


def _nanoseconds(stamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return 0
