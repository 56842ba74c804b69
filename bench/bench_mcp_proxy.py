"""A proxied MCP `tools/call` against the same call made directly, in both protocol eras, at 1, 8
and 32 concurrent client sessions, in one run.

The upstream is bench/_mcp_echo_server.py (the SDK's low-level server, one `echo` tool, over
streamable HTTP) in its own process; the bridge is `bridge serve` in its own process, fronting
that server twice: once as a 2025-11-25 (handshake) upstream and once as a 2026-07-28 (sessionless)
one, so each era is proxied in its own era end to end. The clients are the SDK's `Client`s in this
process, one per session. Each row gives calls/s, p50 and p95 latency, the share of the direct
throughput, and the CPU time per call of the bridge, the upstream and the client (utime + stime
of each process from /proc, so the machine's other load does not count). Rounds repeat the whole
grid, direct and proxied in turns; the table gives each cell's median over the rounds.

Each cell is also run through bench/_mcp_floor.py, a forwarder on the bridge's HTTP stack that
does nothing but forward: its CPU per call (the FLOOR column) is what the stack itself costs, so
the bridge's own work is the difference. BRIDGE/FLOOR is the bridge's CPU per call over the
floor's, the median of the rounds' ratios: a machine slower or busier on the day raises both, so
this ratio compares runs of different days where the milliseconds do not. Before the table,
bench/_wake_cost.py says what the machine charges a process for each wake after a short and a
longer sleep: a proxy wakes twice a call, and at 1 session each wake follows a sleep of several
milliseconds.

A second table splits each proxy's CPU by side. Each cell also runs against a bridge whose one
upstream is inside its own process (bench/_local_echo.py), and against the floor answering the
call itself (`_mcp_floor.py ... --answer`): what they cost is the side facing the clients
(FRONT: the HTTP server and, for the bridge, its MCP frontend and pipeline), and the rest of a
proxied call is the side facing the upstream (BACK: the client and, for the bridge, its MCP
adapter). OWN is the bridge's over the floor's on each side, the median of the rounds' values.

`--profile DIR` also samples the bridge with py-spy (when installed) during one proxied run of
each era at 8 sessions, and prints where its time goes (own time per function, and time under
the main stages of a call).

Run: .venv/bin/python bench/bench_mcp_proxy.py [--rounds 3] [--calls 600] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from _procs import pct, process, table  # noqa: E402
from mcp import Client  # noqa: E402

PY = sys.executable
ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}  # era -> the SDK client's mode
UPSTREAM_OF = {"2025-11-25": "hs", "2026-07-28": "sl"}  # era -> the bridge's upstream fronting it
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wake_cost(period_ms: float) -> str:
    """Microseconds of CPU a process pays per wake after `period_ms` asleep, on this machine."""
    probe = await asyncio.create_subprocess_exec(
        PY, str(ROOT / "bench" / "_wake_cost.py"), str(period_ms), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await probe.communicate()
    return out.decode().strip() or "?"


def cpu_seconds(pid: int | None = None) -> float:
    """utime + stime of a process, all its threads, in seconds."""
    stat = Path(f"/proc/{pid or 'self'}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def wait_listening(port: int, proc: asyncio.subprocess.Process, timeout: float = 120) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"a server process exited with {proc.returncode}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.1)


async def wait_ready(base: str, timeout: float = 120) -> None:
    """Until the bridge's /readyz answers 200: it listens before its upstreams have listed."""
    async with asyncio.timeout(timeout), httpx2.AsyncClient() as http:
        while (await http.get(f"{base}/readyz")).status_code != 200:
            await asyncio.sleep(0.1)


