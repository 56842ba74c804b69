"""Surface placement: rules by upstream, name glob, tag, kind and safety facts; blocks from the
upstream, the lifecycle and user interaction; `allow`; the auto-load threshold."""

from __future__ import annotations

from bridge.catalog import Catalog
from bridge.config import SurfaceConfig
from bridge.model import SafetyHints
from bridge.policy import blocked_error
from bridge.store import Store
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool


def catalog_of(*upstreams: FakeUpstream) -> Catalog:
    catalog = Catalog(Store())
    for up in upstreams:
        catalog.add_upstream(up)
        catalog.apply_tools(up.name, up.tools)
    return catalog


def placements(catalog: Catalog, **config: object) -> dict[str, tuple[str, str | None]]:
    surface = Surface(SurfaceConfig(name="s", **config), catalog)
    return {
        d.name: (surface.place(d).state, surface.place(d).reason) for d in catalog.declarations()
    }


def test_rules_by_upstream_glob_tag_kind_and_safety():
    api = FakeUpstream(
        name="api",
        tools=[
            tool("get_pet", read_only=True, tags=["pets"]),
            tool("delete_pet", destructive=True),
            tool("op", tool_kind="openapi_operation"),
        ],
    )
    files = FakeUpstream(name="files", tools=[tool("read", read_only=True), tool("write")])
    placed = placements(
        catalog_of(api, files),
        load=[{"tag": "pets"}, {"upstream": "files", "read_only": True}],
        defer=[{"kind": "openapi_operation"}, "files__*"],
        block=[{"destructive": True, "reason": "too_dangerous"}],
    )
    assert placed == {
        "api__get_pet": ("loaded", None),
        "api__delete_pet": ("blocked", "too_dangerous"),
        "api__op": ("deferred", None),
        "files__read": ("loaded", None),
        "files__write": ("deferred", None),
    }


def test_upstream_lifecycle_and_interaction_blocks_and_allow():
    up = FakeUpstream(
        name="u",
        tools=[
            tool("secret", blocked_reason="credential_missing"),
            tool("fresh", lifecycle="requires_setup"),
            tool("gone", lifecycle="retired"),
            tool("prompt").model_copy(
                update={"safety": SafetyHints(requires_user_interaction=True)}
            ),
            tool("fine"),
        ],
    )
    catalog = catalog_of(up)
    assert placements(catalog) == {
        "u__secret": ("blocked", "credential_missing"),
        "u__fresh": ("blocked", "setup_required"),
        "u__gone": ("blocked", "policy_blocked"),
        "u__prompt": ("blocked", "requires_user_interaction"),
        "u__fine": ("loaded", None),
    }
    allowed = placements(catalog, allow=["u__prompt", "u__fresh"])
    assert allowed["u__prompt"] == ("loaded", None) and allowed["u__fresh"] == ("loaded", None)
    decl = catalog.resolve("u__fresh")
    assert decl is not None
    assert blocked_error(decl, "setup_required").error_class == "setup_required"
    assert blocked_error(decl, "requires_user_interaction").error_class == "policy_blocked"


def test_read_only_surface_is_not_lifted_by_allow():
    up = FakeUpstream(name="u", tools=[tool("look", read_only=True), tool("touch")])
    placed = placements(catalog_of(up), read_only=True, allow=["*"])
    assert placed == {"u__look": ("loaded", None), "u__touch": ("blocked", "policy_blocked")}


def test_only_the_surfaces_own_rules_hide_a_tool_and_they_decide_first():
    up = FakeUpstream(
        name="u",
        tools=[
            tool("secret", blocked_reason="credential_missing"),
            tool("prompt").model_copy(
                update={"safety": SafetyHints(requires_user_interaction=True)}
            ),
            tool("fresh", lifecycle="requires_setup"),
            tool("look", read_only=True),
            tool("touch"),
        ],
    )
    catalog = catalog_of(up)

    def hidden(**config: object) -> dict[str, tuple[str | None, bool]]:
        surface = Surface(SurfaceConfig(name="s", **config), catalog)
        places = {d.name: surface.place(d) for d in catalog.declarations()}
        return {name: (p.reason, p.hidden) for name, p in places.items() if p.state == "blocked"}

    # what the upstream, the lifecycle or the tool imposes is told, with its reason
    assert hidden() == {
        "u__secret": ("credential_missing", False),
        "u__prompt": ("requires_user_interaction", False),
        "u__fresh": ("setup_required", False),
    }
    # a block rule or read_only is access control, whatever else blocks the tool
    blocked = ("u__secret", "u__prompt", "u__fresh", "u__touch")
    by_rule = hidden(block=[{"name": "u__*", "reason": "internal"}], allow=["u__look"])
    assert by_rule == {name: ("internal", True) for name in blocked}
    assert hidden(read_only=True) == {name: ("policy_blocked", True) for name in blocked}


