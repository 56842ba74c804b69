"""What telemetry adds to a call through the invocation pipeline, in one run: a no-op upstream
called over and over in process (no HTTP), with

- `none`: no telemetry at all (the pipeline's hooks do nothing), the floor;
- `metrics`: the Prometheus counters and histograms, no exporter (the default bridge);
- `metrics+audit`: and an audit record per call (a file in a temporary folder);
- `traced, dropped`: metrics and tracing with a sampler that drops every trace begun here;
- `traced, sampled`: metrics and tracing, every call's spans made and handed to a batch
  processor whose exporter discards them: two a call, the pipeline's and the upstream call's;
- `traced, 3 spans`: the same, each call made inside a frontend request's span as the REST and
  MCP frontends make it (its sampling decision, the span, current for the call), three a call.

The configurations take turns, a round of calls each, so that the machine's drift falls on all
alike; what a configuration adds at p50 is the median, over the rounds, of its p50 less that of
`none` in the same round. Prints p50 and p99 in µs per call (wall clock), what each adds to
`none`, and the p50 of the event loop thread's CPU time per call (work handed to other threads,
the audit file's writes and the span exporter's, is not in it).

    python bench/bench_telemetry.py [--calls 30000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The batch span processor's queue holds every span of a run: with the SDK's 2,048 its thread
# fell behind the calls, and the spans it dropped ("Queue full") cost the calls nothing.
os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "2000000")

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402

from bridge.config import parse_config  # noqa: E402
from bridge.model import UpstreamResult, UpstreamTool  # noqa: E402
from bridge.runtime import Bridge  # noqa: E402
from bridge.telemetry import CallOrigin, Telemetry  # noqa: E402
from bridge.telemetry.tracing import Tracing  # noqa: E402
from bridge.upstream import CallContext, Upstream, UpstreamConfig  # noqa: E402

ANSWER = UpstreamResult(content=[{"type": "text", "text": "ok"}])


class NoopUpstream(Upstream):
    """Answers every call at once with the same result."""

    kind = "noop"

    async def start(self) -> None:
        pass

    async def list_tools(self) -> list[UpstreamTool]:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        return [
            UpstreamTool(native_id="echo", name="echo", description="Echo.", input_schema=schema)
        ]

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        return ANSWER

    async def close(self) -> None:
        pass


class NoTelemetry(Telemetry):
    """Hooks that do nothing: the pipeline without telemetry."""

    def call_begun(self, ref: str, origin: CallOrigin | None) -> None:
        return None

    def call_ended(self, *args: Any, **kwargs: Any) -> None:
        pass


class Discard(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def telemetries(folder: str) -> dict[str, Telemetry]:
    return {
        "none": NoTelemetry(),
        "metrics": Telemetry(),
        "metrics+audit": Telemetry(audit_path=Path(folder) / "audit.jsonl"),
        "traced, dropped": Telemetry(tracing=Tracing(sample_ratio=0.0, exporter=Discard())),
        "traced, sampled": Telemetry(tracing=Tracing(sample_ratio=1.0, exporter=Discard())),
        "traced, 3 spans": Telemetry(tracing=Tracing(sample_ratio=1.0, exporter=Discard())),
    }


REQUEST = {"http.request.method": "POST", "url.path": "/invoke", "url.scheme": "http"}


async def in_request(tracing: Tracing, call: Awaitable[Any]) -> None:
    """`call` in a frontend request's span, as TracedHTTP makes it."""
    passed = tracing.dropped(None, None)
    if passed is not None:
        with tracing.unsampled(passed):
            await call
        return
    span = tracing.server_span("POST", REQUEST)
    with tracing.active(span):
        await call


async def run(calls: int, rounds: int) -> None:
    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}),
        extra_upstreams=[NoopUpstream(UpstreamConfig(name="noop", kind="noop"))],
    )
    await bridge.start()
    surface = bridge.surfaces.get("default")
    origin = CallOrigin("rest", "bench")
    invoker = bridge.invoker
    with tempfile.TemporaryDirectory() as folder:
        kinds = telemetries(folder)
        times: dict[str, list[int]] = {name: [] for name in kinds}
        cpu: dict[str, list[int]] = {name: [] for name in kinds}
        round_p50: dict[str, list[float]] = {name: [] for name in kinds}
        # the configurations whose calls are made in a frontend request's span
        framed = {name: t.tracing for name, t in kinds.items() if name.endswith("3 spans")}
        for name, telemetry in kinds.items():  # warm up each
            invoker.telemetry = telemetry
            for _ in range(500):
                call = invoker.invoke("noop__echo", {"text": "x"}, surface=surface, origin=origin)
                tracing = framed.get(name)
                await (call if tracing is None else in_request(tracing, call))
        gc.collect()
        gc.freeze()
        per_round = max(1, calls // rounds)
        clock, thread_clock = time.perf_counter_ns, time.thread_time_ns
        for _ in range(rounds):
            for name, telemetry in kinds.items():
                invoker.telemetry = telemetry
                taken, used = [], cpu[name]
                tracing = framed.get(name)
                for _ in range(per_round):
                    began, began_cpu = clock(), thread_clock()
                    call = invoker.invoke(
                        "noop__echo", {"text": "x"}, surface=surface, origin=origin
                    )
                    await (call if tracing is None else in_request(tracing, call))
                    taken.append(clock() - began)
                    used.append(thread_clock() - began_cpu)
                times[name] += taken
                round_p50[name].append(statistics.median(taken) / 1000)
        for telemetry in kinds.values():
            await telemetry.aclose()
    await bridge.close()

    def quantiles(samples: list[int]) -> tuple[float, float]:
        cuts = statistics.quantiles(samples, n=100)
        return cuts[49] / 1000, cuts[98] / 1000

    base99 = quantiles(times["none"])[1]
    base_cpu = quantiles(cpu["none"])[0]
    print(f"{per_round * rounds} calls per configuration in {rounds} rounds, no-op upstream")
    header = ("telemetry", "p50 µs", "p99 µs", "+p50 µs", "+p99 µs", "cpu p50", "+cpu")
    print(f"{header[0]:<18}" + "".join(f"{h:>9}" for h in header[1:]))
    for name, samples in times.items():
        p50, p99 = quantiles(samples)
        added = statistics.median(
            mine - base for mine, base in zip(round_p50[name], round_p50["none"], strict=True)
        )
        cpu50 = quantiles(cpu[name])[0]
        values = (p50, p99, added, p99 - base99, cpu50, cpu50 - base_cpu)
        print(f"{name:<18}" + "".join(f"{v:>9.1f}" for v in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30_000, help="calls per configuration")
    parser.add_argument("--rounds", type=int, default=30, help="turns the configurations take")
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.rounds))


if __name__ == "__main__":
    main()
