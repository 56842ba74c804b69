"""The tool-search index: a Tantivy index (on disk beside the store, or in memory) of one
document per tool, written by one background thread in batched commits, with a digest per tool
so that an unchanged tool is never written again and a restart reopens instead of rebuilding."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt
else:
    msvcrt = None  # type: ignore[assignment]

from bridge.search.rank import (
    ANALYZER_NAME,
    AnalyzedQuery,
    analyzer,
    cjk_pairs,
    name_words,
    split_identifiers,
)

__all__ = ["Foreground", "IndexedTool", "IndexQuery", "ToolIndex", "FIELD_WEIGHTS", "INDEX_FORMAT", "COMMIT_WINDOW", "exact_names", "name_text",
           "index_released"]

log = logging.getLogger("bridge.search")

# Bump when the schema, the analyzer or the text put in a field changes: an index of another
# format is rebuilt from the catalog instead of being reopened.
INDEX_FORMAT = 9
# Changes arriving within this window share one commit; while more keep arriving (upstreams
# listing at start), the commit waits for them in further windows, up to COMMIT_MAX seconds after
# the first: fewer commits of more changes each, every change still searchable within a second.
COMMIT_WINDOW = 0.05
COMMIT_MAX = 0.5
# A commit that fails (a full disk, an I/O error) is tried again, with the changes arriving
# meanwhile, after these many seconds: doubling from the first to the last, then the last.
RETRY_FIRST = 0.5
RETRY_LAST = 30.0
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
DISK_RETRY_FAILED = 300.0  # after a move that failed (a full disk): each try writes every tool
# the longest a unit of background work (64 tools of a compaction, a batch of embeddings) waits
# for the searches running to end (`Foreground.pause`)
PAUSE_MOST = 0.05
_FORMAT_FILE = "bridge-search.json"  # the format, and which generation of the index is the current one
_DIGEST_LOG = "digests.log"  # in the generation's folder
LOG_SLACK = 10_000  # lines a digest log may hold past twice its tools' before it is written anew


def _generation(number: int) -> str:
    """The folder, inside the index's, of one generation of it: a compaction writes the next."""
    return f"g{number}"


def _digest_line(tool_id: str, namespace: str, digest: int) -> str:
    """A digest log line: the index holds this tool with this digest."""
    return f"{tool_id}\t{namespace}\t{digest:016x}\n"


def _gone_line(tool_id: str) -> str:
    """A digest log line: the index no longer holds this tool."""
    return f"{tool_id}\t-\n"


def _digest_lines(digests: dict[str, dict[str, int]]) -> Iterator[str]:
    """A whole digest log of what `digests` (namespace -> tool_id -> digest) says."""
    return (_digest_line(tool_id, namespace, digest) for namespace, tools in digests.items() for tool_id, digest in tools.items())

# One text field, `all`, holds every text of the tool: its own words (name, title, hint,
# description, parameter names), the name's words `NAME_REPEAT` times, then its namespace, tags
# and parameters' descriptions with each word once (a BM25F-like weighting in one field: the
# tool's own words count more than the wording of its parameters). Tuned on the development set
# (bench/search_quality.py): one weighted field beats a sum of per-field scores by 3 points of
# recall@5; it matches, within 0.2 points, a second field of the own words at half weight, for
# half the indexing work and a query of plain term clauses, which Tantivy answers with block-max
# WAND (the top hits without scoring every match).
FIELD_WEIGHTS: dict[str, float] = {"all": 1.0}
WEIGHTS_KEPT = 65_536  # terms whose `term_weights` are kept
NAME_REPEAT = 2
EXACT_NAME_WEIGHT = 10.0
# A longer query is matched by its rarest words only: they decide the ranking, and every word
# costs a posting list walk (measured on the development set: no loss down to 32).
MAX_QUERY_TERMS = 32
# In a large catalog, a word found in more than COMMON_SHARE of the tools (and in more than
# COMMON_MIN_DOCS of them) is left out of the query, which always keeps its MIN_QUERY_TERMS
# rarest words: its BM25 weight is low, but its long posting list is most of the query's cost (at 1,000,000
# tools: p95 from 12 ms to under 3 ms of CPU, with no loss in finding the development set's
# answers among them). Smaller catalogs, the development set's included, keep every word.
COMMON_SHARE = 0.03
COMMON_MIN_DOCS = 20_000
MIN_QUERY_TERMS = 3
# In a query of at most FUZZY_MAX_TERMS words, a word of letters alone, at least FUZZY_MIN_CHARS
# long (as stemmed), that no tool has is taken for a typing error: it matches the words one edit
# away (a letter added, dropped or changed, or two swapped: `califronia`, `restuarant`), at
# FUZZY_WEIGHT of a word as written; at most FUZZY_MAX_WORDS such words, the longest. A word some
# tool has is never widened, nor one the language knows (search_rank.spelled_words: *monkey*
# found `convert_currency` by *money*). Each widened word walks the index's whole word list:
# widening every query's unknown words cost 1 ms at p95 over a million tools, and in a longer
# request they are mostly names and values (`philadelphia`, `15th`) while its other words find
# its tools. On the development set neither rule changed a ranking.
FUZZY_MAX_TERMS = 4
FUZZY_MIN_CHARS = 6
FUZZY_WEIGHT = 0.5
FUZZY_MAX_WORDS = 2
# Two adjacent words of a query written as one (*zip code*: `zipcode`, *pre heat*: `preheat`;
# bridge.search.rank.AnalyzedQuery.joined) are matched, at this weight, when the catalog uses the
# word (and, in a large catalog, not in more tools than COMMON_SHARE): the catalog's way of writing
# what the request says in two.
JOINED_WEIGHT = 1.0
# A query word's related words (bridge.search.rank.related_words) that more tools use than the
# word itself are matched at this share of its weight. Measured among 0.2, 0.3 and 0.5
# (docs/search.md, *What is indexed*, related words).
RELATED_WEIGHT = 0.3
_TEXT_FIELDS = ("all",)
# Tools asked for by `lookups`: the lookups of a word in one upstream are few (the search asks
# the match's own upstream first).
LOOKUP_LIMIT = 50
# Tools scoring alike stand in the order of their keys (`tool_key`), not in the order they came
# into the index (which follows the order the upstreams' listings arrived in, until a compaction
# rewrites it): a search reads TIE_MARGIN hits past those it answers and orders them all. A tie
# running on past those is cut among the ones read. Reading and ordering 64 more of a million
# tools' hits costs about 0.1 ms a search; asking the index again for more while the last still
# tied cost 1 ms at the 95th percentile (half the synthetic million's requests tied past 16).
TIE_MARGIN = 64
# A place a tool changes (search_rank.changes_current) is kept in the lookups' field as this prefix
# and its noun: no word of a name holds a space, so the two never meet.
CHANGES_PREFIX = "current "


