"""Logs: `logging: {format: json}` makes every stderr line of `bridge serve` one JSON object, the
start-up banner included; each call writes one access line at INFO (tool, surface, outcome,
durations, the caller's trace id; no argument value), in either format."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import sys
from pathlib import Path

import aiohttp

from bridge.telemetry.logs import ACCESS_LOGGER, TEXT_FORMAT, JsonFormatter
from tests.fakes import FakeUpstream, tool
from tests.serve.rest_env import TOKEN_ALL, config_with, narrow_surfaces, serving
from tests.servers import TINY_MCP_SERVER

ROOT = Path(__file__).resolve().parents[2]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SECRET = "do-not-log-this-value"


@contextlib.contextmanager
def access_lines(formatter: logging.Formatter):
    """The access log's lines, formatted by `formatter`, while the block runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(ACCESS_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    lines: list[str] = []
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        lines += stream.getvalue().splitlines()


async def test_each_call_writes_one_access_line_with_its_caller_and_trace_and_no_arguments():
    echo = FakeUpstream(name="docs", tools=[tool("echo")])
    with access_lines(JsonFormatter()) as lines:
        async with serving(echo, config=config_with(**narrow_surfaces())) as served:
            headers = {"traceparent": TRACEPARENT}
            status, _, _ = await served.post(
                "/invoke",
                {"tool": "docs__echo", "arguments": {"text": SECRET}},
                token=TOKEN_ALL,
                headers=headers,
            )
            assert status == 200
            status, _, _ = await served.post(
                "/invoke", {"tool": "docs__echo", "arguments": {"text": 7}}, token=TOKEN_ALL
            )
            assert status == 400
    assert len(lines) == 2 and all(SECRET not in line for line in lines)
    first, second = (json.loads(line) for line in lines)
    assert first["logger"] == ACCESS_LOGGER and first["level"] == "INFO"
    assert {
        k: first[k]
        for k in (
            "event",
            "tool",
            "version",
            "surface",
            "frontend",
            "caller",
            "outcome",
            "trace_id",
        )
    } == {
        "event": "call",
        "tool": "docs__echo",
        "version": 1,
        "surface": "default",
        "frontend": "rest",
        "caller": "server.tokens[0]",
        "outcome": "ok",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    }
    assert first["duration_ms"] >= first["upstream_ms"] > 0 and first["invocation_id"].startswith(
        "inv"
    )
    assert (
        second["outcome"] == "invalid_arguments"
        and "upstream_ms" not in second
        and "trace_id" not in second
    )


async def test_the_text_access_line_says_the_same_as_key_value_pairs():
    echo = FakeUpstream(name="docs", tools=[tool("echo")])
    with access_lines(logging.Formatter(TEXT_FORMAT)) as lines:
        async with serving(echo) as served:
            await served.post("/invoke", {"tool": "docs__echo", "arguments": {"text": SECRET}})
    assert len(lines) == 1 and SECRET not in lines[0]
    assert " INFO bridge.access: call invocation_id=inv" in lines[0]
    assert (
        " tool=docs__echo version=1 surface=default frontend=rest outcome=ok duration_ms="
        in lines[0]
    )


def test_a_json_record_carries_its_extra_fields_and_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("bridge.test").makeRecord(
            "bridge.test",
            logging.ERROR,
            __file__,
            1,
            "failed %s",
            ("x",),
            sys.exc_info(),
            extra={"upstream": "docs"},
        )
    entry = json.loads(JsonFormatter().format(record))
    assert (
        entry["message"] == "failed x" and entry["level"] == "ERROR" and entry["upstream"] == "docs"
    )
    assert entry["time"].endswith("Z") and "ValueError: boom" in entry["exception"]


async def test_bridge_serve_writes_json_lines_on_stderr_banner_included(tmp_path):
    config = {
        "store": {"path": ":memory:"},
        "logging": {"format": "json", "level": "info"},
        "upstreams": [
            {
                "name": "tiny",
                "kind": "mcp",
                "command": sys.executable,
                "args": [str(TINY_MCP_SERVER)],
            }
        ],
    }
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge.cli",
        "serve",
        "-c",
        str(path),
        "--port",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stderr is not None
    records: list[dict] = []

    async def until_message(start: str) -> dict:
        async with asyncio.timeout(30):
            while True:
                raw = await process.stderr.readline()
                assert raw, "bridge serve exited:\n" + json.dumps(records, indent=1)
                records.append(json.loads(raw))  # every line is one JSON object
                if records[-1]["message"].startswith(start):
                    return records[-1]

    try:
        banner = await until_message("bridge: serving")
        assert banner["logger"] == "bridge.serve" and banner["level"] == "INFO"
        base = banner["message"].rsplit(" on ", 1)[1]
        await until_message("bridge: upstreams started")
        async with (
            aiohttp.ClientSession(base_url=base) as http,
            http.post(
                "/invoke",
                json={"tool": "tiny__echo", "arguments": {"text": SECRET}},
                headers={"traceparent": TRACEPARENT},
            ) as response,
        ):
            assert response.status == 200
        access = await until_message("call tiny__echo")
        assert (
            access["outcome"] == "ok"
            and access["trace_id"] == TRACEPARENT[3:35]
            and access["frontend"] == "rest"
        )
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            rest = await process.stderr.read()
            assert await process.wait() == 0
        records += [json.loads(line) for line in rest.decode().splitlines()]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not any(SECRET in json.dumps(record) for record in records)
