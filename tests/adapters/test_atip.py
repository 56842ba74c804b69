"""ATIP upstream: real fixture CLIs on a temporary PATH, a temporary XDG home, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from adapters.atip.discovery import ATIPMetadataError
from adapters.atip.upstream import ATIPConfig, ATIPUpstream
from bridge.catalog import Catalog
from bridge.config import parse_config
from bridge.model import BridgeError
from bridge.runtime import Bridge
from bridge.store import Store
from bridge.upstream import CallContext, UpstreamEvent
from tests.servers import process_ended

FIXTURES = Path(__file__).parent / "atip_fixtures"
ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "legacy": "legacy_cli.py",
    "cloud": "modern_cli.py",
    "broken": "broken_cli.py",
    "oldtool": "plain_tool.py",
}


@pytest.fixture
def home(tmp_path: Path) -> dict[str, Any]:
    """A temporary PATH folder holding one wrapper per fixture tool, and XDG folders."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in TOOLS.items():
        wrapper = bin_dir / name
        wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{FIXTURES / script}' \"$@\"\n")
        wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    return {
        "tmp": tmp_path,
        "bin": bin_dir,
        "work": work,
        "data": tmp_path / "data",
        "config": tmp_path / "config",
        "path": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
    }


def config(home: dict[str, Any], command: str | list[str], **extra: Any) -> ATIPConfig:
    env = {"PATH": home["path"], **extra.pop("env", {})}
    return ATIPConfig(
        name=extra.pop("name", "t"),
        command=command,
        cwd=str(home["work"]),
        env=env,
        xdg_data_home=str(home["data"]),
        xdg_config_home=str(home["config"]),
        system_dirs=extra.pop("system_dirs", []),
        base_dir=str(home["tmp"]),
        **extra,
    )


def ctx(timeout: float = 20.0) -> CallContext:
    return CallContext(invocation_id="inv_test", timeout=timeout)


async def started(cfg: ATIPConfig) -> ATIPUpstream:
    upstream = ATIPUpstream(cfg)
    await upstream.start()
    return upstream


def bridge_for(
    home: dict[str, Any], entry: dict[str, Any], surfaces: list[dict[str, Any]] | None = None
) -> Bridge:
    entry = {
        "kind": "atip",
        "cwd": str(home["work"]),
        "env": {"PATH": home["path"]},
        "xdg_data_home": str(home["data"]),
        "xdg_config_home": str(home["config"]),
        "system_dirs": [],
        **entry,
    }
    data = {"store": {"path": ":memory:"}, "upstreams": [entry], "surfaces": surfaces or []}
    return Bridge(parse_config(data, base_dir=str(home["tmp"])))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


# ------------------------------------------------------------------------------- discovery


async def test_full_discovery_of_legacy_string_form(home):
    upstream = await started(config(home, "legacy"))
    try:
        tools = {t.name: t for t in await upstream.list_tools()}
        assert set(tools) == {
            f"legacy_{c}"
            for c in ("echo", "sleep", "linger", "doze", "fail", "ask", "login", "wipe", "flood")
        }
        echo = tools["legacy_echo"]
        assert echo.tool_kind == "shell_command"
        assert echo.external_mapping == {
            "source": "atip",
            "executable": str(home["bin"] / "legacy"),
            "argv_path": ["echo"],
            "atip_version": "0.3",
            "command_id": "legacy echo",
            "tool_version": "0.3.1",
        }
        props = echo.input_schema["properties"]
        assert echo.input_schema["additionalProperties"] is False
        assert props["words"] == {
            "type": "array",
            "items": {"type": "string"},
            "description": "Words",
        }
        assert props["count"]["type"] == "integer" and props["ratio"]["type"] == "number"
        assert props["verbose"]["type"] == "boolean"
        assert props["label"]["type"] == "array"
        assert props["mode"] == {
            "type": "string",
            "enum": ["fast", "slow"],
            "default": "fast",
            "description": "Mode",
        }
        assert props["input"] == {
            "type": "string",
            "format": "file-path",
            "description": "Input file (file path)",
        }
        assert props["site"]["format"] == "uri" and props["site"]["description"].endswith("(URL)")
        assert (
            "required" not in echo.input_schema
        )  # a non-required variadic argument, optional options
        assert tools["legacy_sleep"].input_schema["required"] == ["pid_file"]
        # declared effects become declared safety facts and a permission profile
        assert echo.safety.read_only is True and echo.safety.sources["read_only"] == "declared"
        wipe = tools["legacy_wipe"]
        assert wipe.safety.destructive and wipe.safety.reversible is False
        assert wipe.safety.sources["destructive"] == "declared"
        assert wipe.annotations["permission_profile"]["risk_level"] == "critical"
        assert wipe.annotations["permission_profile"]["credential_refs"] == ["env:FIXTURE_TOKEN"]
        # a password is never asked of the caller; stdin and prompts are (asked, not blocked)
        assert tools["legacy_login"].blocked_reason == "requires_user_interaction"
        assert tools["legacy_login"].safety.requires_user_interaction is True
        ask = tools["legacy_ask"]
        assert ask.blocked_reason is None and ask.safety.requires_user_interaction is False
        assert ask.annotations["atip"]["interaction_asked"] == [
            "input on stdin",
            "answers to prompts",
        ]
        health = await upstream.health()
        assert health["metadata_source"] == "agent" and health["atip_version"] == "0.3"
    finally:
        await upstream.close()


