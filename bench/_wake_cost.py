"""What a machine charges a Python process for waking up: an event loop (uvloop, as the bridge
runs) that sleeps PERIOD milliseconds and wakes, over and over, for SECONDS, doing nothing else.
Prints one line: the CPU time (the scheduler's, from /proc/self/schedstat) per wake, in
microseconds.

A wake costs a few microseconds after a short sleep; some machines, virtual ones among them,
charge far more after a longer one. There a proxy that sleeps between the calls of one client
pays that charge twice a call, once for the request and once for the upstream's answer, and so
do its client and its upstream.
Run by bench/bench_mcp_proxy.py: `_wake_cost.py PERIOD_MS [SECONDS]`."""

from __future__ import annotations

import asyncio
import sys
import time

import uvloop


def _cpu_ns() -> int:
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[0])


async def wakes(period: float, seconds: float) -> float:
    """Microseconds of CPU per wake after `period` seconds asleep."""
    await asyncio.sleep(period)  # the loop's first turns are not counted
    count, began, spent = 0, time.monotonic(), _cpu_ns()
    while time.monotonic() - began < seconds:
        await asyncio.sleep(period)
        count += 1
    return (_cpu_ns() - spent) / 1000 / count


if __name__ == "__main__":
    period_ms = float(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    print(f"{uvloop.run(wakes(period_ms / 1000, seconds)):.1f}")
