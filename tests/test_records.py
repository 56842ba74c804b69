"""Every record kind serializes to JSON that validates against the shared Agent Tool schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bridge.catalog import Catalog
from bridge.config import SurfaceConfig
from bridge.invoke import Invoker
from bridge.model import (
    SCHEMA_VERSION,
    InputContract,
    ResultPersistence,
    ToolInvocation,
    ToolProgress,
    UpstreamResult,
)
from bridge.search.service import ToolSearch
from bridge.store import Store
from bridge.surface import Surfaces, deferred_ref
from tests.fakes import FakeUpstream, tool

SPECS = Path(__file__).resolve().parent.parent / "specs" / "agenttool"


def check(record: dict, kind: str) -> None:
    schema = json.loads((SPECS / f"agenttool-{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(record)
    assert record["schema_version"] == SCHEMA_VERSION


@pytest.fixture
async def catalog():
    cat = Catalog(Store())
    cat.add_upstream(
        FakeUpstream(
            name="svc",
            tools=[
                tool("echo"),
                tool("wipe", destructive=True),
                tool("secret", blocked_reason="credential_missing"),
            ],
        )
    )
    await cat.start()
    yield cat
    await cat.close()


async def test_declaration_surface_deferred(catalog):
    for decl in catalog.declarations():
        data = decl.to_json()
        check(data, "tool-declaration")
        assert (
            "model_input_schema" in data["input_contract"]
            and "schema" not in data["input_contract"]
        )
        check(deferred_ref(decl).to_json(), "deferred-tool")
    surfaces = Surfaces([SurfaceConfig(name="s", defer=["*"])], catalog)
    record = surfaces.get("s").record().to_json()
    check(record, "tool-surface")
    assert {b["reason"] for b in record["blocked_tools"]} == {"credential_missing"}


async def test_results_invocation_progress_persistence(catalog):
    invoker = Invoker(catalog, Surfaces([], catalog), catalog.store)
    ok = await invoker.invoke("svc__echo", {"text": "a"})
    check(ok.to_json(), "result")
    err = await invoker.invoke("nope", {})
    data = err.to_json()
    check(data, "result")
    assert data["is_error"] is True and data["error"]["error_class"] == "unknown_tool"
    check(
        ToolInvocation(invocation_id="inv_1", tool_id=ok.tool_id, status="succeeded").to_json(),
        "invocation",
    )
    check(ToolProgress(invocation_id="inv_1", sequence=1).to_json(), "progress")
    check(
        ResultPersistence(decision_id="p1", invocation_id="inv_1").to_json(), "result-persistence"
    )
    await invoker.aclose()


async def test_search_result_matches_are_deferred_refs(catalog):
    surface = Surfaces([SurfaceConfig(name="s", defer=["*"])], catalog).get("s")
    result = ToolSearch(catalog).search("select:svc__echo,svc__missing", surface=surface).to_json()
    assert result["query_type"] == "select" and result["missing_names"] == ["svc__missing"]
    for match in result["matches"]:
        check(match, "deferred-tool")


def test_input_contract_reads_schema_alias():
    contract = InputContract.model_validate({"schema": {"type": "object", "properties": {"a": {}}}})
    assert contract.model_input_schema["properties"] == {"a": {}}
    assert "schema" not in contract.to_json()


def test_upstream_result_defaults():
    assert UpstreamResult().is_error is False