async def test_partial_discovery_of_object_form_expands_subtrees(home):
    log = home["tmp"] / "agent.log"
    upstream = ATIPUpstream(
        config(home, "cloud", partial_discovery=True, env={"FIXTURE_LOG": str(log)})
    )
    added: list[UpstreamEvent] = []
    upstream.subscribe(added.append)
    await upstream.start()
    try:
        first = [t.name for t in await upstream.list_tools()]
        assert first == ["cloud_status"]  # only the depth-1 leaf; vm and disk were cut off
        await until(lambda: bool(added))
        assert added[0].kind == "tools_added"
        names = {t.name for t in added[0].tools}
        assert names == {
            "cloud_vm_create",
            "cloud_vm_delete",
            "cloud_vm_list",
            "cloud_vm_snapshot_create",
            "cloud_vm_snapshot_list",
            "cloud_disk_list",
        }
        calls = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
        assert calls == [["--depth=1"], ["--commands=vm,disk"]]
        snapshot = next(t for t in added[0].tools if t.name == "cloud_vm_snapshot_create")
        assert snapshot.external_mapping["argv_path"] == ["vm", "snapshot", "create"]
        assert snapshot.external_mapping["atip_version"] == "0.6"
        # once complete, the metadata is cached without the partial markers
        await until(lambda: (home["data"] / "agent-tools" / "tools" / "cloud.json").exists())
        cached = json.loads((home["data"] / "agent-tools" / "tools" / "cloud.json").read_text())
        assert "partial" not in cached and "snapshot" in cached["commands"]["vm"]["commands"]
        result = await upstream.invoke("cloud vm snapshot create", {"vm": "web-1"}, ctx())
        assert result.structured_content["argv"] == ["vm", "snapshot", "create", "--", "web-1"]
    finally:
        await upstream.close()


async def test_partial_discovery_expands_only_selected_subtrees_and_joins_the_catalog(home):
    catalog = Catalog(Store())
    catalog.add_upstream(
        ATIPUpstream(config(home, "cloud", name="cloud", partial_discovery=True, expand=["disk"]))
    )
    await catalog.start()
    try:
        await until(lambda: catalog.resolve("cloud__cloud_disk_list") is not None)
        names = sorted(d.name for d in catalog.declarations())
        assert names == ["cloud__cloud_disk_list", "cloud__cloud_status"]
        health = await catalog.slot("cloud").upstream.health()
        assert health["pending_subtrees"] == []
    finally:
        await catalog.close()


async def test_partial_discovery_falls_back_to_full_when_unsupported(home):
    upstream = await started(config(home, "legacy", partial_discovery=True))
    try:
        assert len(await upstream.list_tools()) == 9
    finally:
        await upstream.close()


