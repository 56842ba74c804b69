"""Bridge.reload and SIGHUP: a new config applied to a running bridge, upstream by upstream,
surfaces and settings from the next request on, the rest kept until a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import yaml

from bridge.config import ConfigError, load_config, parse_config
from bridge.runtime import Bridge, reload_on_hangup
from bridge.upstream import register_kind
from tests.fakes import FakeUpstream
from tests.servers import until

register_kind("fake", FakeUpstream)

ROOT = Path(__file__).resolve().parents[1]


def config(*names: str, **sections) -> dict:
    return {
        "store": {"path": ":memory:"},
        "upstreams": [{"name": n, "kind": "fake"} for n in names],
        **sections,
    }


async def searched(bridge: Bridge, query: str = "echo") -> list[str]:
    await bridge.search.wait_indexed()
    found = bridge.search.search(
        query, surface=bridge.surfaces.require(None), limit=50, fold_alternatives=False
    )
    return sorted(m.name for m in found.matches)


async def test_upstreams_added_removed_and_restarted_by_name_the_others_untouched():
    bridge = Bridge(parse_config(config("keep", "gone", "moved")))
    await bridge.start()
    try:
        keep, gone, moved = (bridge.catalog.slot(n).upstream for n in ("keep", "gone", "moved"))
        moved_echo = bridge.catalog.resolve("moved__echo")
        assert await searched(bridge) == ["gone__echo", "keep__echo", "moved__echo"]
        keep.gate = asyncio.Event()  # a call in flight to the upstream left alone
        call = asyncio.create_task(bridge.invoker.invoke("keep__echo", {"text": "still here"}))
        await until(lambda: keep.calls)

        new = config("keep", "moved", "added")
        new["upstreams"][1]["timeout"] = 5
        new["upstreams"][2]["start_delay"] = 0.2  # not waited for: it shows as connecting
        summary = await bridge.reload(parse_config(new))
        assert summary == "added: added; removed: gone; restarted: moved"

        assert (
            "gone" not in bridge.catalog.slots
            and gone.closed == 1
            and bridge.catalog.resolve("gone__echo") is None
        )
        assert bridge.catalog.slot("added").health.state == "connecting"
        assert moved.closed == 1 and bridge.catalog.slot("moved").upstream.config.timeout == 5
        assert bridge.catalog.slot("keep").upstream is keep and (keep.started, keep.closed) == (
            1,
            0,
        )
        await until(
            lambda: (
                bridge.catalog.resolve("added__echo") is not None
                and bridge.catalog.slot("moved").health.state == "ready"
            )
        )
        again = bridge.catalog.resolve("moved__echo")
        assert (again.tool_id, again.version) == (moved_echo.tool_id, moved_echo.version)
        assert await searched(bridge) == ["added__echo", "keep__echo", "moved__echo"]

        keep.gate.set()
        result = await call
        assert result.status == "succeeded" and result.content[0]["text"] == "still here"
    finally:
        await bridge.close()


async def test_calls_in_flight_to_an_upstream_removed_or_restarted_end_first_new_ones_are_refused():
    bridge = Bridge(
        parse_config(config("gone", "moved", "slow", "other", surfaces=[{"name": "default"}]))
    )
    await bridge.start()
    try:
        gone, moved, slow = (bridge.catalog.slot(n).upstream for n in ("gone", "moved", "slow"))
        for up in (gone, moved, slow):
            up.gate = asyncio.Event()
        calls = {
            up.name: asyncio.create_task(
                bridge.invoker.invoke(f"{up.name}__echo", {"text": up.name})
            )
            for up in (gone, moved, slow)
        }
        await until(lambda: gone.calls and moved.calls and slow.calls)

        new = config("moved", "slow", "other", surfaces=[{"name": "default"}, {"name": "added"}])
        new["upstreams"][0]["timeout"] = 5
        new["upstreams"][1]["timeout"] = 6
        reload = asyncio.create_task(bridge.reload(parse_config(new)))
        await until(
            lambda: bridge.surfaces.get("added") is not None
        )  # the rest applies while they end
        assert not reload.done() and (gone.closed, moved.closed, slow.closed) == (0, 0, 0)
        assert (
            bridge.catalog.resolve("gone__echo") is None
        )  # a removed upstream's tools leave at once
        refused = await bridge.invoker.invoke("moved__echo", {"text": "new"})
        assert (
            refused.error.error_class == "dependency_unavailable"
            and "restarting with new settings" in refused.error.message
        )
        assert (await bridge.invoker.invoke("other__echo", {"text": "hi"})).status == "succeeded"

        gone.gate.set()
        moved.gate.set()
        for name in ("gone", "moved"):
            result = await calls[name]
            assert result.status == "succeeded" and result.content[0]["text"] == name
        await until(lambda: gone.closed and moved.closed)
        assert not reload.done() and slow.closed == 0  # the slow one is still waited for

        slow.gate.set()
        assert (await calls["slow"]).status == "succeeded"
        assert await reload == "removed: gone; restarted: moved, slow; surfaces changed: added"
        await until(lambda: bridge.catalog.slot("moved").health.state == "ready")
        assert (await bridge.invoker.invoke("moved__echo", {"text": "again"})).status == "succeeded"
    finally:
        await bridge.close()


async def test_a_restart_waits_for_calls_in_flight_no_longer_than_the_upstreams_timeout():
    bridge = Bridge(
        parse_config(
            {**config("svc"), "upstreams": [{"name": "svc", "kind": "fake", "timeout": 0.3}]}
        )
    )
    await bridge.start()
    try:
        up = bridge.catalog.slot("svc").upstream
        up.gate = asyncio.Event()
        bridge.catalog.resolve(
            "svc__echo"
        ).timeout = 60  # the tool's own limit is longer than the drain
        call = asyncio.create_task(bridge.invoker.invoke("svc__echo", {"text": "x"}))
        await until(lambda: up.calls)
        new = config("svc")
        assert await asyncio.wait_for(bridge.reload(parse_config(new)), 10) == "restarted: svc"
        assert up.closed == 1 and not call.done()  # the old connection is closed under it
        up.gate.set()
        await call
    finally:
        await bridge.close()


async def test_upstreams_removed_or_restarted_by_a_reload_are_stopped_at_once():
    # a stdio server may take its shutdown_timeout to exit: stopped one after another, 300 of
    # them held the reload for minutes
    names = [f"u{i}" for i in range(40)]
    bridge = Bridge(parse_config(config(*names)))
    await bridge.start()
    ups = [bridge.catalog.slot(name).upstream for name in names]
    for up in ups:
        up.close_gate = asyncio.Event()
    try:
        kept = config(*names[:20])
        for entry in kept["upstreams"]:
            entry["tags"] = ["moved"]  # restarted with new settings; the other 20 removed
        reloading = asyncio.create_task(bridge.reload(parse_config(kept)))
        await until(
            lambda: all(up.closed == 1 for up in ups)
        )  # every stop begun while none has ended
        for up in ups:
            up.close_gate.set()
        assert (
            await reloading
            == f"removed: {', '.join(names[20:])}; restarted: {', '.join(names[:20])}"
        )
        await until(
            lambda: all(bridge.catalog.slot(name).health.state == "ready" for name in names[:20])
        )
        assert sorted(bridge.catalog.slots) == sorted(names[:20])
    finally:
        for up in ups:
            up.close_gate.set()
        await bridge.close()


async def test_keys_that_need_a_restart_keep_their_running_values_with_a_warning_each(caplog):
    bridge = Bridge(parse_config(config("svc")))
    await bridge.start()
    try:
        new = config(
            "svc",
            server={"port": 9999, "body_timeout": 5, "tokens": [{"token": "a-new-token"}]},
            search={"semantic": "off"},
        )
        new["store"] = {"path": "elsewhere.db"}
        new["redis"] = {"url": "redis://127.0.0.1:1/0"}
        with caplog.at_level(logging.WARNING, logger="bridge.runtime"):
            summary = await bridge.reload(parse_config(new))
        warned = [
            r.getMessage()
            for r in caplog.records
            if "takes effect when the bridge restarts" in r.getMessage()
        ]
        assert [w.split(" changed")[0] for w in warned] == [
            "config reload: server.port",
            "config reload: server.body_timeout",
            "config reload: store.path",
            "config reload: search.semantic",
            "config reload: redis",
        ]
        assert summary == (
            "needs a restart: server.port, server.body_timeout, store.path, search.semantic, redis"
        )
        assert bridge.config.redis is None and bridge.shared is None
        running = bridge.config
        assert (
            running.server.port,
            running.server.body_timeout,
            running.store.path,
            running.search.semantic,
        ) == (8080, 30, ":memory:", "auto")
        assert [t.token for t in running.server.tokens] == [
            "a-new-token"
        ]  # live: the next request reads it
    finally:
        await bridge.close()


async def test_surfaces_and_invoke_settings_hold_from_the_next_request_a_call_in_flight_ends_as_it_began():
    surfaces = [{"name": "default", "block": ["svc__echo"]}, {"name": "open"}]
    bridge = Bridge(parse_config(config("svc", surfaces=surfaces)))
    await bridge.start()
    try:
        up = bridge.catalog.slot("svc").upstream
        up.gate = asyncio.Event()
        big = "x" * 1000
        call = asyncio.create_task(
            bridge.invoker.invoke("svc__echo", {"text": big}, surface="open")
        )
        await until(lambda: up.calls)

        new = config(
            "svc",
            surfaces=[{"name": "default"}, {"name": "narrow", "read_only": True}],
            invoke={"inline_result_limit": 256},
        )
        summary = await bridge.reload(parse_config(new))
        assert summary == "surfaces changed: default, narrow, open"
        assert bridge.surfaces.get("open") is None and bridge.surfaces.get("narrow") is not None
        assert (
            bridge.surfaces.require("default").place(bridge.catalog.resolve("svc__echo")).state
            != "blocked"
        )

        up.gate.set()
        in_flight = await call  # began under the old limit: answered inline, through its surface
        assert (
            in_flight.status == "succeeded"
            and in_flight.content[0]["text"] == big
            and in_flight.persisted is None
        )
        up.gate = None
        after = await bridge.invoker.invoke("svc__echo", {"text": big})
        assert after.persisted is not None  # the next call: the new limit
        unknown = await bridge.invoker.invoke("svc__echo", {"text": "hi"}, surface="open")
        assert (
            unknown.error.error_class == "policy_blocked"
        )  # a surface removed is gone for the next request

        same = bridge.surfaces.require("narrow")
        assert await bridge.reload(parse_config(new)) == "nothing changed"
        assert bridge.surfaces.require("narrow") is same  # unchanged: kept, placements and all
    finally:
        await bridge.close()


async def test_reloads_run_one_after_the_other():
    bridge = Bridge(parse_config(config("slow", "other")))
    await bridge.start()
    try:
        slow = bridge.catalog.slot("slow").upstream
        slow.close_gate = asyncio.Event()  # the first reload waits while it closes
        first = asyncio.create_task(bridge.reload(parse_config(config("other"))))
        await until(lambda: slow.closed)
        second = asyncio.create_task(bridge.reload(parse_config(config("other", "added"))))
        await asyncio.sleep(0)  # the second has run up to where it waits for the first
        assert "added" not in bridge.catalog.slots and not first.done()
        slow.close_gate.set()
        assert await first == "removed: slow"
        assert await second == "added: added"
    finally:
        await bridge.close()


async def test_an_upstream_name_served_from_elsewhere_is_refused_and_nothing_changes():
    bridge = Bridge(parse_config(config("svc")), extra_upstreams=[FakeUpstream(name="extra")])
    await bridge.start()
    try:
        with pytest.raises(ConfigError) as refused:
            await bridge.reload(parse_config(config("extra")))
        assert "upstreams[0].name" in str(refused.value)
        assert (
            bridge.catalog.resolve("svc__echo") is not None
            and bridge.catalog.slot("extra").upstream.closed == 0
        )
        assert (
            await bridge.reload(parse_config(config())) == "removed: svc"
        )  # one not from the config stays
        assert list(bridge.catalog.slots) == ["extra"]
    finally:
        await bridge.close()


@contextlib.asynccontextmanager
async def reloading(path, *names: str) -> AsyncIterator[tuple[Bridge, Callable[[], None]]]:
    """A started bridge on a config file of upstreams `names` at `path`, applying it again on
    SIGHUP, and the function that stops that."""
    path.write_text(yaml.safe_dump(config(*names)))
    bridge = Bridge(load_config(path))
    await bridge.start()
    stop = reload_on_hangup(bridge, str(path))
    try:
        yield bridge, stop
    finally:
        stop()
        await bridge.close()


async def test_sighup_reads_the_file_again_a_bad_one_changes_nothing_and_is_said_on_one_line(
    tmp_path, caplog
):
    path = tmp_path / "bridge.yaml"
    async with reloading(path, "first") as (bridge, _):
        with caplog.at_level(logging.WARNING, logger="bridge.runtime"):
            path.write_text(yaml.safe_dump(config("first", "second")))
            os.kill(os.getpid(), signal.SIGHUP)
            await until(lambda: bridge.catalog.resolve("second__echo") is not None)

            path.write_text("upstreams:\n  - {name: second, kind: fake, timout: 1}\n")
            os.kill(os.getpid(), signal.SIGHUP)
            await until(lambda: any(r.levelno == logging.ERROR for r in caplog.records))
        error = next(r for r in caplog.records if r.levelno == logging.ERROR)
        assert error.exc_info is None and "\n" not in error.getMessage()
        assert error.getMessage() == (
            f"config reload: {path}: upstreams[0].timout: unknown key `timout` "
            "(fix: did you mean `timeout`?); nothing changed"
        )
        assert (
            sorted(bridge.catalog.slots) == ["first", "second"]
            and bridge.catalog.resolve("second__echo") is not None
        )
        assert bridge.config.upstreams[1].name == "second"


async def test_sighups_during_a_reload_make_one_more_reload_after_it(tmp_path, caplog):
    path = tmp_path / "bridge.yaml"
    async with reloading(path, "slow") as (bridge, stop):
        slow = bridge.catalog.slot("slow").upstream
        slow.close_gate = asyncio.Event()
        with caplog.at_level(logging.WARNING, logger="bridge.runtime"):
            path.write_text(yaml.safe_dump(config("b")))
            os.kill(os.getpid(), signal.SIGHUP)
            await until(lambda: slow.closed)  # the first reload is under way
            path.write_text(yaml.safe_dump(config("b", "c")))
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.sleep(0)
            slow.close_gate.set()
            await until(lambda: "c" in bridge.catalog.slots)
            await until(
                lambda: (
                    len([r for r in caplog.records if r.getMessage().startswith("config reloaded")])
                    >= 2
                )
            )
            stop()  # no third reload can start now
        said = [
            r.getMessage().split(": ", 1)[1]
            for r in caplog.records
            if r.getMessage().startswith("config reloaded")
        ]
        assert said == ["added: b; removed: slow", "added: c"]


def launched_a2t_server() -> dict:
    """The demo A2T server launched by the bridge, its url naming port 0 (as configs/demo.yaml's)."""
    launch = {"command": "python", "args": ["-m", "bridge.demo.a2t_server"], "cwd": str(ROOT)}
    upstream = {
        "name": "math",
        "kind": "a2t",
        "url": "http://127.0.0.1:0",
        "start_timeout": 30,
        "launch": launch,
    }
    return {"store": {"path": ":memory:"}, "upstreams": [upstream]}


async def test_a_launched_upstream_whose_url_names_port_0_is_served_on_a_free_port_of_its_own():
    # the demo's fixed ports (9101-9103) reached whatever else listened there: a second bridge on
    # the same config talked to the first one's processes, an unrelated server was taken for one
    async with contextlib.AsyncExitStack() as stack:
        bridges = [
            await stack.enter_async_context(Bridge(parse_config(launched_a2t_server())))
            for _ in range(2)
        ]
        ports = []
        for bridge in bridges:
            slot = bridge.catalog.slot("math")
            assert slot.health.state == "ready", slot.health.reason
            port = urllib.parse.urlsplit(slot.upstream.config.url).port
            assert port and slot.upstream.config.launch.env["PORT"] == str(port)
            assert any(
                line.endswith(f"listening on http://127.0.0.1:{port}") for line in slot.sidecar.tail
            )
            assert not (await bridge.invoker.invoke("math__add", {"a": 2, "b": 3})).is_error
            ports.append(port)
        assert ports[0] != ports[1]
        # the file still says port 0: a reload finds the upstream unchanged, port and process kept
        slot = bridges[0].catalog.slot("math")
        pid = slot.sidecar.process.pid
        assert await bridges[0].reload(parse_config(launched_a2t_server())) == "nothing changed"
        assert bridges[0].catalog.slot("math") is slot and slot.sidecar.process.pid == pid
        assert urllib.parse.urlsplit(slot.upstream.config.url).port == ports[0]