@dataclass
class IndexedTool:
    """What the index holds of one tool: the text of each field and the filter values."""

    tool_id: str
    namespace: str
    name: str
    exact_names: list[str]
    title: str = ""
    description: str = ""
    shared: str = ""  # description text shared by many tools of the namespace (search_rank.SharedText)
    hint: str = ""
    tags: list[str] = field(default_factory=list)
    params: str = ""
    param_text: str = ""
    kind: str = "function"
    read_only: bool = False
    looks_up: list[str] = field(default_factory=list)  # what the tool looks up by name (search_rank.looked_up)
    changes: list[str] = field(default_factory=list)  # the current places it changes (search_rank.changes_current)
    _digest: int | None = field(default=None, repr=False, compare=False)
    _key: int | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> int:
        """The tool id's key (`tool_key`), computed once: the index maps it and the document holds it."""
        if self._key is None:
            self._key = tool_key(self.tool_id)
        return self._key

    @property
    def digest(self) -> int:
        """64-bit digest of everything indexed: equal digests, equal documents."""
        if self._digest is None:
            parts = [str(INDEX_FORMAT), self.namespace, self.name, "\x1e".join(self.exact_names), self.title,
                     self.description, self.shared, self.hint, "\x1e".join(self.tags), self.params, self.param_text, self.kind,
                     "1" if self.read_only else "0", "\x1e".join(self.looks_up), "\x1e".join(self.changes)]
            raw = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
            self._digest = int.from_bytes(raw, "big")
        return self._digest

    def document(self) -> tantivy.Document:
        # names and parameter names arrive split into words; only free text needs camelCase split
        own = cjk_pairs(" ".join([*[self.name] * NAME_REPEAT, split_identifiers(f"{self.title} {self.hint} {self.description}"),
                                  self.params]))
        extra = cjk_pairs(split_identifiers(" ".join([self.shared, self.namespace, *self.tags, self.param_text]))).lower().split()
        doc = tantivy.Document()  # add_text: twice as fast as keyword arguments
        doc.add_text("tool_id", self.tool_id)
        doc.add_unsigned("key", self.key)
        for exact in self.exact_names:
            doc.add_text("exact", exact)
        doc.add_text("all", " ".join([own, *dict.fromkeys(extra)]))
        doc.add_text("f_ns", self.namespace)
        for tag in self.tags:
            doc.add_text("f_tag", tag)
        doc.add_text("f_kind", self.kind)
        doc.add_text("f_ro", "1" if self.read_only else "0")
        for word in self.looks_up:
            doc.add_text("f_lookup", word)
        for noun in self.changes:
            doc.add_text("f_lookup", CHANGES_PREFIX + noun)
        return doc


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("tool_id", stored=True, tokenizer_name="raw", index_option="basic")
    # the tool id's hash, read for a batch of hits without fetching their stored documents
    builder.add_unsigned_field("key", fast=True)
    builder.add_text_field("exact", tokenizer_name="raw", index_option="basic")
    for name in _TEXT_FIELDS:
        builder.add_text_field(name, tokenizer_name=ANALYZER_NAME, index_option="freq")
    for name in ("f_ns", "f_tag", "f_kind", "f_ro", "f_lookup"):
        builder.add_text_field(name, tokenizer_name="raw", index_option="basic")
    return builder.build()


Converter = Callable[[Any], IndexedTool]


def tool_key(tool_id: str) -> int:
    """A tool id's 64-bit key (the index's fast field `key`): a search reads its hits' keys in
    one batch and maps them to tool ids in memory, instead of fetching each hit's stored
    document (about 3 µs each at a million tools)."""
    return int.from_bytes(hashlib.blake2b(tool_id.encode(), digest_size=8).digest(), "big")


@dataclass
class _Batch:
    """One submission. `upserts` are IndexedTools or items the index's converter turns into
    them (on the writer thread, so a listing of 100,000 tools does not stall the caller)."""

    upserts: Sequence[Any] = ()
    deletes: Sequence[tuple[str, str]] = ()  # (namespace, tool_id)
    reconcile: str | None = None  # namespace whose tools not in `upserts` are dropped
    keep_namespaces: frozenset[str] | None = None  # namespaces not in it are dropped
    # run on the writer thread first; a (namespace, items) answer makes the batch a reconcile
    # of that namespace with those items
    prepare: Callable[[], tuple[str, Sequence[Any]] | None] | None = None
    seq: int = 0
    submitted: float = 0.0  # time.monotonic() when it was submitted: its commit begins COMMIT_MAX after at the latest
    compact: bool = False  # `upserts` are every tool the index holds (`ToolIndex.compact`)
    move: bool = False  # with `compact`: written into the on-disk index whose lock was free (`_try_disk`)


class _Abandoned(Exception):
    """A compaction left off because the index is closing."""


_WAKE = _Batch()  # queued when a compaction's thread is done: the writer thread ends the compaction


@dataclass
class _Compaction:
    """A compaction under way (`ToolIndex.compact`): its tools are written into a new index, and
    committed, on a thread of its own (`_compact_run`), while the writer thread commits the
    changes that arrive meanwhile. What a change submitted after it says of a tool (`touched`:
    the tool, or None when deleted) has the last word in the new index."""

    batch: _Batch
    path: str | None = None  # of the new index's folder (None: in memory)
    generation: int = 0  # the new index's
    lock_file: Any = None  # held for the on-disk index a move writes (`_try_disk`), until it is searched
    segments: int = -1  # of the index searched, when it began (-1: not begun)
    deleted: int = 0  # documents of deleted tools in the index searched, when it began
    started: float = 0.0
    index: Any = None  # the new index (the next generation)
    writer: Any = None
    digests: dict[str, dict[str, int]] = field(default_factory=dict)  # the new index's, by namespace
    owner: dict[str, str] = field(default_factory=dict)  # tool_id -> namespace, in the new index
    touched: dict[str, IndexedTool | None] = field(default_factory=dict)  # `lock` held to change it
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None  # writing its tools, then committing them
    done: threading.Event = field(default_factory=threading.Event)  # set when that thread is done, failed or not
    error: BaseException | None = None
    log_file: Any = None


def _emptied(folder: Path) -> None:
    """`folder` made, empty: what it held is removed."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def _index_error(exc: BaseException) -> bool:
    """Whether `exc` is what opening or writing an on-disk index raises when its files cannot be
    used: an OSError, Tantivy's ValueError, or a panic of Tantivy's (pyo3's PanicException, which
    is no Exception: a truncated segment file panics as the index is opened)."""
    return isinstance(exc, (OSError, ValueError)) or type(exc).__name__ == "PanicException"


def _error_text(exc: BaseException) -> str:
    """One line of an opening's error, for a warning."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _take_lock(path: str, note: bool = True) -> Any:
    """An exclusive lock on `<index>.lock` beside the index folder, held by the open file this
    returns (None when another process holds it). One process writes an index; Tantivy would
    refuse a second writer anyway, but only after this one had touched the folder. With `note`,
    the file then names this process, for the warning of one that cannot take it."""
    lock_path = Path(path).with_name(Path(path).name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path, "a+b")  # noqa: SIM115 - held open as the lock
    try:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        elif msvcrt is not None:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
    except OSError:
        handle.close()
        return None
    if not note:
        return handle
    with contextlib.suppress(OSError):  # who holds it, for the warning of a process that cannot
        handle.seek(0)
        handle.truncate()
        command = " ".join([os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]])
        handle.write(f"{os.getpid()} {command}"[:300].encode())
        handle.flush()
    return handle


