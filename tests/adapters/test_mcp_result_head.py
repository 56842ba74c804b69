"""The head of a `tools/call` result checked with the SDK's types once per distinct head
(adapters/mcp/result_head.py): a head seen again answers what the SDK's check and dump answer,
and heads that differ only in a value's JSON type are told apart. A plain text block, kept and
rendered without the SDK's models, is what those models make of it."""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types
import pytest
from pydantic import TypeAdapter, ValidationError

from adapters.mcp import result_head
from adapters.mcp.calls import ToolCalls
from adapters.mcp.listing import check_result
from bridge.model import ToolResult
from bridge.translate.mcp_results import render_result

HEADS = [
    '{"isError":false,"resultType":"complete",'
    '"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"x","version":"1"}},"content":[]}',
    '{"content":[]}',
    '{"isError":false,"content":[]}',
    '{"isError":1,"content":[]}',
    '{"isError":true,"structuredContent":{"a":1,"b":[1.0,null]},"content":[]}',
    '{"structuredContent":null,"content":[]}',
    '{"structuredContent":[1,2],"content":[]}',
    '{"extra":5,"_meta":{"b":1,"a":2},"content":[]}',
    '{"_meta":null,"content":[]}',
    '{"isError":"yes","content":[]}',
    '{"resultType":"input_required","content":[]}',
]
VERSIONS = ["2025-06-18", "2025-11-25", "2026-07-28"]


def sdk_answer(version: str, head: dict[str, Any]) -> str:
    """What the SDK's check and dump make of `head`, as JSON text (or the error's)."""
    try:
        check_result("tools/call", version, head)
        result = types.CallToolResult.model_validate(head, by_name=False)
        return json.dumps(result.model_dump(by_alias=True, exclude_none=True, mode="json"))
    except ValidationError as exc:
        return f"rejected: {exc.error_count()}"


def kept_answer(version: str, head: dict[str, Any]) -> str:
    try:
        result, wire = result_head.checked_head(version, head)
    except ValidationError as exc:
        return f"rejected: {exc.error_count()}"
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert json.dumps(dumped) == json.dumps(wire)
    return json.dumps(wire)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_head_seen_again_answers_as_the_sdk_does(version: str):
    result_head._kept.clear()
    for _ in range(3):  # the first time checked, then kept
        for text in HEADS:
            assert kept_answer(version, json.loads(text)) == sdk_answer(version, json.loads(text))
    assert result_head._kept, "no head was kept"


def test_an_equal_head_is_checked_once(monkeypatch: pytest.MonkeyPatch):
    result_head._kept.clear()
    checked: list[dict[str, Any]] = []
    real = result_head.check_result

    def counting(method: str, version: str, data: dict[str, Any]) -> None:
        checked.append(data)
        real(method, version, data)

    monkeypatch.setattr(result_head, "check_result", counting)
    head = HEADS[0]
    first = result_head.checked_head("2026-07-28", json.loads(head))
    again = result_head.checked_head("2026-07-28", json.loads(head))
    assert len(checked) == 1
    assert first[1] == again[1] and list(first[1]) == list(again[1])
    # the same values of another JSON type, another version: checked on their own
    result_head.checked_head("2025-11-25", json.loads(HEADS[2]))
    result_head.checked_head("2025-11-25", json.loads(HEADS[3]))
    assert len(checked) == 3
    assert result_head.checked_head("2025-11-25", json.loads(HEADS[3]))[1]["isError"] is True


def test_a_kept_dump_is_the_heads_own_values():
    """A dump made from a kept verdict holds the values of the head it was asked for, not
    those of the head first checked: a caller may change what it is given."""
    result_head._kept.clear()
    head = json.loads(HEADS[0])
    _, first = result_head.checked_head("2026-07-28", head)
    first["_meta"]["changed"] = True
    _, again = result_head.checked_head("2026-07-28", json.loads(HEADS[0]))
    assert "changed" not in again["_meta"]


def test_the_kept_verdicts_are_bounded(monkeypatch: pytest.MonkeyPatch):
    result_head._kept.clear()
    monkeypatch.setattr(result_head, "KEPT_HEADS", 4)
    for n in range(10):
        result_head.checked_head("2025-11-25", {"_meta": {"n": n}, "content": []})
    assert 0 < len(result_head._kept) <= 4
    big = {"structuredContent": {"x": "y" * result_head.KEPT_HEAD_CHARS}, "content": []}
    result_head._kept.clear()
    result_head.checked_head("2025-11-25", big)
    assert not result_head._kept


BLOCKS: list[Any] = [
    {"type": "text", "text": "hé ✓"},
    {"text": "order", "type": "text"},
    {"type": "text", "text": "lone \ud800 surrogate"},
    {"type": "text", "text": 5},
    {"type": "text", "text": None},
    {"type": "text"},
    {"type": "text", "text": "x", "annotations": {"priority": 0.5}},
    {"type": "text", "text": "x", "_meta": None},
    {"type": "text", "wrong": "x"},
    {"type": "image", "data": "aGk=", "mimeType": "image/png"},
    {"type": "mystery", "text": "x"},
    "not an object",
]


@pytest.mark.parametrize("block", BLOCKS)
def test_a_content_block_is_kept_as_the_sdks_model_dumps_it(block: Any):
    class Upstream(ToolCalls):
        name = "up"

    kept = Upstream()._content_block("tool", block)
    model = types.TextContent if isinstance(block, dict) and block.get("type") == "text" else None
    try:
        expected = (
            model.model_validate(block, by_name=False).model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )
            if model is not None
            else kept
        )
    except ValidationError:
        expected = block
    assert json.dumps(kept) == json.dumps(expected)


@pytest.mark.parametrize("block", BLOCKS[:-1])
def test_a_content_block_is_rendered_as_the_sdks_union_reads_it(block: Any):
    rendered = render_result(
        ToolResult(result_id="r", invocation_id="i", status="succeeded", content=[block])
    ).content
    try:
        expected = [TypeAdapter(types.ContentBlock).validate_python(block, by_name=False)]
    except ValidationError:
        expected = rendered  # said as JSON text: not the fast path's
    assert rendered == expected
    assert [b.model_fields_set for b in rendered] == [b.model_fields_set for b in expected]
