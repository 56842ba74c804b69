"""Synthesized versions: digests, history in the store, compatibility classes."""

from __future__ import annotations

from bridge.catalog import Catalog
from bridge.store import Store
from bridge.versions import classify_change
from tests.fakes import FakeUpstream, tool


async def test_new_signature_makes_version_2_compatible(tmp_path):
    store = Store(tmp_path / "v.db")
    up = FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}}, required=["a"])])
    catalog = Catalog(store)
    catalog.add_upstream(up)
    await catalog.start()
    assert catalog.resolve("v__t").version == 1
    catalog.apply_tools("v", [tool("t", props={"a": {"type": "string"}, "b": {"type": "integer"}}, required=["a"])])
    decl = catalog.resolve("v__t")
    assert decl.version == 2
    history = catalog.versions.history(decl.tool_id)
    assert [h.version for h in history] == [2, 1]
    assert history[0].compatibility == "compatible"
    assert history[1].compatibility == "initial"
    assert history[1].signature["input_schema"]["properties"] == {"a": {"type": "string"}}
    await catalog.close()
    # survives a restart: same digest means no new version
    catalog2 = Catalog(Store(tmp_path / "v.db"))
    catalog2.add_upstream(FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}, "b": {"type": "integer"}}, required=["a"])]))
    await catalog2.start()
    assert catalog2.resolve("v__t").version == 2
    await catalog2.close()


async def test_breaking_changes_classified():
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="v", tools=[tool("t", props={"a": {"type": "string"}})]))
    await catalog.start()
    catalog.apply_tools("v", [tool("t", props={"a": {"type": "string"}, "b": {"type": "string"}}, required=["b"])])
    decl = catalog.resolve("v__t")
    assert decl.version == 2
    assert catalog.versions.history(decl.tool_id)[0].compatibility == "breaking"
    assert catalog.versions.breaking_since(decl.tool_id, 1) == 2
    await catalog.close()


def test_classify_rules():
    base = {"input_schema": {"properties": {"a": {"type": "string"}}, "required": ["a"]}, "output_schema": {"properties": {"x": {"type": "string"}}}}
    more_out = {**base, "output_schema": {"properties": {"x": {"type": "string"}, "y": {"type": "string"}}}}
    assert classify_change(base, more_out) == "compatible"
    type_change = {**base, "input_schema": {"properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    assert classify_change(base, type_change) == "breaking"
    removed_out = {**base, "output_schema": {"properties": {}}}
    assert classify_change(base, removed_out) == "breaking"
    removed_in = {**base, "input_schema": {"properties": {}, "required": []}}
    assert classify_change(base, removed_in) == "breaking"