async def run_sessions(
    url: str, mode: str, tool: str, sessions: int, calls: int, pids: dict[str, int]
) -> dict[str, Any]:
    """`calls` calls spread over `sessions` clients, after each made 3 to warm up."""
    latencies: list[float] = []
    ready = asyncio.Barrier(sessions + 1)
    go = asyncio.Event()
    finished = asyncio.Barrier(sessions + 1)
    share = [calls // sessions + (1 if n < calls % sessions else 0) for n in range(sessions)]

    async def one(n: int) -> None:
        async with Client(url, mode=mode, cache=None) as client:  # type: ignore[arg-type]
            for i in range(3):
                await client.call_tool(tool, {"text": f"warm {i}"})
            await ready.wait()
            await go.wait()
            for i in range(share[n]):
                started = time.perf_counter()
                result = await client.call_tool(tool, {"text": f"s{n} c{i}"})
                latencies.append((time.perf_counter() - started) * 1000)
                if result.is_error:
                    raise RuntimeError(f"call failed: {result.content}")
            await finished.wait()

    tasks = [asyncio.create_task(one(n)) for n in range(sessions)]
    try:
        async with asyncio.timeout(900):
            waiter = asyncio.ensure_future(ready.wait())
            while not waiter.done():
                await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    if task.done() and task.exception():
                        raise task.exception()  # type: ignore[misc]
            before = {name: cpu_seconds(pid) for name, pid in pids.items()} | {
                "client": cpu_seconds()
            }
            started = time.perf_counter()
            go.set()
            waiter = asyncio.ensure_future(finished.wait())
            while not waiter.done():
                await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    if task.done() and task.exception():
                        raise task.exception()  # type: ignore[misc]
            wall = time.perf_counter() - started
            after = {name: cpu_seconds(pid) for name, pid in pids.items()} | {
                "client": cpu_seconds()
            }
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    count = len(latencies)
    return {
        "rate": count / wall,
        "p50": statistics.median(latencies),
        "p95": pct(latencies, 0.95),
        **{f"cpu_{name}": (after[name] - before[name]) * 1000 / count for name in after},
    }


# ------------------------------------------------------------------------------------ profile

STAGES = {  # a frame whose function (file:function) holds this -> the stage it counts in
    "frontend: SDK server (transport, session, models)": (
        "mcp/server/",
        "mcp_types/",
        "sse_starlette/",
    ),
    "frontend: bridge handler": ("bridge/serve/",),
    "pipeline (invoke)": ("bridge/invoke.py", "bridge/arguments", "bridge/envelopes"),
    "upstream: SDK client (session, models)": ("mcp/client/", "mcp/shared/"),
    "upstream: bridge adapter": ("adapters/",),
    "translate": ("bridge/translate/",),
    "telemetry": ("bridge/telemetry",),
    "HTTP client (httpx2, httpcore)": ("httpx2/", "httpcore", "h11/"),
    "HTTP server (uvicorn, starlette)": ("uvicorn/", "starlette/"),
    "pydantic": ("pydantic",),
    "json": ("json/",),
    "logging": ("logging/",),
    "asyncio / anyio": ("asyncio/", "anyio/", "uvloop"),
}


def profile_summary(raw: Path, top: int = 25) -> str:
    """Own time per function and time under each stage, from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    stage: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        seen: set[str] = set()
        for frame in frames:
            for name, marks in STAGES.items():
                if name not in seen and any(mark in frame for mark in marks):
                    seen.add(name)
                    stage[name] += count
    if not total:
        return "  (no samples)"
    lines = [f"  {total} samples; time under each stage (stages nest, so shares overlap):"]
    lines += [f"    {100 * n / total:5.1f}%  {name}" for name, n in stage.most_common()]
    lines.append("  own time per function:")
    lines += [f"    {100 * n / total:5.1f}%  {frame[:150]}" for frame, n in own.most_common(top)]
    return "\n".join(lines)


def cprofile_summary(path: Path, top: int = 40) -> str:
    """Own time per function (cProfile's tottime), and the stages' cumulative time."""
    import io
    import pstats

    text = io.StringIO()
    stats = pstats.Stats(str(path), stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return "\n".join("  " + line for line in text.getvalue().splitlines()[4:] if line.strip())


async def profiled(pid: int, out: Path, run: Any) -> str:
    spy = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
    if not Path(spy).exists():
        await run()
        return "  py-spy is not installed: no profile"
    sampler = await asyncio.create_subprocess_exec(
        spy,
        "record",
        "--pid",
        str(pid),
        "--rate",
        "500",
        "--format",
        "raw",
        "--output",
        str(out),
        "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    await asyncio.sleep(1.0)  # py-spy attaches
    try:
        await run()
    finally:
        sampler.send_signal(signal.SIGINT)
        _, err = await sampler.communicate()
    if not out.exists():
        return f"  py-spy wrote no profile: {err.decode(errors='replace')[-500:]}"
    return profile_summary(out)


# ------------------------------------------------------------------------------------ main


def print_split(
    cells: dict[tuple[str, int, str], list[dict[str, Any]]], eras: list[str], sessions: list[int]
) -> None:
    """The CPU per call of each side of the bridge and of the floor: the side facing the clients
    (FRONT: the HTTP server and, for the bridge, its MCP frontend and the pipeline) is what a
    call of an upstream inside the process costs (bench/_local_echo.py; the floor answering the
    call itself), and the side facing the upstream (BACK) is the rest of a proxied call. OWN is
    the bridge's over the floor's, side by side: its own work. Medians of the rounds' values."""
    rows = []
    for era in eras:
        for n in sessions:
            runs = [cells[(era, n, path)] for path in ("bridge", "floor", "local", "f-local")]
            if not all(runs):
                continue
            # each path's CPU per call, round by round: the bridge, the floor, and both answering
            # the call themselves
            rounds = [[m["cpu_bridge"] for m in ms] for ms in runs]
            b, f, bl, fl = (statistics.median(r) for r in rounds)
            by_round = list(zip(*rounds, strict=True))
            own_front = statistics.median(bl_ - fl_ for _, _, bl_, fl_ in by_round)
            own_back = statistics.median((b_ - bl_) - (f_ - fl_) for b_, f_, bl_, fl_ in by_round)
            rows.append(
                [
                    era,
                    str(n),
                    f"{fl:.2f} / {bl:.2f}",
                    f"{f - fl:.2f} / {b - bl:.2f}",
                    f"{own_front:.2f}",
                    f"{own_back:.2f}",
                ]
            )
    if not rows:
        return
    header = [
        "ERA",
        "N",
        "FRONT floor/bridge",
        "BACK floor/bridge",
        "OWN FRONT+PIPELINE",
        "OWN BACK",
    ]
    print("\nCPU ms per call by side: the clients' (FRONT) and the upstream's (BACK)")
    print(table(rows, header))


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--calls", type=int, default=600, help="calls per cell (spread over its sessions)"
    )
    parser.add_argument("--sessions", default="1,8,32")
    parser.add_argument("--eras", default=",".join(ERAS))
    parser.add_argument("--profile", type=Path, help="write py-spy profiles of the bridge here")
    parser.add_argument(
        "--cprofile",
        type=Path,
        help="run a second bridge under cProfile, one run per era at 8 "
        "sessions, and write each era's profile here",
    )
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    sessions_list = [int(s) for s in args.sessions.split(",")]
    eras = args.eras.split(",")
    print(
        f"proxied MCP tools/call vs direct ({os.cpu_count()} CPUs, Python {sys.version.split()[0]}), "
        f"{args.calls} calls per cell, {args.rounds} rounds",
        flush=True,
    )
    wakes = [await wake_cost(period) for period in (0.5, 5.0)]
    print(
        f"CPU per wake of an idle event loop here: {wakes[0]} us after 0.5 ms asleep, "
        f"{wakes[1]} us after 5 ms (bench/_wake_cost.py)",
        flush=True,
    )
    cells: dict[tuple[str, int, str], list[dict[str, Any]]] = collections.defaultdict(list)
    profiles: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-mcp-proxy-") as tmp:
        work = Path(tmp)
        up_port, bridge_port = free_port(), free_port()
        up_url = f"http://127.0.0.1:{up_port}/mcp"
        config = {
            "server": {"host": "127.0.0.1", "port": bridge_port},
            "store": {"path": str(work / "bridge.db")},
            "upstreams": [
                {"name": UPSTREAM_OF[era], "kind": "mcp", "url": up_url, "protocol": mode}
                for era, mode in ERAS.items()
            ],
            "search": {"semantic": "off"},
        }
        (work / "bridge.json").write_text(json.dumps(config))
        # the same bridge with an upstream inside its process instead (bench/_local_echo.py)
        local_port = free_port()
        local_config = config | {
            "server": {"host": "127.0.0.1", "port": local_port},
            "store": {"path": str(work / "local.db")},
            "upstreams": [{"name": "local", "kind": "local_echo"}],
        }
        (work / "local.json").write_text(json.dumps(local_config))
        async with process(
            PY, str(ROOT / "bench" / "_mcp_echo_server.py"), str(up_port)
        ) as upstream:
            await wait_listening(up_port, upstream)
            floor_port, floor_local_port = free_port(), free_port()
            floor_script = str(ROOT / "bench" / "_mcp_floor.py")
            async with (
                process(PY, "-m", "bridge.cli", "serve", "-c", str(work / "bridge.json")) as bridge,
                process(PY, floor_script, up_url, str(floor_port)) as floor,
                process(
                    PY,
                    str(ROOT / "bench" / "_local_echo.py"),
                    "serve",
                    "-c",
                    str(work / "local.json"),
                ) as bridge_local,
                process(PY, floor_script, up_url, str(floor_local_port), "--answer") as floor_local,
            ):
                base = f"http://127.0.0.1:{bridge_port}"
                for port, proc in (
                    (bridge_port, bridge),
                    (floor_port, floor),
                    (local_port, bridge_local),
                    (floor_local_port, floor_local),
                ):
                    await wait_listening(port, proc)
                await wait_ready(base)
                await wait_ready(f"http://127.0.0.1:{local_port}")
                pids = {"bridge": bridge.pid, "upstream": upstream.pid}
                # the floors' and the local bridge's CPU is read as the bridge's in their runs
                floor_pids = {"bridge": floor.pid, "upstream": upstream.pid}
                local_pids = {"bridge": bridge_local.pid, "upstream": upstream.pid}
                floor_local_pids = {"bridge": floor_local.pid, "upstream": upstream.pid}
                for round_ in range(args.rounds):
                    for era in eras:
                        mode = ERAS[era]
                        for sessions in sessions_list:
                            paths = [
                                ("direct", up_url, "echo", pids),
                                ("bridge", f"{base}/mcp", f"{UPSTREAM_OF[era]}__echo", pids),
                                ("floor", f"http://127.0.0.1:{floor_port}/mcp", "echo", floor_pids),
                                (
                                    "local",
                                    f"http://127.0.0.1:{local_port}/mcp",
                                    "local__echo",
                                    local_pids,
                                ),
                                (
                                    "f-local",
                                    f"http://127.0.0.1:{floor_local_port}/mcp",
                                    "echo",
                                    floor_local_pids,
                                ),
                            ]
                            if round_ % 2:
                                paths.reverse()
                            for path, url, tool, measured in paths:
                                m = await run_sessions(
                                    url, mode, tool, sessions, args.calls, measured
                                )
                                cells[(era, sessions, path)].append(m)
                                print(
                                    f"  round {round_ + 1} {era} N={sessions:<2} {path:<7} {m['rate']:7.0f}/s "
                                    f"p50 {m['p50']:6.2f} p95 {m['p95']:6.2f} ms  cpu/call bridge "
                                    f"{m['cpu_bridge']:.2f} upstream {m['cpu_upstream']:.2f} client "
                                    f"{m['cpu_client']:.2f} ms",
                                    flush=True,
                                )
                if args.profile:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    for era in eras:
                        out = args.profile / f"bridge-{era}.txt"

                        async def run(era: str = era) -> None:
                            await run_sessions(
                                f"{base}/mcp",
                                ERAS[era],
                                f"{UPSTREAM_OF[era]}__echo",
                                8,
                                args.calls * 2,
                                pids,
                            )

                        profiles[era] = await profiled(bridge.pid, out, run)
        if args.cprofile:
            args.cprofile.mkdir(parents=True, exist_ok=True)
            for era in eras:
                port = free_port()
                config["server"] = {"host": "127.0.0.1", "port": port}
                config["store"] = {"path": str(work / f"profiled-{era}.db")}
                (work / "profiled.json").write_text(json.dumps(config))
                out = args.cprofile / f"bridge-{era}.prof"
                async with (
                    process(
                        PY, str(ROOT / "bench" / "_mcp_echo_server.py"), str(up_port)
                    ) as upstream,
                    process(
                        PY,
                        str(ROOT / "bench" / "_cprofiled.py"),
                        str(out),
                        "serve",
                        "-c",
                        str(work / "profiled.json"),
                    ) as bridge,
                ):
                    await wait_listening(up_port, upstream)
                    await wait_listening(port, bridge)
                    await wait_ready(f"http://127.0.0.1:{port}")
                    await run_sessions(
                        f"http://127.0.0.1:{port}/mcp",
                        ERAS[era],
                        f"{UPSTREAM_OF[era]}__echo",
                        8,
                        args.calls * 2,
                        {},
                    )
                for _ in range(100):
                    if out.exists():
                        break
                    await asyncio.sleep(0.1)
                profiles[f"{era} (cProfile, {args.calls * 2} calls)"] = (
                    cprofile_summary(out) if out.exists() else "  no profile written"
                )
    rows = []
    for era in eras:
        for sessions in sessions_list:
            direct, via = cells[(era, sessions, "direct")], cells[(era, sessions, "bridge")]
            floor = cells[(era, sessions, "floor")]
            if not direct or not via or not floor:
                continue

            def med(ms: list[dict[str, Any]], key: str) -> float:
                return statistics.median(m[key] for m in ms)

            ratio = statistics.median(
                v["rate"] / d["rate"] for v, d in zip(via, direct, strict=True)
            )
            # the bridge's CPU over the floor's, round by round: the machine's speed on the day
            # moves both together, and this far less; a round too short for the clock's ticks to
            # see the floor's CPU gives no ratio
            over = [
                v["cpu_bridge"] / f["cpu_bridge"]
                for v, f in zip(via, floor, strict=True)
                if f["cpu_bridge"]
            ]
            over_floor = f"{statistics.median(over):.2f}" if over else "-"
            rows.append(
                [
                    era,
                    str(sessions),
                    f"{med(direct, 'rate'):.0f}",
                    f"{med(via, 'rate'):.0f}",
                    f"{ratio:.2f}",
                    f"{med(direct, 'p50'):.2f} / {med(via, 'p50'):.2f}",
                    f"{med(direct, 'p95'):.2f} / {med(via, 'p95'):.2f}",
                    f"{med(via, 'cpu_bridge'):.2f}",
                    f"{med(floor, 'cpu_bridge'):.2f}",
                    over_floor,
                    f"{med(via, 'cpu_upstream'):.2f}",
                    f"{med(direct, 'cpu_upstream'):.2f}",
                    f"{med(via, 'cpu_client'):.2f}",
                ]
            )
    header = [
        "ERA",
        "N",
        "DIRECT/S",
        "BRIDGE/S",
        "RATIO",
        "P50 MS direct/bridge",
        "P95 MS direct/bridge",
        "BRIDGE CPU MS/CALL",
        "FLOOR CPU",
        "BRIDGE/FLOOR",
        "UPSTREAM CPU (via)",
        "UPSTREAM CPU (direct)",
        "CLIENT CPU (via)",
    ]
    print(
        f"\nCPU per wake of an idle event loop here: {wakes[0]} us after 0.5 ms asleep, "
        f"{wakes[1]} us after 5 ms"
    )
    print(table(rows, header))
    print_split(cells, eras, sessions_list)
    for era, text in profiles.items():
        print(f"\nwhere the bridge's time goes, {era}, 8 sessions (py-spy):\n{text}")
    if args.json:
        args.json.write_text(
            json.dumps({f"{e}|{n}|{p}": v for (e, n, p), v in cells.items()}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
