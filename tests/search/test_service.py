"""Tool search (bridge.search.service): exact selection, filters, surfaces, limits, hints, and the
Agent Tool shapes of the answer."""

from __future__ import annotations

import jsonschema
import pytest

from bridge.config import Rule, SurfaceConfig
from bridge.search.analysis import analyze_query
from bridge.surface import Surface
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.search.support import (
    DEFERRED_SCHEMA,
    SEARCH_RESULT_SCHEMA,
    fs_tools,
    others,
    start_env,
    tools_a,
)
from tests.servers import until


async def test_camel_snake_and_path_names_match_their_words(env):
    assert env.names("user")[0] in ("api__getUserById", "api__delete_user")
    assert "api__getUserById" in env.names("user by id")[:1]
    assert env.names("repositories")[0] == "api__list_repositories"
    assert env.names("read text")[0] == "api__files_read-text"
    # stemming and case folding: plural, capitals, another form of the verb
    assert env.names("READING FILES")[0] == "api__files_read-text"
    # a parameter's camelCase name and its description count
    assert env.names("customer email")[0] == "api__send_invoice"
    # a query quoting a tool's own name gets that tool first
    assert env.names("please run getUserById for 42")[0] == "api__getUserById"


async def test_select_by_name_alias_and_id_with_missing_names(env):
    repo = env.catalog.resolve("api__list_repositories")
    user = env.catalog.resolve("api__getUserById")
    # the catalog keeps an old name as an alias when a collision renames a tool; give one
    user.aliases.append("api__get_user_old")
    env.catalog._by_name["api__get_user_old"] = user.tool_id
    result = env.search.search(
        f"select:api__list_repositories,{user.tool_id},api__get_user_old,nope,api__gone",
        surface=env.surface,
    )
    assert result.query_type == "select"
    assert [m.name for m in result.matches] == [
        "api__list_repositories",
        "api__getUserById",
    ]  # the same tool once
    assert result.matches[0].tool_id == repo.tool_id
    assert result.missing_names == ["nope", "api__gone"]
    assert "nope" in result.hint
    none = env.search.search("select:", surface=env.surface)
    assert none.matches == [] and none.next_action == "refine_query"


async def test_filters_namespace_tag_kind_read_only(env):
    assert set(env.names("invoice")) == {"api__send_invoice", "billing__create_invoice"}
    assert env.names("invoice", namespace="billing") == ["billing__create_invoice"]
    assert env.names("user", tags=["admin"]) == ["api__delete_user"]
    assert env.names("user", tags=["users", "admin"]) == ["api__delete_user"]
    assert env.names("user", read_only=True) == ["api__getUserById"]
    assert env.names("invoice", kind="openapi_operation") == ["billing__create_invoice"]
    assert set(env.names("", namespace="billing")) == {"billing__create_invoice", "billing__refund"}
    assert len(env.names("a", limit=2, namespace="api")) <= 2


async def test_blocked_tools_never_appear(env):
    blocking = Surface(
        SurfaceConfig(name="safe", block=["api__delete*", Rule(upstream="billing")]), env.catalog
    )
    for query in ("delete user", "user", "invoice", "refund", ""):
        names = env.names(query, surface=blocking, limit=50)
        assert "api__delete_user" not in names and not any(n.startswith("billing__") for n in names)
    result = env.search.search("select:api__delete_user,api__getUserById", surface=blocking)
    assert [m.name for m in result.matches] == ["api__getUserById"]
    assert result.missing_names == ["api__delete_user"]
    read_only = Surface(SurfaceConfig(name="ro", read_only=True), env.catalog)
    assert "api__send_invoice" not in env.names("invoice", surface=read_only)


async def test_select_keeps_the_filters_and_says_which_one_left_a_named_tool_out(env):
    # the filters narrow a selection as they narrow a ranking; a tool they leave out is reported, not returned
    result = env.search.search(
        "select:api__delete_user,api__getUserById,billing__refund,nope",
        surface=env.surface,
        read_only=True,
    )
    assert [m.name for m in result.matches] == ["api__getUserById"]
    assert result.missing_names == ["api__delete_user", "billing__refund", "nope"]
    assert result.hint == (
        "not found on this surface: nope; left out by the filters: api__delete_user (read_only), "
        "billing__refund (read_only); ask again without those filters to have them"
    )
    result = env.search.search(
        "select:billing__refund,api__delete_user",
        surface=env.surface,
        namespace="api",
        tags=["admin"],
        kind="openapi_operation",
    )
    assert result.matches == [] and result.next_action == "refine_query"
    assert (
        "billing__refund (namespace, tags)" in result.hint
        and "api__delete_user (kind)" in result.hint
    )
    assert [
        m.name
        for m in env.search.search(
            "select:api__delete_user", surface=env.surface, namespace="api", tags=["admin"]
        ).matches
    ] == ["api__delete_user"]
    # a blocked tool stays unknown, whatever the filters: it is never revealed
    blocking = Surface(SurfaceConfig(name="safe", block=["api__delete*"]), env.catalog)
    result = env.search.search("select:api__delete_user", surface=blocking, read_only=True)
    assert (
        result.missing_names == ["api__delete_user"]
        and result.hint == "not found on this surface: api__delete_user"
    )


