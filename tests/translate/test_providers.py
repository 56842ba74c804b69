"""Provider function formats: safety suffix, OpenAI strict rules over the demo catalog, the
1024-character limit, Gemini and Anthropic shapes, and the `bridge translate` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bridge.config import parse_config
from bridge.model import InputContract, SafetyHints, ToolDeclaration
from bridge.runtime import Bridge
from bridge.translate.providers import (
    FLAG_BILLABLE,
    FLAG_DESTRUCTIVE,
    FLAG_NOT_IDEMPOTENT,
    FLAG_NOT_REVERSIBLE,
    FLAG_READ_ONLY,
    OPENAI_DESCRIPTION_LIMIT,
    StrictSchemaError,
    compile_tools,
    describe,
    gemini_schema,
    safety_suffix,
    strict_schema,
    to_anthropic,
    to_gemini,
    to_openai,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "$ref",
    "$defs",
    "definitions",
}
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def decl(
    name: str = "t",
    description: str = "Do it.",
    schema: dict[str, Any] | None = None,
    **safety: Any,
) -> ToolDeclaration:
    sources = safety.pop("sources", {k: "declared" for k in safety})
    return ToolDeclaration(
        tool_id=f"id-{name}",
        namespace="ns",
        name=name,
        description=description,
        input_contract=InputContract(
            model_input_schema=schema or {"type": "object", "properties": {}}
        ),
        safety=SafetyHints(**safety, sources=sources),
    )


def assert_openai_strict(tool: dict[str, Any]) -> None:
    """The rules OpenAI applies to a strict function definition."""
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["strict"] is True
    assert NAME.match(function["name"])
    assert len(function["description"]) <= OPENAI_DESCRIPTION_LIMIT
    parameters = function["parameters"]
    assert parameters["type"] == "object" and "anyOf" not in parameters
    jsonschema.Draft202012Validator.check_schema(parameters)

    def walk(node: Any, where: str) -> None:
        assert isinstance(node, dict) and node, f"{where}: empty schema"
        assert set(node) <= STRICT_KEYWORDS, f"{where}: unsupported {set(node) - STRICT_KEYWORDS}"
        kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "object" in kinds:
            assert node["additionalProperties"] is False, where
            assert node["required"] == list(node["properties"]), where
            for name, sub in node["properties"].items():
                walk(sub, f"{where}/properties/{name}")
        if "array" in kinds:
            walk(node["items"], f"{where}/items")
        for i, sub in enumerate(node.get("anyOf") or []):
            walk(sub, f"{where}/anyOf/{i}")
        for key in ("$defs", "definitions"):
            for name, sub in (node.get(key) or {}).items():
                walk(sub, f"{where}/{key}/{name}")

    walk(parameters, "")


# ---------------------------------------------------------------------------- suffix


def test_safety_suffix_follows_the_rfc_order_and_skips_default_facts():
    everything = decl(destructive=True, reversible=False, idempotent=False, billable=True)
    assert (
        safety_suffix(everything.safety)
        == f"[{FLAG_DESTRUCTIVE} | {FLAG_NOT_REVERSIBLE} | {FLAG_NOT_IDEMPOTENT} | {FLAG_BILLABLE}]"
    )
    assert FLAG_DESTRUCTIVE == "\u26a0\ufe0f DESTRUCTIVE"
    assert describe(decl(read_only=True)) == f"Do it. [{FLAG_READ_ONLY}]"
    # idempotent=False left at its default is not a declared fact: no flag
    assert describe(decl(sources={})) == "Do it."
    assert (
        describe(decl(idempotent=False, sources={"idempotent": "inferred"}))
        == f"Do it. [{FLAG_NOT_IDEMPOTENT}]"
    )


def test_the_1024_character_limit_keeps_the_safety_flags():
    long = decl(
        description="word " * 600,
        destructive=True,
        reversible=False,
        idempotent=False,
        billable=True,
    )
    suffix = safety_suffix(long.safety)
    text = to_openai(long, strict=True)["function"]["description"]
    assert len(text) <= OPENAI_DESCRIPTION_LIMIT
    assert text.endswith("... " + suffix)
    assert len(text) >= OPENAI_DESCRIPTION_LIMIT - 5  # only as much cut as needed
    # the same tool keeps its whole description where there is no limit
    assert to_anthropic(long)["description"] == ("word " * 600).strip() + " " + suffix
    plain = to_openai(decl(description="x" * 2000, sources={}))["function"]["description"]
    assert len(plain) == OPENAI_DESCRIPTION_LIMIT and plain.endswith("...")


# ---------------------------------------------------------------------------- strict mode


@pytest.fixture
async def demo_decls(tmp_path: Path) -> list[ToolDeclaration]:
    """The demo catalog's ATIP upstream (configs/demo.yaml), started for real."""
    document = yaml.safe_load(DEMO.read_text())
    [entry] = [u for u in document["upstreams"] if u.get("kind") == "atip"]
    entry = {
        **entry,
        "cwd": str(tmp_path),
        "xdg_data_home": str(tmp_path / "data"),
        "xdg_config_home": str(tmp_path / "config"),
    }
    config = parse_config(
        {"store": {"path": ":memory:"}, "upstreams": [entry]}, base_dir=str(DEMO.parent)
    )
    async with Bridge(config) as bridge:
        decls = sorted(bridge.catalog.declarations(), key=lambda d: d.name)
    assert len(decls) >= 8
    return decls


