"""OpenAPI's `discriminator` in JSON Schema terms: the discriminator that picks a branch of a
`oneOf` / `anyOf` (a schema's own, or the one its branches inherit through `allOf`), each
branch's value of the property (from `mapping`, or the implicit name of the schema component it
refers to), and each branch pinned to its value(s)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from referencing.exceptions import Unresolvable

from adapters.openapi.keywords import is_dict

__all__ = ["Discriminators", "pinned"]


def pinned(
    discriminator: Any,
    raw: list[Any],
    branches: list[Any],
    implicit: Callable[[Any, str], str | None],
) -> list[Any]:
    """OpenAPI's `discriminator` names the branch of a `oneOf` / `anyOf` a value takes by one of
    its properties; JSON Schema has no such keyword, and without it a value can match another
    branch than the one its server reads it as. Each branch gets the property's value(s) as a
    constant: those its `mapping` names it by (`$ref` or schema name), else its implicit value,
    the name of the schema component it refers to (`#/components/schemas/Cat` is `Cat`), which
    `implicit(raw branch, property)` gives unless the branch's own schema allows other values only."""
    if not is_dict(discriminator) or not isinstance(discriminator.get("propertyName"), str):
        return branches
    mapping = found if is_dict(found := discriminator.get("mapping")) else {}
    prop = discriminator["propertyName"]
    out = []
    for raw_branch, branch in zip(raw, branches, strict=True):
        ref = raw_branch.get("$ref") if is_dict(raw_branch) else None
        values = [
            value
            for value, target in mapping.items()
            if isinstance(ref, str)
            and isinstance(target, str)
            and (
                target == ref
                or (not target.startswith(("#", ".", "/")) and ref.endswith("/" + target))
            )
        ]
        if not values:
            name = implicit(raw_branch, prop)
            values = [name] if name is not None and name not in mapping else []
        if not values:
            out.append(branch)
            continue
        pin = {"const": values[0]} if len(values) == 1 else {"enum": values}
        out.append({"allOf": [branch, {"properties": {prop: pin}, "required": [prop]}]})
    return out


_COMPONENT_SCHEMA = re.compile(r"^/components/schemas/([^/]+)$")


def discriminates(node: dict[str, Any]) -> bool:
    discriminator = node.get("discriminator")
    return is_dict(discriminator) and isinstance(discriminator.get("propertyName"), str)


class Discriminators:
    """The discriminator side of `SchemaInliner` (a mixin: the inliner holds the document)."""

    _lookup: Callable[[str], Any]

    def _raw(self, node: Any, base: str, depth: int = 8) -> tuple[Any, str]:
        """`node` with its `$ref` chain followed in the document as written (None when a `$ref`
        cannot be resolved or the chain is long): for reading a discriminator, not for expanding."""
        while is_dict(node) and isinstance(node.get("$ref"), str):
            if depth == 0:
                return None, base
            uri = urljoin(base, node["$ref"])
            try:
                node, base, depth = self._lookup(uri), urldefrag(uri).url, depth - 1
            except Unresolvable:
                return None, base
        return node, base

    def _discriminator_of(
        self, node: dict[str, Any], branches: Any, base: str
    ) -> dict[str, Any] | None:
        """The discriminator that picks a branch of `node`'s `oneOf` / `anyOf`: its own, or, when
        it has none, the one each branch inherits through `allOf` from a base schema (`Cat` is
        `allOf: [Pet, {...}]` and `Pet` holds the discriminator), when all branches inherit one
        on the same property."""
        if discriminates(node):
            return node["discriminator"]
        if not isinstance(branches, list) or not branches:
            return None
        found: dict[str, Any] | None = None
        for branch in branches:
            inherited = self._inherited_discriminator(branch, base, 3)
            if inherited is None or (
                found is not None and inherited["propertyName"] != found["propertyName"]
            ):
                return None
            found = found or inherited
        return found

    def _inherited_discriminator(self, branch: Any, base: str, depth: int) -> dict[str, Any] | None:
        branch, base = self._raw(branch, base)
        parts = branch.get("allOf") if is_dict(branch) else None
        if depth == 0 or not isinstance(parts, list):
            return None
        for part in parts:
            schema, _part_base = self._raw(part, base)
            if is_dict(schema) and discriminates(schema):
                return schema["discriminator"]
            inherited = self._inherited_discriminator(part, base, depth - 1)
            if inherited is not None:
                return inherited
        return None

    def _implicit_value(self, branch: Any, prop: str, base: str) -> str | None:
        """The implicit discriminator value of a branch: the name of the schema component its
        `$ref` names. None for an inline branch, or when the branch's own schema gives the
        property a `const` or `enum` without that name (the document sends other values)."""
        ref = branch.get("$ref") if is_dict(branch) else None
        if not isinstance(ref, str):
            return None
        match = _COMPONENT_SCHEMA.match(urldefrag(ref).fragment)
        if match is None:
            return None
        name = unquote(match.group(1)).replace("~1", "/").replace("~0", "~")
        allowed = self._declared_values(branch, prop, base, 4)
        return None if allowed is not None and name not in allowed else name

    def _declared_values(self, schema: Any, prop: str, base: str, depth: int) -> list[Any] | None:
        """The values a schema's `const` or `enum` allows for property `prop` (through `allOf`), or None."""
        schema, base = self._raw(schema, base)
        if depth == 0 or not is_dict(schema):
            return None
        props = schema.get("properties")
        if is_dict(props) and prop in props:
            declared, _ = self._raw(props[prop], base)
            if is_dict(declared) and "const" in declared:
                return [declared["const"]]
            if is_dict(declared) and isinstance(declared.get("enum"), list):
                return declared["enum"]
        parts = schema.get("allOf")
        for part in parts if isinstance(parts, list) else ():
            values = self._declared_values(part, prop, base, depth - 1)
            if values is not None:
                return values
        return None
