"""What exporting a kept trace's spans costs, in CPU per call, in the bridge's process and in
its span export child: the no-op upstream of bench_telemetry.py called over and over in process
(two spans a call, every trace kept), its spans

- `discarded`: handed to the SDK's batch span processor in process, whose exporter keeps
  nothing (no encoding);
- `thread`: encoded and sent by the SDK's OTLP/HTTP exporter on the batch processor's thread,
  in the bridge's process;
- `child`: handed to the span export child, which encodes and sends them (the bridge's way).

Spans go to a collector on loopback that discards them (bench/_otlp_sink.py). The three take
turns, a round of calls each; a row gives the median over the rounds of the bridge process's
CPU time per call (its event loop's and its threads') and of the export child's, measured once
it stopped (its start and stop, measured alone first, taken out). The queues of the batch span
processors are made large enough that no span is dropped.

    python bench/bench_span_export.py [--calls 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = "1000000"  # read by both processes' span processors

from bench_rest_invoke import free_port  # noqa: E402
from bench_telemetry import Discard, NoopUpstream  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402

from bridge.config import parse_config  # noqa: E402
from bridge.runtime import Bridge  # noqa: E402
from bridge.telemetry import CallOrigin, Telemetry  # noqa: E402
from bridge.telemetry.tracing import Tracing  # noqa: E402
from bridge.upstream import UpstreamConfig  # noqa: E402


def children_cpu() -> float:
    """CPU seconds of the child processes that ended (and were waited for) so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def run(calls: int, rounds: int) -> None:
    port = free_port()
    sink = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "_otlp_sink.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdout is not None
    sink.stdout.readline()  # listening
    url = f"http://127.0.0.1:{port}"
    bridge = Bridge(
        parse_config({"store": {"path": ":memory:"}}),
        extra_upstreams=[NoopUpstream(UpstreamConfig(name="noop", kind="noop"))],
    )
    await bridge.start()
    try:
        surface = bridge.surfaces.get("default")
        origin = CallOrigin("rest", "bench")
        invoker = bridge.invoker
        kinds: dict[str, Callable[[], Tracing]] = {
            "discarded": lambda: Tracing(sample_ratio=1.0, exporter=Discard()),
            "thread": lambda: Tracing(
                sample_ratio=1.0, exporter=OTLPSpanExporter(endpoint=f"{url}/v1/traces")
            ),
            "child": lambda: Tracing(url, sample_ratio=1.0),
        }
        before = children_cpu()
        await asyncio.to_thread(kinds["child"]().close)
        alone = children_cpu() - before  # the child's start and stop
        mine: dict[str, list[float]] = {name: [] for name in kinds}
        child: dict[str, list[float]] = {name: [] for name in kinds}
        warm = min(300, calls)
        for _ in range(rounds):
            for name, make in kinds.items():
                invoker.telemetry = telemetry = Telemetry(tracing=make())
                for _ in range(warm):
                    await invoker.invoke("noop__echo", {}, surface=surface, origin=origin)
                before, began = children_cpu(), time.process_time()
                for _ in range(calls):
                    await invoker.invoke("noop__echo", {}, surface=surface, origin=origin)
                await telemetry.aclose()  # the spans still waiting are exported
                used = time.process_time() - began
                mine[name].append(used / calls)
                spent = children_cpu() - before - (alone if name == "child" else 0.0)
                child[name].append(max(0.0, spent) / (calls + warm))
    finally:
        await bridge.close()
        sink.terminate()
        sink.wait()
    print(f"{calls} calls per row in {rounds} rounds, two spans a call; child start+stop alone:")
    print(f"{alone * 1000:.0f} ms CPU")
    header = ("spans", "bridge µs/call", "child µs/call", "both µs/call")
    print(f"{header[0]:<12}" + "".join(f"{h:>16}" for h in header[1:]))
    for name in kinds:
        ours, theirs = statistics.median(mine[name]) * 1e6, statistics.median(child[name]) * 1e6
        print(f"{name:<12}" + "".join(f"{v:>16.0f}" for v in (ours, theirs, ours + theirs)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="turns the rows take")
    args = parser.parse_args()
    asyncio.run(run(args.calls, args.rounds))


if __name__ == "__main__":
    main()