async def index_released(path: str, timeout: float, poll: float = 0.1) -> bool:
    """Wait, without blocking the event loop, until no other process holds the on-disk index's
    lock (`<index>.lock`), at most `timeout` seconds; True when none holds it now. `bridge serve`
    waits so before it opens the index: a `bridge search` (or `tools`, `check`, `call`) holding
    the lock for the few seconds it runs would otherwise leave the server's index in memory,
    built again, until the server moves it to disk (`DISK_RETRY`). Said with a warning when it has to wait."""
    started = time.monotonic()
    waiting = False
    while True:
        try:
            handle = _take_lock(path, note=False)
        except OSError:  # a folder that cannot be made: said by the index's opening, not here
            return True
        if handle is not None:
            handle.close()  # taken again by the index (`ToolIndex`) right after
            if waiting:
                log.warning("search index %s is free after %.1f s; it is kept on disk", path, time.monotonic() - started)
            return True
        if time.monotonic() - started >= timeout:
            log.warning("search index %s is still in use by %s after %.0f s (search.lock_wait)", path, _lock_holder(path), timeout)
            return False
        if not waiting:
            waiting = True
            log.warning("search index %s is in use by %s; waiting up to %.0f s for it (search.lock_wait)", path,
                        _lock_holder(path), timeout)
        await asyncio.sleep(poll)


def _lock_holder(path: str) -> str:
    """What the lock file says of the process holding it: `pid command`, or nothing."""
    with contextlib.suppress(OSError):
        text = Path(path).with_name(Path(path).name + ".lock").read_text(errors="replace").strip()
        if text:
            return f"process {text.split(' ', 1)[0]} (`{text.split(' ', 1)[1].strip()}`)" if " " in text else f"process {text}"
    return "another process"


class Foreground:
    """The searches running now, and the background work that steps aside for them.

    A compaction (every tool converted and written again) and the semantic stage's embeddings
    are Python work: they hold the interpreter's lock as a search does. A search that shares it
    with them gives it up at each call into numpy or Tantivy and waits for a switch interval to
    have it back; right after a 100,000-tool catalog became searchable, searches took 21 to 27 ms
    (p50) while both ran, against 2 ms once they were done. Before each unit of its work, such
    a thread calls `pause()`: it waits while a search runs, at most `most` seconds, so a steady
    stream of searches slows it down but never stops it."""

    def __init__(self, most: float = PAUSE_MOST) -> None:
        self.most = most
        self._running = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around a search."""
        with self._cond:
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self._cond.notify_all()

    def pause(self) -> bool:
        """Wait while a search runs, at most `most` seconds; True when none runs now."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, self.most)


