"""Compaction of the search index: every tool written again into the next generation, on a
thread of its own, while the writer thread commits the changes arriving meanwhile; and the move
of an index kept in memory to the on-disk one once another process has let go of its lock."""

from __future__ import annotations

import contextlib
import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.search.document import IndexedTool, tool_key
from bridge.search.foreground import Foreground
from bridge.search.lock import name_holder, take_lock
from bridge.search.storage import (
    _DIGEST_LOG,
    Batch,
    IndexStorage,
    _digest_line,
    _digest_lines,
    _emptied,
    _generation,
    _gone_line,
)

__all__ = [
    "COMPACT_DELETED",
    "COMPACT_DELETED_MIN",
    "COMPACT_MIN_TOOLS",
    "COMPACT_SEGMENTS",
    "DISK_RETRY",
    "DISK_RETRY_FAILED",
    "LOCK_POLL",
    "WAKE",
    "IndexCompaction",
]

log = logging.getLogger("bridge.search")

# Every query word costs a lookup in each segment of the index (over a million tools, the keyword
# scores of a request's parts took 2.96 ms in 23 segments, 1.22 ms in 2). An index filled by many
# commits, as upstreams list one after another, keeps many segments: Tantivy merges only segments
# of about the same size, eight at a time. `compact` writes every tool again into a new index
# beside it, in a few segments of equal size that Tantivy then merges, when a search reads
# COMPACT_SEGMENTS or more of them in an index of at least COMPACT_MIN_TOOLS tools. It writes on a
# thread of its own (about 3 minutes over a million tools); a change arriving meanwhile is
# committed to the index searched by the writer thread, and written to the new one too before it
# is searched in its place.
COMPACT_SEGMENTS = 6
COMPACT_MIN_TOOLS = 20_000
# A deleted or replaced tool's document stays in its segment until Tantivy merges that segment,
# and BM25 still counts it: in the word frequencies and the average length every score is read
# against. An index filled once is never merged whole (Tantivy merges segments of about the same
# size), so the documents of tools re-listed with changes pile up: the same request over the same
# tools is then scored differently from a fresh build (docs/search.md, *Segments and compaction*).
# Once deleted documents are COMPACT_DELETED or more of the documents a search reads, the writer
# thread compacts the index (every tool written again into a new one, none deleted): about 4
# documents written for each one deleted, an index never more than a quarter larger than its tools.
COMPACT_DELETED = 0.2
# ...and at least COMPACT_DELETED_MIN of them: a catalog of 5 tools reached 20% at each removal, and
# wrote a new generation on every one (14 to 100 ms and a folder each). Below 32 tools the floor
# decides: there, one deleted document already changed the first match of 2 to 4% of the
# development requests against a fresh build, and 8 of them 4 to 5% (docs/search.md, *Segments and
# compaction*), so compacting sooner bought nothing measurable. Tantivy's own merges of small
# segments drop deleted documents too: 50 removals and re-listings in a row left at most 4 to 8.
COMPACT_DELETED_MIN = 8
# An index kept in memory because another process held the on-disk one's lock looks whether the
# lock is free at most every DISK_RETRY seconds (an attempt to take it: a few microseconds), and
# once it is, writes its tools into the on-disk index as a compaction does, and keeps it from then on.
DISK_RETRY = 10.0
# ...and every LOCK_POLL seconds for its first `lock_wait` seconds (`bridge serve`'s
# `search.lock_wait`): a command that held the lock for the few seconds it ran is followed at once.
LOCK_POLL = 0.1
DISK_RETRY_FAILED = 300.0  # after a move that failed (a full disk): each try writes every tool


class _Abandoned(Exception):
    """A compaction left off because the index is closing."""


WAKE = Batch()  # queued when a compaction's thread is done: the writer thread ends the compaction


