"""The tool-search index: a Tantivy index (on disk beside the store, or in memory) of one
document per tool, written by one background thread in batched commits, with a digest per tool
so that an unchanged tool is never written again and a restart reopens instead of rebuilding."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

from bridge.search_rank import ANALYZER_NAME, AnalyzedQuery, analyzer, name_tokens, split_identifiers

__all__ = ["IndexedTool", "ToolIndex", "FIELD_WEIGHTS", "INDEX_FORMAT", "COMMIT_WINDOW"]

log = logging.getLogger("bridge.search")

# Bump when the schema, the analyzer or the text put in a field changes: an index of another
# format is rebuilt from the catalog instead of being reopened.
INDEX_FORMAT = 1
# Changes arriving within this window share one commit.
COMMIT_WINDOW = 0.05
_FORMAT_FILE = "bridge-search.json"
_DIGEST_LOG = "digests.log"

# Score weight of a query word found in each field (tuned on the development set, see
# bench/search_quality.py).
FIELD_WEIGHTS: dict[str, float] = {
    "name": 3.0,
    "namespace": 0.5,
    "title": 1.5,
    "hint": 1.5,
    "description": 1.0,
    "tags": 0.5,
    "params": 0.5,
    "param_text": 0.3,
}
EXACT_NAME_WEIGHT = 10.0
_TEXT_FIELDS = tuple(FIELD_WEIGHTS)


@dataclass
class IndexedTool:
    """What the index holds of one tool: the text of each field and the filter values."""

    tool_id: str
    namespace: str
    name: str
    exact_names: list[str]
    title: str = ""
    description: str = ""
    hint: str = ""
    tags: list[str] = field(default_factory=list)
    params: str = ""
    param_text: str = ""
    kind: str = "function"
    read_only: bool = False
    _digest: int | None = field(default=None, repr=False, compare=False)

    @property
    def digest(self) -> int:
        """64-bit digest of everything indexed: equal digests, equal documents."""
        if self._digest is None:
            parts = [str(INDEX_FORMAT), self.namespace, self.name, "\x1e".join(self.exact_names), self.title,
                     self.description, self.hint, "\x1e".join(self.tags), self.params, self.param_text, self.kind,
                     "1" if self.read_only else "0"]
            raw = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
            self._digest = int.from_bytes(raw, "big")
        return self._digest

    def document(self) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_text("tool_id", self.tool_id)
        for exact in self.exact_names:
            doc.add_text("exact", exact)
        doc.add_text("name", self.name)
        doc.add_text("namespace", split_identifiers(self.namespace))
        for name in ("title", "description", "hint", "params", "param_text"):
            text = getattr(self, name)
            if text:
                doc.add_text(name, split_identifiers(text))
        if self.tags:
            doc.add_text("tags", " ".join(split_identifiers(t) for t in self.tags))
        doc.add_text("f_ns", self.namespace)
        for tag in self.tags:
            doc.add_text("f_tag", tag)
        doc.add_text("f_kind", self.kind)
        doc.add_text("f_ro", "1" if self.read_only else "0")
        return doc

    def name_words(self) -> set[str]:
        return set(analyzer().analyze(self.name))

    def all_words(self) -> set[str]:
        text = " ".join((self.name, self.namespace, self.title, self.description, self.hint, " ".join(self.tags),
                         self.params, self.param_text))
        return set(analyzer().analyze(split_identifiers(text)))


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("tool_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("exact", tokenizer_name="raw", index_option="basic")
    for name in _TEXT_FIELDS:
        builder.add_text_field(name, tokenizer_name=ANALYZER_NAME, index_option="freq")
    for name in ("f_ns", "f_tag", "f_kind", "f_ro"):
        builder.add_text_field(name, tokenizer_name="raw", index_option="basic")
    return builder.build()


@dataclass
class _Batch:
    upserts: list[IndexedTool] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    seq: int = 0


class ToolIndex:
    """The Tantivy index and its writer thread.

    `submit()` hands over documents to write and ids to delete and returns at once; the writer
    thread gathers what arrives within `COMMIT_WINDOW`, commits once, and makes it searchable.
    `digests` maps each indexed tool_id to (namespace, digest) as of the last submit.
    """

    def __init__(self, path: str | None = None, *, heap_size: int = 64_000_000, threads: int = 1) -> None:
        self.path = path
        self.schema = _schema()
        self.opened_existing = False  # an on-disk index was reopened as it was
        self.documents_written = 0  # documents added since this index was opened
        self.commits = 0
        self.digests: dict[str, tuple[str, int]] = {}
        self._index = self._open(path)
        self._index.register_tokenizer(ANALYZER_NAME, analyzer())
        self._index.config_reader(reload_policy="manual")
        self._writer = self._index.writer(heap_size=heap_size, num_threads=threads)
        self._log_file: Any = None
        if path is not None:
            self._load_digests()
        self._queue: queue.Queue[_Batch | None] = queue.Queue()
        self._cond = threading.Condition()
        self._submitted = 0
        self._committed = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="search-index-writer", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- opening

    def _open(self, path: str | None) -> tantivy.Index:
        if path is None:
            return tantivy.Index(self.schema)
        folder = Path(path)
        marker = folder / _FORMAT_FILE
        current = {"format": INDEX_FORMAT, "tantivy": tantivy.__version__}
        if marker.exists() and tantivy.Index.exists(str(folder)):
            try:
                if json.loads(marker.read_text()) == current:
                    index = tantivy.Index.open(str(folder))
                    self.opened_existing = True
                    return index
            except (ValueError, OSError) as exc:
                log.warning("search index at %s cannot be reopened (%s); rebuilding it", folder, exc)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        index = tantivy.Index(self.schema, path=str(folder), reuse=False)
        marker.write_text(json.dumps(current))
        return index

    def _load_digests(self) -> None:
        """Replay the digest log. A log that disagrees with the index (a crash between a commit
        and its log lines) costs a rebuild: every tool is then written again."""
        assert self.path is not None
        log_path = Path(self.path) / _DIGEST_LOG
        digests: dict[str, tuple[str, int]] = {}
        lines = 0
        namespaces: dict[str, str] = {}
        if self.opened_existing and log_path.exists():
            with open(log_path, encoding="utf-8") as fh:
                for line in fh:
                    lines += 1
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) == 3:
                        ns = namespaces.setdefault(parts[1], parts[1])
                        digests[parts[0]] = (ns, int(parts[2], 16))
                    elif len(parts) == 2:
                        digests.pop(parts[0], None)
        if self.opened_existing and self._index.searcher().num_docs != len(digests):
            log.warning("search index and its digest log disagree; rebuilding the index")
            self._writer_delete_all()
            digests, lines = {}, 0
            self.opened_existing = False
        self.digests = digests
        if lines > 2 * len(digests) + 10_000 or not log_path.exists():
            self._rewrite_log(log_path)
        self._log_file = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for appends

    def _writer_delete_all(self) -> None:
        writer = self._index.writer(heap_size=15_000_000, num_threads=1)
        writer.delete_all_documents()
        writer.commit()
        writer.wait_merging_threads()

    def _rewrite_log(self, log_path: Path) -> None:
        tmp = log_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(f"{tid}\t{ns}\t{dg:016x}\n" for tid, (ns, dg) in self.digests.items())
        os.replace(tmp, log_path)

    # ---------------------------------------------------------------- writing

    def submit(self, upserts: Sequence[IndexedTool] = (), deletes: Iterable[str] = ()) -> int:
        """Queue changes: unchanged documents (same digest) are skipped. Returns a ticket for
        `flush`, or the last ticket when nothing needed writing."""
        todo = _Batch()
        for tool in upserts:
            known = self.digests.get(tool.tool_id)
            if known is not None and known[1] == tool.digest and known[0] == tool.namespace:
                continue
            self.digests[tool.tool_id] = (tool.namespace, tool.digest)
            todo.upserts.append(tool)
        for tool_id in deletes:
            if self.digests.pop(tool_id, None) is not None:
                todo.deletes.append(tool_id)
        with self._cond:
            if not (todo.upserts or todo.deletes):
                return self._submitted
            if self._closed:
                raise RuntimeError("search index is closed")
            self._submitted += 1
            todo.seq = self._submitted
        self._queue.put(todo)
        return todo.seq

    def flush(self, timeout: float | None = 10.0, ticket: int | None = None) -> bool:
        """Wait until everything submitted (or up to `ticket`) is committed and searchable."""
        with self._cond:
            target = self._submitted if ticket is None else ticket
            return self._cond.wait_for(lambda: self._committed >= target or self._closed, timeout)

    @property
    def pending(self) -> bool:
        return self._committed < self._submitted

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            batches = [batch]
            deadline = time.monotonic() + COMMIT_WINDOW
            stop = False
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    more = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batches.append(more)
            self._write(batches)
            if stop:
                return

    def _write(self, batches: list[_Batch]) -> None:
        lines: list[str] = []
        try:
            for batch in batches:
                for tool_id in batch.deletes:
                    self._writer.delete_documents_by_term("tool_id", tool_id)
                    lines.append(f"{tool_id}\t-\n")
                for tool in batch.upserts:
                    # a delete then an add in one commit: the add survives the delete (opstamps)
                    self._writer.delete_documents_by_term("tool_id", tool.tool_id)
                    self._writer.add_document(tool.document())
                    lines.append(f"{tool.tool_id}\t{tool.namespace}\t{tool.digest:016x}\n")
            self._writer.commit()
            self._index.reload()
            self.documents_written += sum(len(b.upserts) for b in batches)
            self.commits += 1
            if self._log_file is not None:
                self._log_file.writelines(lines)
                self._log_file.flush()
        except Exception:  # noqa: BLE001 - the writer thread must survive a failed commit
            log.exception("search index commit failed; the tools concerned are indexed again on their next change")
            with contextlib.suppress(Exception):
                self._writer.rollback()
            for batch in batches:
                for tool in batch.upserts:
                    self.digests.pop(tool.tool_id, None)
        finally:
            with self._cond:
                self._committed = max(self._committed, max(b.seq for b in batches))
                self._cond.notify_all()

    def bulk_load(self, tools: Iterable[IndexedTool]) -> int:
        """Write many tools in one commit on the calling thread (an initial build). Tools
        already indexed with the same digest are skipped."""
        self.flush(None)
        count = 0
        lines: list[str] = []
        for tool in tools:
            known = self.digests.get(tool.tool_id)
            if known is not None and known[1] == tool.digest:
                continue
            if known is not None:
                self._writer.delete_documents_by_term("tool_id", tool.tool_id)
            self.digests[tool.tool_id] = (tool.namespace, tool.digest)
            self._writer.add_document(tool.document())
            if self._log_file is not None:
                lines.append(f"{tool.tool_id}\t{tool.namespace}\t{tool.digest:016x}\n")
            count += 1
        self._writer.commit()
        self._index.reload()
        self.documents_written += count
        self.commits += 1
        if self._log_file is not None:
            self._log_file.writelines(lines)
            self._log_file.flush()
        return count

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
        self.flush(30.0)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._queue.put(None)
        self._thread.join(timeout=30.0)
        with contextlib.suppress(Exception):
            self._writer.wait_merging_threads()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # ---------------------------------------------------------------- reading

    @property
    def num_docs(self) -> int:
        return self._index.searcher().num_docs

    def doc_freq(self, term: str, fields: Sequence[str] = ("name", "description", "params")) -> int:
        searcher = self._index.searcher()
        return max(searcher.doc_freq(f, term) for f in fields)

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
    ) -> tantivy.Query:
        """The index query of a free-text search: each term in each field, weighted by field and
        by term (filler words weigh little), whole identifiers against names, filters required."""
        schema, Q, occur = self.schema, tantivy.Query, tantivy.Occur
        weights = weights or FIELD_WEIGHTS
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if analyzed is not None:
            for term, term_weight in analyzed.terms.items():
                for name, field_weight in weights.items():
                    if field_weight > 0:
                        should.append((occur.Should, Q.boost_query(Q.term_query(schema, name, term), field_weight * term_weight)))
            for ident in analyzed.identifiers:
                should.append((occur.Should, Q.boost_query(Q.term_query(schema, "exact", ident), exact_weight)))
        text = Q.boolean_query(should) if should else Q.all_query()
        must: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if namespace is not None:
            must.append((occur.Must, Q.term_query(schema, "f_ns", namespace)))
        for tag in tags or ():
            must.append((occur.Must, Q.term_query(schema, "f_tag", tag)))
        if kind is not None:
            must.append((occur.Must, Q.term_query(schema, "f_kind", kind)))
        if read_only is not None:
            must.append((occur.Must, Q.term_query(schema, "f_ro", "1" if read_only else "0")))
        if not must:
            return text
        return Q.boolean_query([(occur.Must, text), *must])

    def search(self, query: tantivy.Query, limit: int, offset: int = 0) -> list[tuple[str, float]]:
        """(tool_id, score) of the best `limit` documents after `offset`."""
        searcher = self._index.searcher()
        hits = searcher.search(query, limit=limit, offset=offset, count=False).hits
        return [(searcher.doc(address)["tool_id"][0], float(score)) for score, address in hits]


def exact_names(*names: str) -> list[str]:
    """Lower-case whole names a query may quote, and their forms without namespace separators."""
    out: dict[str, None] = {}
    for name in names:
        if name:
            out[name.lower()] = None
    return list(out)


def name_text(*names: str) -> str:
    return " ".join(" ".join(name_tokens(n)) for n in names if n)