def test_a_call_finds_no_hidden_tool_and_the_surface_record_names_none():
    up = FakeUpstream(
        name="u",
        tools=[tool("secret", blocked_reason="credential_missing"), tool("internal"), tool("fine")],
    )
    catalog = catalog_of(up)
    surface = Surface(SurfaceConfig(name="s", block=["u__internal"]), catalog)
    internal = catalog.resolve("u__internal")
    assert internal is not None
    for ref in ("u__internal", internal.tool_id, "u__nothing"):
        assert surface.lookup(ref) is None and surface.resolve(ref) is None
    # a call of this one is refused with its reason
    assert surface.resolve("u__secret") is catalog.resolve("u__secret")
    record = surface.record().to_json()
    assert [b["name"] for b in record["blocked_tools"]] == ["u__secret"]
    assert "u__internal" not in str(record)
    assert record["selection_policy"]["counts"] == {"loaded": 1, "deferred": 0, "blocked": 1}


def test_auto_load_threshold_counts_visible_tools_only():
    up = FakeUpstream(
        name="u", tools=[tool(f"t{i}") for i in range(4)] + [tool(f"x{i}") for i in range(3)]
    )
    catalog = catalog_of(up)
    # 7 tools, 3 blocked: the 4 visible ones fit under a threshold of 4
    placed = placements(catalog, auto_load_threshold=4, block=["u__x*"])
    assert sorted(n for n, (state, _) in placed.items() if state == "loaded") == [
        f"u__t{i}" for i in range(4)
    ]
    # beyond the threshold everything visible is deferred
    placed = placements(catalog, auto_load_threshold=3, block=["u__x*"])
    assert {state for state, _ in placed.values()} == {"deferred", "blocked"}
    # any load/defer rule turns the threshold off
    placed = placements(catalog, auto_load_threshold=100, load=["u__t0"])
    assert placed["u__t0"] == ("loaded", None) and placed["u__t1"] == ("deferred", None)


def test_placements_follow_catalog_changes():
    up = FakeUpstream(name="u", tools=[tool("a"), tool("b")])
    catalog = catalog_of(up)
    surface = Surface(SurfaceConfig(name="s", auto_load_threshold=2), catalog)
    assert [d.name for d in surface.loaded()] == ["u__a", "u__b"]
    catalog.apply_tools("u", [tool("a"), tool("b"), tool("c")])
    assert surface.loaded() == [] and surface.counts() == {"loaded": 0, "deferred": 3, "blocked": 0}


def surface_view(surface: Surface) -> tuple:
    """Everything a surface answers about its catalog."""
    catalog = surface.catalog
    return (
        {d.tool_id: surface.place(d) for d in catalog.declarations()},
        surface.counts(),
        [d.tool_id for d in surface.loaded()],
        [id(d) for d in surface.loaded()],
    )


def test_a_surface_kept_in_step_answers_as_a_new_one_after_every_change():
    import random

    rng = random.Random(7)
    names = [f"t{i}" for i in range(12)]
    ups = [FakeUpstream(name=n, tools=[]) for n in ("u", "v")]
    catalog = Catalog(Store())
    for up in ups:
        catalog.add_upstream(up)
    configs = [
        dict(
            auto_load_threshold=6, block=[{"tag": "bad"}]
        ),  # the threshold turns as tools come and go
        dict(load=[{"tag": "hot"}], block=[{"tag": "bad"}], allow=["v__*"]),
        dict(read_only=True, auto_load_threshold=3),
    ]
    surfaces = [Surface(SurfaceConfig(name=f"s{i}", **c), catalog) for i, c in enumerate(configs)]
    for _ in range(60):
        upstream = rng.choice(["u", "v"])
        listed = [
            tool(
                n,
                tags=rng.sample(["bad", "hot", "plain"], rng.randint(0, 2)),
                read_only=rng.random() < 0.5,
            )
            for n in rng.sample(names, rng.randint(0, 8))
        ]
        catalog.apply_tools(upstream, listed)
        for surface, config in zip(surfaces, configs, strict=True):
            fresh = Surface(SurfaceConfig(name="fresh", **config), catalog)
            assert surface_view(surface) == surface_view(fresh)


