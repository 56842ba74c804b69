"""The embeddings of a catalog's tools: computed in the background as the catalog changes, kept
in memory and, beside an on-disk index, in an append-only vector file keyed by the embedded
text, so a restart (or the same tool under another upstream) embeds nothing again."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import LRUCache

from bridge.model import ToolDeclaration
from bridge.search.encoder import Encoder
from bridge.search.tooltext import (
    tool_text,
)
from bridge.search.vectorfile import KEY_BYTES, file_header, read_records, vector_path

__all__ = ["ToolEmbeddings"]

log = logging.getLogger("bridge.search")

_BATCH = 32
_AHEAD = 1024
_SETTLED = object()  # queued by `settle()`


@dataclass(frozen=True)
class _ToDisk:
    """Queued by `keep_on_disk`: the vector file the stage writes from then on."""

    path: str


# tools embedded by a search while they wait for the background thread (a cheap encoder's
# `vectors`), kept for the searches after it and then handed to the thread: 16 MB at 256 dims
_FRESH_KEPT = 32768
_AFTER_WAIT = 0.25  # seconds of each wait for the keyword index (`after`), between looks at closing


class ToolEmbeddings:
    """The tool embeddings of one catalog.

    `submit()` hands over changed and removed tools and returns at once; one background thread
    embeds what is new (in batches, texts already embedded are never embedded again). `path`
    is the vector file (None: memory only). `vectors()` answers None while a tool is still
    waiting for its embedding and the encoder is not cheap.

    `after`, when given, is asked before each change is taken in and before each batch is
    embedded: it waits up to the given seconds for the keyword index to take in every change
    submitted to it so far, and answers whether it has (`ToolSearch._index_first`). The embedding
    work (texts, tokens, sums) holds the interpreter's lock as much as the index's writer
    does, so while the upstreams first list, embedding alongside the index made their tools
    searchable later; what a search needs first is the keyword index.
    """

    def __init__(
        self,
        encoder: Encoder,
        path: str | None = None,
        *,
        after: Callable[[float], bool] | None = None,
        seed: str | None = None,
    ) -> None:
        self.encoder = encoder
        self.after = after
        self.path = path
        # texts its thread embedded since it opened (not read from the file, nor by a search)
        self.embedded = 0
        self._model_key = hashlib.blake2b(
            f"{encoder.name}|{encoder.tool_tokens}".encode(), digest_size=8
        ).digest()
        self._rows: dict[bytes, int] = {}  # text key -> row in _vectors
        self._vectors = np.zeros((0, encoder.dim), np.float16)
        self._count = 0
        self._keys: dict[str, bytes] = {}  # tool_id -> text key
        # counts the changes of the tools' keys or the rows, under the lock (`every_vector`)
        self.generation = 0
        self._file: Any = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: queue.Queue[tuple[list[ToolDeclaration], list[str]] | object | None] = (
            queue.Queue()
        )
        self._submitted = 0
        self._done = 0
        self._todo: dict[bytes, str] = {}  # text key -> text, waiting for its embedding
        self._todo_len = 0
        # rows that may have lost their last tool (a tool removed or its text changed) since the
        # vector file was last compacted: `_compact` looks at every row only when enough may have
        self._dropped = 0
        self._tidying = False  # the last waiting tool was embedded and `_compact` has yet to look
        # every tool is known (`settle()`): until then a row no tool has may be a tool not listed yet
        self._settled = True
        # tool_id -> (declaration, vector): embedded by a search before the thread came to it
        self._fresh: LRUCache[str, tuple[ToolDeclaration, np.ndarray]] = LRUCache(_FRESH_KEPT)
        # tools whose vector changed since `changes()` last read them (None: no one follows), and
        # text key -> the tools waiting for that text's vector (bridge.search.dense)
        self._journal: list[str] | None = None
        self._awaiting: dict[bytes, list[str]] = {}
        self._closed = False
        if path is not None:
            try:
                self._load()
            except OSError as exc:  # a folder in the file's place, a read-only or full disk: the vectors stay in memory
                log.warning(
                    "semantic vectors cannot be read from or written to %s (%s); kept in memory, and computed "
                    "again at each start",
                    path,
                    exc,
                )
                self.path, self._file = None, None
                self._rows, self._vectors, self._count = (
                    {},
                    np.zeros((0, encoder.dim), np.float16),
                    0,
                )
        elif seed is not None:
            self._seed(seed)
        self._dropped = self._count  # rows of the file no tool may have any more
        self._settled = not self._count  # the file's rows are kept until every tool is known
        self._thread = threading.Thread(target=self._run, name="search-semantic", daemon=True)
        self._thread.start()

    def vectors(self, decls: Sequence[ToolDeclaration]) -> np.ndarray | None:
        """The tools' unit vectors, one row each; None when one has no embedding yet and the
        encoder is not cheap. A cheap one embeds the waiting tools now, as the background thread
        would (to the same float16 values); the last _FRESH_KEPT are kept for the next searches
        and then taken by the thread, which embeds them no more."""
        waiting: list[int] = []
        kept: dict[int, np.ndarray] = {}
        with self._lock:
            rows = []
            for i, decl in enumerate(decls):
                row = self._rows.get(self._keys.get(decl.tool_id, b""))
                if row is None:
                    if not self.encoder.cheap:
                        return None
                    fresh = self._fresh.get(decl.tool_id)
                    if fresh is not None and fresh[0] is decl:
                        kept[i] = fresh[1]
                    else:
                        waiting.append(i)
                    row = 0
                rows.append(row)
            tools = (
                self._vectors[rows].astype(np.float32)
                if self._count
                else np.zeros((len(rows), self.encoder.dim), np.float32)
            )
        for i, vector in kept.items():
            tools[i] = vector
        if waiting:
            embedded = self.encoder.encode(
                [tool_text(decls[i]) for i in waiting], self.encoder.tool_tokens
            ).astype(np.float16)
            tools[waiting] = embedded
            with self._lock:
                for i, vector in zip(waiting, embedded, strict=True):
                    self._fresh[decls[i].tool_id] = (decls[i], vector)
        return tools

    # ---------------------------------------------------------------- the vector file

    def _load(self) -> None:
        assert self.path is not None
        file = Path(self.path)
        header = self._header()
        if file.exists():
            raw = file.read_bytes()
            records = self._records(raw)
            if isinstance(records, int):
                log.warning(
                    "semantic vectors at %s hold %d damaged record(s) (not unit length, or not numbers); "
                    "they are all computed again",
                    file,
                    records,
                )
                file.unlink()
            elif records is not None:
                self._take(records)
                if len(raw) != len(header) + records.nbytes:
                    with open(file, "r+b") as fh:
                        fh.truncate(len(header) + records.nbytes)
            else:
                log.info(
                    "semantic vectors at %s are of another model; they are computed again", file
                )
                file.unlink()
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(header)
        self._file = open(file, "ab")  # noqa: SIM115 - kept open for appends

    def _seed(self, path: str) -> None:
        """Before the thread starts, in memory: take in the vectors of the file at `path` that
        another process writes (the one holding the index), as it is now, and leave it as it
        is. That process appends whole records and replaces the file whole; a torn last record
        is left out, and a file of another model, or with a damaged record, read as empty."""
        try:
            records = self._records(Path(path).read_bytes())
        except OSError:  # none yet, or not readable: every tool is embedded
            return
        if isinstance(records, np.ndarray):  # (another model's, or damaged: every tool embedded)
            self._take(records)
            log.info(
                "semantic vectors: %d read from %s, which another process keeps", self._count, path
            )

    def _header(self) -> bytes:
        return file_header(self._model_key, self.encoder.dim)

    def _records(self, raw: bytes) -> np.ndarray | int | None:
        return read_records(raw, self._header(), self.encoder.dim)

    def _take(self, records: np.ndarray) -> None:
        """Hold `records` (`_records`) as the first rows; the first of a key repeated is its row."""
        n = len(records)
        self._grow(n)
        for i in range(n):
            self._rows.setdefault(bytes(records[i, :KEY_BYTES]), i)
        vectors = records[:, KEY_BYTES:].copy().view(np.float16)
        self._vectors[:n] = vectors.reshape(n, self.encoder.dim)
        self._count = n

    # Only the stage's thread (and `_load`, before it starts) changes the rows, the vectors and the
    # tools' keys; it takes the lock to change them, and reads them without it. The searches
    # (`vectors`) and the catalog's listener (`submit`) take the lock, so the long work (a copy of
    # every vector, a pass over every row) is done before it is taken: doubling the vectors of a
    # million tools copied 256 MB under it, and a change of the catalog waited 0.5 s.

    def _grow(self, need: int) -> None:
        if need > len(self._vectors):
            bigger = np.zeros(
                (max(need, 2 * len(self._vectors), 1024), self.encoder.dim), np.float16
            )
            bigger[: self._count] = self._vectors[: self._count]
            with self._lock:
                self._vectors = bigger

    def _compact(self) -> None:
        """Rewrite the vector file (and memory) with only the texts of current tools, once the
        file holds more than twice as many. Not before the stage is settled: after a restart, the
        rows of an upstream that has not listed again are its tools' still."""
        if not self._settled:
            return
        if (
            2 * self._dropped <= self._count + 1000
        ):  # at least half the rows are live: nothing to do
            return
        live = set(self._keys.values())
        keep = [(k, r) for k, r in self._rows.items() if k in live]
        if self._count <= 2 * len(keep) + 1000:
            self._dropped = self._count - len(keep)
            return
        self._dropped = 0
        vectors = np.zeros((max(len(keep), 1024), self.encoder.dim), np.float16)
        if keep:
            vectors[: len(keep)] = self._vectors[[row for _, row in keep]]
        rows = {k: i for i, (k, _) in enumerate(keep)}
        with self._lock:
            self._rows, self._vectors, self._count = rows, vectors, len(keep)
            self.generation += 1
        if self.path is not None and self._file is not None:
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "wb") as fh:
                    fh.write(self._header())
                    for key, row in self._rows.items():
                        fh.write(key + self._vectors[row].tobytes())
                os.replace(tmp, self.path)
            except OSError as exc:
                # a full disk (or a folder in the way): the file stays as it was, its records keyed,
                # and takes the appends to come; the error ended the stage's thread, and every
                # tool listed after it went without its vector
                log.warning(
                    "semantic vectors at %s cannot be compacted (%s); the file is kept as it was",
                    self.path,
                    exc,
                )
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                return
            self._file.close()
            try:
                self._file = open(self.path, "ab")  # noqa: SIM115
            except OSError as exc:
                log.warning(
                    "semantic vectors cannot be written to %s (%s); kept in memory from now on",
                    self.path,
                    exc,
                )
                self.path, self._file = None, None

    # ---------------------------------------------------------------- keeping in step

    def settle(self) -> None:
        """Every tool is known now (each upstream has listed since the start): once the changes
        submitted so far are taken in, a row no tool has is no tool's, and the file may be
        compacted (looked at now, and after each round of embeddings)."""
        with self._cond:
            if self._closed or self._settled:
                return
            self._submitted += 1
        self._queue.put(_SETTLED)

    def keep_on_disk(self, index_path: str) -> None:
        """A stage kept in memory (its index was: another process held the on-disk one) keeps
        its vectors in the file beside `index_path` from now on: every vector it has is written
        there (in place of what another process left), and those it embeds later are added."""
        with self._cond:
            if self._closed or self.path is not None:
                return
            self._submitted += 1
        self._queue.put(_ToDisk(vector_path(index_path, static=self.encoder.cheap)))

    def _write_file(self, path: str) -> None:
        """On the stage's thread: the vector file written anew with every vector held, then
        kept open for the vectors to come."""
        by_row = sorted(self._rows.items(), key=lambda item: item[1])
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(self._header())
                fh.write(b"".join(key + self._vectors[row].tobytes() for key, row in by_row))
            os.replace(tmp, path)
            file = open(path, "ab")  # noqa: SIM115 - kept open for appends
        except OSError as exc:
            log.warning("semantic vectors cannot be written to %s (%s); kept in memory", path, exc)
            return
        if [row for _, row in by_row] != list(
            range(self._count)
        ):  # rows no key has (never in memory alone): renumbered
            with self._lock:
                self._rows = {key: i for i, (key, _) in enumerate(by_row)}
                self._vectors[: len(by_row)] = self._vectors[[row for _, row in by_row]]
                self._count = len(by_row)
                self.generation += 1
        self.path, self._file = path, file

    def submit(self, upserts: Iterable[ToolDeclaration] = (), deletes: Iterable[str] = ()) -> None:
        """Queue tools added or changed, and tool ids removed."""
        batch = (list(upserts), list(deletes))
        if not batch[0] and not batch[1]:
            return
        with self._cond:
            if self._closed:
                return
            self._submitted += 1
        self._queue.put(batch)

    def _text_key(self, text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=KEY_BYTES, key=self._model_key).digest()

    def _index_first(self) -> None:
        """Wait while the keyword index has changes to take in (`after`), or until closing."""
        while self.after is not None and not self._closed and not self.after(_AFTER_WAIT):
            pass

    def _run(self) -> None:
        todo = self._todo
        while True:
            # take the changes waiting (without blocking while embeddings are due), while fewer
            # than _AHEAD texts wait: the others stay queued as the declarations they are, not
            # as texts held until their turn (100 MB for 100,000 tools)
            while len(todo) < _AHEAD:
                try:
                    item = self._queue.get(block=not todo)
                except queue.Empty:
                    break
                if item is None:
                    return
                self._index_first()
                if isinstance(item, _ToDisk):
                    self._write_file(item.path)
                    with self._cond:
                        self._done += 1
                        self._cond.notify_all()
                    continue
                if item is _SETTLED:
                    with self._lock:
                        self._settled = True
                    if not todo:  # else once the waiting tools are embedded
                        self._compact()
                    with self._cond:
                        self._done += 1
                        self._cond.notify_all()
                    continue
                assert isinstance(item, tuple)  # the rest of what is queued: (upserts, deletes)
                upserts, deletes = item
                with self._lock:
                    for tool_id in deletes:
                        if self._keys.pop(tool_id, None) is not None:
                            self._dropped += 1
                            if self._journal is not None:
                                self._journal.append(tool_id)
                    self.generation += 1
                pending: list[tuple[str, bytes]] = []
                ready: dict[bytes, np.ndarray] = {}  # embedded by a search already
                for decl in upserts:
                    text = tool_text(decl)
                    key = self._text_key(text)
                    pending.append((decl.tool_id, key))
                    if key not in self._rows:
                        with self._lock:
                            held = self._fresh.pop(decl.tool_id, None)
                        if held is not None and held[0] is decl:
                            ready[key] = held[
                                1
                            ]  # (`_store` takes it off `todo`, where another tool of its text may have put it)
                        elif key not in ready:
                            todo[key] = text
                if ready:
                    self._store(list(ready), np.stack(list(ready.values())), todo)
                    if not todo:  # (nothing left to embed: `_embed` would not come to tidy)
                        self._tidy()
                with self._cond:
                    for tool_id, key in pending:
                        if self._keys.get(tool_id, key) != key:
                            self._dropped += 1
                        self._keys[tool_id] = key
                        if self._journal is not None:
                            self._journal.append(tool_id)
                            if key not in self._rows:
                                self._awaiting.setdefault(key, []).append(tool_id)
                    self.generation += 1
                    self._todo_len = len(todo)
                    self._done += 1
                    self._cond.notify_all()
            if todo:
                self._index_first()
                self._embed(todo)
                if not todo:
                    self._tidy()

    def _tidy(self) -> None:
        """The last waiting text is stored: compact the vector file when that is due, and only
        then let `flush` return."""
        self._compact()
        with self._cond:
            self._tidying = False
            self._cond.notify_all()

    def _embed(self, todo: dict[bytes, str]) -> None:
        keys = list(
            itertools.islice(todo, _BATCH)
        )  # not list(todo): a million waiting would be copied per batch
        try:
            vectors = self.encoder.encode([todo[k] for k in keys], self.encoder.tool_tokens).astype(
                np.float16
            )
        except Exception:
            log.exception(
                "semantic embedding failed for %d tools; they are ranked by keywords", len(keys)
            )
            with self._cond:
                for key in keys:
                    todo.pop(key, None)
                    self._awaiting.pop(key, None)
                self._todo_len = len(todo)
                self._tidying = not todo
                self._cond.notify_all()
            return
        self._store(keys, vectors, todo)
        self.embedded += len(keys)

    def _store(self, keys: list[bytes], vectors: np.ndarray, todo: dict[bytes, str]) -> None:
        """Keep the texts' vectors (float16, one row per key) in memory and in the vector file."""
        self._grow(self._count + len(keys))
        with self._cond:
            for key, vector in zip(keys, vectors, strict=True):
                self._vectors[self._count] = vector
                self._rows[key] = self._count
                self._count += 1
                todo.pop(key, None)
                if self._journal is not None:
                    self._journal.extend(self._awaiting.pop(key, ()))
            self.generation += 1
            self._todo_len = len(todo)
            self._tidying = not todo
            self._cond.notify_all()
        if self._file is not None:
            whole = self._file.tell()  # the file's size: every append is flushed
            try:
                self._file.write(
                    b"".join(k + v.tobytes() for k, v in zip(keys, vectors, strict=True))
                )
                self._file.flush()
            except OSError as exc:  # a full disk: said once, and the file is let go of
                log.warning(
                    "semantic vectors cannot be written to %s (%s); kept in memory from now on (those not in the "
                    "file are computed again at the next start)",
                    self.path,
                    exc,
                )
                self._let_go(whole)

    def _let_go(self, whole: int) -> None:
        """Stop writing the vector file, cut back to its `whole` bytes: an append the disk took
        in part left a torn record in it, which the appends after it (one warning each) put in
        the middle, every record past it then read at the wrong place at the next start."""
        with contextlib.suppress(OSError):
            self._file.close()  # its buffer holds the rest of the append: written now, or not
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.truncate(self.path, whole)
        self.path, self._file = None, None

    def every_vector(self, follow: bool = False) -> tuple[int, list[str], np.ndarray]:
        """Every tool with a vector: the `generation` read, the tool ids and their vectors
        (float32, one row each; copied after the lock is let go: the array read keeps them, as the
        stage only appends to it or replaces it whole); with `follow`, journal the changes."""
        with self._lock:
            generation, vectors, rows = self.generation, self._vectors, self._rows
            pairs = [(tool_id, rows[key]) for tool_id, key in self._keys.items() if key in rows]
            if follow:
                self._journal = []
                self._awaiting = {}
                for tool_id, key in self._keys.items():
                    if key not in rows:
                        self._awaiting.setdefault(key, []).append(tool_id)
        at = np.fromiter((row for _, row in pairs), np.int64, len(pairs))
        return generation, [tool_id for tool_id, _ in pairs], vectors[at].astype(np.float32)

    def vectors_of(self, tool_ids: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """The tools of `tool_ids` that have a vector, and those vectors (float32, one row each)."""
        with self._lock:
            found = [
                (tool_id, row)
                for tool_id in tool_ids
                if (row := self._rows.get(self._keys.get(tool_id, b""))) is not None
            ]
            vectors = self._vectors[[row for _, row in found]].astype(np.float32)
        return [tool_id for tool_id, _ in found], vectors

    def changes(self) -> tuple[int, list[str], np.ndarray, list[str]]:
        """Since `every_vector(follow=True)` or the last call: the `generation` read, the changed
        tools with a vector, their vectors (float32) and the tools with none (removed, waiting)."""
        with self._lock:
            journal = self._journal or []
            self._journal = None if self._journal is None else []
            generation, vectors, rows, keys = self.generation, self._vectors, self._rows, self._keys
            have: dict[str, int] = {}
            gone: list[str] = []
            for tool_id in dict.fromkeys(journal):
                row = rows.get(keys.get(tool_id, b""))
                if row is None:
                    gone.append(tool_id)
                else:
                    have[tool_id] = row
        at = np.fromiter(have.values(), np.int64, len(have))
        return generation, list(have), vectors[at].astype(np.float32), gone

    @property
    def tools(self) -> int:
        """How many tools the embeddings know (with a vector or waiting for one)."""
        return len(self._keys)

    @property
    def missing(self) -> int:
        """Tools known to the stage whose embedding is not computed yet."""
        with self._lock:
            return sum(1 for key in self._keys.values() if key not in self._rows)

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Block until every change so far is taken in and every tool has its embedding (and the
        vector file is compacted, when that is due)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: (
                    self._closed
                    or (self._done >= self._submitted and self._todo_len == 0 and not self._tidying)
                ),
                timeout,
            )

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._queue.put(None)
        self._thread.join(timeout=30.0)
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