async def test_openai_strict_output_passes_the_strict_rules_for_every_demo_tool(demo_decls):
    compiled = compile_tools(demo_decls, "openai-strict")
    assert compiled.notes == []
    assert len(compiled.tools) == len(demo_decls)
    for tool in compiled.tools:
        assert_openai_strict(tool)
    by_name = {t["function"]["name"]: t["function"] for t in compiled.tools}
    delete = by_name["notes_cli__notes_note_delete"]
    assert delete["description"].endswith(f"[{FLAG_DESTRUCTIVE} | {FLAG_NOT_REVERSIBLE}]")
    delete_params = delete["parameters"]
    assert delete_params["properties"]["missing_ok"]["type"] == [
        "boolean",
        "null",
    ]  # optional -> nullable
    assert delete_params["properties"]["ids"]["type"] == "array"  # required stays non-null
    add = by_name["notes_cli__notes_note_add"]["parameters"]
    # a null for an optional value is valid, a missing key is not
    validator = jsonschema.Draft202012Validator(add)
    assert validator.is_valid({"title": "t", "body": None, "tag": None, "pinned": None})
    assert not validator.is_valid({"title": "t"})
    assert 'default: ""' in add["properties"]["body"]["description"]
    hash_algorithm = by_name["notes_cli__notes_text_hash"]["parameters"]["properties"]["algorithm"]
    assert hash_algorithm["enum"] == ["sha256", "sha1", "md5", None]


def test_strict_conversion_of_general_schemas():
    schema = {
        "type": "object",
        "properties": {
            "where": {"$ref": "#/$defs/place"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1},
            "pick": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "count": {"type": "integer", "minimum": 0, "nullable": True},
        },
        "required": ["where"],
        "$defs": {
            "place": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "format": "hostname"},
                    "zip": {"type": "string"},
                },
                "required": ["city"],
            }
        },
    }
    out = strict_schema(schema)
    assert_openai_strict(
        {
            "type": "function",
            "function": {"name": "x", "description": "", "parameters": out, "strict": True},
        }
    )
    assert out["properties"]["where"] == {"$ref": "#/$defs/place"}
    assert out["$defs"]["place"]["properties"]["zip"]["type"] == ["string", "null"]
    assert out["properties"]["pick"]["anyOf"][-1] == {"type": "null"}
    assert out["properties"]["count"]["type"] == ["integer", "null"]


def test_schemas_strict_mode_cannot_express_fall_back_with_a_note():
    free = decl(
        "free",
        schema={"type": "object", "properties": {"meta": {"type": "object"}}, "required": ["meta"]},
    )
    mixed = decl(
        "mixed",
        schema={
            "type": "object",
            "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 2}]}},
            "required": ["a"],
        },
    )
    optional = decl(
        "optional",
        schema={
            "type": "object",
            "properties": {"meta": {"type": "object"}, "q": {"type": "string"}},
            "required": ["q"],
        },
    )
    compiled = compile_tools([free, mixed, optional, decl("ok")], "openai-strict")
    strict = {t["function"]["name"]: t["function"]["strict"] for t in compiled.tools}
    assert strict == {"free": False, "mixed": False, "optional": True, "ok": True}
    assert any(
        "free: sent with strict: false" in n and "/properties/meta" in n for n in compiled.notes
    )
    # an optional property strict mode cannot express is left out, and the tool stays strict
    params = {t["function"]["name"]: t["function"]["parameters"] for t in compiled.tools}[
        "optional"
    ]
    assert list(params["properties"]) == ["q"] and params["required"] == ["q"]
    assert any(
        "optional: optional property left out" in n and "/properties/meta" in n
        for n in compiled.notes
    )


# ---------------------------------------------------------------------------- other formats


