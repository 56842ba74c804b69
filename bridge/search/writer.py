"""The writer thread of the search index: `submit` queues changes and returns at once; the thread
gathers what arrives within a commit window, commits it in one go (`IndexStorage._write`), tries
a failed commit again, and runs the compactions asked for between commits."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bridge.search.compaction import WAKE, IndexCompaction
from bridge.search.document import IndexedTool
from bridge.search.storage import Batch, _digest_line

__all__ = ["COMMIT_MAX", "COMMIT_WINDOW", "RETRY_FIRST", "RETRY_LAST", "IndexWriter"]

log = logging.getLogger("bridge.search")

# Changes arriving within this window share one commit; while more keep arriving (upstreams
# listing at start), the commit waits for them in further windows, up to COMMIT_MAX seconds after
# the first: fewer commits of more changes each, every change still searchable within a second.
COMMIT_WINDOW = 0.05
COMMIT_MAX = 0.5
# A commit that fails (a full disk, an I/O error) is tried again, with the changes arriving
# meanwhile, after these many seconds: doubling from the first to the last, then the last.
RETRY_FIRST = 0.5
RETRY_LAST = 30.0


class IndexWriter(IndexCompaction):
    """The writer thread's loop, and what callers use to hand it changes and wait for them. The
    state below is set by `ToolIndex.__init__`."""

    retry_first: float
    failing: bool  # the last commit failed; its changes wait for the next try
    _committed: int
    _thread: threading.Thread

    def submit(
        self,
        upserts: Sequence[Any] = (),
        deletes: Sequence[tuple[str, str]] = (),
        *,
        reconcile: str | None = None,
        keep_namespaces: Iterable[str] | None = None,
        prepare: Callable[[], tuple[str, Sequence[Any]] | None] | None = None,
    ) -> int:
        """Queue changes and return a ticket for `flush`. `upserts` are IndexedTools (or items
        for the converter); `deletes` are (namespace, tool_id) pairs; with `reconcile`, the
        namespace's indexed tools missing from `upserts` are deleted; with `keep_namespaces`,
        every tool of another namespace is. `prepare` runs on the writer thread before the
        batch; when it answers (namespace, items), those items reconcile that namespace instead
        of `upserts`."""
        batch = Batch(
            upserts=list(upserts),
            deletes=list(deletes),
            reconcile=reconcile,
            keep_namespaces=frozenset(keep_namespaces) if keep_namespaces is not None else None,
            prepare=prepare,
            submitted=time.monotonic(),
        )
        with self._cond:
            if self._closed:
                raise RuntimeError("search index is closed")
            self._submitted += 1
            batch.seq = self._submitted
        self._queue.put(batch)
        return batch.seq

    def ticket(self) -> int:
        """Every change submitted so far, for `flush` and `searchable`."""
        with self._cond:
            return self._submitted

    def searchable(self, ticket: int) -> bool:
        """Whether every change up to `ticket` is committed and searchable."""
        with self._cond:
            return self._committed >= ticket

    def flush(
        self, timeout: float | None = 10.0, ticket: int | None = None, *, behind: int = 0
    ) -> bool:
        """Wait until everything submitted (or up to `ticket`, or all but the last `behind`
        batches) is committed and searchable."""
        with self._cond:
            target = self._submitted - behind if ticket is None else ticket
            return self._cond.wait_for(lambda: self._committed >= target or self._closed, timeout)

    @property
    def pending(self) -> bool:
        return self._committed < self._submitted

    def _gather(self, batches: list[Batch], window: float, *, commit: bool = True) -> bool:
        """Add to `batches` what is submitted within `window` seconds, and what was submitted
        before and is still queued (a compaction is set going instead); False when the index is
        closed (nothing more comes). A window before a `commit` ends when `close` begins: what
        is queued then is all there is to wait for."""
        deadline = time.monotonic() + window
        while True:
            remaining = 0.0 if commit and self._closing else deadline - time.monotonic()
            try:  # past the window, what is queued already is taken without waiting
                more = (
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                return True
            if more is None:
                return False
            if more.compact:
                self._begin_compaction(more)
            elif more is not WAKE:
                batches.append(more)

    def _next_batch(self) -> Batch | None:
        """The next batch queued. While the index is kept in memory in place of an on-disk one
        (`wanted_path`), it looks whether that one's lock is free at most every DISK_RETRY
        seconds (LOCK_POLL in its first `lock_wait` seconds), between batches or while none
        comes; WAKE when it begins to move there."""
        while self.wanted_path is not None and self._compacting is None and not self._closing:
            wait = self._disk_retry_at - time.monotonic()
            if wait <= 0:
                if self._try_disk():
                    return WAKE
                continue
            try:
                return self._queue.get(timeout=wait)
            except queue.Empty:
                continue
        return self._queue.get()

    def _run(self) -> None:
        while True:
            c = self._compacting
            if c is not None and c.done.is_set():
                self._compact_end(c)
                continue
            if c is None or c.thread is not None:
                batch = self._next_batch()  # a compaction's thread queues WAKE when it is done
            else:
                try:
                    batch = self._queue.get_nowait()
                except queue.Empty:  # what was submitted before is committed: the compaction begins
                    self._compact_begin(c)
                    continue
            if batch is None:
                if self._compacting is not None:
                    self._leave_compaction(self._compacting, None)
                return
            if batch is WAKE:
                continue
            if batch.compact:
                self._begin_compaction(batch)
                continue
            batches = [batch]
            # COMMIT_MAX counts from the submission of the first change waiting, not from when this
            # thread came to it: changes submitted while a commit of hundreds was written waited for
            # it, then for a whole COMMIT_MAX more (over 1 s in a burst of 500 changes)
            first = batch.submitted
            going = self._gather(batches, min(COMMIT_WINDOW, first + COMMIT_MAX - time.monotonic()))
            while going and len(batches) > 1 and time.monotonic() - first < COMMIT_MAX:
                gathered = len(batches)
                going = self._gather(
                    batches, min(COMMIT_WINDOW, first + COMMIT_MAX - time.monotonic())
                )
                if len(batches) == gathered:
                    break  # a quiet window: commit what came
            delay = self.retry_first
            while not self._write(batches) and going:
                # nothing of `batches` is lost: tried again with what arrives meanwhile
                self.failing = True
                log.warning(
                    "search index commit failed; %d change batches are tried again in %.1f s",
                    len(batches),
                    delay,
                )
                going = self._gather(batches, delay, commit=False)
                delay = min(2 * delay, self.retry_last)
            self.failing = False
            self._compact_when_deleted()  # before the commit is told: `flush` then `compacted` waits for it
            with self._cond:
                self._committed = max(self._committed, batches[-1].seq)
                self._cond.notify_all()
            if not going:
                if self._compacting is not None:
                    self._leave_compaction(self._compacting, None)
                return

    def bulk_load(self, tools: Iterable[IndexedTool]) -> int:
        """Write many new tools in one commit on the calling thread (an initial build, while
        nothing else writes). Returns how many were written. When a tool cannot be written or
        the commit fails, the error is raised and nothing of the load is kept: the index and
        its digests are as before, and the same load can be run again."""
        self.flush(None)
        count = 0
        lines: list[str] = []
        writer, known, logged = self._writer, self._digests, self._log_file is not None
        added: dict[str, list[str]] = {}  # namespace -> the ids this load adds, to undo
        replaced: list[tuple[str, str, int]] = []  # (namespace, tool_id, digest before)
        try:
            for tool in tools:
                tool_id, namespace, digest = tool.tool_id, tool.namespace, tool.digest
                digests = known.get(namespace)
                if digests is None:
                    digests = known[namespace] = {}
                previous = digests.get(tool_id)
                if previous == digest:
                    continue
                if previous is None:
                    new_ids = added.get(namespace)
                    if new_ids is None:
                        new_ids = added[namespace] = []
                    new_ids.append(tool_id)
                else:
                    replaced.append((namespace, tool_id, previous))
                    writer.delete_documents_by_term("tool_id", tool_id)
                digests[tool_id] = digest
                self._known(tool_id, tool.key)
                writer.add_document(tool.document())
                if logged:
                    lines.append(_digest_line(tool_id, namespace, digest))
                count += 1
            writer.commit()
        except BaseException:
            with contextlib.suppress(Exception):
                writer.rollback()
            # latest first: a tool the load lists twice is replaced by its own first listing
            for namespace, tool_id, previous in reversed(replaced):
                known.setdefault(namespace, {})[tool_id] = previous
            for namespace, new_ids in added.items():
                digests = known.get(namespace, {})
                for tool_id in new_ids:
                    digests.pop(tool_id, None)
            raise
        self._index.reload()
        self.documents_written += count
        self.commits += 1
        self._append_log(lines)
        return count

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closing = (
                True  # a compaction under way leaves off: the changes after it are written
            )
        self._queue.put(WAKE)  # a commit window under way ends now
        self.flush(60.0)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._queue.put(None)
        self._thread.join(timeout=60.0)
        with contextlib.suppress(Exception):
            self._writer.wait_merging_threads()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock
            self._lock_file = None
