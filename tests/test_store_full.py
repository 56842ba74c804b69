"""The store on a full disk, simulated by a file size limit (RLIMIT_FSIZE) in a subprocess: a write
past it fails as on a disk with no space left (Python ignores SIGXFSZ)."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path

from bridge.config import load_config
from bridge.runtime import Bridge
from bridge.upstream import register_kind
from tests.fakes import FakeUpstream

ROOT = Path(__file__).resolve().parents[1]
register_kind("fake", FakeUpstream)


def limited(kilobytes: int):
    """A preexec_fn limiting the files the subprocess writes to `kilobytes`."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (kilobytes * 1024, resource.RLIM_INFINITY))

    return limit


def test_a_store_that_cannot_be_laid_out_on_a_full_disk_says_so_in_one_line(tmp_path):
    store = tmp_path / "data" / "bridge.db"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store: {{path: {store}}}\nupstreams: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "search", "x", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        preexec_fn=limited(40),
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    # the error itself, not the failed rollback after it ("cannot rollback - no transaction is active")
    assert "rollback" not in lines[0]
    assert f"StoreFull: {store}: cannot be written (disk I/O error" in lines[0]
    assert "fix: free space on its disk, or set store.path" in lines[0]


# Run in a subprocess: the limit is set once the store is laid out, and lifted as space returning.
WRITES_REFUSED = """
import json, logging, os, resource, sys
from bridge.store import Store, StoreFull

logging.basicConfig(level=logging.WARNING, format="%(message)s")
path = sys.argv[1]
store = Store(path)
store.log_invocations([("inv_0", "t", "svc__echo", 1, "default", "succeeded", None, "2026-01-01T00:00:00Z", 1.0)])
size = max(os.path.getsize(f) for f in (path, path + "-wal") if os.path.exists(f))
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 8192, resource.RLIM_INFINITY))
signature = json.dumps({"description": os.urandom(60000).hex()})  # past the limit, compressed or not
row = ("svc", "t", 2, "d2", "breaking", "2026-01-01T00:00:00Z", signature)
out = {}
# first: 1,999 rows are a transaction of 18 statements, which SQLite rolls back when the disk refuses it
store.log_invocations([(f"inv_{i}", "t", "svc__echo", 2, "default", "succeeded", None, "2026-01-01T00:00:01Z", 1.0)
                       for i in range(1, 2000)], keep=1000)
store.add_version_rows([row])
store.save_names([("svc", "t", "svc__echo", "echo")])
try:
    store.put_result("blob_1", "inv_1", "application/json", os.urandom(60000))
except StoreFull as exc:
    out["put_result"] = str(exc)
out["unwritable"] = store.unwritable
out["pending version"] = store.get_version("svc", "t", 2).digest
out["versions"] = [v.version for v in store.list_versions("svc", "t")]
out["names"] = store.assigned_names()
out["latest"] = store.latest_versions()
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
store.log_invocations([("inv_2000", "t", "svc__echo", 2, "default", "succeeded", None, "2026-01-01T00:00:02Z", 1.0)])
out["after"] = store.unwritable
store.close()
again = Store(path)
out["stored versions"] = [v.version for v in again.list_versions("svc", "t")]
out["stored names"] = again.assigned_names()
out["stored log rows"] = again._db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0]
print(json.dumps(out))
"""


def test_writes_a_full_disk_refuses_wait_in_memory_and_are_written_once_it_takes_them_again(
    tmp_path,
):
    done = subprocess.run(
        [sys.executable, "-c", WRITES_REFUSED, str(tmp_path / "b.db")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = __import__("json").loads(done.stdout)
    assert out["put_result"].startswith(
        f"{tmp_path / 'b.db'}: the result cannot be stored (disk I/O error)"
    )
    assert out["unwritable"] == "disk I/O error"
    # the version refused is read from memory meanwhile: the next change is classified against it
    assert out["pending version"] == "d2" and out["versions"] == [2]
    assert out["names"] == {"t": "svc__echo"} and out["latest"] == {"t": [2, "d2"]}
    assert out["after"] is None
    assert out["stored versions"] == [2] and out["stored names"] == {"t": "svc__echo"}
    assert out["stored log rows"] == 2001  # every row, none lost
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 2, done.stderr  # once refused, once written again
    assert (
        "cannot be written (disk I/O error" in warnings[0]
        and "fix: free space on its disk" in warnings[0]
    )
    assert "written again" in warnings[1]


SERVE = (
    "import sys\nfrom bridge.upstream import register_kind\nfrom tests.fakes import FakeUpstream\n"
    "register_kind('fake', FakeUpstream)\nfrom bridge.cli import main\nsys.exit(main(sys.argv[1:]))\n"
)


def test_bridge_serve_on_a_full_disk_answers_calls_says_so_in_health_and_writes_again_once_space_returns(
    tmp_path,
):
    import json
    import re
    import time
    import urllib.request

    store = tmp_path / "b.db"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"server: {{host: 127.0.0.1, port: 0}}\nstore: {{path: {store}}}\nsearch: {{persist: false}}\n"
        "invoke: {inline_result_limit: 256}\nupstreams:\n  - {name: svc, kind: fake}\n"
    )

    async def lay_out() -> None:
        async with Bridge(load_config(cfg)):  # the store laid out, as `bridge check` leaves it
            pass

    asyncio.run(lay_out())
    err = tmp_path / "err"
    with err.open("w") as stderr:  # the limit: the store as laid out, and 24 KB to write more
        server = subprocess.Popen(
            [sys.executable, "-c", SERVE, "serve", "-c", str(cfg)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=limited(store.stat().st_size // 1024 + 24),
        )
    try:
        base = None
        for _ in range(300):
            found = re.search(r"http://127\.0\.0\.1:\d+", err.read_text())
            if found and "upstreams started" in err.read_text():
                base = found.group(0)
                break
            time.sleep(0.1)
        assert base, err.read_text()

        def request(path: str, body: dict | None = None) -> tuple[int, dict]:
            sent = urllib.request.Request(
                base + path,
                data=json.dumps(body).encode() if body else None,
                headers={"content-type": "application/json"},
            )
            try:
                with urllib.request.urlopen(sent, timeout=30) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        for size in (40_000, 80_000):  # each result past the limit: answered whole, not stored
            status, body = request(
                "/invoke", {"tool": "svc__echo", "arguments": {"text": "x" * size}}
            )
            assert status == 200 and body["status"] == "succeeded", body
            assert body["content"][0]["text"] == "x" * size
        status, health = request("/healthz")
        assert status == 200 and health["status"] == "ok" and health["store"]["writable"] is False

        resource.prlimit(
            server.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )  # space returns
        status, body = request(
            "/invoke", {"tool": "svc__echo", "arguments": {"text": "y" * 80_000}}
        )
        assert status == 200 and "bridge://results/" in json.dumps(
            body
        )  # stored again, behind a ref
        for _ in range(50):  # the log rows are flushed a quarter second after a call
            if request("/healthz")[1] == {"status": "ok"}:
                break
            time.sleep(0.1)
        assert request("/healthz")[1] == {"status": "ok"}
    finally:
        server.terminate()
        server.wait(30)
    log = err.read_text()
    assert "Traceback" not in log and "never retrieved" not in log, log
    # said once each (the small log rows between the large results went in: the repeats are at INFO)
    assert (
        log.count("cannot be written (disk I/O error") == 1 and log.count("written again") == 1
    ), log
    import sqlite3

    with sqlite3.connect(
        store
    ) as db:  # every call's log row, those made while the disk was full too
        assert db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0] == 3