def test_gemini_and_anthropic_shapes():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "path": {"type": "string", "format": "file-path", "description": "A file (file path)"},
            "when": {"type": ["string", "null"], "format": "date-time"},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "where": {"$ref": "#/$defs/place"},
        },
        "required": ["path"],
        "additionalProperties": False,
        "$defs": {"place": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    tool = decl("files.read", schema=schema, read_only=True)
    gemini = to_gemini(tool)
    params = gemini["parameters"]
    assert gemini["name"] == "files.read" and gemini["description"].endswith(f"[{FLAG_READ_ONLY}]")
    assert (
        "additionalProperties" not in params and "$schema" not in params and "$defs" not in params
    )
    assert params["properties"]["path"] == {"type": "string", "description": "A file (file path)"}
    assert params["properties"]["when"] == {
        "type": "string",
        "format": "date-time",
        "nullable": True,
    }
    assert (
        "enum" not in params["properties"]["level"]
        and "one of 1, 2, 3" in params["properties"]["level"]["description"]
    )
    assert params["properties"]["where"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
    }
    assert "parameters" not in to_gemini(decl("bare"))
    assert gemini_schema(None) == {"type": "object", "properties": {}}

    anthropic = to_anthropic(tool)
    assert set(anthropic) == {"name", "description", "input_schema"}
    assert anthropic["name"] == "files_read"  # Anthropic names allow no dots
    assert anthropic["input_schema"]["additionalProperties"] is False
    openai = compile_tools([tool, decl("files_read")], "openai")
    # the name the provider takes as it is keeps it; the one cleaned into it gets the suffix
    assert [t["function"]["name"] for t in openai.tools] == ["files_read_2", "files_read"]
    assert "strict" not in openai.tools[0]["function"]
    assert any("sent as 'files_read_2'" in n for n in openai.notes)


def test_translate_command_prints_a_json_array(tmp_path):
    config = tmp_path / "bridge.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "store": {"path": ":memory:"},
                "upstreams": [
                    {
                        "name": "notes_cli",
                        "kind": "atip",
                        "command": ["python", "-m", "bridge.demo.atip_cli"],
                        "cwd": str(tmp_path),
                        "xdg_data_home": str(tmp_path / "data"),
                        "xdg_config_home": str(tmp_path / "config"),
                    }
                ],
                "surfaces": [{"name": "default"}, {"name": "ro", "read_only": True}],
            }
        )
    )
    outputs = {}
    for target, surface in (("openai-strict", "default"), ("gemini", "ro")):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "bridge.cli",
                "translate",
                "--to",
                target,
                "-c",
                str(config),
                "--surface",
                surface,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=dict(os.environ),
        )
        assert run.returncode == 0, run.stderr
        outputs[target] = json.loads(run.stdout)
    strict = outputs["openai-strict"]
    for tool in strict:
        assert_openai_strict(tool)
    names = [t["function"]["name"] for t in strict]
    assert "notes_cli__notes_note_edit" in names  # its caller is asked for its stdin
    assert "notes_cli__notes_note_delete" in names  # visible; calls are denied by policy
    assert {t["name"] for t in outputs["gemini"]} == {
        "notes_cli__notes_note_list",
        "notes_cli__notes_note_show",
        "notes_cli__notes_text_hash",
        "notes_cli__notes_text_stats",
        "notes_cli__notes_version",
    }


async def test_openai_strict_rules_hold_for_the_whole_demo_federation(tmp_path: Path):
    """Every tool of configs/demo.yaml, of every upstream kind, compiles to OpenAI strict mode."""
    document = yaml.safe_load(DEMO.read_text())  # its launched services get ports the bridge picks
    document["store"] = {"path": str(tmp_path / "demo.db")}
    for entry in document["upstreams"]:
        if entry["kind"] == "atip":
            entry.update(
                cwd=str(tmp_path),
                xdg_data_home=str(tmp_path / "data"),
                xdg_config_home=str(tmp_path / "config"),
            )
    config = parse_config(document, base_dir=str(DEMO.parent))
    async with Bridge(config) as bridge:
        assert {h.name: h.state for h in bridge.catalog.health()} == {
            u.name: "ready" for u in config.upstreams
        }
        decls = sorted(bridge.catalog.declarations(), key=lambda d: d.name)
    kinds = {d.upstream_kind for d in decls}
    assert kinds == {"mcp", "openapi", "a2a", "atip", "a2t"}
    compiled = compile_tools(decls, "openai-strict")
    assert len(compiled.tools) == len(decls)
    for tool in compiled.tools:
        assert_openai_strict(tool)
        assert tool["function"]["strict"] is True
    # the A2A tools' optional free-form `data` part cannot be strict: left out, and said so
    assert compiled.notes and all(
        "optional property left out" in n and "/properties/data" in n for n in compiled.notes
    )
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in compiled.tools}
    assert "data" not in by_name["travel__convert_currency"]["properties"]
    assert "message" in by_name["travel__convert_currency"]["required"]