def test_a_change_of_one_tool_places_that_tool_alone_again(monkeypatch):
    up = FakeUpstream(name="u", tools=[tool(f"t{i}") for i in range(200)])
    catalog = catalog_of(up)
    surface = Surface(
        SurfaceConfig(name="s", auto_load_threshold=10, block=[{"tag": "bad"}]), catalog
    )
    assert surface.counts() == {"loaded": 0, "deferred": 200, "blocked": 0}
    classified = []
    classify = Surface._classify
    monkeypatch.setattr(
        Surface,
        "_classify",
        lambda self, decl: classified.append(decl.name) or classify(self, decl),
    )
    blocked = Surface._blocked
    looked = []
    monkeypatch.setattr(
        Surface, "_blocked", lambda self, decl: looked.append(decl.name) or blocked(self, decl)
    )
    catalog.apply_tools("u", [tool(f"t{i}", tags=["bad"] if i == 5 else []) for i in range(200)])
    assert surface.counts() == {"loaded": 0, "deferred": 199, "blocked": 1}
    assert classified == ["u__t5"] and looked.count("u__t5") == len(looked) <= 3
    # a change too large for the catalog's journal: every tool is placed again
    monkeypatch.setattr("bridge.catalog.JOURNAL_IDS", 100)
    catalog.apply_tools("u", [tool(f"t{i}", tags=["bad"]) for i in range(150)])
    assert (
        surface.counts() == {"loaded": 0, "deferred": 0, "blocked": 150} and len(classified) == 151
    )


def test_a_change_of_ten_thousand_tools_places_those_alone_again(monkeypatch):
    up = FakeUpstream(name="u", tools=[tool(f"t{i}") for i in range(10_050)])
    catalog = catalog_of(up)
    surface = Surface(SurfaceConfig(name="s", block=[{"tag": "bad"}]), catalog)
    assert surface.counts()["deferred"] == 10_050
    classified = []
    classify = Surface._classify
    monkeypatch.setattr(
        Surface,
        "_classify",
        lambda self, decl: classified.append(decl.name) or classify(self, decl),
    )
    catalog.apply_tools(
        "u", [tool(f"t{i}", tags=["bad"] if i < 10_001 else []) for i in range(10_050)]
    )
    assert (
        surface.counts() == {"loaded": 0, "deferred": 49, "blocked": 10_001}
        and len(classified) == 10_001
    )


def test_the_catalog_journal_answers_the_changed_ids_it_still_holds(monkeypatch):
    monkeypatch.setattr("bridge.catalog.JOURNAL_IDS", 4)
    up = FakeUpstream(name="u", tools=[tool("a"), tool("b")])
    catalog = catalog_of(up)  # generation 1: a and b added
    one = catalog.generation
    assert catalog.changed_since(one) == set() and catalog.changed_since(one - 1) == {
        catalog.resolve("u__a").tool_id,
        catalog.resolve("u__b").tool_id,
    }
    catalog.apply_tools("u", [tool("a", description="changed"), tool("b")])
    catalog.apply_tools("u", [tool("a", description="changed"), tool("b"), tool("c")])
    assert catalog.changed_since(one) == {
        catalog.resolve("u__a").tool_id,
        catalog.resolve("u__c").tool_id,
    }
    catalog.apply_tools(
        "u", [tool("d")]
    )  # a, b and c removed, d added: the journal holds 4 ids, from here on
    assert (
        catalog.changed_since(one) is None
        and catalog.changed_since(catalog.generation - 1) is not None
    )
    assert (
        catalog.changed_since(-1) is None and catalog.changed_since(catalog.generation + 1) is None
    )


async def test_a_rule_naming_no_upstream_or_with_no_condition_is_said(caplog):
    import logging

    import pytest

    from bridge.config import ConfigError, parse_config
    from bridge.runtime import Bridge

    config = parse_config(
        {
            "store": {"path": ":memory:"},
            "search": {"persist": False},
            "surfaces": [
                {"name": "default", "block": [{"upstream": "svc-x"}, {"upstream": "sv*"}]}
            ],
        }
    )
    with caplog.at_level(logging.WARNING):
        await Bridge(config, extra_upstreams=[FakeUpstream(name="svc")]).close()
    said = [r.getMessage() for r in caplog.records if "matches no upstream" in r.getMessage()]
    assert said == [
        "surface default: block rule 0 names upstream 'svc-x', which matches no upstream (did you mean 'svc'?); "
        "it matches no tool"
    ]
    # an empty rule would match every tool; a reason is a block rule's
    for surface, said in (
        ({"allow": [{}]}, "rule 0 has no condition"),
        ({"load": [{"name": "x", "reason": "r"}]}, "only a block rule"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_config({"surfaces": [{"name": "default", **surface}]})
        assert said in str(err.value)
