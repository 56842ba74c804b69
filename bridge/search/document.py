"""What the search index holds of a tool: the document a declaration becomes (`IndexedTool`,
`indexed_tool`), its digest, and the index's schema. Any change to them is a new INDEX_FORMAT."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tantivy

from bridge.model import ToolDeclaration
from bridge.search.analysis import (
    ANALYZER_NAME,
    cjk_pairs,
    name_words,
    split_identifiers,
)
from bridge.search.sources import name_key
from bridge.search.tooltext import (
    SharedText,
    changes_current,
    described_schema,
    function_name,
    looked_up,
    searched_description,
    unsaid,
)

__all__ = [
    "CHANGES_PREFIX",
    "FIELD_WEIGHTS",
    "INDEX_FORMAT",
    "Converter",
    "IndexedTool",
    "exact_names",
    "indexed_tool",
    "name_text",
    "schema",
    "tool_key",
]

# Bump when the schema, the analyzer or the text put in a field changes: an index of another
# format is rebuilt from the catalog instead of being reopened.
INDEX_FORMAT = 10
# One text field, `all`, holds every text of the tool: its own words (name, title, hint,
# description, parameter names), the name's words `NAME_REPEAT` times, then its namespace, tags
# and parameters' descriptions with each word once (a BM25F-like weighting in one field: the
# tool's own words count more than the wording of its parameters). Tuned on the development set
# (bench/search_quality.py): one weighted field beats a sum of per-field scores by 3 points of
# recall@5; it matches, within 0.2 points, a second field of the own words at half weight, for
# half the indexing work and a query of plain term clauses, which Tantivy answers with block-max
# WAND (the top hits without scoring every match).
FIELD_WEIGHTS: dict[str, float] = {"all": 1.0}
NAME_REPEAT = 2
_TEXT_FIELDS = ("all",)
# A place a tool changes (bridge.search.tooltext.changes_current) is kept in the lookups' field as this prefix
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
    shared: str = ""  # description text shared by many tools of the namespace (bridge.search.tooltext.SharedText)
    hint: str = ""
    tags: list[str] = field(default_factory=list)
    params: str = ""
    param_text: str = ""
    kind: str = "function"
    read_only: bool = False
    looks_up: list[str] = field(
        default_factory=list
    )  # what the tool looks up by name (bridge.search.tooltext.looked_up)
    changes: list[str] = field(
        default_factory=list
    )  # the current places it changes (bridge.search.tooltext.changes_current)
    named: str = ""  # its function name as a parameter names its source (bridge.search.sources)
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
            parts = [
                str(INDEX_FORMAT),
                self.namespace,
                self.name,
                "\x1e".join(self.exact_names),
                self.title,
                self.description,
                self.shared,
                self.hint,
                "\x1e".join(self.tags),
                self.params,
                self.param_text,
                self.kind,
                "1" if self.read_only else "0",
                "\x1e".join(self.looks_up),
                "\x1e".join(self.changes),
                self.named,
            ]
            raw = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
            self._digest = int.from_bytes(raw, "big")
        return self._digest

    def document(self) -> tantivy.Document:
        # names and parameter names arrive split into words; only free text needs camelCase split
        own = cjk_pairs(
            " ".join(
                [
                    *[self.name] * NAME_REPEAT,
                    split_identifiers(f"{self.title} {self.hint} {self.description}"),
                    self.params,
                ]
            )
        )
        extra = (
            cjk_pairs(
                split_identifiers(
                    " ".join([self.shared, self.namespace, *self.tags, self.param_text])
                )
            )
            .lower()
            .split()
        )
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
        if self.named:
            doc.add_text("f_lookup", self.named)
        return doc


def schema() -> tantivy.Schema:
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


def exact_names(*names: str) -> list[str]:
    """Lower-case whole names a query may quote, and their forms without namespace separators."""
    out: dict[str, None] = {}
    for name in names:
        if name:
            out[name.lower()] = None
    return list(out)


def name_text(*names: str) -> str:
    return " ".join(name_words(n) for n in names if n)


_PARAM_DEPTH = 2
_MAX_ENUM = 20


def _param_text(schema: Any, depth: int = 0) -> tuple[list[str], list[str]]:
    """Parameter names and their descriptions (and short enum values), nested objects included."""
    names: list[str] = []
    texts: list[str] = []
    if not isinstance(schema, dict) or depth > _PARAM_DEPTH:
        return names, texts
    props = schema.get("properties")
    if isinstance(props, dict):
        for pname, pschema in props.items():
            names.append(name_words(str(pname)))
            if isinstance(pschema, dict):
                desc = pschema.get("description") or pschema.get("title")
                if isinstance(desc, str):
                    texts.append(desc)
                enum = pschema.get("enum")
                if isinstance(enum, list):
                    texts.extend(str(v) for v in enum[:_MAX_ENUM] if isinstance(v, str))
                sub_names, sub_texts = _param_text(pschema, depth + 1)
                names += sub_names
                texts += sub_texts
                items = pschema.get("items")
                if isinstance(items, dict):
                    sub_names, sub_texts = _param_text(items, depth + 1)
                    names += sub_names
                    texts += sub_texts
    return names, texts


def indexed_tool(decl: ToolDeclaration, shared: SharedText | None = None) -> IndexedTool:
    """The index document of a declaration; with `shared`, the description's text shared by many
    tools of its namespace is kept apart from the tool's own."""
    param_names, param_texts = _param_text(described_schema(decl))
    native = function_name(decl)
    described = searched_description(decl)
    common, own = shared.split(decl.namespace, described) if shared is not None else ("", described)
    return IndexedTool(
        tool_id=decl.tool_id,
        namespace=decl.namespace,
        name=name_text(native, *(a for a in decl.aliases if a != native)),
        exact_names=exact_names(native, decl.native_name or "", decl.name, *decl.aliases),
        title=unsaid(decl.title, described),
        description=own or "",
        shared=common,
        hint=unsaid(decl.search_hint, described, decl.title),
        tags=list(decl.tags),
        params=" ".join(param_names),
        param_text=" ".join(param_texts),
        kind=decl.tool_kind,
        read_only=decl.safety.read_only,
        looks_up=sorted(looked_up(decl, native)),
        changes=sorted(changes_current(decl)),
        named=name_key(native),
    )
