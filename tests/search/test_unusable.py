"""An on-disk search index that cannot be used: a damaged generation is rebuilt from the catalog,
and an index folder that cannot be opened or written (its lock file, a read-only or full disk)
leaves the index in memory with one warning naming the path and the fix. Never a traceback:
`bridge search` answers, and `bridge serve` reaches /readyz."""

from __future__ import annotations

import asyncio
import errno
import re
import subprocess
import sys
from pathlib import Path

import httpx
import tantivy

from bridge.config import load_config
from bridge.runtime import Bridge
from bridge.search.lock import take_lock
from tests.conftest import ROOT
from tests.search.support import hits, indexed, written_index
from tests.search.test_lock import start

SPEC = """\
openapi: 3.0.3
info: {title: Weather, version: "1.0"}
paths:
  /forecast:
    get:
      operationId: getForecast
      summary: Get the weather forecast for a city
      parameters:
        - {name: city, in: query, required: true, schema: {type: string}}
      responses:
        "200": {description: the forecast}
"""


def config(tmp_path: Path) -> str:
    """A config whose one upstream lists one tool from a document on disk (no server is called)."""
    (tmp_path / "weather.yaml").write_text(SPEC)
    path = tmp_path / "bridge.yaml"
    path.write_text(
        f"store: {{path: {tmp_path / 'bridge.db'}}}\nsearch: {{semantic: static, lock_wait: 0}}\n"
        f"upstreams:\n  - {{name: wx, kind: openapi, spec: weather.yaml, base_url: 'http://127.0.0.1:9'}}\n"
    )
    return str(path)