@dataclass
class _Compaction:
    """A compaction under way (`ToolIndex.compact`): its tools are written into a new index, and
    committed, on a thread of its own (`_compact_run`), while the writer thread commits the
    changes that arrive meanwhile. What a change submitted after it says of a tool (`touched`:
    the tool, or None when deleted) has the last word in the new index."""

    batch: Batch
    path: str | None = None  # of the new index's folder (None: in memory)
    generation: int = 0  # the new index's
    lock_file: Any = (
        None  # held for the on-disk index a move writes (`_try_disk`), until it is searched
    )
    segments: int = -1  # of the index searched, when it began (-1: not begun)
    deleted: int = 0  # documents of deleted tools in the index searched, when it began
    started: float = 0.0
    index: Any = None  # the new index (the next generation)
    writer: Any = None
    digests: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # the new index's, by namespace
    owner: dict[str, str] = field(default_factory=dict)  # tool_id -> namespace, in the new index
    touched: dict[str, IndexedTool | None] = field(default_factory=dict)  # `lock` held to change it
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None  # writing its tools, then committing them
    done: threading.Event = field(
        default_factory=threading.Event
    )  # set when that thread is done, failed or not
    error: BaseException | None = None
    log_file: Any = None


class IndexCompaction(IndexStorage):
    """The steps of a compaction (and of a move to disk), which the writer thread runs
    (bridge.search.writer.IndexWriter). The state below is set by `ToolIndex.__init__`; the
    queue, its condition and the counts are the writer thread's, which a compaction's thread
    wakes and the writer's `flush` and `compacted` wait on."""

    wanted_path: (
        str | None
    )  # the on-disk index an index kept in memory moves to once its lock is free
    listing: (
        Callable[[], Sequence[Any] | None] | None
    )  # every tool the index is to hold (None: not known yet)
    moved: Callable[[str], None] | None  # told the path once an index kept in memory moved to disk
    foreground: Foreground | None
    retry_last: float
    _disk_retry_at: float
    _poll_until: float  # the lock is looked at every LOCK_POLL seconds until then, DISK_RETRY after
    _compact_retry_at: float
    _queue: queue.Queue[Batch | None]
    _cond: threading.Condition
    _submitted: int
    _closing: bool  # set first by `close`: a compaction under way leaves off
    _closed: bool
    _compactions: int  # queued or under way
    _compacting: _Compaction | None  # under way, on the writer thread
    _compactions_waiting: list[Batch]  # asked for while one was under way

    def compact(self, tools: Sequence[Any]) -> None:
        """Write `tools` (every tool the index is to hold, as `submit` takes them) again into a
        new index, searched in place of this one once written, when the writer thread comes to
        it and a search then reads COMPACT_SEGMENTS or more segments of at least
        COMPACT_MIN_TOOLS tools (otherwise nothing is done). The changes submitted before are
        written first; the new index is written on a thread of its own. Those submitted after are
        committed as they come, and have the last word on their tools in the new index. `flush`
        does not wait for it (`compacted` does); `close` leaves it off, and the index is as it was."""
        batch = Batch(upserts=list(tools), compact=True)
        with self._cond:
            if self._closed or self._closing:
                return
            batch.seq = self._submitted
            self._compactions += 1
        self._queue.put(batch)

    def compacted(self, timeout: float | None = 10.0) -> bool:
        """Wait until no compaction is queued or under way (nor anything submitted before one)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._compactions or self._closed, timeout)

    def _try_disk(self) -> bool:
        """On the writer thread, while the index is kept in memory: when no other process holds
        the on-disk index's lock any more, take it and begin writing every tool (`listing`) into
        that index as a compaction does (`_compact_begin`); it is searched in place of this one
        once written, and the changes arriving meanwhile are written into both. True when begun."""
        now = time.monotonic()
        self._disk_retry_at = now + (LOCK_POLL if now < self._poll_until else DISK_RETRY)
        if self.listing is None or self.wanted_path is None:
            return False
        try:
            handle = take_lock(self.wanted_path, note=False)
        except OSError:
            return False
        if handle is None:
            return False
        seq, tools = self._list_tools("write to disk")
        with self._cond:
            going = tools is not None and not self._closing
            if going:
                self._compactions += 1
        if not going:  # not every upstream has listed yet: looked at again later
            handle.close()
            return False
        name_holder(handle)
        self._compacting = _Compaction(
            Batch(upserts=list(tools), compact=True, move=True, seq=seq), lock_file=handle
        )
        return True

    def _disk_generation(self, path: str) -> int:
        """The generation a move to the on-disk index at `path` writes: the one after the
        generation its marker names, when the index there is of this format (that one stays
        whole until the marker names the new one); else 1, in a folder emptied for it."""
        folder = Path(path)
        with contextlib.suppress(ValueError, OSError):
            same, generation = self._marked(folder)
            if same and isinstance(generation, int) and (folder / _generation(generation)).is_dir():
                return generation + 1
        _emptied(folder)
        return 1

    # ---------------------------------------------------------------- compaction

    def _begin_compaction(self, batch: Batch) -> None:
        """Set a compaction going, or keep it for when the one under way is done. The tools that a
        change submitted after it writes or deletes are then marked as the change's (`_write`)."""
        if self._compacting is None:
            self._compacting = _Compaction(batch)
        else:
            self._compactions_waiting.append(batch)

    def _end_compaction(self) -> None:
        """The compaction under way is done or left off: the next one asked for, if any, begins."""
        self._compacting = None
        ended = 1
        if self._closing:
            ended += len(self._compactions_waiting)
            self._compactions_waiting.clear()
        elif self._compactions_waiting:
            self._compacting = _Compaction(self._compactions_waiting.pop(0))
        with self._cond:
            self._compactions -= ended
            self._cond.notify_all()

    def _compact_begin(self, c: _Compaction) -> None:
        """On the writer thread, once everything submitted before the compaction is committed:
        open the new index and set the compaction's thread going (`_compact_run`), unless the
        index searched has too few segments or tools to be worth it."""
        try:
            if self._closing:
                raise _Abandoned
            c.segments, c.deleted, c.started = self.segments, self.deleted, time.monotonic()
            if c.batch.move and self.wanted_path is not None:
                c.path = self.wanted_path
                c.generation = self._disk_generation(c.path)
                c.index = self._ready(self._new_index_at(c.path, c.generation))
            elif (
                c.segments < COMPACT_SEGMENTS or self.tool_count < COMPACT_MIN_TOOLS
            ) and not self._deleted_enough():
                self._end_compaction()
                return
            else:
                c.path, c.generation = self.path, self._generation + 1
                c.index = self._ready(self._new_index(c.generation))
            c.writer = c.index.writer(heap_size=self._heap_size, num_threads=self._threads)
            c.thread = threading.Thread(
                target=self._compact_run, args=(c,), name="search-index-compaction", daemon=True
            )
            c.thread.start()
        except Exception as exc:
            self._leave_compaction(c, exc)

    @property
    def deleted(self) -> int:
        """Documents of deleted or replaced tools that the segments searched still hold (and BM25
        still counts) until Tantivy merges them away: every document has one `f_ro` term, and a
        term's document frequency counts the deleted ones too."""
        searcher = self._index.searcher()
        return searcher.doc_freq("f_ro", "0") + searcher.doc_freq("f_ro", "1") - searcher.num_docs

    @property
    def deleted_share(self) -> float:
        """`deleted` among every document the segments hold (0 for an empty index)."""
        searcher = self._index.searcher()
        held = searcher.doc_freq("f_ro", "0") + searcher.doc_freq("f_ro", "1")
        return (held - searcher.num_docs) / held if held else 0.0

    def _deleted_enough(self) -> bool:
        """Deleted documents are COMPACT_DELETED or more of the index, and COMPACT_DELETED_MIN or more."""
        searcher = self._index.searcher()
        held = searcher.doc_freq("f_ro", "0") + searcher.doc_freq("f_ro", "1")
        deleted = held - searcher.num_docs
        return deleted >= COMPACT_DELETED_MIN and deleted / held >= COMPACT_DELETED

    def _list_tools(self, purpose: str) -> tuple[int, Any]:
        """On the writer thread: the last change submitted, and every tool (`listing`) as of at
        least that change (None when not every upstream has listed yet, or the listing failed,
        which is logged naming `purpose`)."""
        with self._cond:
            seq = self._submitted  # the changes submitted after have the last word on their tools
        try:
            return seq, self.listing()  # type: ignore[misc]  # read after `seq`: it holds every change up to it
        except Exception:
            log.exception("search index: the tools to %s could not be listed", purpose)
            return seq, None

    def _compact_when_deleted(self) -> None:
        """On the writer thread, after a commit: begin a compaction (of `listing`) when deleted
        documents are COMPACT_DELETED or more of the index (and COMPACT_DELETED_MIN or more) and none is under way."""
        if (
            self.listing is None
            or self._compacting is not None
            or self._closing
            or time.monotonic() < self._compact_retry_at
            or not self._deleted_enough()
        ):
            return
        seq, tools = self._list_tools("compact")
        if tools is None:
            return
        with self._cond:
            if self._closing:
                return
            self._compactions += 1
        self._begin_compaction(Batch(upserts=list(tools), compact=True, seq=seq))

    def _compact_run(self, c: _Compaction) -> None:
        """On the compaction's thread: write its tools into the new index (stepping aside for
        searches every 64 tools), then what the changes since it began said of theirs, commit,
        and write the new index's digest log whole. Tantivy's writer makes its caller wait while
        it writes a full segment to disk; over a million tools, with the disk busy, that took up
        to 1.7 s, which a change committed by the same thread would wait too. The writer thread
        meanwhile commits changes to the index searched and leaves the new one alone."""
        try:
            for position, item in enumerate(c.batch.upserts):
                if self._closing:
                    raise _Abandoned
                if position % 64 == 0 and position and self.foreground is not None:
                    self.foreground.pause()
                tool = self._tool(item)
                if (
                    tool.tool_id not in c.touched
                ):  # a change that has its last word on it comes after
                    self._compact_add(c, tool)
            self._compact_touched(c)
            if self._closing:
                raise _Abandoned
            c.writer.commit()
            c.index.reload()
            if c.path is not None:
                c.log_file = open(  # noqa: SIM115 - kept open for appends
                    Path(c.path) / _generation(c.generation) / _DIGEST_LOG, "w", encoding="utf-8"
                )
                c.log_file.writelines(_digest_lines(c.digests))
                c.log_file.flush()
        except BaseException as exc:
            c.error = exc
        finally:
            c.done.set()
            self._queue.put(WAKE)

    def _compact_end(self, c: _Compaction) -> None:
        """On the writer thread, once the compaction's thread is done: write what the changes
        said since its commit (a few tools), commit that, and search the new index in place of
        the old one (`_swap`); or, when it failed, leave it off."""
        try:
            if c.error is not None:
                raise c.error
            self._compact_touched(c, commit=True)
            self._swap(c)
        except Exception as exc:
            self._leave_compaction(c, exc)
            return
        if c.batch.move:
            log.warning(
                "search index %s is free now: the %d tools of the index kept in memory were written to it in %.1f s, "
                "and it is kept on disk from now on",
                self.path,
                len(c.owner),
                time.monotonic() - c.started,
            )
            if self.moved is not None and self.path is not None:
                try:
                    self.moved(self.path)
                except Exception:
                    log.exception("search index: what follows its move to disk failed")
            self._end_compaction()
            return
        log.info(
            "search index compacted: %d tools written again in %.1f s; %d segments before, %d after "
            "(Tantivy merges them further in the background); %d deleted documents before, %d after",
            len(c.owner),
            time.monotonic() - c.started,
            c.segments,
            self.segments,
            c.deleted,
            self.deleted,
        )
        self._end_compaction()

    def _compact_touched(self, c: _Compaction, commit: bool = False) -> None:
        """Write into the new index what the changes said of their tools since the last time;
        with `commit` (after the compaction's own commit), commit that and log their digests."""
        with c.lock:
            touched, c.touched = (
                c.touched,
                {},
            )  # what a change says from here on is written the next time
        lines: list[str] = []
        for tool_id, changed in touched.items():
            if changed is not None:
                self._compact_add(c, changed)
                lines.append(_digest_line(tool_id, changed.namespace, changed.digest))
            elif (namespace := c.owner.pop(tool_id, None)) is not None:
                del c.digests[namespace][tool_id]
                c.writer.delete_documents_by_term("tool_id", tool_id)
                lines.append(_gone_line(tool_id))
        if commit and lines:
            c.writer.commit()
            if c.log_file is not None:
                c.log_file.writelines(lines)
                c.log_file.flush()

    def _compact_add(self, c: _Compaction, tool: IndexedTool) -> None:
        if (
            namespace := c.owner.get(tool.tool_id)
        ) is not None:  # listed again: the last listing stays
            if namespace == tool.namespace and c.digests[namespace][tool.tool_id] == tool.digest:
                # as written already (the compaction read its tools after the change that lists
                # them): written again, its first document would stay there deleted
                return
            del c.digests[namespace][tool.tool_id]
            c.writer.delete_documents_by_term("tool_id", tool.tool_id)
        c.owner[tool.tool_id] = tool.namespace
        c.digests.setdefault(tool.namespace, {})[tool.tool_id] = tool.digest
        self._known(tool.tool_id, tool.key)
        c.writer.add_document(tool.document())

    def _swap(self, c: _Compaction) -> None:
        """Search the compacted index from now on: on disk, the format marker names its
        generation (a reopening before that opens the old one), and the old generation's folder
        is dropped."""
        c.index.reload()
        generation = c.generation
        if c.path is not None:
            self._mark(generation, c.path)
        if self._log_file is not None:
            self._log_file.close()
        gone: list[
            str
        ] = []  # the tools of the old index that the new one does not hold: usually none
        for (
            namespace,
            tools,
        ) in self._digests.items():  # namespace by namespace: small dicts, compared in C
            held = c.digests.get(namespace, {})
            if tools.keys() != held.keys():
                gone.extend(
                    tool_id for tool_id in tools.keys() - held.keys() if tool_id not in c.owner
                )
        old, old_path = self._generation, self.path
        self._index, self._writer, self._digests, self._log_file = (
            c.index,
            c.writer,
            c.digests,
            c.log_file,
        )
        if c.batch.move:  # kept on disk from now on, under the lock taken for it
            self.path, self._lock_file, self.wanted_path, c.lock_file = (
                c.path,
                c.lock_file,
                None,
                None,
            )
        self._log_lines = (
            self.tool_count
        )  # the new log: the digests whole, and the lines since (about as many)
        self._generation = generation
        c.index = c.writer = c.log_file = None
        for tool_id in gone:
            if self._by_key.get(key := tool_key(tool_id)) == tool_id:
                del self._by_key[key]
        self.documents_written += len(c.owner)
        self.commits += 1
        if (
            old_path is not None
        ):  # searches under way keep reading the old files until they are done
            shutil.rmtree(Path(old_path) / _generation(old), ignore_errors=True)
        elif c.path is not None:  # moved to disk: the generation another process left there
            for other in Path(c.path).iterdir():
                if other.is_dir() and other.name != _generation(generation):
                    shutil.rmtree(other, ignore_errors=True)

    def _leave_compaction(self, c: _Compaction, exc: BaseException | None) -> None:
        """The compaction stops where it is; its new index is dropped, the one searched is as it was."""
        if c.thread is not None:
            c.thread.join()
        if c.log_file is not None:
            c.log_file.close()
            c.log_file = None
        if c.writer is not None:
            with contextlib.suppress(Exception):
                c.writer.rollback()
            c.index = c.writer = None
        if c.path is not None and c.generation:
            shutil.rmtree(Path(c.path) / _generation(c.generation), ignore_errors=True)
        if (
            c.lock_file is not None
        ):  # a move left off: the lock is let go, and taken again at the next try
            c.lock_file.close()
            c.lock_file = None
            if exc is not None:
                self._disk_retry_at = time.monotonic() + DISK_RETRY_FAILED
        if exc is not None and not isinstance(exc, _Abandoned):
            log.error(
                "search index compaction left off (%s); the index is kept as it was",
                exc,
                exc_info=exc,
            )
            self._compact_retry_at = time.monotonic() + self.retry_last
        self._end_compaction()

    def _touching(self, seq: int, deletes: list[tuple[str, str]], tools: list[IndexedTool]) -> None:
        if self._compacting is not None and seq > self._compacting.batch.seq:
            # submitted after the compaction's tools were read: the change has the last word
            c = self._compacting
            with c.lock:
                c.touched.update((tid, None) for _, tid in deletes)
                c.touched.update((t.tool_id, t) for t in tools)
