"""Storage of the search index: the Tantivy index on disk (or in memory), its generations (the
folder a compaction writes next), the format marker naming the current one, and the digest log
that tells a reopened index what it holds; and the one commit that applies a run of changes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from bridge.search.analysis import ANALYZER_NAME, analyzer
from bridge.search.document import INDEX_FORMAT, Converter, IndexedTool, tool_key

__all__ = ["Batch", "IndexStorage"]

log = logging.getLogger("bridge.search")

_FORMAT_FILE = (
    "bridge-search.json"  # the format, and which generation of the index is the current one
)
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
    return (
        _digest_line(tool_id, namespace, digest)
        for namespace, tools in digests.items()
        for tool_id, digest in tools.items()
    )


@dataclass
class Batch:
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
    move: bool = (
        False  # with `compact`: written into the on-disk index whose lock was free (`_try_disk`)
    )


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


class IndexStorage:
    """The index's files and what it holds (`ToolIndex` is made of this and the parts built on it).

    Only the writer thread changes them, and `_write` is its one commit of a run of batches.
    The state below is set by `ToolIndex.__init__`."""

    path: str | None  # the on-disk index's folder; None: in memory
    schema: tantivy.Schema
    convert: Converter | None  # turns a submitted item into its IndexedTool
    unusable: str | None  # why the on-disk index cannot be used (kept in memory instead)
    opened_existing: bool  # an on-disk index was reopened as it was
    documents_written: int  # documents added since this index was opened
    commits: int
    _index: Any  # tantivy.Index
    _writer: Any  # its IndexWriter
    _digests: dict[str, dict[str, int]]  # namespace -> tool_id -> digest
    _by_key: dict[int, str | None]  # tool_key -> tool_id of every tool written (`_known`)
    _generation: int  # the folder of the index searched, on disk
    _lock_file: Any  # held while this process writes the on-disk index (bridge.search.lock)
    _log_file: Any
    _log_lines: int
    _heap_size: int
    _threads: int

    # ---------------------------------------------------------------- opening

    def _open_index(self, path: str | None) -> None:
        """Open the index, its writer and (on disk) its digests. A generation reopened that then
        cannot be read (its digest log, say) is rebuilt; an on-disk index that cannot be opened
        or built at all (a read-only or full disk) is kept in memory instead (`_kept_in_memory`)."""
        fresh = False
        while True:
            try:
                self._index = self._ready(self._open(path, fresh))
                self._writer = self._index.writer(
                    heap_size=self._heap_size, num_threads=self._threads
                )
                if path is not None:
                    self._load_digests()
                return
            except BaseException as exc:
                if path is None or not _index_error(exc):
                    raise
                reopened, generation = self.opened_existing, self._generation
                self._opened_nothing()
                if (
                    reopened and not fresh
                ):  # that generation is damaged: the catalog writes it again
                    log.warning(
                        "search index at %s cannot be reopened (%s); rebuilding it",
                        Path(path) / _generation(generation),
                        _error_text(exc),
                    )
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
        log.warning(
            "search index %s cannot be used (%s); this process keeps its index in memory, built again at each start. "
            "To keep it on disk, set search.path to a folder this process can create and write (left out, it is "
            "store.path with the suffix .index), or set search.persist: false to keep it in memory without this "
            "warning",
            path,
            self.unusable,
        )

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
                    log.warning(
                        "search index at %s names no index it holds (generation %r); rebuilding it",
                        folder,
                        generation,
                    )
            except BaseException as exc:
                if not _index_error(exc):
                    raise
                self.opened_existing = False
                log.warning(
                    "search index at %s cannot be reopened (%s); rebuilding it",
                    folder,
                    _error_text(exc),
                )
        _emptied(folder)
        self._generation = 1
        index = self._new_index(1)
        self._mark(1)
        return index

    @staticmethod
    def _format() -> dict[str, Any]:
        return {"format": INDEX_FORMAT, "tantivy": vars(tantivy)["__version__"]}

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
                    elif len(parts) == 2 and (gone := owner.pop(parts[0], None)) is not None:
                        self._digests[gone].pop(parts[0], None)
                    elif len(parts) != 2:
                        unreadable += 1
        if self.opened_existing and (
            unreadable or self._index.searcher().num_docs != self.tool_count
        ):
            log.warning(
                "search index and its digest log disagree%s; the index is written again",
                f" ({unreadable} unreadable line{'s' if unreadable > 1 else ''} in {log_path})"
                if unreadable
                else "",
            )
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

    def _tool(self, item: Any) -> IndexedTool:
        if isinstance(item, IndexedTool):
            return item
        if self.convert is None:
            raise TypeError(f"no converter for {type(item).__name__}")
        return self.convert(item)

    def _touching(self, seq: int, deletes: list[tuple[str, str]], tools: list[IndexedTool]) -> None:
        """Told, within `_write`, what the batch submitted as `seq` deletes and writes, before it
        is applied: a compaction under way (bridge.search.compaction) gives it the last word."""

    def _write(self, batches: list[Batch]) -> bool:
        """Apply `batches` in one commit. False when the commit failed: the index and the
        digests are then as before, and the batches can be written again."""
        lines: list[str] = []
        written = 0  # documents added
        before: list[
            tuple[str, str, int | None]
        ] = []  # (namespace, tool_id, digest before), to undo
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
                    deletes += [
                        (ns, tid)
                        for ns, tools in self._digests.items()
                        if ns not in batch.keep_namespaces
                        for tid in tools
                    ]
                tools = [self._tool(item) for item in batch.upserts]
                if batch.reconcile is not None:
                    listed = {t.tool_id for t in tools}
                    known = self._digests.get(batch.reconcile, {})
                    deletes += [(batch.reconcile, tid) for tid in known if tid not in listed]
                self._touching(batch.seq, deletes, tools)
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
        except Exception:
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
            log.exception(
                "search index change could not be applied; the tools concerned are written again on their next change"
            )
            return True

    @property
    def num_docs(self) -> int:
        return self._index.searcher().num_docs

    @property
    def segments(self) -> int:
        """How many segments a search reads now (fewer as the background merges are done)."""
        return self._index.searcher().num_segments
