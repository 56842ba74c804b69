"""ATIP metadata as callable commands: a tool's subcommand tree flattened into leaf commands,
each with its JSON input schema, its argv path and parameter table, its merged effects, and the
safety hints and permission profile those effects declare."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.model import SCHEMA_VERSION, SafetyHints, UpstreamTool

__all__ = [
    "ATIPCommand",
    "Param",
    "asks_caller",
    "atip_version_of",
    "flatten",
    "merge_effects",
    "needs_interaction",
    "param_schema",
    "parse_duration",
    "permission_profile",
    "safety_of",
    "to_upstream_tool",
]

# ATIP type -> JSON Schema, and the note the RFC appends to the description.
_TYPES: dict[str, tuple[dict[str, Any], str]] = {
    "string": ({"type": "string"}, ""),
    "integer": ({"type": "integer"}, ""),
    "number": ({"type": "number"}, ""),
    "boolean": ({"type": "boolean"}, ""),
    "file": ({"type": "string", "format": "file-path"}, " (file path)"),
    "directory": ({"type": "string", "format": "directory-path"}, " (directory path)"),
    "url": ({"type": "string", "format": "uri"}, " (URL)"),
    "enum": ({"type": "string"}, ""),
    "array": ({"type": "array", "items": {"type": "string"}}, ""),
}
_OR_FLAGS = ("network", "subprocess", "destructive")
_AND_FLAGS = ("reversible", "idempotent")
_FS_FLAGS = ("read", "write", "delete")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


@dataclass(frozen=True)
class Param:
    """One input property and how it reaches the argv."""

    prop: str
    kind: Literal["argument", "option"]
    atip_type: str
    flag: str | None = None  # the option flag written on the argv
    is_array: bool = False  # the property is a JSON array (variadic or type `array`)


@dataclass
class ATIPCommand:
    """One leaf command of an ATIP tool: `path` is the argv after the executable."""

    tool: str
    path: tuple[str, ...]
    description: str
    params: list[Param]
    input_schema: dict[str, Any]
    effects: dict[str, Any]
    examples: list[str] = field(default_factory=list)

    @property
    def native_id(self) -> str:
        return " ".join((self.tool, *self.path))

    @property
    def native_name(self) -> str:
        return "_".join((self.tool, *self.path))

    @property
    def command_line(self) -> str:
        return " ".join(self.path)


def atip_version_of(metadata: dict[str, Any]) -> str:
    """The protocol version: `atip` is a legacy string ("0.3") or an object ({"version": "0.6"})."""
    raw = metadata.get("atip")
    if isinstance(raw, dict):
        return str(raw.get("version", ""))
    return str(raw or "")


def merge_effects(root: dict[str, Any] | None, command: dict[str, Any] | None) -> dict[str, Any]:
    """Root effects apply to every command, merged conservatively: `network`, `subprocess`,
    `destructive` and filesystem flags are true if either says so; `reversible` and `idempotent`
    are false if either says so; `cost`, `duration` and `interactive` keys of the command win."""
    root, command = root or {}, command or {}
    merged: dict[str, Any] = {}
    for key in _OR_FLAGS:
        values = [v for v in (root.get(key), command.get(key)) if isinstance(v, bool)]
        if values:
            merged[key] = any(values)
    for key in _AND_FLAGS:
        values = [v for v in (root.get(key), command.get(key)) if isinstance(v, bool)]
        if values:
            merged[key] = all(values)
    fs_root, fs_cmd = root.get("filesystem") or {}, command.get("filesystem") or {}
    if fs_root or fs_cmd:
        fs: dict[str, Any] = {}
        for key in _FS_FLAGS:
            values = [v for v in (fs_root.get(key), fs_cmd.get(key)) if isinstance(v, bool)]
            if values:
                fs[key] = any(values)
        paths = list(dict.fromkeys([*(fs_root.get("paths") or []), *(fs_cmd.get("paths") or [])]))
        if paths:
            fs["paths"] = paths
        merged["filesystem"] = fs
    for key in ("creates", "modifies", "deletes"):
        items = list(dict.fromkeys([*(root.get(key) or []), *(command.get(key) or [])]))
        if items:
            merged[key] = items
    for key in ("cost", "duration", "interactive"):
        value = {**(root.get(key) or {}), **(command.get(key) or {})}
        if value:
            merged[key] = value
    return merged


def param_schema(spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """JSON Schema of one ATIP argument or option (RFC type table), and whether it is an array."""
    atip_type = spec.get("type", "string")
    base, note = _TYPES.get(atip_type, _TYPES["string"])
    schema = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        target = schema["items"] if atip_type == "array" else schema
        target["enum"] = list(enum)
        if all(isinstance(v, str) for v in enum):
            target["type"] = "string"
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in enum):
            target["type"] = "integer"
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in enum):
            target["type"] = "number"
        else:
            target.pop("type", None)
    description = (spec.get("description") or "") + note
    is_array = atip_type == "array"
    if spec.get("variadic") and not is_array:
        schema = {"type": "array", "items": schema}
        is_array = True
    if description:
        schema["description"] = description
    if "default" in spec:
        schema["default"] = spec["default"]
    return schema, is_array


def _long_flag(flags: list[str]) -> str:
    return next((f for f in flags if f.startswith("--")), flags[0])


def _inputs(node: dict[str, Any]) -> tuple[dict[str, Any], list[Param]]:
    """Arguments and options as one object schema; a name used twice gets a `_2` suffix."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[Param] = []

    def unique(name: str) -> str:
        prop, n = name, 1
        while prop in properties:
            n += 1
            prop = f"{name}_{n}"
        return prop

    for arg in node.get("arguments") or []:
        prop = unique(arg["name"])
        param, is_array = param_schema(arg)
        if is_array and arg.get("required", True):
            param["minItems"] = 1
        properties[prop] = param
        if arg.get("required", True):
            required.append(prop)
        params.append(Param(prop, "argument", arg.get("type", "string"), None, is_array))
    for opt in node.get("options") or []:
        prop = unique(opt["name"])
        param, is_array = param_schema(opt)
        properties[prop] = param
        if opt.get("required", False):
            required.append(prop)
        params.append(
            Param(prop, "option", opt.get("type", "string"), _long_flag(opt["flags"]), is_array)
        )
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema, params