async def test_cache_and_registry_are_written_atomically_and_used_when_agent_fails(home):
    upstream = await started(config(home, "legacy"))
    await upstream.close()
    tools_dir = home["data"] / "agent-tools"
    registry = json.loads((tools_dir / "registry.json").read_text())
    assert registry["tools"]["legacy"]["executable"] == str(home["bin"] / "legacy")
    assert registry["tools"]["legacy"]["atip_version"] == "0.3"
    assert json.loads((tools_dir / "tools" / "legacy.json").read_text())["name"] == "legacy"
    assert not [p for p in tools_dir.rglob("*.tmp")]  # temp files were renamed into place

    broken = await started(config(home, "legacy", env={"LEGACY_AGENT_BROKEN": "1"}))
    try:
        assert len(await broken.list_tools()) == 9
        health = await broken.health()
        assert health["metadata_source"] == "cache"
        assert "exited with code 1" in health["problems"][0]
    finally:
        await broken.close()


async def test_shim_system_folder_and_override_from_xdg_home(home):
    shim = {
        "atip": "0.3",
        "name": "oldtool",
        "version": "9.9",
        "description": "A legacy program described by a shim",
        "commands": {
            "": {
                "description": "Run oldtool",
                "options": [
                    {
                        "name": "level",
                        "flags": ["--level"],
                        "type": "integer",
                        "description": "Level",
                    }
                ],
            }
        },
    }
    system = home["tmp"] / "system"
    (system / "shims").mkdir(parents=True)
    (system / "shims" / "oldtool.json").write_text(json.dumps(shim))
    overrides = home["config"] / "agent-tools" / "overrides"
    overrides.mkdir(parents=True)
    (overrides / "oldtool.json").write_text(
        json.dumps(
            {
                "commands": {
                    "": {"description": "Run oldtool (reviewed)", "effects": {"destructive": True}}
                }
            }
        )
    )

    upstream = await started(config(home, "oldtool", system_dirs=[str(system)]))
    try:
        [tool] = await upstream.list_tools()
        assert tool.name == "oldtool" and tool.description == "Run oldtool (reviewed)"
        assert tool.safety.destructive and tool.safety.sources["destructive"] == "declared"
        health = await upstream.health()
        assert health["metadata_source"] == "system" and health["override"] == str(
            overrides / "oldtool.json"
        )
        result = await upstream.invoke("oldtool", {"level": 2}, ctx())
        assert result.structured_content == {"argv": ["--level=2"]}
    finally:
        await upstream.close()

    # a shim in the user's data home wins over the system folder
    (home["data"] / "agent-tools" / "shims").mkdir(parents=True)
    (home["data"] / "agent-tools" / "shims" / "oldtool.json").write_text(
        json.dumps({**shim, "version": "10"})
    )
    upstream = await started(config(home, "oldtool", system_dirs=[str(system)]))
    try:
        assert (await upstream.health())["metadata_source"] == "shim"
        assert (await upstream.list_tools())[0].external_mapping["tool_version"] == "10"
    finally:
        await upstream.close()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "schema",
            [
                "invalid ATIP metadata from `broken --agent`",
                "commands.go",
                "'description' is a required property",
                "'text' is not one of",
            ],
        ),
        ("json", ["not valid JSON"]),
        ("version", ["protocol version '0.9' is not supported"]),
        ("exit", ["`broken --agent` exited with code 1: broken: cannot describe myself"]),
        ("hang", ["did not answer within 0.5s"]),
    ],
)
async def test_invalid_metadata_gives_a_clear_error(home, mode, expected):
    cfg = config(
        home, "broken", discovery="agent", discovery_timeout=0.5, env={"BROKEN_MODE": mode}
    )
    with pytest.raises(ATIPMetadataError) as info:
        await started(cfg)
    for text in expected:
        assert text in info.value.message


async def test_invalid_metadata_is_reported_in_catalog_health(home):
    catalog = Catalog(Store())
    catalog.add_upstream(
        ATIPUpstream(
            config(home, "broken", name="broken", retry_initial=30, env={"BROKEN_MODE": "schema"})
        )
    )
    await catalog.start()
    try:
        health = catalog.slot("broken").health
        assert health.state == "failed"
        assert "invalid ATIP metadata" in health.reason and "no metadata file in" in health.reason
    finally:
        await catalog.close()


async def test_missing_executable_is_a_clear_error(home):
    with pytest.raises(BridgeError) as info:
        await started(config(home, "no-such-tool"))
    assert info.value.error_class == "dependency_unavailable"
    assert "'no-such-tool' not found" in info.value.message


# ------------------------------------------------------------------------------- execution


