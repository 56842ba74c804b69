"""The Makefile: the command line `serve` runs (`make -n`), with and without options, and what
the demo config it serves launches and shows; how `setup` installs the packages, and how `test`
runs the lint beside the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.catalog import Catalog
from bridge.config import load_config
from bridge.store import Store
from bridge.surface import Surfaces
from bridge.upstream import register_kind
from tests.fakes import FakeUpstream, tool

ROOT = Path(__file__).resolve().parent.parent

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
register_kind("fake", FakeUpstream)


def make_environment(*dropped: str) -> dict[str, str]:
    """This process's environment for a make started here: without what the make running the
    suite (`make test`) passes its children, nor the variables `dropped`."""
    gone = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", *dropped}
    return {k: v for k, v in os.environ.items() if k not in gone}


def serve_command(*assignments: str, **environment: str) -> str:
    """The `bridge serve` line `make serve` would run, given `assignments` on make's command line."""
    env = make_environment("HOST", "PORT", "ARGS", "CONFIG")
    done = subprocess.run(
        ["make", "-n", "-s", "serve", *assignments],
        cwd=ROOT,
        env=env | environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if "bridge serve" in line][-1]


@needs_make
def test_make_serve_alone_runs_bridge_serve_on_the_demo_config():
    assert serve_command() == ".venv/bin/bridge serve -c configs/demo.yaml"
    assert serve_command("PORT=") == ".venv/bin/bridge serve -c configs/demo.yaml"


@needs_make
def test_make_serve_passes_port_host_and_args_given_on_its_command_line():
    assert serve_command("PORT=9999") == ".venv/bin/bridge serve -c configs/demo.yaml --port 9999"
    assert serve_command("HOST=127.0.0.2", "PORT=0", "ARGS=-v --insecure", "CONFIG=my.yaml") == (
        ".venv/bin/bridge serve -c my.yaml --host 127.0.0.2 --port 0 -v --insecure"
    )


@needs_make
def test_make_serve_ignores_host_and_port_in_the_environment():
    """Shells and hosting platforms export HOST (the machine's name) and PORT for their own uses."""
    assert (
        serve_command(HOST="buildbox", PORT="5000", ARGS="--stdio")
        == ".venv/bin/bridge serve -c configs/demo.yaml"
    )


def test_the_demo_services_are_launched_on_ports_the_bridge_picks():
    # fixed ports (9101-9103) reached whatever else listened there: another bridge's demo
    # services, or an unrelated server
    launched = [
        u for u in load_config(ROOT / "configs" / "demo.yaml").upstreams if u.launch is not None
    ]
    assert {u.name for u in launched} == {"demo_api", "travel", "a2t_demo"}
    for upstream in launched:
        assert upstream.port_zero_urls(), upstream.name
        assert upstream.launch is not None and "--port" not in upstream.launch.args


def test_the_demo_surface_loads_the_demo_catalog():
    # it deferred every tool: MCP clients saw only search_tools and call_tool, and a direct call
    # of demo_mcp__add answered schema_not_loaded
    config = load_config(ROOT / "configs" / "demo.yaml")
    sizes = {"demo_mcp": 5, "notes_cli": 8, "demo_api": 5, "travel": 3, "a2t_demo": 4}  # 25 tools
    assert set(sizes) == {u.name for u in config.upstreams}
    catalog = Catalog(Store())
    for name, count in sizes.items():
        upstream = FakeUpstream(name=name, tools=[tool(f"tool_{i}") for i in range(count)])
        catalog.add_upstream(upstream)
        catalog.apply_tools(name, upstream.tools)
    surface = Surfaces(config.surfaces, catalog).require(None)
    assert {surface.place(d).state for d in catalog.declarations()} == {"loaded"}


