"""The tool-search index: a Tantivy index (on disk beside the store, or in memory) of one
document per tool, written by one background thread in batched commits, with a digest per tool
so that an unchanged tool is never written again and a restart reopens instead of rebuilding."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bridge.search import compaction
from bridge.search.compaction import _Compaction
from bridge.search.document import Converter, schema
from bridge.search.foreground import Foreground
from bridge.search.lock import lock_holder, take_lock
from bridge.search.query import IndexQueries
from bridge.search.storage import Batch
from bridge.search.writer import RETRY_FIRST, RETRY_LAST, IndexWriter

__all__ = ["ToolIndex"]

log = logging.getLogger("bridge.search")


class ToolIndex(IndexWriter, IndexQueries):
    """The Tantivy index and its writer thread, one object made of four parts: what the index
    holds and the one commit of a run of changes (IndexStorage, bridge.search.storage), its
    compaction and move to disk (IndexCompaction), the writer thread (IndexWriter), and the
    queries of a search (IndexQueries). The constructor sets the state they share.

    `submit()` hands over changes and returns at once; the writer thread gathers what arrives
    within `COMMIT_WINDOW`, skips tools whose digest is unchanged, commits once and makes the
    result searchable. Only that thread writes the index and the digests. On disk, a digest log
    beside the index records what each commit holds, so a reopened index knows its content.

    An on-disk index whose lock another process holds is kept in memory instead, and moved to
    disk once the lock is free (`_try_disk`), looked at every LOCK_POLL seconds for the first
    `lock_wait` seconds, every DISK_RETRY after.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        convert: Converter | None = None,
        heap_size: int = 64_000_000,
        threads: int = 1,
        foreground: Foreground | None = None,
        listing: Callable[[], Sequence[Any] | None] | None = None,
        moved: Callable[[str], None] | None = None,
        lock_wait: float = 0.0,
    ) -> None:
        self.moved = (
            moved  # told the path, on the writer thread, once an index kept in memory moved to disk
        )
        # why the on-disk index at `path` cannot be used (kept in memory instead, for the process's life)
        self.unusable: str | None = None
        self._lock_file: Any = None
        if path is not None:
            try:
                self._lock_file = take_lock(path)
            except OSError as exc:  # `<index>.lock` cannot be opened: a read-only or full disk, a folder in its place
                self._kept_in_memory(path, exc)
                path = None
        # the on-disk index this one, kept in memory, moves to once no other process holds its lock
        self.wanted_path: str | None = None
        self._poll_until = time.monotonic() + lock_wait
        retry = compaction.LOCK_POLL if lock_wait > 0 else compaction.DISK_RETRY
        self._disk_retry_at = time.monotonic() + retry
        if path is not None and self._lock_file is None:
            looking = f"every {compaction.DISK_RETRY:g} s"
            if lock_wait > 0:
                looking = f"every {compaction.LOCK_POLL:g} s for {lock_wait:g} s, then {looking}"
            log.warning(
                "search index %s is in use by %s; this process keeps its own index in "
                "memory, and moves it to disk once the other process has ended (looking %s)",
                path,
                lock_holder(path),
                looking,
            )
            self.wanted_path, path = path, None
        self.path = path
        self.schema = schema()
        self.convert = convert
        self.foreground = foreground  # a compaction steps aside for its searches
        # every tool the index is to hold, as `compact` takes them (None: not known yet), read on the
        # writer thread when deleted documents are COMPACT_DELETED of the index; None: never compacted for that
        self.listing = listing
        self._compact_retry_at = (
            0.0  # after a compaction failed, none is begun for deleted documents before then
        )
        self._heap_size, self._threads = heap_size, threads
        self._generation = 0  # the folder of the index searched (`_generation`), on disk
        self.opened_existing = False  # an on-disk index was reopened as it was
        self.documents_written = 0  # documents added since this index was opened
        self.commits = 0
        self._digests: dict[str, dict[str, int]] = {}  # namespace -> tool_id -> digest
        # tool_key -> tool_id of every tool written (`_known`); a key two ids share maps to None
        self._by_key: dict[int, str | None] = {}
        # (what the index held when they were read: `_held`, term -> `term_weights`)
        self._weights: tuple[tuple[int, int, int], dict[str, float]] = ((-1, -1, -1), {})
        self._log_file: Any = None
        self._log_lines = 0  # lines in the digest log, rewritten whole once they outgrow the tools (`_append_log`)
        self._open_index(path)
        self._queue: queue.Queue[Batch | None] = queue.Queue()
        self._cond = threading.Condition()
        self._submitted = 0
        self._committed = 0
        self._closed = False
        self._closing = False  # set first by `close`: a compaction under way leaves off
        self._compactions = 0  # queued or under way
        self._compacting: _Compaction | None = None  # under way, on the writer thread
        self._compactions_waiting: list[Batch] = []  # asked for while one was under way
        self.retry_first, self.retry_last = RETRY_FIRST, RETRY_LAST
        self.failing = False  # the last commit failed; its changes wait for the next try
        self._thread = threading.Thread(target=self._run, name="search-index-writer", daemon=True)
        self._thread.start()