async def test_injection_attempts_reach_the_program_as_plain_values(home):
    upstream = await started(config(home, "legacy"))
    try:
        arguments = {
            "title": "--output=/etc/passwd",
            "short": "-x; rm -rf /",
            "words": [
                "; rm -rf /",
                "$(touch pwned)",
                "--output=/etc/passwd",
                "-v",
                "`touch pwned2`",
            ],
            "label": ["a b", "$HOME"],
            "verbose": True,
            "count": 3,
            "ratio": 0.5,
            "mode": "slow",
        }
        result = await upstream.invoke("legacy echo", arguments, ctx())
        assert not result.is_error
        assert result.structured_content["argv"] == [
            "--title=--output=/etc/passwd",
            "--count=3",
            "--ratio=0.5",
            "--verbose",
            "--label=a b",
            "--label=$HOME",
            "--mode=slow",
            "-s-x; rm -rf /",
            "--",
            "; rm -rf /",
            "$(touch pwned)",
            "--output=/etc/passwd",
            "-v",
            "`touch pwned2`",
        ]
        assert not list(home["work"].glob("pwned*")) and not list(home["tmp"].glob("pwned*"))
        # false booleans and absent values put nothing on the argv; unknown keys are never read
        result = await upstream.invoke(
            "legacy echo", {"verbose": False, "--output": "/etc/passwd", "title": None}, ctx()
        )
        assert result.structured_content["argv"] == []
        with pytest.raises(BridgeError) as info:
            await upstream.invoke("legacy echo", {"title": "a\x00b"}, ctx())
        assert info.value.error_class == "invalid_arguments"
    finally:
        await upstream.close()

    separate = await started(config(home, "legacy", option_style="separate"))
    try:
        result = await separate.invoke("legacy echo", {"title": "plain", "count": 2}, ctx())
        assert result.structured_content["argv"] == ["--title", "plain", "--count", "2"]
        with pytest.raises(BridgeError) as info:
            await separate.invoke("legacy echo", {"title": "--output=/etc/passwd"}, ctx())
        assert info.value.error_class == "invalid_arguments"
    finally:
        await separate.close()


async def test_pipeline_validates_before_anything_runs(home):
    async with bridge_for(home, {"name": "legacy", "command": "legacy"}) as bridge:
        bad = await bridge.invoker.invoke("legacy__legacy_echo", {"--output": "/etc/passwd"})
        assert bad.is_error and bad.error.error_class == "invalid_arguments"
        wrong_type = await bridge.invoker.invoke("legacy__legacy_echo", {"count": "3; rm -rf /"})
        assert wrong_type.is_error and wrong_type.error.error_class == "invalid_arguments"
        good = await bridge.invoker.invoke("legacy__legacy_echo", {"words": ["$(id)"]})
        assert good.status == "succeeded" and good.structured_content["argv"] == ["--", "$(id)"]


async def test_minimal_environment_and_auth_variables_only_when_configured(home, monkeypatch):
    monkeypatch.setenv("FIXTURE_TOKEN", "tok-123456")
    monkeypatch.setenv("UNRELATED_SECRET", "nope")
    log = home["tmp"] / "agent.log"
    plain = await started(config(home, "legacy"))
    try:
        env = (await plain.invoke("legacy echo", {}, ctx())).structured_content["env"]
        assert "FIXTURE_TOKEN" not in env and "UNRELATED_SECRET" not in env
        assert set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}
        assert (await plain.invoke("legacy echo", {}, ctx())).structured_content["cwd"] == str(
            home["work"]
        )
    finally:
        await plain.close()
    authed = await started(
        config(home, "cloud", auth_env=["FIXTURE_TOKEN"], env={"FIXTURE_LOG": str(log)})
    )
    try:
        result = await authed.invoke("cloud status", {}, ctx())
        assert result.structured_content["token"] == "tok-123456"
        assert (
            json.loads(log.read_text().splitlines()[0])["token_visible"] is False
        )  # never to --agent
        assert (await authed.health()).get("auth_env_passed") is None  # cloud declares no auth env
    finally:
        await authed.close()


