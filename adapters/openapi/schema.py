"""OpenAPI schemas turned into self-contained JSON Schema 2020-12 for tool contracts.

`$ref`s are looked up through the `referencing` resolver that jsonschema-path builds for the
document (local pointers, relative files, URLs); this module only decides what to inline. Each
referenced schema is inlined once per tool; a schema that refers back to itself (directly or
through others) is kept once under `$defs` and referred to with `{"$ref": "#/$defs/<name>"}`,
so recursive schemas stay finite. A cycle that never descends into a property or item (`A` is
`{$ref: B}` or `{allOf: [B]}` and `B` leads back to `A`) describes no value at all and would send
a validator into endless recursion (JSON Schema 2020-12 §9.4.1 leaves it undefined): it is a
SpecError naming the cycle. OpenAPI 3.0 dialect (`nullable`, boolean `exclusiveMinimum`,
`example`) is rewritten to JSON Schema; OpenAPI-only keywords are dropped.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import unquote, urldefrag, urljoin

from referencing.exceptions import Unresolvable

from adapters.openapi.discriminators import Discriminators, pinned
from adapters.openapi.keywords import (
    ANNOTATIONS,
    beside_ref,
    distinct,
    is_dict,
    json_type,
    or_null,
    python_reads,
)

__all__ = ["INLINE_MAX_VALUES", "Direction", "RefCycleError", "SchemaInliner", "SpecError"]

Direction = Literal["input", "output"]

# Keywords whose value is one subschema / a list of subschemas / a map of name -> subschema.
_ONE = (
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "dependentSchemas")
# Keywords that apply their subschemas to the same instance (no descent into a part of it).
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas"})
# OpenAPI-only or bulky annotation keywords that a tool contract does not need.
_DROP = frozenset(
    {
        "example",
        "examples",
        "xml",
        "externalDocs",
        "discriminator",
        "nullable",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "definitions",
        "$defs",
    }
)
# A referenced schema holding more values than this, written out, is kept once under `$defs`
# rather than inlined at each use.
INLINE_MAX_VALUES = 500
_DEF_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class SpecError(Exception):
    """A problem in an OpenAPI document: `location` says where (a JSON path), `problem` what."""

    def __init__(self, problem: str, location: str = "") -> None:
        self.problem = problem
        self.location = location
        super().__init__(f"{location}: {problem}" if location else problem)


class RefCycleError(SpecError):
    """A `$ref` cycle that never reaches a concrete schema: no value could ever be checked."""

    WHY = (
        "never reaches a concrete schema (each refers on through `$ref`, `allOf`, `anyOf`, `oneOf`, `not` or "
        "`if` without a property or item in between), so no value can be checked against it"
    )

    def __init__(self, cycle: str, location: str) -> None:
        self.cycle = cycle
        super().__init__(
            f"$ref cycle {cycle} {self.WHY}; make one of them end the cycle, or leave the operation "
            "out with `exclude`",
            location,
        )


class SchemaInliner(Discriminators):
    """Expands schemas of one document. Results are shared between tools (never mutate them)."""

    def __init__(self, lookup: Callable[[str], Any], base_uri: str, openapi_30: bool) -> None:
        self._lookup = lookup
        self.base_uri = base_uri
        self.openapi_30 = openapi_30
        self._cache: dict[tuple[str, Direction], tuple[Any, frozenset[str]]] = {}
        self._stack: list[tuple[str, Direction]] = []
        self._levels: list[int] = []  # self._descent when each entry of _stack was pushed
        self._descent = 0  # properties / items entered so far
        self._in_place: dict[str, set[str]] = {}  # uri -> uris it reaches without descending
        self._recursive: set[tuple[str, Direction]] = set()
        self._defs: dict[tuple[str, Direction], tuple[Any, frozenset[str]]] = {}
        self._gathered: dict[
            tuple[frozenset[str], Direction], dict[str, Any]
        ] = {}  # needs -> their `$defs`
        self._names: dict[str, str] = {}
        self._uris: dict[str, str] = {}
        self._taken: set[str] = set()
        # id -> (node, values it holds written out): of the referenced schemas' parts, kept while
        # this inliner lives; of the parts an operation's schemas have of their own, until `forget_own`
        self._sizes: dict[int, tuple[Any, int]] = {}
        self._own_sizes: dict[int, tuple[Any, int]] = {}

    # ------------------------------------------------------------------ references

    def resolve(self, node: Any, base: str, where: str) -> tuple[Any, str]:
        """Follow `$ref` chains of a non-schema object (parameter, response, request body)."""
        seen: set[str] = set()
        while is_dict(node) and isinstance(node.get("$ref"), str):
            uri = urljoin(base, node["$ref"])
            if uri in seen:
                raise SpecError(f"$ref {node['$ref']!r} refers to itself", where)
            seen.add(uri)
            node, base = self.lookup(uri, node["$ref"], where), urldefrag(uri).url
        return node, base

    def lookup(self, uri: str, ref: str, where: str) -> Any:
        try:
            return self._lookup(uri)
        except Unresolvable as exc:
            cause = exc.__cause__ or exc.__context__
            if cause is not None and isinstance(cause.__cause__, PermissionError | ValueError):
                cause = (
                    cause.__cause__
                )  # a read refused (a document it may not read, or past the limits) says why
            why = (
                f" ({type(cause).__name__}: {str(cause)[:160]})"
                if cause and not isinstance(cause, KeyError)
                else ""
            )
            if (
                "does not exist within" in why
            ):  # referencing quotes the whole document; keep it short
                why = ""
            raise SpecError(f"$ref {ref!r} cannot be resolved{why}", where) from None

    def _def_name(self, uri: str) -> str:
        name = self._names.get(uri)
        if name is None:
            doc, fragment = urldefrag(uri)
            tail = (
                unquote(fragment.rstrip("/").rsplit("/", 1)[-1])
                if fragment
                else doc.rsplit("/", 1)[-1]
            )
            base = _DEF_NAME.sub("_", tail).strip("_") or "schema"
            name, n = base, 2
            while name in self._taken:
                name, n = f"{base}_{n}", n + 1
            self._taken.add(name)
            self._names[uri] = name
            self._uris[name] = uri
        return name

    # ------------------------------------------------------------------ public API

    def schema(self, node: Any, base: str, where: str, direction: Direction) -> dict[str, Any]:
        """A self-contained JSON Schema for `node` (with `$defs` for recursive parts)."""
        needs: set[str] = set()
        out = self._expand(node, base, where, direction, needs)
        if not is_dict(out):
            out = {} if out is True or out is None else {"not": {}}
        return self.with_defs(out, needs, direction)

    def expand(
        self, node: Any, base: str, where: str, direction: Direction, needs: set[str]
    ) -> Any:
        """Expand without attaching `$defs`: the caller merges several and calls `with_defs`."""
        return self._expand(node, base, where, direction, needs)

    def unwrap(self, schema: Any, direction: Direction) -> Any:
        """A recursive schema used at the top (`{"$ref": "#/$defs/Node"}`) as one inline copy of
        its definition, so an object body can still be inlined and an output is still an object."""
        if (
            not is_dict(schema)
            or not isinstance(schema.get("$ref"), str)
            or not schema["$ref"].startswith("#/$defs/")
        ):
            return schema
        uri = self._uris.get(schema["$ref"][len("#/$defs/") :])
        found = self._defs.get((uri, direction)) if uri else None
        if found is None or not is_dict(found[0]):
            return schema
        return {**found[0], **{k: v for k, v in schema.items() if k != "$ref"}}

    def with_defs(
        self, schema: dict[str, Any], needs: set[str], direction: Direction
    ) -> dict[str, Any]:
        if not needs:
            return schema
        # operations that use the same referenced schemas need the same `$defs`: gathered once
        # (each definition's own needs are walked for each it reaches: Microsoft Graph's
        # entities reach one another, and gathering them anew for each operation was most of
        # the mapping of a document made to its pattern)
        key = (frozenset(needs), direction)
        defs = self._gathered.get(key)
        if defs is None:
            defs = self._gathered[key] = self._gather(needs, direction)
        return {**schema, "$defs": defs}

    def _gather(self, needs: set[str], direction: Direction) -> dict[str, Any]:
        defs: dict[str, Any] = {}
        todo = list(needs)
        while todo:
            uri = todo.pop()
            name = self._def_name(uri)
            if name in defs:
                continue
            body, more = self._defs[(uri, direction)]
            defs[name] = body
            todo.extend(m for m in more if self._def_name(m) not in defs)
        return defs

    # ------------------------------------------------------------------ expansion

    def _expand(
        self, node: Any, base: str, where: str, direction: Direction, needs: set[str]
    ) -> Any:
        if isinstance(node, bool):
            return node
        if not is_dict(node):
            raise SpecError(f"a schema must be an object, got {type(node).__name__}", where)
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self._expand_ref(urljoin(base, ref), ref, where, direction, needs)
            siblings = {
                k: v
                for k, v in node.items()
                if k != "$ref"
                and k not in _DROP
                and not k.startswith("x-")
                and (k in ANNOTATIONS or not self.openapi_30)
            }
            if siblings and is_dict(target):
                target = beside_ref(target, self._expand(siblings, base, where, direction, needs))
            if self.openapi_30 and node.get("nullable") is True:
                # `{$ref: Pet, nullable: true}`: how 3.0 documents say "a Pet or null" (a schema
                # without it would refuse the null answers of the API it describes)
                return or_null(target)
            return target
        return self._convert(node, base, where, direction, needs)

    def _expand_ref(
        self, uri: str, ref: str, where: str, direction: Direction, needs: set[str]
    ) -> Any:
        key = (uri, direction)
        if self._stack and self._levels[-1] == self._descent:
            self._link(self._stack[-1][0], uri, where)
        if key in self._recursive:
            needs.add(uri)
            return {"$ref": f"#/$defs/{self._def_name(uri)}"}
        cached = self._cache.get(key)
        if cached is not None:
            needs.update(cached[1])
            return cached[0]
        if key in self._stack:
            self._recursive.add(key)
            needs.add(uri)
            return {"$ref": f"#/$defs/{self._def_name(uri)}"}
        target = self.lookup(uri, ref, where)
        self._stack.append(key)
        self._levels.append(self._descent)
        inner: set[str] = set()
        try:
            body = self._expand(target, urldefrag(uri).url, f"{where} -> {ref}", direction, inner)
        finally:
            self._stack.pop()
            self._levels.pop()
        size = self._measured(
            body, self._sizes
        )  # a recursive one too: every tool's `$defs` lists it
        if key in self._recursive or size > INLINE_MAX_VALUES:
            # a recursive schema, or one so large that inlining each use would multiply it:
            # DocuSign's envelope schemas, inlined wherever used, wrote out 60 MB for one tool
            inner.discard(uri)
            self._defs[key] = (body, frozenset(inner))
            needs.add(uri)
            needs.update(inner)
            result: Any = {"$ref": f"#/$defs/{self._def_name(uri)}"}
            self._cache[key] = (result, frozenset(inner | {uri}))
            return result
        needs.update(inner)
        self._cache[key] = (body, frozenset(inner))
        return body

    def written_size(self, node: Any) -> int:
        """The values `node` holds once written out as JSON: expanded schemas share their parts,
        so a part used ten times counts ten times (each part of a referenced schema is measured
        once, while this inliner lives: Microsoft Graph's tools counted anew took 8 s of mapping
        its document; the parts an operation's schemas have of their own, until `forget_own`)."""
        return self._measured(node, self._own_sizes)

    def forget_own(self) -> None:
        """Let go of the sizes of the parts the last operation's schemas had of their own: kept,
        they kept those parts (every operation's top level, `$defs` and parameters) alive until
        the whole document was mapped, where the tools hold each distinct one once."""
        self._own_sizes.clear()

    def _measured(self, node: Any, memo: dict[int, tuple[Any, int]]) -> int:
        if not isinstance(node, dict | list):
            return 1
        known = self._sizes.get(id(node)) or self._own_sizes.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        children = node.values() if isinstance(node, dict) else node
        size = 1 + sum(self._measured(child, memo) for child in children)
        memo[id(node)] = (node, size)  # the node is kept: its id is not reused meanwhile
        return size

    def _link(self, source: str, target: str, where: str) -> None:
        """Record that `source` reaches `target` without descending; fail when that closes a cycle."""
        reached = self._in_place.setdefault(source, set())
        if target in reached:
            return
        back = self._path(target, source)
        if back is not None:
            cycle = " -> ".join(self._shown(u) for u in (source, *back))
            raise RefCycleError(cycle, where)
        reached.add(target)

    def _path(self, start: str, goal: str) -> list[str] | None:
        """The uris from `start` to `goal` along recorded in-place links, or None."""
        came: dict[str, str | None] = {start: None}
        todo = [start]
        while todo:
            uri = todo.pop()
            if uri == goal:
                path = [uri]
                while (prev := came[path[-1]]) is not None:
                    path.append(prev)
                return path[::-1]
            for nxt in self._in_place.get(uri, ()):
                if nxt not in came:
                    came[nxt] = uri
                    todo.append(nxt)
        return None

    def _shown(self, uri: str) -> str:
        doc, fragment = urldefrag(uri)
        return f"#{fragment}" if doc == self.base_uri else uri

    def _convert(
        self, node: dict[str, Any], base: str, where: str, direction: Direction, needs: set[str]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        unread: str | None = None
        for key, value in node.items():
            if key in _DROP or key.startswith("x-"):
                continue
            descends = key not in _IN_PLACE  # only subschemas matter; other keys expand nothing
            self._descent += descends
            try:
                if key in _ONE or key == "additionalProperties":
                    out[key] = self._expand(value, base, f"{where}.{key}", direction, needs)
                elif key == "items":
                    if isinstance(value, list):  # 2019-09 tuple form
                        out["prefixItems"] = [
                            self._expand(v, base, f"{where}.items[{i}]", direction, needs)
                            for i, v in enumerate(value)
                        ]
                    else:
                        out[key] = self._expand(value, base, f"{where}.items", direction, needs)
                elif key in _MANY:
                    if not isinstance(value, list):
                        raise SpecError(f"`{key}` must be a list of schemas", where)
                    out[key] = [
                        self._expand(v, base, f"{where}.{key}[{i}]", direction, needs)
                        for i, v in enumerate(value)
                    ]
                    discriminator = (
                        self._discriminator_of(node, value, base)
                        if key in ("oneOf", "anyOf")
                        else None
                    )
                    if discriminator is not None:
                        out[key] = pinned(
                            discriminator,
                            value,
                            out[key],
                            functools.partial(self._implicit_value, base=base),
                        )
                    if key == "oneOf" and discriminator is not None and "anyOf" not in node:
                        # the discriminator, not the branches' exclusivity, picks the branch: branches
                        # that share the base schema's properties matched every value twice, and a
                        # oneOf refused it
                        out["anyOf"] = out.pop("oneOf")
                elif key in _MAP:
                    if not is_dict(value):
                        raise SpecError(f"`{key}` must be an object of schemas", where)
                    out[key] = {
                        k: self._expand(v, base, f"{where}.{key}.{k}", direction, needs)
                        for k, v in value.items()
                    }
                elif key == "enum" and isinstance(value, list):
                    out[key] = distinct(value)
                elif key == "pattern" and isinstance(value, str) and not python_reads(value):
                    # a pattern no validator here can apply would make the whole schema unusable
                    # (every argument then goes unchecked): it is said in the description instead
                    unread = value
                else:
                    out[key] = value
            finally:
                self._descent -= descends
        if "type" in out and not json_type(out["type"]):
            # `type: application/json` (Cloudmersive), a schema under `type` (Codat): no validator
            # or provider takes the schema; without it, the value is left to the server
            del out["type"]
        if unread is not None:
            note = f"pattern (ECMA-262, not checked by the bridge): {unread}"
            out["description"] = (
                f"{out['description']} ({note})"
                if isinstance(out.get("description"), str) and out["description"]
                else note
            )
        self._drop_one_way(out, "readOnly" if direction == "input" else "writeOnly")
        # draft 4's boolean bounds: OpenAPI 3.0's, and a 3.1 schema's written in that draft
        # (`jsonSchemaDialect`, or its own `$schema`); 2020-12 reads only numbers there
        self._numeric_bounds(out)
        if self.openapi_30 and node.get("nullable") is True:
            return or_null(out)
        return out

    @staticmethod
    def _drop_one_way(schema: dict[str, Any], flag: str) -> None:
        """Properties marked readOnly are not sent; those marked writeOnly never come back."""
        props = schema.get("properties")
        if not is_dict(props):
            return
        hidden = [k for k, v in props.items() if is_dict(v) and v.get(flag) is True]
        if not hidden:
            return
        schema["properties"] = {k: v for k, v in props.items() if k not in hidden}
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r not in hidden]

    @staticmethod
    def _numeric_bounds(out: dict[str, Any]) -> None:
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            flag = out.get(bound)
            if isinstance(flag, bool):
                if flag and limit in out:
                    out[bound] = out.pop(limit)
                else:
                    del out[bound]