async def test_a_filter_no_tool_on_the_surface_passes_is_named_and_a_blocked_one_is_not_revealed(
    env,
):
    def hint(query: str = "invoice", surface: Surface | None = None, **filters) -> str:
        result = env.search.search(query, surface=surface or env.surface, **filters)
        assert result.matches == [] and result.next_action == "refine_query"
        return result.hint

    # a namespace written wrong, also in a listing by filters alone: the namespaces like it
    for query in ("invoice", ""):
        assert (
            "no tool on this surface is in the namespace 'bililng' (namespaces like it: billing);"
            in hint(query, namespace="bililng")
        )
    assert "(namespaces like it: billing)" in hint(namespace="Billing")
    assert "is in the namespace" not in hint(
        "repositories", namespace="billing"
    )  # a namespace there is, the words wrong
    assert "no tool on this surface has the tag 'admins'" in hint("user", tags=["users", "admins"])
    assert (
        "no tool on this surface is of the kind 'openapi' (kinds on it: function, openapi_operation);"
        in hint(kind="openapi")
    )
    read_only = Surface(SurfaceConfig(name="ro", read_only=True), env.catalog)
    assert "no tool on this surface has read_only false" in hint(
        "user", surface=read_only, read_only=False
    )
    # on a surface blocking billing, its namespace and its kind read as ones no tool has
    blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="billing")]), env.catalog)
    assert hint(surface=blocking, namespace="billing").replace("'billing'", "N") == hint(
        surface=blocking, namespace="zzz"
    ).replace("'zzz'", "N")
    assert "no tool on this surface is in the namespace 'bililng';" in hint(
        surface=blocking, namespace="bililng"
    )
    assert "(kinds on it: function);" in hint(surface=blocking, kind="openapi")
    assert (
        "no tool on this surface is of the kind 'openapi_operation' (kinds on it: function);"
        in hint(surface=blocking, kind="openapi_operation")
    )


async def test_a_namespace_filter_of_a_bridge_with_no_other_upstream_answers_no_match():
    # the namespaces written like it were drawn from none: difflib refused n=0 with a ValueError,
    # so `bridge search "" --namespace x` without upstreams, or GET /search?namespace=x, failed
    for ups in ([], [FakeUpstream(name="api", tools=tools_a())]):
        e = await start_env(ups)
        try:
            blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="api")]), e.catalog)
            for namespace, surface in (("zzz", e.surface), ("api", blocking)):
                for query in ("invoice", ""):
                    result = e.search.search(query, surface=surface, namespace=namespace)
                    assert (
                        result.matches == []
                        and f"no tool on this surface is in the namespace {namespace!r}"
                        in result.hint
                    )
        finally:
            await e.close()


async def test_the_namespace_of_an_upstream_still_connecting_is_not_said_to_have_no_tool():
    down = FakeUpstream(
        FakeConfig(name="slow", fail_start="connection refused on 127.0.0.1:9", retry_initial=30),
        tools=[tool("get_forecast")],
    )
    e = await start_env([FakeUpstream(name="api", tools=tools_a()), down])
    try:
        hint = e.search.search("forecast", surface=e.surface, namespace="slow").hint
        assert "is in the namespace" not in hint and hint.endswith("; still connecting: slow")
        # a namespace written like it is not named: none of its tools is shown yet
        assert (
            "no tool on this surface is in the namespace 'slw';"
            in e.search.search("forecast", surface=e.surface, namespace="slw").hint
        )
    finally:
        await e.close()


async def test_blocked_tools_outranking_a_visible_one_leave_room_for_it():
    loud = [
        tool(f"report_{i}", description="report report report quarterly report") for i in range(60)
    ]
    quiet = tool("archive", description="Archive an old report.")
    e = await start_env([FakeUpstream(name="x", tools=[*loud, quiet])])
    try:
        surface = Surface(SurfaceConfig(name="s", block=["x__report_*"]), e.catalog)
        assert e.names("report", surface=surface, limit=3) == ["x__archive"]
    finally:
        await e.close()


async def test_no_match_answers_with_a_hint(env):
    result = env.search.search("zzyzx quux", surface=env.surface, namespace="billing")
    assert result.matches == []
    assert result.next_action == "refine_query"
    assert "filters namespace" in result.hint and "select:" in result.hint


async def test_a_query_without_words_lists_nothing_and_a_number_alone_is_searched(env):
    for query in ("***", "-", "\x00\x01"):  # not a listing of every tool
        result = env.search.search(query, surface=env.surface)
        assert result.matches == [] and result.next_action == "refine_query"
        assert "no word to search for" in result.hint
    assert env.search.search(
        "", surface=env.surface, namespace="api"
    ).matches  # a filter-only listing still lists
    up = env.ups["api"]
    up.change_tools([*tools_a(), tool("http_404_report", description="Pages that were not found.")])
    await until(lambda: env.catalog.resolve("api__http_404_report") is not None)
    assert await env.search.wait_indexed()
    assert env.names("404") == ["api__http_404_report"]
    assert analyze_query("send 40 invoices").terms == {
        "send": 1.0,
        "invoic": 1.0,
    }  # a value beside words: dropped