async def test_a_command_gets_the_calls_w3c_trace_context_in_its_environment(home):
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    upstream = await started(config(home, "legacy"))
    try:
        traced = CallContext(
            invocation_id="inv_test", timeout=20.0, traceparent=traceparent, tracestate="vendor=1"
        )
        env = (await upstream.invoke("legacy echo", {}, traced)).structured_content["env"]
        assert env["TRACEPARENT"] == traceparent and env["TRACESTATE"] == "vendor=1"
        plain = (await upstream.invoke("legacy echo", {}, ctx())).structured_content["env"]
        assert "TRACEPARENT" not in plain
    finally:
        await upstream.close()


async def test_timeout_kills_the_whole_process_group(home):
    upstream = await started(config(home, "legacy"))
    pid_file = home["tmp"] / "pids"
    try:
        started_at = time.monotonic()
        with pytest.raises(BridgeError) as info:
            # effects.duration.timeout of `sleep` is "1s"
            await upstream.invoke("legacy sleep", {"pid_file": str(pid_file), "seconds": 30}, ctx())
        assert info.value.error_class == "timeout" and info.value.status == "timed_out"
        assert time.monotonic() - started_at < 5
        parent, child = map(int, pid_file.read_text().split())
        await until(lambda: not alive(parent) and not alive(child))
    finally:
        await upstream.close()


async def test_cancel_kills_the_whole_process_group(home):
    upstream = await started(config(home, "legacy", command_timeouts={"sleep": 20}))
    pid_file = home["tmp"] / "pids"
    try:
        call = asyncio.create_task(
            upstream.invoke("legacy sleep", {"pid_file": str(pid_file), "seconds": 30}, ctx())
        )
        await until(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2)
        parent, child = map(int, pid_file.read_text().split())
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: not alive(parent) and not alive(child))
    finally:
        await upstream.close()


