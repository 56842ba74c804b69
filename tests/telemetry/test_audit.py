"""The audit stream: one JSON line per invocation, over every frontend, naming the caller's token
by its name and holding no argument value, result or token; rotated by size, the oldest files
dropped; a file that cannot be written loses records with a warning, and the calls go on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bridge.telemetry.audit import FIELDS, AuditLog
from tests.fakes import FakeUpstream, tool
from tests.serve.mcp_support import HANDSHAKE, http_client
from tests.serve.rest_env import TOKEN_ALL, config_with, narrow_surfaces, serving

SECRET = "an-argument-value-never-audited"


def record(n: int) -> tuple:
    """The values of a record of FIELDS, about 250 bytes written, told apart by `n`."""
    values = dict.fromkeys(FIELDS, "x" * 10)
    values.update(invocation_id=f"inv_{n:04d}", duration_ms=0.5, upstream_ms=None)
    return tuple(values.values())


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_every_invocation_is_one_record_without_arguments_or_results(tmp_path):
    path = tmp_path / "audit" / "calls.jsonl"
    config = narrow_surfaces()
    config["server"]["tokens"][0]["name"] = "ci-robot"
    echo = FakeUpstream(name="docs", tools=[tool("echo")])
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with serving(echo, config=config_with(**config, audit={"path": str(path)})) as served:
        body = {"tool": "docs__echo", "arguments": {"text": SECRET}}
        assert (
            await served.post(
                "/invoke", body, token=TOKEN_ALL, headers={"traceparent": traceparent}
            )
        )[0] == 200
        assert (
            await served.post(
                "/invoke", {"tool": "docs__echo", "arguments": {"text": 3}}, token=TOKEN_ALL
            )
        )[0] == 400
        async with http_client(served.base, HANDSHAKE, token=TOKEN_ALL) as client:
            assert not (await client.call("docs__echo", {"text": SECRET})).is_error
    # the bridge is closed: every record is written
    found = records(path)
    assert len(found) == 3
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text(encoding="utf-8")
    assert SECRET not in text and TOKEN_ALL not in text
    rest, invalid, mcp = found
    assert set(rest) == {
        "time",
        "invocation_id",
        "caller",
        "frontend",
        "surface",
        "tool",
        "tool_id",
        "upstream",
        "version",
        "outcome",
        "status",
        "error_class",
        "duration_ms",
        "upstream_ms",
        "trace_id",
    }
    assert {
        k: rest[k]
        for k in (
            "caller",
            "frontend",
            "surface",
            "tool",
            "upstream",
            "version",
            "outcome",
            "status",
            "error_class",
            "trace_id",
        )
    } == {
        "caller": "ci-robot",
        "frontend": "rest",
        "surface": "default",
        "tool": "docs__echo",
        "upstream": "docs",
        "version": 1,
        "outcome": "ok",
        "status": "succeeded",
        "error_class": None,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    }
    assert rest["duration_ms"] >= rest["upstream_ms"] > 0 and rest["time"].endswith("Z")
    assert (
        invalid["outcome"] == invalid["error_class"] == "invalid_arguments"
        and invalid["upstream_ms"] is None
    )
    assert mcp["frontend"] == "mcp" and mcp["caller"] == "ci-robot" and mcp["outcome"] == "ok"


async def test_the_file_is_rotated_by_size_and_the_oldest_dropped(tmp_path):
    path = tmp_path / "audit.jsonl"
    size = len(json.dumps(dict.fromkeys(FIELDS, "x" * 10), separators=(",", ":"))) + 1
    audit = AuditLog(path, max_bytes=25 * size, keep=2)
    for n in range(100):  # ten records a batch, two batches a file: five files
        audit.record(record(n))
        if n % 10 == 9:
            audit.flush()
    await audit.aclose()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert all(p.stat().st_size <= 25 * size for p in tmp_path.iterdir())
    kept = [
        int(r["invocation_id"][4:])
        for name in ("audit.jsonl.2", "audit.jsonl.1", "audit.jsonl")
        for r in records(tmp_path / name)
    ]
    # in order: the current file and two rotated, of two batches each; the oldest dropped
    assert kept == list(range(40, 100))


async def test_records_the_disk_refuses_are_counted_and_warned_once(tmp_path, caplog):
    path = tmp_path / "taken"
    path.mkdir()  # a folder where the file goes: opening it fails
    audit = AuditLog(path, max_bytes=1 << 20, keep=1)
    with caplog.at_level(logging.WARNING, logger="bridge.audit"):
        for n in range(3):
            audit.record(record(n))
            audit.flush()
        await audit.aclose()
    assert audit.dropped == 3
    assert len([r for r in caplog.records if "cannot be written" in r.message]) == 1
