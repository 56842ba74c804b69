"""The PostgreSQL test server (tests/pgserver.py): reached over TCP on loopback with its
password, and stopped and started again with its data kept, as outage tests need."""

from __future__ import annotations

import psycopg
import pytest

from tests.pgserver import PostgresServer


def test_a_database_of_its_own_over_tcp_with_the_password(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    assert postgres_url.startswith(f"postgresql://bridge:{postgres_server.password}@127.0.0.1:")
    with psycopg.connect(postgres_url, connect_timeout=5) as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (
            "bridge",
            postgres_url.rsplit("/", 1)[1],
        )
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    wrong = postgres_url.replace(postgres_server.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)


def test_stopped_and_started_again_with_its_data(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (7)")
    postgres_server.stop()
    assert not postgres_server.running
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_url, connect_timeout=5)
    postgres_server.start()
    with psycopg.connect(postgres_url, connect_timeout=5) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(7,)]