@needs_make
def test_make_serve_cluster_starts_the_cluster_launcher_on_the_cluster_config():
    env = make_environment()
    done = subprocess.run(
        ["make", "-n", "-s", "serve-cluster", "REPLICAS=2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    line = [line for line in done.stdout.splitlines() if "bridge.demo.cluster" in line][-1]
    assert (
        line == ".venv/bin/python -m bridge.demo.cluster --config configs/cluster.yaml --replicas 2"
    )
    # every replica's store is its own, and each reads Redis's URL from its environment
    config = load_config(ROOT / "configs" / "cluster.yaml")
    assert config.redis is not None and config.store.path.endswith("replica-1.db")


def make_test(tmp_path: Path, pytest: str, lint: str) -> subprocess.CompletedProcess[str]:
    """`make test` with its pytest and lint commands replaced (its setup taken as done)."""
    env = make_environment()
    return subprocess.run(
        [
            "make",
            "-s",
            "-o",
            "setup",
            "test",
            f"PYTEST={pytest}",
            f"LINT={lint}",
            f"VENV={tmp_path}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@needs_make
def test_make_test_runs_the_lint_beside_the_tests_and_fails_when_either_fails(tmp_path):
    passed = make_test(tmp_path, "echo tests ran", "echo lint said this")
    assert passed.returncode == 0, passed.stderr
    lines = passed.stdout.splitlines()
    # what the lint said comes after the tests' summary
    assert lines.index("tests ran") < lines.index("lint said this")
    lint_failed = make_test(tmp_path, "echo tests ran", "echo a lint error; false")
    assert lint_failed.returncode != 0
    assert "a lint error" in lint_failed.stdout and "make lint failed" in lint_failed.stdout
    tests_failed = make_test(tmp_path, "false", "echo lint said this")
    assert tests_failed.returncode != 0 and "lint said this" in tests_failed.stdout
    # the lint yields the cores to the tests (`nice` alone prints its own niceness)
    niceness = make_test(tmp_path, "echo tests ran", "echo niceness $$(nice)")
    assert niceness.returncode == 0 and "niceness 19" in niceness.stdout, niceness.stdout


FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$LOG"
if [ "$*" = "-m pip install -q uv==0.13.*" ]; then
    [ -n "$FAKE_UV" ] || exit 1
    printf '#!/bin/sh\\necho "uv $*" >> "$LOG"\\n[ "$FAKE_UV" = works ]\\n' > "$(dirname "$0")/uv"
    chmod +x "$(dirname "$0")/uv"
fi
"""


def make_install(venv: Path, uv: str, *assignments: str) -> tuple[list[str], str]:
    """The commands `make setup`'s Python install runs into `venv`, whose `python` only logs what
    it is asked (and installs a `uv` that works when `uv` is "works", fails when it is "fails",
    and is not installed when it is empty); and what make printed."""
    bin_dir = venv / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "uv").unlink(missing_ok=True)
    (venv / ".installed-test").unlink(missing_ok=True)
    log = venv / "log"
    log.write_text("")
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    done = subprocess.run(
        ["make", "-s", f"VENV={venv}", *assignments, f"{venv}/.installed-test"],
        cwd=ROOT,
        env=make_environment("INSTALLER", "UV_VERSION", "EXTRAS")
        | {"LOG": str(log), "FAKE_UV": uv},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (venv / ".installed-test").exists()
    return log.read_text().splitlines(), done.stdout


@needs_make
def test_make_setup_installs_with_uv_and_with_pip_where_uv_cannot(tmp_path):
    get_uv = "python -m pip install -q uv==0.13.*"
    by_uv = f"uv pip install -q --python {tmp_path}/bin/python --system-certs --compile-bytecode -e .[test]"
    by_pip = ["python -m pip install -q --upgrade pip", "python -m pip install -q -e .[test]"]
    assert make_install(tmp_path, "works")[0] == [get_uv, by_uv]
    commands, said = make_install(tmp_path, "fails")
    assert commands == [get_uv, by_uv, *by_pip]
    assert "uv could not install the packages; pip installs them" in said
    commands, said = make_install(tmp_path, "")
    assert commands == [get_uv, *by_pip]
    assert "uv could not be installed; pip installs the packages" in said
    assert make_install(tmp_path, "works", "INSTALLER=pip")[0] == by_pip
