"""The store on a full disk, simulated by a file size limit (RLIMIT_FSIZE) in a subprocess: a write
past it fails as on a disk with no space left (Python ignores SIGXFSZ)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def limited(kilobytes: int):
    """A preexec_fn limiting the files the subprocess writes to `kilobytes`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (kilobytes * 1024, resource.RLIM_INFINITY))
    return limit


def test_a_store_that_cannot_be_laid_out_on_a_full_disk_says_so_in_one_line(tmp_path):
    store = tmp_path / "data" / "bridge.db"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store: {{path: {store}}}\nupstreams: []\n")
    done = subprocess.run([sys.executable, "-m", "bridge.cli", "search", "x", "-c", str(cfg)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, preexec_fn=limited(40))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    # the error itself, not the failed rollback after it ("cannot rollback - no transaction is active")
    assert "rollback" not in lines[0]
    assert f"StoreFull: {store}: cannot be written (disk I/O error" in lines[0]
    assert "fix: free space on its disk, or set store.path" in lines[0]
