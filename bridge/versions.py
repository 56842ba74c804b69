"""Synthesized tool versions: a digest of each tool's normalized signature, the version history
kept in the store, and whether a new signature is compatible with the one before it."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Literal

from bridge.model import ToolDeclaration, VersionRecord, now_iso
from bridge.store import StoreInterface, StoreUnavailable

__all__ = [
    "Signed",
    "UnencodableText",
    "VersionRegistry",
    "classify_change",
    "digest_of",
    "sign",
    "signature_of",
]

log = logging.getLogger("bridge.catalog")


def signature_of(decl: ToolDeclaration) -> dict[str, Any]:
    """The part of a declaration that defines how it is called. Names and ids are not in it
    (they are identity, not signature); safety facts are, since they change what a call does."""
    safety = decl.safety
    return {
        "native_name": decl.native_name or decl.name,
        "description": decl.description,
        "input_schema": decl.input_schema,
        "output_schema": decl.output_schema,
        "safety": {
            "read_only": safety.read_only,
            "destructive": safety.destructive,
            "idempotent": safety.idempotent,
        },
    }


def canonical_json(signature: dict[str, Any]) -> str:
    return json.dumps(
        signature, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


def digest_of(signature: dict[str, Any], blob: str | None = None) -> str:
    blob = blob if blob is not None else canonical_json(signature)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def _props(schema: dict[str, Any] | None) -> tuple[dict[str, Any], set[str]]:
    if not isinstance(schema, dict):
        return {}, set()
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    return (props if isinstance(props, dict) else {}), required


# Keywords of a schema's root that `classify_change` reads itself, or that only annotate it.
_ROOT_READ = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "title",
        "description",
        "examples",
        "$comment",
    }
)
_ROOT_DEFS = ("$defs", "definitions")


def _root_kept(old: Any, new: Any) -> bool:
    """Whether every other keyword of the old schema's root holds as it was in the new one: the
    schemas its properties refer to (`$defs`, `definitions`: an entry may be added, none changed
    or removed) and any combinator or constraint of the root (none added, changed or removed)."""
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    for key in (old.keys() | new.keys()) - _ROOT_READ:
        if key in _ROOT_DEFS:
            old_defs, new_defs = old.get(key) or {}, new.get(key) or {}
            if not isinstance(old_defs, dict) or not isinstance(new_defs, dict):
                if old_defs != new_defs:
                    return False
            elif any(
                name not in new_defs or new_defs[name] != body for name, body in old_defs.items()
            ):
                return False
        elif old.get(key) != new.get(key):
            return False
    return True


def classify_change(old: dict[str, Any], new: dict[str, Any]) -> Literal["compatible", "breaking"]:
    """`compatible` when a caller of the old signature is served by the new one: every old input
    is still accepted with the same schema, no new input is required, and every old output is
    still produced. Anything else is `breaking`. The schemas properties refer to under `$defs`
    count as part of them: a change there (a field of a referenced object) is breaking too."""
    if not _root_kept(old.get("input_schema"), new.get("input_schema")) or not _root_kept(
        old.get("output_schema"), new.get("output_schema")
    ):
        return "breaking"
    old_in, old_req = _props(old.get("input_schema"))
    new_in, new_req = _props(new.get("input_schema"))
    for name, schema in old_in.items():
        if name not in new_in or new_in[name] != schema:
            return "breaking"
    if new_req - old_req:
        return "breaking"
    old_extra = (old.get("input_schema") or {}).get("additionalProperties", True)
    new_extra = (new.get("input_schema") or {}).get("additionalProperties", True)
    if old_extra is not False and new_extra is False:
        return "breaking"
    old_out, _ = _props(old.get("output_schema"))
    new_out, _ = _props(new.get("output_schema"))
    for name, schema in old_out.items():
        if name not in new_out or new_out[name] != schema:
            return "breaking"
    if old.get("output_schema") and not new.get("output_schema"):
        return "breaking"
    if old.get("safety", {}).get("read_only") and not new.get("safety", {}).get("read_only"):
        return "breaking"
    if new.get("safety", {}).get("destructive") and not old.get("safety", {}).get("destructive"):
        return "breaking"
    return "compatible"


class UnencodableText(ValueError):
    """Declarations (by position) whose text holds a lone surrogate; nothing was assigned."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__(f"{len(indices)} declarations hold text that cannot be encoded as UTF-8")
        self.indices = indices