def flatten(metadata: dict[str, Any]) -> list[ATIPCommand]:
    """Every leaf command (a node without non-empty `commands`) of validated metadata. In a
    partial document (`"partial": true`) a node whose `commands` is an empty object is a subtree
    cut off by the depth limit: it is not a tool until it is expanded."""
    tool = metadata["name"]
    root_effects = metadata.get("effects") or {}
    partial = metadata.get("partial") is True
    out: list[ATIPCommand] = []

    def walk(path: tuple[str, ...], node: dict[str, Any]) -> None:
        children = node.get("commands")
        if isinstance(children, dict) and (children or partial):
            for name, child in children.items():
                walk((*path, name) if name else path, child)
            return
        schema, params = _inputs(node)
        out.append(
            ATIPCommand(
                tool=tool,
                path=path,
                description=node.get("description", ""),
                params=params,
                input_schema=schema,
                effects=merge_effects(root_effects, node.get("effects")),
                examples=list(node.get("examples") or []),
            )
        )

    for name, node in (metadata.get("commands") or {}).items():
        walk((name,) if name else (), node)
    return out


def needs_interaction(effects: dict[str, Any]) -> bool:
    """A command that waits for stdin, a password, a prompt answer or a terminal."""
    return bool(interaction_needs(effects))


def asks_caller(effects: dict[str, Any]) -> bool:
    """A command whose wait for a user the caller can answer in a form: input on stdin or answers
    to prompts. Not a terminal, which the bridge has none of, nor a password, which MCP forbids
    asking for in a form."""
    interactive = effects.get("interactive") or {}
    if interactive.get("tty") is True or interactive.get("stdin") == "password":
        return False
    return needs_interaction(effects)


def interaction_needs(effects: dict[str, Any]) -> list[str]:
    """What a command waits for from a user, as its metadata says (empty when nothing)."""
    interactive = effects.get("interactive") or {}
    needs = []
    if interactive.get("stdin") in ("required", "password"):
        needs.append(
            "a password on stdin" if interactive["stdin"] == "password" else "input on stdin"
        )
    if interactive.get("prompts") is True:
        needs.append("answers to prompts")
    if interactive.get("tty") is True:
        needs.append("a terminal")
    return needs


def safety_of(effects: dict[str, Any]) -> SafetyHints:
    """Safety hints from merged effects; every fact the metadata states is marked `declared`."""
    hints = SafetyHints()
    sources: dict[str, Any] = {}
    fs = effects.get("filesystem") or {}
    if isinstance(effects.get("destructive"), bool):
        hints.destructive = effects["destructive"]
        sources["destructive"] = "declared"
    if isinstance(effects.get("reversible"), bool):
        hints.reversible = effects["reversible"]
        sources["reversible"] = "declared"
    if isinstance(effects.get("idempotent"), bool):
        hints.idempotent = effects["idempotent"]
        sources["idempotent"] = "declared"
    if isinstance(effects.get("network"), bool):
        hints.open_world = effects["network"]
        sources["open_world"] = "declared"
    billable = (effects.get("cost") or {}).get("billable")
    if isinstance(billable, bool):
        hints.billable = billable
        sources["billable"] = "declared"
    writes = (
        effects.get("network") is True
        or fs.get("write") is True
        or fs.get("delete") is True
        or effects.get("destructive") is True
    )
    if writes:
        hints.read_only = False
        sources["read_only"] = "declared"
    elif effects.get("network") is False and fs.get("write") is False:
        hints.read_only = True
        sources["read_only"] = "declared"
    if "interactive" in effects:
        hints.requires_user_interaction = needs_interaction(effects)
        sources["requires_user_interaction"] = "declared"
    hints.sources = sources
    return hints


