"""The semantic stage's vector file: where it lies beside an index folder, its header, and its
records read back (the whole ones, each checked). A record is a 16-byte key (a digest of the
encoder and the embedded text) and a float16 vector."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["KEY_BYTES", "file_header", "read_records", "vector_path"]

MAGIC = b"BRIDGE-VEC1\n"
KEY_BYTES = 16


def vector_path(index_path: str, *, static: bool = False) -> str:
    """The vector file beside an index folder: `<index>.vectors` (the full model's), or
    `<index>.static.vectors` (the static table's)."""
    name = Path(index_path).name + (".static.vectors" if static else ".vectors")
    return str(Path(index_path).with_name(name))


def file_header(model_key: bytes, dim: int) -> bytes:
    """The header of a file of the encoder of `model_key`, of vectors of `dim` dimensions."""
    return MAGIC + model_key + dim.to_bytes(4, "little")


def read_records(raw: bytes, header: bytes, dim: int) -> np.ndarray | int | None:
    """The whole records of a vector file's bytes, one row each (a torn last one, a crash
    mid-append, left out); None for a file of another header (another model), and for one
    holding damaged records, how many."""
    if not raw.startswith(header):
        return None
    record = KEY_BYTES + 2 * dim
    body = memoryview(raw)[len(header) :]
    n = len(body) // record
    data = np.frombuffer(body[: n * record], dtype=np.uint8).reshape(n, record)
    return _damaged(data[:, KEY_BYTES:].copy().view(np.float16)) or data


def _damaged(vectors: np.ndarray) -> int:
    """How many stored vectors no encoder writes: every one is of unit length (or zero, a text
    of no known word); a flipped byte makes a number that is none, or another length."""
    bad = 0
    for start in range(
        0, len(vectors), 65_536
    ):  # a million vectors widened at once would take a GB
        wide = vectors[start : start + 65_536].astype(np.float32)
        finite = np.asarray(np.isfinite(wide).all(axis=1), dtype=bool)
        norms = np.linalg.norm(np.where(finite[:, None], wide, 0.0), axis=1)
        bad += int((~(finite & ((np.abs(norms - 1.0) < 0.02) | (norms < 1e-6)))).sum())
    return bad