@pytest.mark.parametrize("provider", ["openai", "openai-strict", "gemini", "anthropic"])
def test_a_malformed_input_schema_leaves_its_tool_out_with_a_note(provider):
    tools = [
        decl("good", schema={"type": "object", "properties": {"a": {"type": "string"}}}),
        decl(
            "odd_required",
            schema={
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": [{"a": 1}],
            },
        ),
        decl("props_list", schema={"type": "object", "properties": ["a", "b"]}),
    ]
    compiled = compile_tools(tools, provider)
    names = [t.get("name") or t.get("function", {}).get("name") for t in compiled.tools]
    assert (
        "good" in names
        and len(names) + sum("left out, its input schema is malformed" in n for n in compiled.notes)
        == 3
    )


def test_object_roots_with_combinators_or_a_ref_and_allof_parts_keep_what_they_say():
    """An object root with `allOf`/`anyOf` was wrapped under `value` (and then failed every call,
    checked against the tool's own schema); a one-element `allOf`'s properties were overwritten
    by the node's; a root `$ref` lost its target's properties; two valid names were renamed."""
    merge = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "allOf": [{"properties": {"b": {"type": "integer"}}, "required": ["b"]}],
    }
    strict = strict_schema(merge)
    assert set(strict["properties"]) == {"a", "b"} and strict["required"] == ["a", "b"]
    gemini = gemini_schema(merge)
    assert set(gemini["properties"]) == {"a", "b"} and sorted(gemini["required"]) == ["a", "b"]
    either = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    assert gemini_schema(either)["properties"].keys() == {"a", "b"}  # not under `value`
    with pytest.raises(StrictSchemaError):  # strict mode takes one object at the top
        strict_schema(either)
    ref = {
        "type": "object",
        "$ref": "#/$defs/R",
        "$defs": {
            "R": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        },
    }
    assert gemini_schema(ref)["properties"] == {"q": {"type": "string"}}
    with pytest.raises(StrictSchemaError):  # not an object closed against its own `$ref`
        strict_schema(ref)
    with pytest.raises(StrictSchemaError, match="not"):  # inside a one-element allOf too
        strict_schema(
            {
                "type": "object",
                "properties": {"p": {"allOf": [{"type": "string", "not": {"enum": ["x"]}}]}},
                "required": ["p"],
            }
        )


def test_gemini_writes_a_recursive_schema_out_once_per_path():
    """Inlining `$ref`s to a fixed depth repeated a recursive schema as often as it branches: a
    cost filter of `And`, `Or` and `Not` filters (AWS Cost Explorer's `Expression`) took minutes
    and gigabytes to write out eight levels deep."""
    expression = {
        "type": "object",
        "properties": {
            "And": {"type": "array", "items": {"$ref": "#/$defs/Expression"}},
            "Or": {"type": "array", "items": {"$ref": "#/$defs/Expression"}},
            "Not": {"$ref": "#/$defs/Expression"},
            "Dimensions": {
                "type": "object",
                "properties": {
                    "Key": {"type": "string"},
                    "Values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    }
    schema = {
        "type": "object",
        "properties": {"Filter": {"$ref": "#/$defs/Expression"}},
        "$defs": {"Expression": expression},
    }
    params = gemini_schema(schema)
    written = params["properties"]["Filter"]
    assert set(written["properties"]) == {"And", "Or", "Not", "Dimensions"}
    assert written["properties"]["Not"] == {
        "type": "object",
        "description": "see #/$defs/Expression",
    }
    assert written["properties"]["And"]["items"] == {
        "type": "object",
        "description": "see #/$defs/Expression",
    }
    assert len(json.dumps(params)) < 2000
    # schemas that refer to each other: at most 200 inlined in all, however they branch
    many = {
        f"S{i}": {
            "type": "object",
            "properties": {f"p{j}": {"$ref": f"#/$defs/S{j}"} for j in range(12) if j != i},
        }
        for i in range(12)
    }
    params = gemini_schema(
        {"type": "object", "properties": {"s": {"$ref": "#/$defs/S0"}}, "$defs": many}
    )
    assert json.dumps(params).count('"p1"') <= 200


def test_gemini_reads_a_null_branch_as_nullable():
    """Gemini has no `null` type: `{anyOf: [X, {type: null}]}` (an OpenAPI 3.0 `$ref` beside
    `nullable: true`) is X with `nullable: true`."""
    schema = {
        "type": "object",
        "properties": {
            "status": {
                "description": "The status.",
                "anyOf": [{"allOf": [{"type": "string", "enum": ["a", "b"]}]}, {"type": "null"}],
            },
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        },
    }
    props = gemini_schema(schema)["properties"]
    assert props["status"] == {
        "type": "string",
        "enum": ["a", "b"],
        "description": "The status.",
        "nullable": True,
    }
    assert props["either"] == {"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": True}
    only_null = gemini_schema(
        {"type": "object", "properties": {"sso": {"type": "null", "description": "Unused."}}}
    )
    assert only_null["properties"]["sso"] == {"description": "Unused.", "nullable": True}