# a bridge in miniature: runs `legacy sleep` (a command that starts a child), then is killed
RUNS_WHEN_KILLED = """
import asyncio
from adapters.atip.upstream import ATIPConfig, ATIPUpstream
from bridge.upstream import CallContext

async def main():
    upstream = ATIPUpstream(ATIPConfig(**{config}))
    await upstream.start()
    await upstream.invoke("legacy sleep", {{"pid_file": {pid_file!r}, "seconds": 60}}, CallContext(invocation_id="inv", timeout=120))

asyncio.run(main())
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
async def test_a_run_and_what_it_started_end_when_the_bridge_is_killed(home):
    cfg = config(home, "legacy", command_timeouts={"sleep": 120}).model_dump(exclude={"base_dir"})
    cfg["base_dir"] = str(home["tmp"])
    pid_file = home["tmp"] / "pids"
    script = RUNS_WHEN_KILLED.format(config=cfg, pid_file=str(pid_file))
    bridge = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=ROOT)
    try:  # the command has started its child once both pids are written
        await until(
            lambda: (
                bridge.returncode is not None
                or (pid_file.exists() and len(pid_file.read_text().split()) == 2)
            ),
            timeout=30,
        )
        assert bridge.returncode is None, "the miniature bridge ended before the command ran"
        command, child = map(int, pid_file.read_text().split())
    finally:
        if bridge.returncode is None:
            bridge.kill()  # as a kill -9: nothing of the bridge's closes
        await bridge.wait()
    assert [await process_ended(command), await process_ended(child)] == [
        True,
        True,
    ]  # each killed if not


async def test_configured_timeout_overrides_the_declared_one(home):
    upstream = await started(config(home, "legacy", command_timeouts={"legacy_sleep": 0.6}))
    pid_file = home["tmp"] / "pids"
    try:
        with pytest.raises(BridgeError) as info:
            await upstream.invoke("legacy sleep", {"pid_file": str(pid_file), "seconds": 30}, ctx())
        assert "within 0.6s" in info.value.message
        if pid_file.exists():
            await until(lambda: not any(alive(int(p)) for p in pid_file.read_text().split()))
        # the pipeline's own limit is the ceiling
        with pytest.raises(BridgeError) as info:
            await upstream.invoke(
                "legacy sleep", {"pid_file": str(pid_file), "seconds": 30}, ctx(timeout=0.4)
            )
        assert "within 0.4s" in info.value.message
        # invoke.default_timeout (a fixed timeout) overrides command_timeouts, longer or shorter
        pid_file.unlink(missing_ok=True)
        fixed = CallContext(invocation_id="inv_fixed", timeout=1.5, timeout_fixed=True)
        began = time.monotonic()
        with pytest.raises(BridgeError) as info:
            await upstream.invoke("legacy sleep", {"pid_file": str(pid_file), "seconds": 30}, fixed)
        assert "within 1.5s" in info.value.message and time.monotonic() - began >= 1.4
    finally:
        await upstream.close()


async def test_declared_timeout_never_outlasts_the_upstream_timeout(home):
    # `linger` declares "99…9s" (400 nines: infinity as a float), `doze` "1h", `sleep` "1s"
    async with bridge_for(home, {"name": "legacy", "command": "legacy", "timeout": 1}) as bridge:
        timeouts = {d.native_name: d.timeout for d in bridge.catalog.declarations()}
        # unreadable as a number of seconds: the upstream's `timeout` applies; longer: cut to it
        assert (timeouts["legacy_linger"], timeouts["legacy_doze"], timeouts["legacy_sleep"]) == (
            None,
            1,
            1,
        )
        for name in ("linger", "doze"):
            pid_file = home["tmp"] / f"{name}.pids"
            started_at = time.monotonic()
            async with asyncio.timeout(10):
                result = await bridge.invoker.invoke(
                    f"legacy__legacy_{name}", {"pid_file": str(pid_file), "seconds": 30}
                )
            assert result.status == "timed_out" and result.error.error_class == "timeout", (
                result.content
            )
            assert time.monotonic() - started_at < 5
            await until(
                lambda f=pid_file: (
                    f.exists() and not any(alive(int(p)) for p in f.read_text().split())
                )
            )
    with pytest.raises(ValueError, match="finite"):
        config(home, "legacy", command_timeouts={"sleep": float("inf")})


async def test_nonzero_exit_is_an_error_envelope_with_exit_code_and_stderr(home):
    async with bridge_for(home, {"name": "legacy", "command": "legacy"}) as bridge:
        result = await bridge.invoker.invoke("legacy__legacy_fail", {"message": "disk full"})
        assert result.is_error and result.status == "failed"
        assert (
            result.error.error_class == "execution_failed"
            and result.error.error_code == "nonzero_exit"
        )
        assert result.error.native_error_ref["exit_code"] == 3
        assert "legacy: disk full" in result.error.native_error_ref["stderr_tail"]
        assert "exited with code 3: legacy: disk full" in result.error.message
        assert "some output before failing" in result.content[0]["text"]


async def test_json_stdout_is_structured_and_output_is_capped(home):
    upstream = await started(config(home, "legacy", max_stdout_bytes=10_000))
    try:
        result = await upstream.invoke("legacy wipe", {}, ctx())
        assert result.structured_content == {"wiped": True}
        flood = await upstream.invoke("legacy flood", {"bytes": 300_000}, ctx())
        assert not flood.is_error
        assert flood.meta["stdout_truncated_bytes"] == 290_000
        assert flood.content[0]["text"].startswith("x" * 10_000 + "\n[output truncated")
    finally:
        await upstream.close()


async def test_interactive_command_blocked_with_reason_unless_answered(home):
    async with bridge_for(home, {"name": "legacy", "command": "legacy"}) as bridge:
        record = bridge.surfaces.get("default").record()
        assert any(
            b.name == "legacy__legacy_login" and b.reason == "requires_user_interaction"
            for b in record.blocked_tools
        )
        result = await bridge.invoker.invoke("legacy__legacy_login", {})
        assert result.is_error and result.status == "denied"
        assert (
            result.error.error_class == "policy_blocked"
            and result.error.error_code == "requires_user_interaction"
        )
        assert (
            "`legacy login` waits for a password on stdin" in result.error.message
            and "`answers:`" in result.error.message
        )
    answered = {
        "name": "legacy",
        "command": "legacy",
        "answers": [
            {"commands": ["ask"], "stdin": "yes\n", "flags": ["--assume-yes"]},
            {"commands": ["legacy_login"], "stdin": "hunter2\n"},
        ],
    }
    async with bridge_for(home, answered) as bridge:
        result = await bridge.invoker.invoke("legacy__legacy_ask", {})
        assert result.status == "succeeded"
        assert result.structured_content == {"answer": "yes", "argv": ["--assume-yes"]}
        result = await bridge.invoker.invoke("legacy__legacy_login", {})
        assert result.structured_content == {"logged_in": True}


async def test_destructive_command_denied_unless_the_surface_allows_it(home):
    surfaces = [
        {"name": "default"},
        {"name": "admin", "allow_destructive": True},
        {"name": "picked", "allow": ["*_wipe"]},
    ]
    async with bridge_for(home, {"name": "legacy", "command": "legacy"}, surfaces) as bridge:
        denied = await bridge.invoker.invoke("legacy__legacy_wipe", {})
        assert denied.is_error and denied.status == "denied"
        assert (
            denied.error.error_class == "permission_denied"
            and denied.error.error_code == "destructive_not_allowed"
        )
        for surface in ("admin", "picked"):
            allowed = await bridge.invoker.invoke("legacy__legacy_wipe", {}, surface=surface)
            assert allowed.status == "succeeded" and allowed.structured_content == {"wiped": True}


def test_config_rejects_bad_answers_and_resolves_relative_paths(home):
    with pytest.raises(ValueError):
        ATIPConfig(name="x", command="x", answers=[{"commands": ["*"]}])
    with pytest.raises(ValueError):
        ATIPConfig(name="x", command="x", answers=[{"flags": ["yes"]}])
    cfg = ATIPConfig(
        name="x", command=["./bin/legacy", "extra"], xdg_data_home="data", base_dir=str(home["tmp"])
    )
    upstream = ATIPUpstream(cfg)
    upstream._probe_env = upstream._environment(with_auth=False)
    assert upstream._resolve_command() == [str(home["tmp"] / "bin" / "legacy"), "extra"]
    assert upstream.dirs.data == home["tmp"] / "data" / "agent-tools"


def test_scan_cli_probes_path_with_a_skip_list(home, capsys):
    # it reads no config (so takes no -c), a timeout above 0 and folders that exist: refused by
    # the command's own entry, run in this process (an exception other than its exit fails here)
    from bridge.cli import main

    for wrong, said in (
        (["-c", "bridge.yaml"], "unrecognized arguments: -c"),
        (["--timeout", "-1"], "above 0"),
        (["--timeout", "nan"], "above 0"),
        (["--path", str(home["tmp"] / "nowhere")], "is no folder"),
    ):
        try:
            status = main(["atip", "scan", *wrong, "--dry-run"])
        except SystemExit as exc:
            status = exc.code
        stderr = capsys.readouterr().err
        assert status == 2 and said in stderr, (wrong, stderr)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli",
            "atip",
            "scan",
            "--path",
            str(home["bin"]),
            "--skip",
            "oldtool",
            "--data-home",
            str(home["data"]),
            "--json",
            "--all",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PATH": home["path"]},
    )
    assert run.returncode == 0, run.stderr
    results = {Path(r["executable"]).name: r for r in json.loads(run.stdout)}
    assert set(results) == {"legacy", "cloud", "broken"}  # oldtool skipped
    assert results["legacy"]["name"] == "legacy" and results["legacy"]["commands"] == 9
    assert results["cloud"]["atip_version"] == "0.6"
    assert "invalid ATIP metadata" in results["broken"]["error"]
    registry = json.loads((home["data"] / "agent-tools" / "registry.json").read_text())
    assert set(registry["tools"]) == {"legacy", "cloud"}
    assert registry["tools"]["cloud"]["source"] == "scan"


async def test_a_program_leaving_a_child_on_its_output_is_done_at_its_own_exit(tmp_path):
    # `tool --agent` that starts a daemon still holding stdout: Process.wait() waits for the pipe
    # to close, so the answer was "did not answer within 2s" although the tool had exited 0
    from adapters.atip.exec import run_process

    pid_file = tmp_path / "child.pid"
    code = (
        "import json, subprocess, sys\n"
        f"child = subprocess.Popen(['sleep', '60'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print(json.dumps({'atip': '0.6'}))\n"
    )
    began = time.perf_counter()
    outcome = await run_process(
        [sys.executable, "-c", code], env=dict(os.environ), cwd=None, timeout=10
    )
    assert (
        not outcome.timed_out
        and outcome.returncode == 0
        and json.loads(outcome.stdout) == {"atip": "0.6"}
    )
    assert time.perf_counter() - began < 5
    child = int(pid_file.read_text())
    async with asyncio.timeout(5):  # the child, in the program's process group, is killed with it
        while (
            os.path.exists(f"/proc/{child}")
            and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]
        ):
            await asyncio.sleep(0.01)