class ToolIndex:
    """The Tantivy index and its writer thread.

    `submit()` hands over changes and returns at once; the writer thread gathers what arrives
    within `COMMIT_WINDOW`, skips tools whose digest is unchanged, commits once and makes the
    result searchable. Only that thread writes the index and the digests. On disk, a digest log
    beside the index records what each commit holds, so a reopened index knows its content.
    """

    def __init__(self, path: str | None = None, *, convert: Converter | None = None, heap_size: int = 64_000_000,
                 threads: int = 1, foreground: Foreground | None = None,
                 listing: Callable[[], Sequence[Any] | None] | None = None,
                 moved: Callable[[str], None] | None = None) -> None:
        self.moved = moved  # told the path, on the writer thread, once an index kept in memory moved to disk
        # why the on-disk index at `path` cannot be used (kept in memory instead, for the process's life)
        self.unusable: str | None = None
        self._lock_file: Any = None
        if path is not None:
            try:
                self._lock_file = _take_lock(path)
            except OSError as exc:  # `<index>.lock` cannot be opened: a read-only or full disk, a folder in its place
                self._kept_in_memory(path, exc)
                path = None
        # the on-disk index this one, kept in memory, moves to once no other process holds its lock
        self.wanted_path: str | None = None
        self._disk_retry_at = time.monotonic() + DISK_RETRY
        if path is not None and self._lock_file is None:
            log.warning("search index %s is in use by %s; this process keeps its own index in memory, and moves it "
                        "to disk once the other process has ended (looking every %.0f s)", path, _lock_holder(path), DISK_RETRY)
            self.wanted_path, path = path, None
        self.path = path
        self.schema = _schema()
        self.convert = convert
        self.foreground = foreground  # a compaction steps aside for its searches
        # every tool the index is to hold, as `compact` takes them (None: not known yet), read on the
        # writer thread when deleted documents are COMPACT_DELETED of the index; None: never compacted for that
        self.listing = listing
        self._compact_retry_at = 0.0  # after a compaction failed, none is begun for deleted documents before then
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
        self._queue: queue.Queue[_Batch | None] = queue.Queue()
        self._cond = threading.Condition()
        self._submitted = 0
        self._committed = 0
        self._closed = False
        self._closing = False  # set first by `close`: a compaction under way leaves off
        self._compactions = 0  # queued or under way
        self._compacting: _Compaction | None = None  # under way, on the writer thread
        self._compactions_waiting: list[_Batch] = []  # asked for while one was under way
        self.retry_first, self.retry_last = RETRY_FIRST, RETRY_LAST
        self.failing = False  # the last commit failed; its changes wait for the next try
        self._thread = threading.Thread(target=self._run, name="search-index-writer", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- opening

    def _open_index(self, path: str | None) -> None:
        """Open the index, its writer and (on disk) its digests. A generation reopened that then
        cannot be read (its digest log, say) is rebuilt; an on-disk index that cannot be opened
        or built at all (a read-only or full disk) is kept in memory instead (`_kept_in_memory`)."""
        fresh = False
        while True:
            try:
                self._index = self._ready(self._open(path, fresh))
                self._writer = self._index.writer(heap_size=self._heap_size, num_threads=self._threads)
                if path is not None:
                    self._load_digests()
                return
            except BaseException as exc:
                if path is None or not _index_error(exc):
                    raise
                reopened, generation = self.opened_existing, self._generation
                self._opened_nothing()
                if reopened and not fresh:  # that generation is damaged: the catalog writes it again
                    log.warning("search index at %s cannot be reopened (%s); rebuilding it", Path(path) / _generation(generation),
                                _error_text(exc))
                    fresh = True
                    continue
                self._kept_in_memory(path, exc)
                path = self.path = None

    def _opened_nothing(self) -> None:
        """Forget what an opening that failed had read, before another."""
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
        self._log_file, self._log_lines = None, 0
        self._index = self._writer = None
        self._digests, self._by_key = {}, {}
        self.opened_existing, self._generation = False, 0

    def _kept_in_memory(self, path: str, exc: BaseException) -> None:
        """The on-disk index at `path` cannot be used: said once, with the fix, and this process
        keeps its index in memory (as when another process holds it, but for its whole life)."""
        self.unusable = _error_text(exc)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        log.warning("search index %s cannot be used (%s); this process keeps its index in memory, built again at each start. "
                    "To keep it on disk, set search.path to a folder this process can create and write (left out, it is "
                    "store.path with the suffix .index), or set search.persist: false to keep it in memory without this "
                    "warning", path, self.unusable)

    def _open(self, path: str | None, fresh: bool = False) -> tantivy.Index:
        """The index at `path` (None: in memory): reopened when of this format and whole, else
        (or with `fresh`) built anew in a folder emptied for it."""
        if path is None:
            return tantivy.Index(self.schema)
        folder = Path(path)
        marker = folder / _FORMAT_FILE
        if marker.exists() and not fresh:
            try:
                same, generation = self._marked(folder)
                current = folder / _generation(generation) if isinstance(generation, int) else None
                if same and current is not None and tantivy.Index.exists(str(current)):
                    index = tantivy.Index.open(str(current))
                    self.opened_existing, self._generation = True, generation
                    for other in folder.iterdir():  # a compaction's, left off or replaced by it
                        if other.is_dir() and other.name != current.name:
                            shutil.rmtree(other, ignore_errors=True)
                    return index
                if not same:  # written by another version of the bridge: expected once
                    log.info("search index at %s is of another format; rebuilding it", folder)
                else:
                    log.warning("search index at %s names no index it holds (generation %r); rebuilding it", folder, generation)
            except BaseException as exc:
                if not _index_error(exc):
                    raise
                self.opened_existing = False
                log.warning("search index at %s cannot be reopened (%s); rebuilding it", folder, _error_text(exc))
        _emptied(folder)
        self._generation = 1
        index = self._new_index(1)
        self._mark(1)
        return index

    @staticmethod
    def _format() -> dict[str, Any]:
        return {"format": INDEX_FORMAT, "tantivy": tantivy.__version__}

    def _marked(self, folder: Path) -> tuple[bool, Any]:
        """Whether the marker of the index in `folder` names this format, and the generation it
        names (an int, or whatever was written). ValueError or OSError when it cannot be read."""
        found = json.loads((folder / _FORMAT_FILE).read_text())
        generation = found.pop("generation", None) if isinstance(found, dict) else None
        return found == self._format(), generation

    def _new_index(self, generation: int) -> tantivy.Index:
        """An empty index: in memory, or in the folder of that generation."""
        return self._new_index_at(self.path, generation)

    def _new_index_at(self, path: str | None, generation: int) -> tantivy.Index:
        """An empty index: in memory (no `path`), or in the folder of that generation in `path`."""
        if path is None:
            return tantivy.Index(self.schema)
        folder = Path(path) / _generation(generation)
        _emptied(folder)
        return tantivy.Index(self.schema, path=str(folder), reuse=False)

    def _mark(self, generation: int, path: str | None = None) -> None:
        """Record the format and the current generation: a reopening opens that one."""
        path = path or self.path
        assert path is not None
        marker = Path(path) / _FORMAT_FILE
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self._format(), "generation": generation}))
        os.replace(tmp, marker)

    @staticmethod
    def _ready(index: tantivy.Index) -> tantivy.Index:
        index.register_tokenizer(ANALYZER_NAME, analyzer())
        # Each commit is made searchable at once by reloading after it (`flush` waits for that);
        # the reader also reloads by itself when the index changes without a commit of ours: a
        # merge of segments, run in the background after a commit, is searched as soon as it is
        # done, not only from the next commit on (each segment costs every query word a lookup).
        index.config_reader(reload_policy="OnCommit")
        return index

    def _log_path(self, generation: int) -> Path:
        assert self.path is not None
        return Path(self.path) / _generation(generation) / _DIGEST_LOG

    def _load_digests(self) -> None:
        """Replay the digest log. A log that disagrees with the index (a crash between a commit
        and its log lines) empties the index: every tool is then written again."""
        log_path = self._log_path(self._generation)
        owner: dict[str, str] = {}  # tool_id -> namespace, while replaying
        lines = 0
        unreadable = 0  # lines no writer wrote: a torn last line (a crash or a full disk), bytes that are no text
        if self.opened_existing and log_path.exists():
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    lines += 1
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) == 3:
                        tool_id, namespace, digest = parts
                        try:
                            value = int(digest, 16)
                        except ValueError:
                            unreadable += 1
                            continue
                        previous = owner.get(tool_id)
                        if previous is not None and previous != namespace:
                            self._digests[previous].pop(tool_id, None)
                        owner[tool_id] = namespace
                        self._digests.setdefault(namespace, {})[tool_id] = value
                    elif len(parts) == 2 and (namespace := owner.pop(parts[0], None)) is not None:
                        self._digests[namespace].pop(parts[0], None)
                    elif len(parts) != 2:
                        unreadable += 1
        if self.opened_existing and (unreadable or self._index.searcher().num_docs != self.tool_count):
            log.warning("search index and its digest log disagree%s; the index is written again",
                        f" ({unreadable} unreadable line{'s' if unreadable > 1 else ''} in {log_path})" if unreadable else "")
            self._writer.delete_all_documents()
            self._writer.commit()
            self._index.reload()
            self._digests, lines = {}, 0
            self.opened_existing = False
        for tools in self._digests.values():
            for tool_id in tools:
                self._known(tool_id, tool_key(tool_id))
        self._log_lines = lines
        if self._log_outgrown() or not log_path.exists():
            self._rewrite_log(log_path)
        self._log_file = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends

    def _log_outgrown(self) -> bool:
        return self._log_lines > 2 * self.tool_count + LOG_SLACK

    def _rewrite_log(self, log_path: Path) -> None:
        """The digest log written anew from the digests held (a line a tool), in place of the old
        one at once: a crash leaves either whole."""
        tmp = log_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(_digest_lines(self._digests))
        os.replace(tmp, log_path)
        self._log_lines = self.tool_count

    def _append_log(self, lines: list[str]) -> None:
        """Log the lines of a commit (writer thread). A long-running bridge whose tools keep
        changing added a line a change for its whole life; once the log holds more than twice its
        tools' lines (and 10,000 more), it is written anew."""
        if self._log_file is None:
            return
        self._log_file.writelines(lines)
        self._log_file.flush()
        self._log_lines += len(lines)
        if self._log_outgrown():
            self._log_file.close()
            path = Path(self._log_file.name)
            self._rewrite_log(path)
            self._log_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends

    def _known(self, tool_id: str, key: int) -> None:
        """Map the tool's key to its id (before its document is searchable; a deleted tool's key
        is dropped before its deletion is, and a hit whose key is not mapped reads the stored id)."""
        if self._by_key.setdefault(key, tool_id) != tool_id:
            self._by_key[key] = None  # two ids, one key: their hits read the stored id

    @property
    def tool_count(self) -> int:
        """Tools the index holds (as of the last commit the writer thread made)."""
        return sum(len(tools) for tools in list(self._digests.values()))

    # ---------------------------------------------------------------- writing

    def submit(self, upserts: Sequence[Any] = (), deletes: Sequence[tuple[str, str]] = (), *,
               reconcile: str | None = None, keep_namespaces: Iterable[str] | None = None,
               prepare: Callable[[], tuple[str, Sequence[Any]] | None] | None = None) -> int:
        """Queue changes and return a ticket for `flush`. `upserts` are IndexedTools (or items
        for the converter); `deletes` are (namespace, tool_id) pairs; with `reconcile`, the
        namespace's indexed tools missing from `upserts` are deleted; with `keep_namespaces`,
        every tool of another namespace is. `prepare` runs on the writer thread before the
        batch; when it answers (namespace, items), those items reconcile that namespace instead
        of `upserts`."""
        batch = _Batch(upserts=list(upserts), deletes=list(deletes), reconcile=reconcile,
                       keep_namespaces=frozenset(keep_namespaces) if keep_namespaces is not None else None,
                       prepare=prepare, submitted=time.monotonic())
        with self._cond:
            if self._closed:
                raise RuntimeError("search index is closed")
            self._submitted += 1
            batch.seq = self._submitted
        self._queue.put(batch)
        return batch.seq

    def flush(self, timeout: float | None = 10.0, ticket: int | None = None, *, behind: int = 0) -> bool:
        """Wait until everything submitted (or up to `ticket`, or all but the last `behind`
        batches) is committed and searchable."""
        with self._cond:
            target = self._submitted - behind if ticket is None else ticket
            return self._cond.wait_for(lambda: self._committed >= target or self._closed, timeout)

    @property
    def pending(self) -> bool:
        return self._committed < self._submitted

    def compact(self, tools: Sequence[Any]) -> None:
        """Write `tools` (every tool the index is to hold, as `submit` takes them) again into a
        new index, searched in place of this one once written, when the writer thread comes to
        it and a search then reads COMPACT_SEGMENTS or more segments of at least
        COMPACT_MIN_TOOLS tools (otherwise nothing is done). The changes submitted before are
        written first; the new index is written on a thread of its own. Those submitted after are
        committed as they come, and have the last word on their tools in the new index. `flush`
        does not wait for it (`compacted` does); `close` leaves it off, and the index is as it was."""
        batch = _Batch(upserts=list(tools), compact=True)
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

    def _gather(self, batches: list[_Batch], window: float) -> bool:
        """Add to `batches` what is submitted within `window` seconds, and what was submitted
        before and is still queued (a compaction is set going instead); False when the index is
        closing (nothing more comes)."""
        deadline = time.monotonic() + window
        while True:
            remaining = deadline - time.monotonic()
            try:  # past the window, what is queued already is taken without waiting
                more = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                return True
            if more is None:
                return False
            if more.compact:
                self._begin_compaction(more)
            elif more is not _WAKE:
                batches.append(more)

    def _next_batch(self) -> _Batch | None:
        """The next batch queued. While the index is kept in memory in place of an on-disk one
        (`wanted_path`), it looks whether that one's lock is free at most every DISK_RETRY
        seconds, between batches or while none comes; _WAKE when it begins to move there."""
        while self.wanted_path is not None and self._compacting is None and not self._closing:
            wait = self._disk_retry_at - time.monotonic()
            if wait <= 0:
                if self._try_disk():
                    return _WAKE
                continue
            try:
                return self._queue.get(timeout=wait)
            except queue.Empty:
                continue
        return self._queue.get()

    def _try_disk(self) -> bool:
        """On the writer thread, while the index is kept in memory: when no other process holds
        the on-disk index's lock any more, take it and begin writing every tool (`listing`) into
        that index as a compaction does (`_compact_begin`); it is searched in place of this one
        once written, and the changes arriving meanwhile are written into both. True when begun."""
        self._disk_retry_at = time.monotonic() + DISK_RETRY
        if self.listing is None or self.wanted_path is None:
            return False
        try:
            handle = _take_lock(self.wanted_path)
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
        self._compacting = _Compaction(_Batch(upserts=list(tools), compact=True, move=True, seq=seq), lock_file=handle)
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

    def _run(self) -> None:
        while True:
            c = self._compacting
            if c is not None and c.done.is_set():
                self._compact_end(c)
                continue
            if c is None or c.thread is not None:
                batch = self._next_batch()  # a compaction's thread queues _WAKE when it is done
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
            if batch is _WAKE:
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
                going = self._gather(batches, min(COMMIT_WINDOW, first + COMMIT_MAX - time.monotonic()))
                if len(batches) == gathered:
                    break  # a quiet window: commit what came
            delay = self.retry_first
            while not self._write(batches) and going:
                # nothing of `batches` is lost: tried again with what arrives meanwhile
                self.failing = True
                log.warning("search index commit failed; %d change batches are tried again in %.1f s",
                            len(batches), delay)
                going = self._gather(batches, delay)
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

    # ---------------------------------------------------------------- compaction

    def _begin_compaction(self, batch: _Batch) -> None:
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
            if c.batch.move:
                c.path = self.wanted_path
                c.generation = self._disk_generation(c.path)
                c.index = self._ready(self._new_index_at(c.path, c.generation))
            elif (c.segments < COMPACT_SEGMENTS or self.tool_count < COMPACT_MIN_TOOLS) and not self._deleted_enough():
                self._end_compaction()
                return
            else:
                c.path, c.generation = self.path, self._generation + 1
                c.index = self._ready(self._new_index(c.generation))
            c.writer = c.index.writer(heap_size=self._heap_size, num_threads=self._threads)
            c.thread = threading.Thread(target=self._compact_run, args=(c,), name="search-index-compaction", daemon=True)
            c.thread.start()
        except Exception as exc:  # noqa: BLE001 - the writer thread must survive; the index searched is as it was
            self._leave_compaction(c, exc)

    def _held(self, searcher: tantivy.Searcher) -> tuple[int, int, int]:
        """What tells one state of the index from another for what is read of it: its tools, the
        documents its segments hold (deleted ones too: fewer after a merge), and our commits."""
        return searcher.num_docs, searcher.doc_freq("f_ro", "0") + searcher.doc_freq("f_ro", "1"), self.commits

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
        except Exception:  # noqa: BLE001 - the writer thread must survive; the index searched is as it was
            log.exception("search index: the tools to %s could not be listed", purpose)
            return seq, None

    def _compact_when_deleted(self) -> None:
        """On the writer thread, after a commit: begin a compaction (of `listing`) when deleted
        documents are COMPACT_DELETED or more of the index (and COMPACT_DELETED_MIN or more) and none is under way."""
        if (self.listing is None or self._compacting is not None or self._closing or time.monotonic() < self._compact_retry_at
                or not self._deleted_enough()):
            return
        seq, tools = self._list_tools("compact")
        if tools is None:
            return
        with self._cond:
            if self._closing:
                return
            self._compactions += 1
        self._begin_compaction(_Batch(upserts=list(tools), compact=True, seq=seq))

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
                if tool.tool_id not in c.touched:  # a change that has its last word on it comes after
                    self._compact_add(c, tool)
            self._compact_touched(c)
            if self._closing:
                raise _Abandoned
            c.writer.commit()
            c.index.reload()
            if c.path is not None:
                c.log_file = open(Path(c.path) / _generation(c.generation) / _DIGEST_LOG, "w", encoding="utf-8")  # noqa: SIM115 - kept open for appends
                c.log_file.writelines(_digest_lines(c.digests))
                c.log_file.flush()
        except BaseException as exc:  # noqa: BLE001 - handed to the writer thread, which leaves the compaction off
            c.error = exc
        finally:
            c.done.set()
            self._queue.put(_WAKE)

    def _compact_end(self, c: _Compaction) -> None:
        """On the writer thread, once the compaction's thread is done: write what the changes
        said since its commit (a few tools), commit that, and search the new index in place of
        the old one (`_swap`); or, when it failed, leave it off."""
        try:
            if c.error is not None:
                raise c.error
            self._compact_touched(c, commit=True)
            self._swap(c)
        except Exception as exc:  # noqa: BLE001 - the writer thread must survive; the index searched is as it was
            self._leave_compaction(c, exc)
            return
        if c.batch.move:
            log.warning("search index %s is free now: the %d tools of the index kept in memory were written to it in %.1f s, "
                        "and it is kept on disk from now on", self.path, len(c.owner), time.monotonic() - c.started)
            if self.moved is not None and self.path is not None:
                try:
                    self.moved(self.path)
                except Exception:  # noqa: BLE001 - the writer thread must survive
                    log.exception("search index: what follows its move to disk failed")
            self._end_compaction()
            return
        log.info("search index compacted: %d tools written again in %.1f s; %d segments before, %d after "
                 "(Tantivy merges them further in the background); %d deleted documents before, %d after", len(c.owner),
                 time.monotonic() - c.started, c.segments, self.segments, c.deleted, self.deleted)
        self._end_compaction()

    def _compact_touched(self, c: _Compaction, commit: bool = False) -> None:
        """Write into the new index what the changes said of their tools since the last time;
        with `commit` (after the compaction's own commit), commit that and log their digests."""
        with c.lock:
            touched, c.touched = c.touched, {}  # what a change says from here on is written the next time
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
        if (namespace := c.owner.get(tool.tool_id)) is not None:  # listed again: the last listing stays
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
        gone: list[str] = []  # the tools of the old index that the new one does not hold: usually none
        for namespace, tools in self._digests.items():  # namespace by namespace: small dicts, compared in C
            held = c.digests.get(namespace, {})
            if tools.keys() != held.keys():
                gone.extend(tool_id for tool_id in tools.keys() - held.keys() if tool_id not in c.owner)
        old, old_path = self._generation, self.path
        self._index, self._writer, self._digests, self._log_file = c.index, c.writer, c.digests, c.log_file
        if c.batch.move:  # kept on disk from now on, under the lock taken for it
            self.path, self._lock_file, self.wanted_path, c.lock_file = c.path, c.lock_file, None, None
        self._log_lines = self.tool_count  # the new log: the digests whole, and the lines since (about as many)
        self._generation = generation
        c.index = c.writer = c.log_file = None
        for tool_id in gone:
            if self._by_key.get(key := tool_key(tool_id)) == tool_id:
                del self._by_key[key]
        self.documents_written += len(c.owner)
        self.commits += 1
        if old_path is not None:  # searches under way keep reading the old files until they are done
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
        if c.lock_file is not None:  # a move left off: the lock is let go, and taken again at the next try
            c.lock_file.close()
            c.lock_file = None
            if exc is not None:
                self._disk_retry_at = time.monotonic() + DISK_RETRY_FAILED
        if exc is not None and not isinstance(exc, _Abandoned):
            log.error("search index compaction left off (%s); the index is kept as it was", exc, exc_info=exc)
            self._compact_retry_at = time.monotonic() + self.retry_last
        self._end_compaction()

    def _tool(self, item: Any) -> IndexedTool:
        if isinstance(item, IndexedTool):
            return item
        if self.convert is None:
            raise TypeError(f"no converter for {type(item).__name__}")
        return self.convert(item)

    def _write(self, batches: list[_Batch]) -> bool:
        """Apply `batches` in one commit. False when the commit failed: the index and the
        digests are then as before, and the batches can be written again."""
        lines: list[str] = []
        written = 0  # documents added
        before: list[tuple[str, str, int | None]] = []  # (namespace, tool_id, digest before), to undo
        writer = self._writer
        committing = False
        try:
            for batch in batches:
                if batch.prepare is not None:
                    expanded = batch.prepare()
                    if expanded is not None:
                        batch.reconcile, batch.upserts = expanded
                deletes = list(batch.deletes)
                if batch.keep_namespaces is not None:
                    deletes += [(ns, tid) for ns, tools in self._digests.items() if ns not in batch.keep_namespaces
                                for tid in tools]
                tools = [self._tool(item) for item in batch.upserts]
                if batch.reconcile is not None:
                    listed = {t.tool_id for t in tools}
                    known = self._digests.get(batch.reconcile, {})
                    deletes += [(batch.reconcile, tid) for tid in known if tid not in listed]
                if self._compacting is not None and batch.seq > self._compacting.batch.seq:
                    # submitted after the compaction's tools were read: the change has the last word
                    c = self._compacting
                    with c.lock:
                        c.touched.update((tid, None) for _, tid in deletes)
                        c.touched.update((t.tool_id, t) for t in tools)
                for namespace, tool_id in deletes:
                    if (gone := self._digests.get(namespace, {}).pop(tool_id, None)) is not None:
                        before.append((namespace, tool_id, gone))
                        writer.delete_documents_by_term("tool_id", tool_id)
                        if self._by_key.get(key := tool_key(tool_id)) == tool_id:
                            del self._by_key[key]  # until then, a hit on it reads the stored id
                        lines.append(_gone_line(tool_id))
                for tool in tools:
                    digests = self._digests.setdefault(tool.namespace, {})
                    if (previous := digests.get(tool.tool_id)) == tool.digest:
                        continue
                    before.append((tool.namespace, tool.tool_id, previous))
                    digests[tool.tool_id] = tool.digest
                    written += 1
                    if previous is not None or tool.key in self._by_key:
                        # a delete then an add in one commit: the add survives the delete (opstamps);
                        # a tool the index does not hold (its key unknown) has nothing to delete
                        writer.delete_documents_by_term("tool_id", tool.tool_id)
                    self._known(tool.tool_id, tool.key)
                    writer.add_document(tool.document())
                    lines.append(_digest_line(tool.tool_id, tool.namespace, tool.digest))
            if not lines:
                return True
            committing = True
            writer.commit()
            self._index.reload()
            self._append_log(lines)
            self.documents_written += written
            self.commits += 1
            return True
        except Exception:  # noqa: BLE001 - the writer thread must survive a failed commit
            with contextlib.suppress(Exception):
                writer.rollback()
            for namespace, tool_id, digest in reversed(before):
                if digest is None:
                    self._digests.get(namespace, {}).pop(tool_id, None)
                else:
                    self._digests.setdefault(namespace, {})[tool_id] = digest
                    self._known(tool_id, tool_key(tool_id))
            if committing:
                log.exception("search index commit failed")
                return False
            # a change that cannot be read into a document: trying it again would fail again
            log.exception("search index change could not be applied; the tools concerned are written again on their next change")
            return True

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
            self._closing = True  # a compaction under way leaves off: the changes after it are written
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

    # ---------------------------------------------------------------- reading

    @property
    def num_docs(self) -> int:
        return self._index.searcher().num_docs

    def term_weights(self, terms: Iterable[str]) -> dict[str, float]:
        """Each term's inverse document frequency over the tools' text, `log(1 + N / (df + 1))`:
        how much a word tells a tool from the others. Kept until the index changes (up to
        WEIGHTS_KEPT terms): the same titles' words are asked again and again. Kept by the count
        of tools alone, they outlived a change of a tool's words, a merge of segments or a
        compaction, none of which changes it."""
        searcher = self._index.searcher()
        count = searcher.num_docs
        held = self._held(searcher)
        kept_held, kept = self._weights
        if kept_held != held or len(kept) > WEIGHTS_KEPT:
            kept = {}
            self._weights = (held, kept)  # a search in another thread may fill the old one meanwhile
        out = {}
        for term in terms:
            weight = kept.get(term)
            if weight is None:
                weight = kept[term] = math.log(1.0 + count / (searcher.doc_freq("all", term) + 1))
            out[term] = weight
        return out

    @property
    def segments(self) -> int:
        """How many segments a search reads now (fewer as the background merges are done)."""
        return self._index.searcher().num_segments

    def query(
        self,
        analyzed: AnalyzedQuery | None,
        *,
        namespace: str | None = None,
        tags: Sequence[str] | None = None,
        kind: str | None = None,
        read_only: bool | None = None,
        weights: dict[str, float] | None = None,
        exact_weight: float = EXACT_NAME_WEIGHT,
        widen: bool = True,
        among: tantivy.Query | None = None,
    ) -> IndexQuery:
        """The index query of a free-text search: each term in each field, weighted by field and
        by term, whole identifiers against names, filters required. No text: every tool.

        A tool's score is the sum of its matching clauses, as one boolean query would give, but
        asked as two queries: the words alone (plain term clauses, which Tantivy answers with
        block-max WAND), and the few tools whose names the query quotes, scored with every
        clause. The best of both are merged by `search`. `widen=False` reads no word as a
        typing error (each one widened walks the index's word list); `among` (`among()`) limits
        the query to those tools."""
        schema, Q, occur = self.schema, tantivy.Query, tantivy.Occur
        weights = weights or FIELD_WEIGHTS
        words: list[tuple[tantivy.Occur, tantivy.Query]] = []
        named: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if analyzed is not None:
            terms = analyzed.terms
            short = widen and len(terms) <= FUZZY_MAX_TERMS  # as written, before the common words are left out
            informative = len(terms) > MAX_QUERY_TERMS or (len(terms) > MIN_QUERY_TERMS and self.num_docs > COMMON_MIN_DOCS)
            freq: dict[str, int] = {}
            if short or informative or analyzed.related or analyzed.joined:
                searcher = self._index.searcher()
                freq = {t: searcher.doc_freq("all", t) for t in terms}
            if informative:
                terms = self._informative(terms, freq, searcher.num_docs)
            unknown = [t for t in terms if short and not freq[t] and len(t) >= FUZZY_MIN_CHARS and t.isalpha()
                       and t not in analyzed.spelled]
            typos = set(sorted(unknown, key=len, reverse=True)[:FUZZY_MAX_WORDS])
            common = max(COMMON_SHARE * searcher.num_docs, COMMON_MIN_DOCS) if informative else math.inf
            if analyzed.related:
                terms = {**terms, **self._related(terms, analyzed.related, freq, searcher, common)}
            if analyzed.joined:  # those the catalog uses, but not too common to matter (as the query's own words)
                terms = {**terms, **{t: JOINED_WEIGHT for t in analyzed.joined if t not in terms and 0 < searcher.doc_freq("all", t) <= common}}
            for term, term_weight in terms.items():
                for name, field_weight in weights.items():
                    if field_weight > 0:
                        weight = field_weight * term_weight
                        if term in typos:
                            clause = Q.fuzzy_term_query(schema, name, term, distance=1, transposition_cost_one=True)
                            weight *= FUZZY_WEIGHT
                        else:
                            clause = Q.term_query(schema, name, term)
                        words.append((occur.Should, clause if weight == 1.0 else Q.boost_query(clause, weight)))
            for ident in analyzed.identifiers:
                named.append((occur.Should, Q.boost_query(Q.term_query(schema, "exact", ident), exact_weight)))
        must = self._filters(namespace, tags, kind, read_only)
        if among is not None:
            must.append((occur.Must, among))

        def filtered(text: tantivy.Query) -> tantivy.Query:
            return Q.boolean_query([(occur.Must, text), *must]) if must else text

        if not named:
            return IndexQuery(filtered(Q.boolean_query(words))) if words else IndexQuery(filtered(Q.all_query()), scored=False)
        # the quoted names' tools: required to match one name, scored by every clause
        quoted = Q.const_score_query(Q.boolean_query(named), 0.0)
        exact = filtered(Q.boolean_query([(occur.Must, quoted), *named, *words]))
        if not words:
            return IndexQuery(exact)
        return IndexQuery(filtered(Q.boolean_query(words)), exact)

    def _filters(self, namespace: str | None, tags: Sequence[str] | None, kind: str | None,
                 read_only: bool | None) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """The clauses a search's filters require."""
        schema, Q, must = self.schema, tantivy.Query, tantivy.Occur.Must
        clauses = [(must, Q.term_query(schema, "f_ns", namespace))] if namespace is not None else []
        clauses += [(must, Q.term_query(schema, "f_tag", tag)) for tag in tags or ()]
        if kind is not None:
            clauses.append((must, Q.term_query(schema, "f_kind", kind)))
        if read_only is not None:
            clauses.append((must, Q.term_query(schema, "f_ro", "1" if read_only else "0")))
        return clauses

    def lookups(self, words: Iterable[str], *, namespace: str | None = None, tags: Sequence[str] | None = None,
                kind: str | None = None, read_only: bool | None = None, limit: int | None = None) -> list[str]:
        """The tools that look up one of these stemmed words by name (`IndexedTool.looks_up`),
        those looking up more of them first, within the filters: at most `limit` tool ids
        (LOOKUP_LIMIT)."""
        Q, should = tantivy.Query, tantivy.Occur.Should
        clauses = [(should, Q.term_query(self.schema, "f_lookup", word)) for word in words]
        if not clauses or limit is not None and limit < 1:  # Tantivy panics on a limit of 0
            return []
        query = Q.boolean_query(clauses)
        must = self._filters(namespace, tags, kind, read_only)
        if must:
            query = Q.boolean_query([(tantivy.Occur.Must, query), *must])
        return [tool_id for tool_id, _ in self.search(IndexQuery(query), LOOKUP_LIMIT if limit is None else limit)]

    def among(self, tool_ids: Iterable[str]) -> tantivy.Query:
        """A filter for `query(among=...)`: these tools only, scoring nothing. Each tool is one
        term lookup (Tantivy's term-set query was 5 times slower over 3,000 tools)."""
        Q, should = tantivy.Query, tantivy.Occur.Should
        ids = [(should, Q.term_query(self.schema, "tool_id", tool_id)) for tool_id in tool_ids]
        return Q.const_score_query(Q.boolean_query(ids), 0.0)

    @staticmethod
    def _related(terms: dict[str, float], related: dict[str, tuple[str, ...]], freq: dict[str, int],
                 searcher: tantivy.Searcher, common: float) -> dict[str, float]:
        """The related words to match (`AnalyzedQuery.related`) of the query's `terms`: those in
        more of the tools than the term itself (the catalog's way of saying it, not a rarer
        look-alike), and no more than `common` of them, each at RELATED_WEIGHT of its term's weight."""
        extra: dict[str, float] = {}
        for term, others in related.items():
            if term not in terms:  # left out as too common
                continue
            for other in others:
                if other not in terms and other not in extra and freq[term] < searcher.doc_freq("all", other) <= common:
                    extra[other] = RELATED_WEIGHT * terms[term]
        return extra

    @staticmethod
    def _informative(terms: dict[str, float], freq: dict[str, int], num_docs: int) -> dict[str, float]:
        """The query's terms without those too common to matter (see COMMON_SHARE), at most
        MAX_QUERY_TERMS of them, the rarest (`freq`: each term's document frequency)."""
        common = max(COMMON_SHARE * num_docs, COMMON_MIN_DOCS)
        rarest = sorted(terms, key=freq.__getitem__)[:MAX_QUERY_TERMS]
        kept = [t for i, t in enumerate(rarest) if i < MIN_QUERY_TERMS or freq[t] <= common]
        return {t: terms[t] for t in kept}

    def search(self, query: IndexQuery, limit: int, offset: int = 0) -> list[tuple[str, float]]:
        """(tool_id, score) of the best `limit` documents after `offset` (none for a limit
        under 1, which Tantivy would answer by panicking), best first, those scoring alike by
        their keys (TIE_MARGIN); a listing (no words) in the index's order. Pages asked by
        `offset` follow on from one another while no tie runs on past TIE_MARGIN."""
        if limit < 1:
            return []
        searcher = self._index.searcher()
        end = offset + limit
        if not query.scored:
            hits = searcher.search(query.main, limit=limit, offset=offset, count=False).hits
            addresses = [address for _, address in hits]
            return list(zip(self._tool_ids(searcher, addresses), (float(score) for score, _ in hits), strict=True))
        hits = self._best(searcher, query, end + TIE_MARGIN)
        keys = searcher.fast_field_values("key", [address for _, address in hits])
        ranked = sorted(zip(hits, keys, strict=True), key=lambda hit: (-hit[0][0], hit[1] if hit[1] is not None else -1))[offset:end]
        addresses = [address for (_, address), _ in ranked]
        return list(zip(self._tool_ids(searcher, addresses, [key for _, key in ranked]), (float(score) for (score, _), _ in ranked),
                        strict=True))

    @staticmethod
    def _best(searcher: tantivy.Searcher, query: IndexQuery, limit: int) -> list[tuple[float, Any]]:
        """(score, address) of the best `limit` documents, as Tantivy orders them."""
        if query.exact is None:
            return searcher.search(query.main, limit=limit, count=False).hits
        # a tool matching a quoted name scores at least as much in `exact` as in `main`
        best: dict[tuple[int, int], tuple[float, Any]] = {}
        for part in (query.main, query.exact):
            for score, address in searcher.search(part, limit=limit, count=False).hits:
                key = (address.segment_ord, address.doc)
                if key not in best or score > best[key][0]:
                    best[key] = (score, address)
        return [hit for _, hit in sorted(best.items(), key=lambda item: (-item[1][0], item[0]))[:limit]]

    def _tool_ids(self, searcher: tantivy.Searcher, addresses: list[Any], keys: list[int | None] | None = None) -> list[str]:
        """The tool ids of these hits: by their keys (read here unless given), or (a key two ids
        share) their stored id."""
        if not addresses:
            return []
        by_key = self._by_key
        keys = keys if keys is not None else searcher.fast_field_values("key", addresses)
        ids = [by_key.get(key) if key is not None else None for key in keys]
        return [tool_id if tool_id is not None else searcher.doc(address)["tool_id"][0] for tool_id, address in zip(ids, addresses, strict=True)]


@dataclass(frozen=True)
class IndexQuery:
    """A free-text search as the index runs it: `main` ranks every tool (by its words, filters
    required); `exact`, when the query quotes tool names, ranks the tools having one of them by
    all their clauses."""

    main: tantivy.Query
    exact: tantivy.Query | None = None
    scored: bool = True  # False for a listing by the filters alone: every tool scores alike


def exact_names(*names: str) -> list[str]:
    """Lower-case whole names a query may quote, and their forms without namespace separators."""
    out: dict[str, None] = {}
    for name in names:
        if name:
            out[name.lower()] = None
    return list(out)


def name_text(*names: str) -> str:
    return " ".join(name_words(n) for n in names if n)