def _risk(effects: dict[str, Any], hints: SafetyHints) -> str:
    fs = effects.get("filesystem") or {}
    if hints.destructive:
        return "critical"
    if fs.get("delete") or hints.reversible is False or hints.billable or effects.get("deletes"):
        return "high"
    if hints.read_only and hints.sources.get("read_only") == "declared":
        return "low"
    return "medium"


def permission_profile(
    command: ATIPCommand, hints: SafetyHints, auth: dict[str, Any] | None
) -> dict[str, Any]:
    """Agent Tool `permission_profile` of a command, from what its effects declare."""
    effects = command.effects
    fs = effects.get("filesystem") or {}
    access = [f"filesystem.{k}" for k in _FS_FLAGS if fs.get(k)]
    if effects.get("network"):
        access.append("network")
    if effects.get("subprocess"):
        access.append("subprocess")
    writes = [
        f"{verb}:{item}"
        for verb in ("creates", "modifies", "deletes")
        for item in effects.get(verb) or []
    ]
    profile: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "permission_profile_id": f"atip:{command.native_id}",
        "risk_level": _risk(effects, hints),
        "access_kinds": access,
        "write_effects": writes,
        "approval_required": bool(hints.destructive or hints.requires_user_interaction),
        "rule_matching_fields": [
            "destructive",
            "read_only",
            "open_world",
            "requires_user_interaction",
        ],
    }
    if isinstance(effects.get("network"), bool):
        profile["network_scope"] = "external" if effects["network"] else "none"
    if hints.destructive:
        profile["approval_reason"] = "declared destructive by the tool's ATIP metadata"
    elif hints.requires_user_interaction:
        profile["approval_reason"] = "needs stdin, a prompt answer or a terminal"
    env_vars = [m["envVar"] for m in (auth or {}).get("methods") or [] if m.get("envVar")]
    if env_vars:
        profile["credential_refs"] = [f"env:{v}" for v in env_vars]
    if fs.get("paths"):
        profile["sandbox_profile"] = "paths:" + ",".join(fs["paths"])
    return profile


def parse_duration(text: Any) -> float | None:
    """`"60s"`, `"5m"`, `"1h"` in seconds; None when absent, unreadable, zero or not finite
    (the schema allows any number of digits, and `"999…9s"` reads as infinity)."""
    if not isinstance(text, str):
        return None
    match = _DURATION.match(text)
    if not match:
        return None
    value, unit = float(match.group(1)), match.group(2) or "s"
    seconds = value * {"s": 1, "m": 60, "h": 3600}[unit]
    return seconds if 0 < seconds < math.inf else None


def to_upstream_tool(
    command: ATIPCommand,
    *,
    executable: str,
    atip_version: str,
    metadata: dict[str, Any],
    interaction_answered: bool = False,
) -> UpstreamTool:
    """The catalog record of one command. A command that waits for a user is blocked with
    `requires_user_interaction` unless the config answers it or its caller can be asked
    (`asks_caller`): the bridge then gives it what it waits for."""
    hints = safety_of(command.effects)
    blocked = detail = None
    line = " ".join((command.tool, *command.path))
    asked = not interaction_answered and asks_caller(command.effects)
    if hints.requires_user_interaction:
        if interaction_answered or asked:
            hints.requires_user_interaction = False
            hints.sources["requires_user_interaction"] = "declared"
        else:
            blocked = "requires_user_interaction"
            detail = (
                f"`{line}` waits for {' and '.join(interaction_needs(command.effects)) or 'a user'}, "
                f"which the bridge cannot ask its caller for; an `answers:` entry of the upstream matching it (stdin or flags) lets it run"
            )
    annotations: dict[str, Any] = {
        "permission_profile": permission_profile(command, hints, metadata.get("authentication")),
        "atip": {
            "effects": command.effects,
            **({"examples": command.examples} if command.examples else {}),
            **({"trust": metadata["trust"]} if metadata.get("trust") else {}),
            **({"interaction_answered": True} if interaction_answered else {}),
            **({"interaction_asked": interaction_needs(command.effects)} if asked else {}),
        },
    }
    return UpstreamTool(
        native_id=command.native_id,
        name=command.native_name,
        title=line,
        description=command.description,
        tool_kind="shell_command",
        input_schema=command.input_schema,
        safety=hints,
        search_hint=line,
        external_mapping={
            "source": "atip",
            "executable": executable,
            "argv_path": list(command.path),
            "atip_version": atip_version,
            "command_id": line,
            "tool_version": metadata.get("version"),
        },
        annotations=annotations,
        blocked_reason=blocked,
        blocked_detail=detail,
    )