async def test_limits_empty_filters_and_many_missing_names_are_answered_plainly(env):
    from bridge.search.service import HINT_NAMES, MAX_LIMIT

    # a limit the index cannot allocate (it panicked) is the most a search returns
    assert len(env.search.search("user", surface=env.surface, limit=2**63).matches) <= MAX_LIMIT
    # an empty namespace, kind or tag list filters nothing, as an empty REST parameter
    assert env.names("user account", namespace="", kind="", tags=[]) == env.names("user account")
    # the hint names the first missing names; missing_names lists every one, once
    unknown = [f"nope{i}" for i in range(5000)]
    result = env.search.search(
        "select:" + ",".join([*unknown, "nope1", "api__delete_user"]), surface=env.surface
    )
    assert [m.name for m in result.matches] == [
        "api__delete_user"
    ] and result.missing_names == unknown
    assert (
        result.hint
        == f"not found on this surface: {', '.join(unknown[:HINT_NAMES])} and 4990 more (all in missing_names)"
    )


async def test_results_validate_against_agent_tool_shapes(env):
    surface = Surface(SurfaceConfig(name="d", defer=["*"]), env.catalog)
    for query in ("user", "select:api__getUserById,missing", "nothing-like-this-exists"):
        result = env.search.search(query, surface=surface, include_schema=True).to_json()
        jsonschema.validate(result, SEARCH_RESULT_SCHEMA)
        for match in result["matches"]:
            jsonschema.validate(match, DEFERRED_SCHEMA)
            assert match["loading_state"] == "deferred" and "input_schema" in match
            assert 3 <= len(match["search_hint"].split()) <= 10
    assert env.search.search("user", surface=surface).total_deferred_tools == len(env.catalog)


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_searchs_first_matches_do_not_depend_on_its_limit(semantic):
    # the steps after the keyword score read the same candidates whatever the limit: with
    # keywords alone too, `wc` gains from its API's other tools also when one match is asked for
    e = await start_env(
        [FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())],
        semantic=semantic,
    )
    try:
        assert e.names("how many lines and words are in that file?", limit=1) == ["fs__wc"]
        for query in (
            "how many lines and words are in that file?",
            "move the file to another folder",
            "list the files here",
            "go to another folder and show what is in it",
        ):
            longest = e.names(query, limit=30)
            for limit in (1, 2, 3, 5, 10):
                assert e.names(query, limit=limit) == longest[:limit], (query, limit)
    finally:
        await e.close()


REPORTS = [
    "sales",
    "stock",
    "travel",
    "payroll",
    "budget",
    "audit",
    "traffic",
    "energy",
    "weather",
    "support",
    "shipping",
    "returns",
    "refunds",
    "hiring",
    "churn",
    "usage",
    "latency",
    "security",
    "tax",
    "margin",
]


def report_tools(vendor: str) -> list:
    # 60 tools of reports and mail, worded in a vendor's way: more than a search's first page of candidates
    out = []
    for i, topic in enumerate(REPORTS):
        out += [
            tool(
                f"create_{topic}_report",
                description=f"{vendor} creates the {topic} report of a period, {i} pages at most.",
            ),
            tool(
                f"email_{topic}_report",
                description=f"{vendor} sends the {topic} report by email to a list of people.",
            ),
            tool(
                f"archive_{topic}_report",
                description=f"{vendor} archives an old {topic} report and its email thread.",
            ),
        ]
    return out


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_searchs_first_matches_are_the_same_whatever_its_limit_over_many_candidates(
    semantic,
):
    # two vendors list the same 60 functions: alternatives fold, so a large limit ranks candidates
    # past the first page; a request of two parts is covered over the whole page, not its limit
    e = await start_env(
        [
            FakeUpstream(name="acme", tools=report_tools("Acme")),
            FakeUpstream(name="globex", tools=report_tools("Globex")),
        ],
        semantic=semantic,
    )
    try:
        for query in (
            "create the sales report and email it to the team",
            "archive the old travel report",
            "report",
        ):
            first = e.search.search(query, surface=e.surface, limit=10).matches
            assert len(first) == 10
            for limit in (20, 40, 60, 100):
                matches = e.search.search(query, surface=e.surface, limit=limit).matches
                assert [m.tool_id for m in matches[:10]] == [m.tool_id for m in first], (
                    query,
                    limit,
                )
                assert len(matches) == min(
                    limit, 60
                )  # each function once, the other vendor's as its alternative
                scores = [m.score for m in matches]
                assert scores == sorted(scores, reverse=True), (
                    query,
                    limit,
                )  # further pages score below
                assert len({m.tool_id for m in matches}) == len(matches)
    finally:
        await e.close()