def bridge_search(cfg: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", "search", "weather forecast", "-c", cfg],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def truncate_segments(generation: Path) -> None:
    """Cut the generation's segment files short, as a crash or a full disk leaves them: Tantivy
    panics as the index is opened (pyo3's PanicException, no Exception)."""
    segments = [f for f in generation.iterdir() if f.suffix in (".idx", ".term", ".store")]
    assert segments
    for segment in segments:
        segment.write_bytes(segment.read_bytes()[:5])


# ---------------------------------------------------------------- the index alone


def test_a_truncated_segment_is_rebuilt_with_one_warning_naming_the_folder(tmp_path, caplog):
    import bridge.search.index as si

    path = tmp_path / "bridge.index"
    written_index(str(path), indexed("t1", "weather forecast"))
    truncate_segments(path / "g1")
    index = si.ToolIndex(str(path))
    try:
        assert (
            index.path == str(path)
            and not index.opened_existing
            and index.unusable is None
            and index.num_docs == 0
        )
        assert (
            caplog.text.count("cannot be reopened") == 1
            and f"{path} cannot be reopened" in caplog.text
        )
        index.submit([indexed("t1", "weather forecast")])  # the catalog writes it again
        assert index.flush() and hits(index, "forecast") == ["t1"]
    finally:
        index.close()
    reopened = si.ToolIndex(str(path))
    try:
        assert reopened.opened_existing and hits(reopened, "forecast") == ["t1"]
    finally:
        reopened.close()


def test_a_digest_log_that_cannot_be_read_has_its_generation_rebuilt(tmp_path, caplog):
    import bridge.search.index as si

    path = tmp_path / "bridge.index"
    written_index(str(path), indexed("t1", "weather forecast"))
    (path / "g1" / "digests.log").unlink()
    (path / "g1" / "digests.log").mkdir()  # a folder where the log goes
    index = si.ToolIndex(str(path))
    try:
        assert (
            index.path == str(path)
            and not index.opened_existing
            and index.num_docs == index.tool_count == 0
        )
        assert (
            caplog.text.count("cannot be reopened") == 1
            and f"{path / 'g1'} cannot be reopened (" in caplog.text
        )
        index.submit([indexed("t1", "weather forecast")])
        assert index.flush() and hits(index, "forecast") == ["t1"]
        assert (path / "g1" / "digests.log").is_file()
    finally:
        index.close()


def test_a_lock_file_that_cannot_be_opened_keeps_the_index_in_memory_with_one_warning_and_the_fix(
    tmp_path, caplog
):
    import bridge.search.index as si

    path = tmp_path / "bridge.index"
    (tmp_path / "bridge.index.lock").mkdir()  # a folder where the lock file goes
    index = si.ToolIndex(str(path), listing=list)
    try:
        assert (
            index.path is None and index.wanted_path is None and "Is a directory" in index.unusable
        )
        assert caplog.text.count("cannot be used") == 1
        assert (
            f"search index {path} cannot be used (" in caplog.text
            and "set search.path to a folder" in caplog.text
        )
        index.submit([indexed("t1", "weather forecast")])
        assert index.flush() and hits(index, "forecast") == ["t1"]
        assert not path.exists()
    finally:
        index.close()


def test_an_index_that_cannot_be_built_on_disk_is_kept_in_memory_and_its_lock_let_go(
    tmp_path, monkeypatch, caplog
):
    import bridge.search.index as si

    def full_disk(self, path, generation):
        if path is not None:
            raise OSError(errno.ENOSPC, "No space left on device")
        return tantivy.Index(self.schema)

    monkeypatch.setattr(si.ToolIndex, "_new_index_at", full_disk)
    path = tmp_path / "bridge.index"
    index = si.ToolIndex(str(path))
    try:
        assert index.path is None and index.unusable == "[Errno 28] No space left on device"
        assert caplog.text.count("cannot be used") == 1 and "search.persist: false" in caplog.text
        index.submit([indexed("t1", "weather forecast")])
        assert index.flush() and hits(index, "forecast") == ["t1"]
        other = take_lock(str(path), note=False)  # the lock is let go
        assert other is not None
        other.close()
    finally:
        index.close()


def test_a_vector_file_that_cannot_be_read_keeps_the_vectors_in_memory(tmp_path, caplog):
    from bridge.search.semantic import SemanticStage
    from bridge.search.vectorfile import vector_path

    index_path = str(tmp_path / "bridge.index")
    Path(vector_path(index_path, static=True)).mkdir()  # a folder where the file goes
    stage = SemanticStage.open(index_path, "static")
    try:
        assert stage is not None and stage.path is None
        assert caplog.text.count("semantic vectors cannot be read from or written to") == 1
    finally:
        stage.close()


# ---------------------------------------------------------------- real processes


def test_bridge_search_answers_over_a_damaged_index_and_a_lock_file_it_cannot_open(tmp_path):
    cfg = config(tmp_path)
    first = bridge_search(cfg)
    assert first.returncode == 0 and "wx__getForecast" in first.stdout
    truncate_segments(tmp_path / "bridge.index" / "g1")
    damaged = bridge_search(cfg)
    assert damaged.returncode == 0 and "wx__getForecast" in damaged.stdout, damaged.stderr
    assert "Traceback" not in damaged.stderr and damaged.stderr.count("cannot be reopened") == 1
    again = bridge_search(cfg)  # rebuilt on disk: reopened quietly
    assert again.returncode == 0 and "wx__getForecast" in again.stdout and again.stderr == ""
    lock = tmp_path / "bridge.index.lock"
    lock.unlink()
    lock.mkdir()
    unusable = bridge_search(cfg)
    assert unusable.returncode == 0 and "wx__getForecast" in unusable.stdout, unusable.stderr
    assert "Traceback" not in unusable.stderr and unusable.stderr.count("cannot be used") == 1
    assert "keeps its index in memory" in unusable.stderr and "set search.path" in unusable.stderr


async def _serve_until_ready(cfg: str) -> str:
    """`bridge serve` on port 0 until /readyz answers 200 and a search finds the tool; its stderr."""
    serve = await start("-m", "bridge.cli", "serve", "-c", cfg, "--port", "0")
    try:
        await serve.said("bridge: serving")
        url = re.search(r"bridge: serving .* on (http://127\.0\.0\.1:\d+)", serve.stderr).group(1)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            async with asyncio.timeout(30):
                while (await client.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.05)
                while (
                    "wx__getForecast"
                    not in (await client.get("/search", params={"q": "weather forecast"})).text
                ):
                    await asyncio.sleep(0.05)
    finally:
        assert await serve.stop() == 0
    return serve.stderr


async def test_bridge_serve_reaches_readyz_over_a_damaged_index_and_a_lock_file_it_cannot_open(
    tmp_path,
):
    cfg = config(tmp_path)
    async with Bridge(
        load_config(cfg)
    ) as bridge:  # the index on disk, as `bridge search` leaves it
        assert await bridge.wait_indexed() == "ready"
    truncate_segments(tmp_path / "bridge.index" / "g1")
    stderr = await _serve_until_ready(cfg)
    assert "Traceback" not in stderr and stderr.count("cannot be reopened") == 1
    lock = tmp_path / "bridge.index.lock"
    lock.unlink()
    lock.mkdir()
    stderr = await _serve_until_ready(cfg)
    assert (
        "Traceback" not in stderr
        and stderr.count("cannot be used") == 1
        and "set search.path" in stderr
    )
