"""The difference of two versions of a tool's signature, item by item: what changed in its
inputs, outputs, schemas' roots and safety facts, each marked compatible or breaking with the
reason, under the verdict `bridge.versions.classify_change` gives for the whole."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from bridge.versions import classify_change

__all__ = ["SignatureChange", "signature_diff"]

Effect = Literal["compatible", "breaking"]

# Keywords of a schema's root that only annotate it, or that the items below read themselves.
_ROOT_SKIPPED = frozenset(
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
_DEFS = ("$defs", "definitions")


@dataclass(frozen=True)
class SignatureChange:
    """One difference: where (`input.city`, `output`, `safety.read_only`), what happened
    (`added`, `removed`, `changed`, `now required`, ...), its effect on a caller of the old
    version, and why, in a sentence."""

    where: str
    what: str
    effect: Effect
    why: str
    old: Any = None
    new: Any = None


def _schema(signature: dict[str, Any], key: str) -> dict[str, Any]:
    value = signature.get(key)
    return value if isinstance(value, dict) else {}


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties")
    return props if isinstance(props, dict) else {}


def _required(schema: dict[str, Any]) -> set[str]:
    required = schema.get("required")
    return {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 120 else text[:119] + "…"


def _root_changes(side: str, old: dict[str, Any], new: dict[str, Any]) -> list[SignatureChange]:
    """The root keywords of one schema: referenced schemas may be added, nothing else may move."""
    out: list[SignatureChange] = []
    for key in sorted((old.keys() | new.keys()) - _ROOT_SKIPPED):
        before, after = old.get(key), new.get(key)
        if key in _DEFS and isinstance(before or {}, dict) and isinstance(after or {}, dict):
            old_defs, new_defs = before or {}, after or {}
            for name in sorted(old_defs.keys() | new_defs.keys()):
                where = f"{side}.{key}.{name}"
                if name not in new_defs:
                    out.append(
                        SignatureChange(
                            where,
                            "removed",
                            "breaking",
                            "a schema the properties refer to is gone",
                            old_defs[name],
                            None,
                        )
                    )
                elif name not in old_defs:
                    out.append(
                        SignatureChange(
                            where,
                            "added",
                            "compatible",
                            "a new referenced schema changes no old input or output",
                            None,
                            new_defs[name],
                        )
                    )
                elif old_defs[name] != new_defs[name]:
                    out.append(
                        SignatureChange(
                            where,
                            "changed",
                            "breaking",
                            "a schema the properties refer to changed: "
                            f"{_short(old_defs[name])} became {_short(new_defs[name])}",
                            old_defs[name],
                            new_defs[name],
                        )
                    )
        elif before != after:
            what = "added" if key not in old else "removed" if key not in new else "changed"
            out.append(
                SignatureChange(
                    f"{side}.{key}",
                    what,
                    "breaking",
                    f"the {side} schema's root keyword {key!r} was {what}: "
                    "it constrains every call",
                    before,
                    after,
                )
            )
    return out


def _input_changes(old: dict[str, Any], new: dict[str, Any]) -> list[SignatureChange]:
    out: list[SignatureChange] = []
    old_props, new_props = _properties(old), _properties(new)
    old_req, new_req = _required(old), _required(new)
    for name in sorted(old_props.keys() | new_props.keys()):
        where = f"input.{name}"
        if name not in new_props:
            out.append(
                SignatureChange(
                    where,
                    "removed",
                    "breaking",
                    "an input old callers may send is no longer declared",
                    old_props[name],
                    None,
                )
            )
        elif name not in old_props:
            if name in new_req:
                out.append(
                    SignatureChange(
                        where,
                        "added, required",
                        "breaking",
                        "a new required input: old callers do not send it",
                        None,
                        new_props[name],
                    )
                )
            else:
                out.append(
                    SignatureChange(
                        where,
                        "added, optional",
                        "compatible",
                        "a new optional input: old callers may leave it out",
                        None,
                        new_props[name],
                    )
                )
        elif old_props[name] != new_props[name]:
            out.append(
                SignatureChange(
                    where,
                    "changed",
                    "breaking",
                    f"its schema changed: {_short(old_props[name])} became "
                    f"{_short(new_props[name])}; a value old callers send "
                    "may be refused",
                    old_props[name],
                    new_props[name],
                )
            )
    for name in sorted((new_req - old_req) & old_props.keys()):
        out.append(
            SignatureChange(
                f"input.{name}",
                "now required",
                "breaking",
                "old callers may leave it out",
                False,
                True,
            )
        )
    for name in sorted((old_req - new_req) & new_props.keys()):
        out.append(
            SignatureChange(
                f"input.{name}",
                "now optional",
                "compatible",
                "old callers send it anyway",
                True,
                False,
            )
        )
    old_extra, new_extra = (
        old.get("additionalProperties", True),
        new.get("additionalProperties", True),
    )
    if old_extra != new_extra:
        refused = old_extra is not False and new_extra is False
        out.append(
            SignatureChange(
                "input.additionalProperties",
                "changed",
                "breaking" if refused else "compatible",
                "inputs the schema does not name are refused now"
                if refused
                else "the inputs the schema does not name are taken as before or more freely",
                old_extra,
                new_extra,
            )
        )
    return out


def _output_changes(old: dict[str, Any], new: dict[str, Any]) -> list[SignatureChange]:
    if old and not new:
        return [
            SignatureChange(
                "output",
                "removed",
                "breaking",
                "the tool no longer declares what it returns",
                old,
                None,
            )
        ]
    if new and not old:
        return [
            SignatureChange(
                "output", "added", "compatible", "the tool now declares what it returns", None, new
            )
        ]
    out: list[SignatureChange] = []
    old_props, new_props = _properties(old), _properties(new)
    for name in sorted(old_props.keys() | new_props.keys()):
        where = f"output.{name}"
        if name not in new_props:
            out.append(
                SignatureChange(
                    where,
                    "removed",
                    "breaking",
                    "an output old callers may read is no longer produced",
                    old_props[name],
                    None,
                )
            )
        elif name not in old_props:
            out.append(
                SignatureChange(
                    where,
                    "added",
                    "compatible",
                    "a new output: old callers ignore it",
                    None,
                    new_props[name],
                )
            )
        elif old_props[name] != new_props[name]:
            out.append(
                SignatureChange(
                    where,
                    "changed",
                    "breaking",
                    f"its schema changed: {_short(old_props[name])} became "
                    f"{_short(new_props[name])}",
                    old_props[name],
                    new_props[name],
                )
            )
    return out


def _safety_changes(old: dict[str, Any], new: dict[str, Any]) -> list[SignatureChange]:
    out: list[SignatureChange] = []
    for fact in sorted(old.keys() | new.keys()):
        before, after = bool(old.get(fact)), bool(new.get(fact))
        if before == after:
            continue
        breaking = (fact == "read_only" and before) or (fact == "destructive" and after)
        why = {
            ("read_only", True): "the tool may change things now, where it only read before",
            ("destructive", False): "the tool may destroy data now",
        }.get((fact, before), "a caller of the old version is no worse off")
        out.append(
            SignatureChange(
                f"safety.{fact}",
                "turned on" if after else "turned off",
                "breaking" if breaking else "compatible",
                why,
                before,
                after,
            )
        )
    return out


def signature_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`{compatibility, changes}` between two stored signatures (`bridge.versions.signature_of`):
    `same` when nothing differs, else the class `classify_change` gives, and each change with its
    effect and reason."""
    if old == new:
        return {"compatibility": "same", "changes": []}
    changes: list[SignatureChange] = []
    if old.get("native_name") != new.get("native_name"):
        changes.append(
            SignatureChange(
                "native_name",
                "changed",
                "compatible",
                "the upstream's own name changed; the exposed name and id stay",
                old.get("native_name"),
                new.get("native_name"),
            )
        )
    if old.get("description") != new.get("description"):
        changes.append(
            SignatureChange(
                "description",
                "changed",
                "compatible",
                "a description alone changes no call",
                old.get("description"),
                new.get("description"),
            )
        )
    old_in, new_in = _schema(old, "input_schema"), _schema(new, "input_schema")
    old_out, new_out = _schema(old, "output_schema"), _schema(new, "output_schema")
    changes += _root_changes("input", old_in, new_in)
    changes += _input_changes(old_in, new_in)
    changes += _root_changes("output", old_out, new_out)
    changes += _output_changes(old_out, new_out)
    changes += _safety_changes(_schema(old, "safety"), _schema(new, "safety"))
    verdict = classify_change(old, new)
    if verdict == "breaking" and not any(c.effect == "breaking" for c in changes):
        changes.append(
            SignatureChange(
                "signature",
                "changed",
                "breaking",
                "a caller of the old signature may not be served",
            )
        )
    return {"compatibility": verdict, "changes": [asdict(c) for c in changes]}
