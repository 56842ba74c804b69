"""The `bridge` command, run in-process on a config with in-test upstreams."""

from __future__ import annotations

import json
import os

from bridge.cli import main
from bridge.upstream import register_kind
from tests.fakes import FakeUpstream

register_kind("fake", FakeUpstream)


def config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"store: {{path: {tmp_path / 'b.db'}}}\nupstreams:\n  - {{name: svc, kind: fake}}\n{extra}"
    )
    return str(path)


def test_check_tools_call(tmp_path, capsys):
    cfg = config(tmp_path)
    assert main(["check", "-c", cfg]) == 0
    out = capsys.readouterr().out
    assert "svc" in out and "ready" in out and "1 tools from 1 upstreams" in out

    assert main(["tools", "-c", cfg, "--json"]) == 0
    tools = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in tools] == ["svc__echo"] and tools[0]["version"] == 1

    assert main(["call", "svc__echo", "--args", '{"text": "hello"}', "-c", cfg, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "succeeded" and result["content"][0]["text"] == "hello"

    assert main(["call", "svc__nope", "-c", cfg]) == 1
    captured = capsys.readouterr()
    assert "unknown_tool" in captured.out


def test_check_fails_when_an_upstream_fails(tmp_path, capsys):
    cfg = config(
        tmp_path, "  - {name: broken, kind: fake, fail_start: 'refused', retry_initial: 30}\n"
    )
    assert main(["check", "-c", cfg]) == 1
    out = capsys.readouterr().out
    assert "broken" in out and "failed" in out and "refused" in out


def test_tools_search_and_translate_name_the_upstreams_that_did_not_start(tmp_path, capsys):
    broken = "  - {name: broken, kind: fake, fail_start: 'refused', retry_initial: 30}\n"
    cfg = config(
        tmp_path, broken
    )  # one of two failed: what the other gives, the failure on stderr, 0
    for argv in (["tools"], ["search", "echo"], ["translate", "--to", "openai"]):
        assert main([*argv, "-c", cfg]) == 0
        captured = capsys.readouterr()
        assert "svc__echo" in captured.out
        assert f"bridge {argv[0]}: upstream broken is failed: refused" in captured.err

    alone = tmp_path / "alone.yaml"  # every upstream failed: an empty answer is no empty catalog, 1
    alone.write_text(f"store: {{path: {tmp_path / 'a.db'}}}\nupstreams:\n{broken}")
    for argv in (
        ["tools", "--json"],
        ["search", "echo", "--json"],
        ["translate", "--to", "openai"],
    ):
        assert main([*argv, "-c", str(alone)]) == 1
        captured = capsys.readouterr()
        json.loads(captured.out)  # stdout stays the machine-readable answer
        assert "upstream broken is failed: refused" in captured.err


def test_config_error_exit_code_and_message(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("upstreams:\n  - {name: a, kind: fake, timout: 1}\n")
    assert main(["check", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "upstreams[0].timout" in err and "did you mean `timeout`?" in err


def test_call_with_bad_json_args(tmp_path, capsys):
    assert main(["call", "svc__echo", "--args", "{nope", "-c", config(tmp_path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert (
        main(["call", "svc__echo", "--args", '{"text": NaN}', "-c", config(tmp_path)]) == 2
    )  # Python's reader takes it
    assert "NaN or Infinity" in capsys.readouterr().err
    # JSON that is no object is refused before any upstream starts, as the rest is
    assert main(["call", "svc__echo", "--args", "[1, 2]", "-c", config(tmp_path)]) == 2
    assert "--args is JSON of a list, not an object" in capsys.readouterr().err
    assert (
        main(
            [
                "call",
                "svc__echo",
                "--args",
                '{"d": ' + "[" * 80 + "]" * 80 + "}",
                "-c",
                config(tmp_path),
            ]
        )
        == 2
    )
    assert "deeper than 64 levels" in capsys.readouterr().err


def test_startup_failure_is_one_clear_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = tmp_path / "c.yaml"
    path.write_text(f"store: {{path: {blocker / 'b.db'}}}\n")
    assert main(["tools", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bridge tools: ") and "Traceback" not in err


def test_serve_runs_on_uvloop_unless_told_otherwise(monkeypatch):
    import builtins

    import uvloop

    from bridge.cli import _loop_factory
    from bridge.config import parse_config

    def config(loop: str | None = None):
        return parse_config({"server": {"event_loop": loop}} if loop else {})

    assert _loop_factory("serve", config()) is uvloop.new_event_loop
    assert _loop_factory("serve", config("uvloop")) is uvloop.new_event_loop
    assert _loop_factory("serve", config("asyncio")) is None
    assert _loop_factory("search", config("uvloop")) is None  # only the server
    real_import = builtins.__import__

    def no_uvloop(name, *args, **kwargs):
        if name == "uvloop":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    assert _loop_factory("serve", config()) is None  # auto: asyncio's loop where uvloop is missing
    try:
        _loop_factory("serve", config("uvloop"))
        raise AssertionError("uvloop was required but missing")
    except RuntimeError as exc:
        assert "server.event_loop" in str(exc) and "pip install uvloop" in str(exc)


def test_commands_work_while_another_process_holds_the_search_index(tmp_path, capsys, caplog):
    from bridge.search.index import ToolIndex

    cfg = config(tmp_path)
    held = ToolIndex(
        str(tmp_path / "b.index")
    )  # as a running `bridge serve` on this config holds it
    try:
        assert main(["search", "echo", "-c", cfg]) == 0
        assert (
            "svc__echo" in capsys.readouterr().out
            and f"in use by process {os.getpid()} (" in caplog.text
        )
        assert main(["check", "-c", cfg]) == 0
    finally:
        held.close()


def test_bad_ports_surfaces_and_options_are_one_clear_line(tmp_path, capsys):
    cfg = config(tmp_path)
    for port in ("99999", "-1", "http"):
        try:
            main(["serve", "-c", cfg, "--port", port])
            raise AssertionError("argparse should have refused the port")
        except SystemExit as exc:
            assert exc.code == 2
        assert "--port" in capsys.readouterr().err
    # a number of matches the index cannot allocate (it panicked), none, or a query with no words
    for argv, said in (
        (["--limit", str(2**63)], "use 1 to 1000"),
        (["--limit", "0"], "use 1 to 1000"),
        (["--limit", "many"], "not a number of matches"),
        (["--", " "], "the query is empty"),
        (["--", "x" * 16_385], "at most 16384"),
    ):
        try:
            main(
                ["search", "echo", "-c", cfg, *argv]
                if argv[0] != "--"
                else ["search", "-c", cfg, *argv]
            )
            raise AssertionError(f"argparse should have refused {argv[:2]}")
        except SystemExit as exc:
            assert exc.code == 2
        assert said in capsys.readouterr().err
    assert main(["serve", "-c", cfg, "--surface", "default"]) == 2
    assert "--surface chooses the surface of --stdio" in capsys.readouterr().err
    for command in (["call", "svc__echo"], ["search", "echo"], ["translate", "--to", "openai"]):
        assert main([*command, "-c", cfg, "--surface", "nope"]) == 2
        err = capsys.readouterr().err
        assert "no surface named 'nope'" in err and "default" in err, command


def test_search_takes_the_filters_and_a_selection_keeps_them(tmp_path, capsys):
    cfg = config(tmp_path, "  - {name: svc2, kind: fake}\n")
    # as over REST and MCP (tests/serve/test_search_select.py): a named tool a filter leaves out is said, not returned
    assert (
        main(
            [
                "search",
                "select:svc__echo,svc2__echo,nope",
                "-c",
                cfg,
                "--namespace",
                "svc",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in result["matches"]] == ["svc__echo"] and result["missing_names"] == [
        "svc2__echo",
        "nope",
    ]
    assert result["hint"] == (
        "not found on this surface: nope; left out by the filters: svc2__echo (namespace); "
        "ask again without those filters to have them"
    )
    assert main(["search", "select:svc__echo", "-c", cfg, "--read-only", "yes", "--tag", "x"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "missing: svc__echo",
        "left out by the filters: svc__echo (tags, read_only); ask again without those filters to have them",
    ]
    # an empty query with a filter lists the tools passing it
    assert (
        main(["search", "", "-c", cfg, "--namespace", "svc2", "--kind", "function", "--json"]) == 0
    )
    assert [m["name"] for m in json.loads(capsys.readouterr().out)["matches"]] == ["svc2__echo"]
    for argv, said in ((["--read-only", "maybe"], "use true or false"), ([], "the query is empty")):
        try:
            main(["search", "", "-c", cfg, *argv])
            raise AssertionError(f"argparse should have refused {argv}")
        except SystemExit as exc:
            assert exc.code == 2
        err = capsys.readouterr().err
        assert said in err and err.startswith("usage: bridge search")


def test_search_shows_how_many_alternatives_other_upstreams_list(tmp_path, capsys):
    cfg = config(
        tmp_path, "  - {name: svc2, kind: fake}\n  - {name: svc3, kind: fake}\n"
    )  # three upstreams, one echo
    assert main(["search", "echo", "-c", cfg]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "__echo" in line]
    assert len(lines) == 1 and "(+2 alternatives)" in lines[0]
    cfg = config(tmp_path, "  - {name: svc2, kind: fake}\n")
    assert main(["search", "echo", "-c", cfg]) == 0
    assert "(+1 alternative)" in capsys.readouterr().out


def test_search_without_a_match_prints_the_hint_alone(tmp_path, capsys):
    assert main(["search", "***", "-c", config(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "the query has no word to search for; give keywords, select:<name> for a tool whose name you know, "
        "or leave the query out and filter"
    ]


def test_search_without_a_match_prints_the_suggestions_after_the_hint(tmp_path, capsys):
    cfg = config(tmp_path, "search: {semantic: static}\n")
    assert main(["search", "give back the string I send", "-c", cfg]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("no tool matched; suggestions lists")
    assert (
        lines[1].split() == ["COSINE", "SUGGESTION", "HINT"] and lines[2].split()[1] == "svc__echo"
    )


def test_a_search_path_naming_a_file_is_said_before_anything_is_made(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    cfg = tmp_path / "bridge.yaml"
    cfg.write_text("store: {path: data/bridge.db}\nsearch: {path: notes.txt}\n")
    assert main(["check", "-c", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert (
        "notes.txt: the search index's folder is a file; fix: set search.path" in err
        and "Traceback" not in err
    )
    assert not (tmp_path / "data").exists() and (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_command_that_fails_prints_one_line_and_with_v_the_traceback_it_offers(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    cfg = tmp_path / "bridge.yaml"
    cfg.write_text(f"store: {{path: {tmp_path / 'b.db'}}}\n")
    code = (
        "import sys, bridge.cli as cli\n"
        "def broken(config):\n    raise RuntimeError('the bridge broke')\n"
        "cli.Bridge = broken\nsys.exit(cli.main(sys.argv[1:]))\n"
    )

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, "check", *flags, "-c", str(cfg)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parent.parent,
        )

    quiet = run()
    assert (
        quiet.returncode == 1
        and quiet.stderr
        == "bridge check: RuntimeError: the bridge broke (run with -v for details)\n"
    )
    verbose = run("-v")
    assert (
        verbose.returncode == 1
        and "Traceback (most recent call last)" in verbose.stderr
        and "in broken" in verbose.stderr
    )
    assert verbose.stderr.endswith("bridge check: RuntimeError: the bridge broke\n")


def test_bridge_serve_over_stdio_names_the_error_its_bridge_failed_with_not_the_task_group():
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "notes.txt").write_text("mine\n")
        cfg = Path(folder) / "bridge.yaml"
        cfg.write_text("store: {path: data/bridge.db}\nsearch: {path: notes.txt}\n")
        done = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "serve", "--stdio", "-c", str(cfg)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parent.parent,
        )
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr.startswith("bridge serve: StoreError: ")
        and "the search index's folder is a file; fix: set search.path" in done.stderr
    )
    assert "ExceptionGroup" not in done.stderr and "Traceback" not in done.stderr


def test_a_store_path_whose_folder_cannot_be_made_names_store_path_as_the_fix(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    cfg = tmp_path / "bridge.yaml"
    cfg.write_text(
        "store: {path: notes.txt/bridge.db}\n"
    )  # no search.path: the index would go beside the store
    assert main(["check", "-c", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert (
        "the search index's folder cannot be made" in err
        and "fix: set store.path" in err
        and "Traceback" not in err
    )
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_ctrl_c_while_the_command_loads_ends_it_quietly():
    import subprocess
    import sys

    # SIGINT as the command's modules are being imported (the first half second of every run)
    code = (
        "import builtins, os, signal, sys\n"
        "import bridge.command as command\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'bridge.cli':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "sys.argv = ['bridge', '--help']\n"
        "sys.exit(command.main())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (
        run.returncode == 130
        and "Traceback" not in run.stderr
        and "KeyboardInterrupt" not in run.stderr
    ), run.stderr