# A declaration's signature (`signature_of`), its canonical JSON and its digest.
Signed = tuple[dict[str, Any], str, str]


def sign(decls: list[ToolDeclaration]) -> list[Signed]:
    """Every declaration's signature, first, so that one whose text cannot be encoded changes
    nothing: raises UnencodableText naming them all."""
    signed: list[Signed] = []
    unencodable: list[int] = []
    for i, decl in enumerate(decls):
        signature = signature_of(decl)
        blob = canonical_json(signature)
        try:
            signed.append((signature, blob, digest_of(signature, blob)))
        except UnicodeEncodeError:
            unencodable.append(i)
    if unencodable:
        raise UnencodableText(unencodable)
    return signed


class VersionRegistry:
    """Assigns version numbers. The latest version and digest of every tool are held in memory;
    the full signature of every version is in the store, read back when a tool changes."""

    def __init__(self, store: StoreInterface) -> None:
        self.store = store
        self._latest: dict[str, tuple[int, str]] = store.latest_versions()

    def assign(
        self, decls: list[ToolDeclaration], signed: list[Signed]
    ) -> list[tuple[str, int, str]]:
        """Set `version` and `signature_digest` on each declaration and write the versions that
        are new to the store; `signed` is `sign(decls)`. Returns (tool_id, version,
        compatibility) of each new version."""
        added: list[tuple[str, int, str]] = []
        rows: list[tuple[str, str, int, str, str, str, str]] = []
        created_at = now_iso()
        for decl, (signature, blob, digest) in zip(decls, signed, strict=True):
            known = self._latest.get(decl.tool_id)
            if known is None:
                version, compatibility = 1, "initial"
            elif known[1] == digest:
                decl.version, decl.signature_digest = known[0], digest
                continue
            else:
                version, compatibility = (
                    known[0] + 1,
                    self._compatibility(decl, known[0], signature),
                )
            added.append((decl.tool_id, version, compatibility))
            rows.append(
                (decl.namespace, decl.tool_id, version, digest, compatibility, created_at, blob)
            )
            self._latest[decl.tool_id] = (version, digest)
            decl.version, decl.signature_digest = version, digest
        self.store.add_version_rows(rows)
        return added

    def _compatibility(
        self, decl: ToolDeclaration, latest: int, signature: dict[str, Any]
    ) -> Literal["compatible", "breaking"]:
        """How a tool's new signature compares with its latest version's. While a shared store's
        database is away that one cannot be read: the change counts as breaking (said), so the
        listing is taken and a pinned call to an older version is refused rather than served
        against a signature that may not take its arguments."""
        try:
            stored = self.store.get_version(decl.namespace, decl.tool_id, latest)
        except StoreUnavailable as exc:
            log.warning(
                "tool %s of %s: version %d counted breaking: %s",
                decl.native_name,
                decl.namespace,
                latest + 1,
                exc,
            )
            return "breaking"
        return classify_change(stored.signature if stored else {}, signature)

    def latest(self, tool_id: str) -> int | None:
        known = self._latest.get(tool_id)
        return known[0] if known else None

    def get(self, decl: ToolDeclaration, version: int) -> VersionRecord | None:
        """The record of one version of a tool; None for a number it never had (including
        numbers past its latest, which SQLite could not even hold)."""
        latest = self.latest(decl.tool_id)
        if latest is None or not 1 <= version <= latest:
            return None
        return self.store.get_version(decl.namespace, decl.tool_id, version)

    def history(self, decl: ToolDeclaration) -> list[VersionRecord]:
        return self.store.list_versions(decl.namespace, decl.tool_id)

    def breaking_since(self, decl: ToolDeclaration, version: int) -> int | None:
        """The first version of a tool after `version` that broke compatibility, or None."""
        for record in reversed(self.history(decl)):
            if record.version > version and record.compatibility == "breaking":
                return record.version
        return None
