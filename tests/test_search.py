"""Tool search: exact selection, ranked search, filters, surfaces, the index following the catalog,
the on-disk index reopened across restarts, and the Agent Tool shapes of the answer."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bridge.catalog import Catalog
from bridge.config import Rule, SurfaceConfig
from bridge.model import InputContract, ToolDeclaration
from bridge.search.analysis import analyze_query, cjk_pairs, meaning_text, name_tokens, name_words, query_parts, spelled_words
from bridge.search.document import IndexedTool, tool_key
from bridge.search.foreground import Foreground
from bridge.search.service import ToolSearch
from bridge.search.stages import LOOKUP_PLACES, cover_order
from bridge.search.tooltext import derive_search_hint
from bridge.store import Store
from bridge.surface import Surface
from tests.conftest import ROOT
from tests.fakes import FakeConfig, FakeUpstream, tool
from tests.servers import until

DEFERRED_SCHEMA = json.loads((ROOT / "specs/agenttool/agenttool-deferred-tool.schema.json").read_text())
# The tool_search_result shape (the Agent Tool spec defines it in prose; no JSON Schema ships).
SEARCH_RESULT_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "query", "query_type", "matches", "total_deferred_tools", "pending_providers",
                 "missing_names", "next_action"],
    "properties": {
        "schema_version": {"const": "0.2.0"},
        "query": {"type": "string"},
        "query_type": {"enum": ["select", "keyword"]},
        "matches": {"type": "array", "items": {"type": "object", "required": ["tool_id", "name", "score"]}},
        "total_deferred_tools": {"type": "integer", "minimum": 0},
        "pending_providers": {"type": "array", "items": {"type": "string"}},
        "missing_names": {"type": "array", "items": {"type": "string"}},
        "next_action": {"type": "string"},
        "hint": {"type": "string"},
    },
}


def tools_a():
    return [
        tool("getUserById", description="Fetch one user account by its id.", read_only=True, tags=["users"]),
        tool("list_repositories", description="List the repositories of an organization.", read_only=True),
        tool("files/read-text", description="Read a text file from the workspace.", read_only=True),
        tool("delete_user", description="Delete a user account for good.", destructive=True, tags=["users", "admin"]),
        tool("send_invoice", description="Email an invoice to a customer.", props={"customerEmail": {"type": "string", "description": "where the invoice goes"}}),
    ]


class Env:
    """A started catalog with its search index and a surface or two."""

    def __init__(self, catalog: Catalog, search: ToolSearch, ups: dict[str, FakeUpstream]) -> None:
        self.catalog, self.search, self.ups = catalog, search, ups
        self.surface = Surface(SurfaceConfig(name="default"), catalog)

    def names(self, query: str, surface: Surface | None = None, **kw) -> list[str]:
        return [m.name for m in self.search.search(query, surface=surface or self.surface, **kw).matches]

    async def close(self) -> None:
        self.search.close()
        await self.catalog.close()


async def start_env(ups: list[FakeUpstream], path: str | None = None, store: Store | None = None, **search_kw) -> Env:
    catalog = Catalog(store or Store())
    for up in ups:
        catalog.add_upstream(up)
    search = ToolSearch(catalog, path, **search_kw)
    await catalog.start()
    assert await search.wait_indexed()
    return Env(catalog, search, {u.name: u for u in ups})


@pytest.fixture
async def env():
    e = await start_env([FakeUpstream(name="api", tools=tools_a()), FakeUpstream(name="billing", tools=[
        tool("create_invoice", description="Create a draft invoice.", tool_kind="openapi_operation"),
        tool("refund", description="Refund a payment.", tool_kind="openapi_operation")])])
    yield e
    await e.close()


def test_name_tokens_split_every_style():
    assert name_tokens("getUserById") == ["get", "user", "by", "id"]
    assert name_tokens("get_user_by_id") == ["get", "user", "by", "id"]
    assert name_tokens("users/get-by.id") == ["users", "get", "by", "id"]
    assert name_tokens("HTTPServerError") == ["http", "server", "error"]
    assert name_words("users/getById") == "users get by id" == name_words("users/getById")  # kept, the same


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


async def test_conversational_filler_does_not_decide(env):
    assert env.names("could you please help me, I would like to read the text of a file")[0] == "api__files_read-text"


async def test_a_query_of_filler_alone_matches_whole_names_only():
    env = await start_env([FakeUpstream(name="ops", tools=[
        tool("who_is", description="Look up who owns a domain name."),
        tool("more", description="Show a file one page at a time."),
        tool("purge_cache", description="Purge the cache; do that when it is stale.",
             props={"missing_ok": {"type": "boolean", "description": "Do not fail when there is no cache: ok."}}),
        tool("http_status", description="Explain an HTTP status code such as 404."),
    ])], semantic="static")
    try:
        # its words are in descriptions and parameters (`missing_ok`, *do that*): no tool is meant
        for query in ("ok thanks", "yes please do that", "OK, thank you!"):
            result = env.search.search(query, surface=env.surface)
            assert result.matches == [] and not result.suggestions, query
            assert "say nothing of a task" in result.hint and result.next_action == "refine_query"
        # ... but a tool named by it is found, whole names as written in any style
        assert env.names("who is") == ["ops__who_is"]
        assert env.names("Who is?") == ["ops__who_is"]
        assert env.names("more please") == ["ops__more"]
        # numbers are still searched when nothing else is left; filler beside them is not
        assert env.names("404") == ["ops__http_status"]
        assert env.names("is it 404") == ["ops__http_status"]
        # with a content word, filler is set aside as ever
        assert env.names("purge ok")[0] == "ops__purge_cache"
        assert not analyze_query("purge ok").filler and analyze_query("who is it").filler
    finally:
        await env.close()


async def test_a_misspelled_word_finds_the_word_one_edit_away(env):
    # letters swapped, dropped, added: no tool has these words, so their neighbours are matched
    assert env.names("refnud the paymnet")[0] == "billing__refund"
    assert env.names("list the reposiotries")[0] == "api__list_repositories"
    assert env.names("email an invoicce")[0] == "api__send_invoice"
    # a word under 6 letters, or one with digits (an id, a code), is not widened, though one edit
    # away from 'refund'; nor is a word of a longer request, whose other words find its tools
    assert env.names("refnd") == []
    assert env.names("refund1") == []
    assert "billing__refund" not in env.names("refnud paymnet customer order today quickly")


async def test_a_word_the_language_knows_is_not_read_as_a_typing_error():
    assert {"monkey", "money", "weather"} <= spelled_words() and "califronia" not in spelled_words()
    env = await start_env([FakeUpstream(name="fx", tools=[
        tool("convert_currency", description="Convert an amount of money between currencies.")])])
    try:
        # *monkey* is one edit from *money*, but a word of its own: no match
        assert env.names("purple monkey dishwasher") == []
        assert analyze_query("purple monkey dishwasher").spelled == {"monkey", "purpl"}
        # a misspelt word is still widened
        assert env.names("curency") == ["fx__convert_currency"]
        assert env.names("monney") == ["fx__convert_currency"]
    finally:
        await env.close()


def test_cjk_runs_are_read_as_overlapping_pairs_of_characters():
    assert cjk_pairs("天气预报") == " 天气 气预 预报 "
    assert cjk_pairs("mbox系统") == "mbox 系统 "  # a run of two is its own pair, set apart from the Latin word
    assert cjk_pairs("东 x") == " 东  x"  # a lone character stays
    assert cjk_pairs("天気予報を取得") == " 天気 気予 予報 報を を取 取得 "  # kanji and kana alike
    assert cjk_pairs("날씨 예보를") == " 날씨   예보 보를 "  # a Korean word keeps its stem apart from its particle
    assert cjk_pairs("Café déjà vu・テスト") == "Café déjà vu・ テス スト "  # other scripts as they are; the middle dot splits
    text = "get_weather: Get the weather for a city."
    assert cjk_pairs(text) is text  # ASCII text, without a look
    # a query's pairs are its terms; a lone character, like a one-letter word, is set aside
    assert set(analyze_query("北京的天气").terms) == {"北京", "京的", "的天", "天气"}
    assert set(analyze_query("天 weather").terms) == {"weather"}


CJK_TOOLS = [
    tool("weather_forecast", description="获取指定城市未来几天的天气预报，包括温度和降水概率。",
         props={"city": {"type": "string", "description": "城市名称"}}),
    tool("stock_quote", description="查询股票的实时价格和涨跌幅。", props={"symbol": {"type": "string", "description": "股票代码"}}),
    tool("ticket_list", description="列出指定公司所有未解决的工单。", props={"company": {"type": "string", "description": "公司名称"}}),
    tool("translate", description="将文本翻译成目标语言。"),
    tool("tenki", description="指定した都市の天気予報を取得します。"),
    tool("norikae", description="出発駅から到着駅までの電車の乗り換え案内を検索します。"),
    tool("nalssi", description="지정한 도시의 날씨 예보를 가져옵니다."),
    tool("baedal", description="음식점에서 음식 배달을 주문합니다."),
    tool("get_weather", description="Get the current weather for a city."),
    tool("order_food", description="Order food delivery from a restaurant."),
]


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_tools_described_in_chinese_japanese_or_korean_are_found_in_their_language(semantic):
    e = await start_env([FakeUpstream(name="intl", tools=CJK_TOOLS)], semantic=semantic)
    try:
        # no space between words: matched by the pairs of characters request and tool share
        assert e.names("北京明天的天气预报")[:1] == ["intl__weather_forecast"]
        assert e.names("查一下苹果的股票价格")[:1] == ["intl__stock_quote"]
        assert e.names("获取阿迪达斯的未解决工单")[:1] == ["intl__ticket_list"]
        assert e.names("帮我把这段话翻译成英文")[:1] == ["intl__translate"]
        assert e.names("東京の天気予報")[:1] == ["intl__tenki"]
        assert e.names("新宿から渋谷までの乗り換え")[:1] == ["intl__norikae"]
        # a Korean word with another particle than the tool's (배달을 / 배달)
        assert e.names("서울 날씨 알려줘")[:1] == ["intl__nalssi"]
        assert e.names("치킨 배달 주문해줘")[:1] == ["intl__baedal"]
        # English requests find the English tools as before
        assert e.names("order food")[:1] == ["intl__order_food"]
        assert e.names("weather in Paris")[:1] == ["intl__get_weather"]
    finally:
        await e.close()


async def test_a_word_the_catalog_says_otherwise_finds_its_tools():
    e = await start_env([FakeUpstream(name="fs", tools=[
        tool("mkdir", description="Create a new directory."),
        tool("ls", description="List the contents of the current directory."),
        tool("start_engine", description="Start the vehicle's engine."),
        tool("archive", description="Pack a folder into a zip archive."),
        tool("flights", description="Find flights to a city."),
    ])])
    try:
        # no tool says *car*; *vehicle* is among its related words
        assert e.names("start the car") == ["fs__start_engine"]
        assert e.names("car") == ["fs__start_engine"]
        # *directory*, related to *folder*, is in more tools than *folder*: both are matched,
        # the tool saying *folder* first
        assert e.names("folder")[0] == "fs__archive"
        assert {"fs__mkdir", "fs__ls"} <= set(e.names("folder"))
        # the other way round the related word is rarer in the catalog: it is left out
        assert "fs__archive" not in e.names("directory")
        # a capitalised word inside a sentence is a name: its nearest words are other names
        assert analyze_query("seattle").related == {"seattl": ("puget", "seahawk")}
        assert "seattl" not in analyze_query("Flights to Seattle").related
        assert e.names("Flights to Seattle") == ["fs__flights"]
        # a long request is matched by its own rarest words alone
        assert not analyze_query(" ".join(f"word{i}x" for i in range(40)) + " folder").related
    finally:
        await e.close()


def test_without_the_related_words_file_queries_are_not_expanded(monkeypatch, tmp_path, caplog):
    from bridge.search.analysis import related_words

    monkeypatch.setattr("bridge.search.analysis.RELATED_TABLE", tmp_path / "missing.npz")
    related_words.cache_clear()
    try:
        assert analyze_query("make a new folder").related == {}
        assert "queries are not expanded" in caplog.text
    finally:
        related_words.cache_clear()


async def test_select_by_name_alias_and_id_with_missing_names(env):
    repo = env.catalog.resolve("api__list_repositories")
    user = env.catalog.resolve("api__getUserById")
    # the catalog keeps an old name as an alias when a collision renames a tool; give one
    user.aliases.append("api__get_user_old")
    env.catalog._by_name["api__get_user_old"] = user.tool_id
    result = env.search.search(f"select:api__list_repositories,{user.tool_id},api__get_user_old,nope,api__gone",
                               surface=env.surface)
    assert result.query_type == "select"
    assert [m.name for m in result.matches] == ["api__list_repositories", "api__getUserById"]  # the same tool once
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
    blocking = Surface(SurfaceConfig(name="safe", block=["api__delete*", Rule(upstream="billing")]), env.catalog)
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
    result = env.search.search("select:api__delete_user,api__getUserById,billing__refund,nope", surface=env.surface, read_only=True)
    assert [m.name for m in result.matches] == ["api__getUserById"]
    assert result.missing_names == ["api__delete_user", "billing__refund", "nope"]
    assert result.hint == ("not found on this surface: nope; left out by the filters: api__delete_user (read_only), "
                           "billing__refund (read_only); ask again without those filters to have them")
    result = env.search.search("select:billing__refund,api__delete_user", surface=env.surface, namespace="api", tags=["admin"],
                               kind="openapi_operation")
    assert result.matches == [] and result.next_action == "refine_query"
    assert "billing__refund (namespace, tags)" in result.hint and "api__delete_user (kind)" in result.hint
    assert [m.name for m in env.search.search("select:api__delete_user", surface=env.surface, namespace="api",
                                              tags=["admin"]).matches] == ["api__delete_user"]
    # a blocked tool stays unknown, whatever the filters: it is never revealed
    blocking = Surface(SurfaceConfig(name="safe", block=["api__delete*"]), env.catalog)
    result = env.search.search("select:api__delete_user", surface=blocking, read_only=True)
    assert result.missing_names == ["api__delete_user"] and result.hint == "not found on this surface: api__delete_user"


async def test_a_filter_no_tool_on_the_surface_passes_is_named_and_a_blocked_one_is_not_revealed(env):
    def hint(query: str = "invoice", surface: Surface | None = None, **filters) -> str:
        result = env.search.search(query, surface=surface or env.surface, **filters)
        assert result.matches == [] and result.next_action == "refine_query"
        return result.hint

    # a namespace written wrong, also in a listing by filters alone: the namespaces like it
    for query in ("invoice", ""):
        assert "no tool on this surface is in the namespace 'bililng' (namespaces like it: billing);" in hint(query, namespace="bililng")
    assert "(namespaces like it: billing)" in hint(namespace="Billing")
    assert "is in the namespace" not in hint("repositories", namespace="billing")  # a namespace there is, the words wrong
    assert "no tool on this surface has the tag 'admins'" in hint("user", tags=["users", "admins"])
    assert "no tool on this surface is of the kind 'openapi' (kinds on it: function, openapi_operation);" in hint(kind="openapi")
    read_only = Surface(SurfaceConfig(name="ro", read_only=True), env.catalog)
    assert "no tool on this surface has read_only false" in hint("user", surface=read_only, read_only=False)
    # on a surface blocking billing, its namespace and its kind read as ones no tool has
    blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="billing")]), env.catalog)
    assert hint(surface=blocking, namespace="billing").replace("'billing'", "N") == hint(surface=blocking, namespace="zzz").replace("'zzz'", "N")
    assert "no tool on this surface is in the namespace 'bililng';" in hint(surface=blocking, namespace="bililng")
    assert "(kinds on it: function);" in hint(surface=blocking, kind="openapi")
    assert "no tool on this surface is of the kind 'openapi_operation' (kinds on it: function);" in hint(surface=blocking, kind="openapi_operation")


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
                    assert result.matches == [] and f"no tool on this surface is in the namespace {namespace!r}" in result.hint
        finally:
            await e.close()


async def test_the_namespace_of_an_upstream_still_connecting_is_not_said_to_have_no_tool():
    down = FakeUpstream(FakeConfig(name="slow", fail_start="connection refused on 127.0.0.1:9", retry_initial=30),
                        tools=[tool("get_forecast")])
    e = await start_env([FakeUpstream(name="api", tools=tools_a()), down])
    try:
        hint = e.search.search("forecast", surface=e.surface, namespace="slow").hint
        assert "is in the namespace" not in hint and hint.endswith("; still connecting: slow")
        # a namespace written like it is not named: none of its tools is shown yet
        assert "no tool on this surface is in the namespace 'slw';" in e.search.search("forecast", surface=e.surface, namespace="slw").hint
    finally:
        await e.close()


async def test_blocked_tools_outranking_a_visible_one_leave_room_for_it():
    loud = [tool(f"report_{i}", description="report report report quarterly report") for i in range(60)]
    quiet = tool("archive", description="Archive an old report.")
    e = await start_env([FakeUpstream(name="x", tools=[*loud, quiet])])
    try:
        surface = Surface(SurfaceConfig(name="s", block=["x__report_*"]), e.catalog)
        assert e.names("report", surface=surface, limit=3) == ["x__archive"]
    finally:
        await e.close()


VOLUME = {  # one function, three vendors' wording
    "audio": "Set the global volume for all audio playback, from 0 (mute) to 100.",
    "speakers": "Change the playback volume of every speaker to a level between 0 and 100 percent.",
    "media": "Adjust the audio output loudness for all players.",
}


def vendors():
    ups = [FakeUpstream(name=ns, tools=[tool("set_volume", description=text, props={"volume": {"type": "integer"}})])
           for ns, text in VOLUME.items()]
    ups[0].tools.append(tool("mute_audio", description="Mute all audio playback at once."))
    ups.append(FakeUpstream(name="code", tools=[tool("search", description="Search source code across the organization's repositories.")]))
    ups.append(FakeUpstream(name="tickets", tools=[tool("search", description="Find support tickets by customer, status or priority.")]))
    return ups


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_one_function_from_several_upstreams_takes_one_place(semantic):
    e = await start_env(vendors(), semantic=semantic)
    try:
        result = e.search.search("set the audio volume", surface=e.surface, limit=2)
        first, second = result.matches
        assert first.name.endswith("__set_volume") and second.name == "audio__mute_audio"
        assert sorted(c["name"] for c in first.alternatives) == sorted({"audio__set_volume", "speakers__set_volume",
                                                                  "media__set_volume"} - {first.name})
        assert {c["tool_id"] for c in first.alternatives} == {e.catalog.resolve(c["name"]).tool_id for c in first.alternatives}
        assert second.alternatives is None and "alternatives" not in second.to_json()
        jsonschema.validate(first.to_json(), DEFERRED_SCHEMA)
        # one native name, two meanings: two matches with the semantic stage, one without
        names = e.names("search", limit=5)
        assert sorted(names) == (["code__search", "tickets__search"] if semantic == "static" else names)
        assert len(names) == (2 if semantic == "static" else 1)
        # filter-only listings and exact selection list every tool
        assert len(e.names("", namespace="speakers", limit=10)) == 1
        assert len(e.search.search("select:audio__set_volume,media__set_volume", surface=e.surface).matches) == 2
    finally:
        await e.close()


async def test_alternatives_kept_apart_when_asked_and_an_unavailable_match_gives_way():
    e = await start_env(vendors(), fold_alternatives=False)
    try:
        assert len([n for n in e.names("set volume", limit=10) if n.endswith("__set_volume")]) == 3
    finally:
        await e.close()
    e = await start_env(vendors(), semantic="static")
    try:
        best = e.names("set the audio volume", limit=1)[0]
        down = e.ups[best.split("__")[0]]
        down.start_gate = asyncio.Event()  # it stays down after the drop
        down.drop("connection reset")
        await until(lambda: e.catalog.resolve(best).loading_state == "unavailable")
        match = e.search.search("set the audio volume", surface=e.surface, limit=1).matches[0]
        assert match.name != best and match.loading_state != "unavailable"
        assert best in [c["name"] for c in match.alternatives]
        down.start_gate.set()
    finally:
        await e.close()


async def test_a_tool_listed_by_hundreds_of_upstreams_takes_one_place():
    ups = [FakeUpstream(name=f"v{i:03d}", tools=[tool("get_weather", description="Get the weather for a city.")])
           for i in range(300)]
    ups.append(FakeUpstream(name="other", tools=[tool(f"weather_{i}", description=f"Weather report number {i}.")
                                                 for i in range(12)]))
    e = await start_env(ups)
    try:
        matches = e.search.search("get the weather of a city", surface=e.surface, limit=10).matches
        assert len(matches) == 10 and len({m.name.split("__")[-1] for m in matches}) == 10
        (weather,) = [m for m in matches if m.name.endswith("__get_weather")]
        assert len(weather.alternatives) == 20 and weather.alternatives_total == 299
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
    assert env.search.search("", surface=env.surface, namespace="api").matches  # a filter-only listing still lists
    up = env.ups["api"]
    up.change_tools([*tools_a(), tool("http_404_report", description="Pages that were not found.")])
    await until(lambda: env.catalog.resolve("api__http_404_report") is not None)
    assert await env.search.wait_indexed()
    assert env.names("404") == ["api__http_404_report"]
    assert analyze_query("send 40 invoices").terms == {"send": 1.0, "invoic": 1.0}  # a value beside words: dropped


async def test_limits_empty_filters_and_many_missing_names_are_answered_plainly(env):
    from bridge.search.service import HINT_NAMES, MAX_LIMIT

    # a limit the index cannot allocate (it panicked) is the most a search returns
    assert len(env.search.search("user", surface=env.surface, limit=2 ** 63).matches) <= MAX_LIMIT
    # an empty namespace, kind or tag list filters nothing, as an empty REST parameter
    assert env.names("user account", namespace="", kind="", tags=[]) == env.names("user account")
    # the hint names the first missing names; missing_names lists every one, once
    unknown = [f"nope{i}" for i in range(5000)]
    result = env.search.search("select:" + ",".join([*unknown, "nope1", "api__delete_user"]), surface=env.surface)
    assert [m.name for m in result.matches] == ["api__delete_user"] and result.missing_names == unknown
    assert result.hint == f"not found on this surface: {', '.join(unknown[:HINT_NAMES])} and 4990 more (all in missing_names)"


def test_long_queries_are_read_in_time_linear_in_their_length():
    """Patterns that looked past a run of letters or spaces from each of its places took seconds
    for 20,000 characters (the server's event loop stalled) and grew with the square of the
    length; a megabyte of each now takes a blink. Run apart, so a regression fails by its
    timeout instead of stalling the suite."""
    import subprocess
    import sys

    script = (
        "from bridge.search.analysis import _FILE_NAME, MAX_QUERY_CHARS, _names, analyze_query, identifier_words, query_parts\n"
        "n = 1_000_000\n"
        "for text in ('a' * n, 'ab1' * (n // 3), 'aB' * (n // 2), 'x' + ' ' * n + 'x', 'Aa' + ' ' * n + 'Bb', ', ' * n + 'also'):\n"
        "    identifier_words(text), _names(text), query_parts(text)\n"
        "    assert len(analyze_query(text).text) == min(len(text), MAX_QUERY_CHARS)\n"
        "    _FILE_NAME.search(text), _FILE_NAME.search(text.replace('b', '-'))\n"
        "assert identifier_words('call getUserById then lawyer.find_nearby, not x2fooBar') == ['getuserbyid', 'lawyer.find_nearby']\n"
        "assert _names('Weather in Santa Barbara.\\n  Then Seattle  too') == {'santa', 'barbara', 'seattle'}\n"
        "assert [p.text for p in query_parts('Book a flight to Paris.   Also    reserve a hotel there')] == "
        "['Book a flight to Paris.', 'reserve a hotel there']\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


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


async def test_index_follows_tool_add_change_and_removal(env):
    up = env.ups["api"]
    up.change_tools([*tools_a(), tool("rotate_keys", description="Rotate the signing keys.")])
    await until(lambda: env.catalog.resolve("api__rotate_keys") is not None)
    assert await env.search.wait_indexed()
    assert env.names("signing keys")[0] == "api__rotate_keys"

    changed = [t if t.name != "rotate_keys" else tool("rotate_keys", description="Renew TLS certificates.") for t in up.tools]
    up.change_tools(changed)
    await until(lambda: "TLS" in env.catalog.resolve("api__rotate_keys").description)
    assert await env.search.wait_indexed()
    assert env.names("certificates")[0] == "api__rotate_keys"
    assert "api__rotate_keys" not in env.names("signing")

    up.change_tools([t for t in changed if t.name != "rotate_keys"])
    await until(lambda: env.catalog.resolve("api__rotate_keys") is None)
    assert await env.search.wait_indexed()
    assert env.names("certificates") == []
    assert env.search.index.num_docs == len(env.catalog)


async def test_a_matchs_hint_follows_its_tool_and_the_text_its_api_shares(env):
    blurb = "Part of the Acme API for orders and carts. Tool description: "
    orders = [tool("create_order", description=blurb + "Create an order."), tool("cancel_order", description=blurb + "Cancel an order.")]

    def hint(query: str) -> tuple[str, str | None]:
        first = env.search.search(query, surface=env.surface).matches[0]
        return first.name, first.search_hint

    env.catalog.apply_tools("billing", orders)
    assert await env.search.wait_indexed()
    # two tools do not share a text yet: the blurb's first sentence is the tool's own
    assert hint("cancel an order") == ("billing__cancel_order", "Part of the Acme API for orders and carts")
    env.catalog.apply_tools("billing", [*orders, tool("refund_order", description=blurb + "Refund an order.")])
    assert await env.search.wait_indexed()
    assert hint("cancel an order") == ("billing__cancel_order", "Cancel an order")  # a third: the blurb is shared
    env.catalog.apply_tools("billing", [orders[0], tool("cancel_order", description=blurb + "Void an order before it ships."),
                                        tool("refund_order", description=blurb + "Refund an order.")])
    assert await env.search.wait_indexed()
    assert hint("void an order") == ("billing__cancel_order", "Void an order before it ships")


async def test_index_follows_a_whole_upstream_going_and_coming_back(env):
    before = env.search.index.num_docs
    env.catalog.apply_tools("billing", [])
    assert await env.search.wait_indexed()
    assert env.search.index.num_docs == before - 2
    assert env.names("refund") == []
    env.catalog.apply_tools("billing", [tool("refund", description="Refund a payment.")])
    assert await env.search.wait_indexed()
    assert env.names("refund") == ["billing__refund"]


async def test_an_outage_does_not_rewrite_the_index(env):
    written = env.search.index.documents_written
    slot = env.catalog.slot("api")
    attempts, generation = slot.health.attempts, env.catalog.generation
    env.ups["api"].drop("connection reset")  # marked unavailable, then reconnected and re-listed
    await until(lambda: slot.health.attempts > attempts and slot.health.state == "ready")
    assert env.catalog.generation >= generation + 2
    assert await env.search.wait_indexed()
    assert env.search.index.documents_written == written  # only the loading state changed
    assert env.names("repositories")[0] == "api__list_repositories"


async def test_thousand_changes_are_searchable_within_a_second():
    e = await start_env([FakeUpstream(name="bulk", tools=[tool("seed")])])
    try:
        many = [tool(f"op_{i}", description=f"Operation number {i} on widget{i}") for i in range(1000)]
        loop = asyncio.get_running_loop()
        e.catalog.apply_tools("bulk", many)  # the change is announced when this returns
        started = loop.time()
        assert await e.search.wait_indexed(timeout=5.0)
        assert loop.time() - started < 1.0
        assert e.names("widget999") == ["bulk__op_999"]
        e.catalog.apply_tools("bulk", many[:10])
        assert await e.search.wait_indexed(timeout=5.0)
        assert e.search.index.num_docs == 10
    finally:
        await e.close()


async def test_restart_reopens_the_index_without_rewriting_it(tmp_path):
    path = str(tmp_path / "bridge.index")
    db = tmp_path / "bridge.db"

    async def run(tools, upstreams=("api",)):
        store = Store(db)
        ups = [FakeUpstream(name=n, tools=tools if n == "api" else [tool("other")]) for n in upstreams]
        e = await start_env(ups, path, store)
        stats = (e.search.index.opened_existing, e.search.index.documents_written, e.search.index.num_docs,
                 e.names("repositories"))
        await e.close()
        store.close()
        return stats

    assert await run(tools_a(), ("api", "extra")) == (False, 6, 6, ["api__list_repositories"])
    # same catalog: reopened, nothing written
    assert await run(tools_a(), ("api", "extra")) == (True, 0, 6, ["api__list_repositories"])
    # one tool changed, one gone, an upstream no longer configured: only the difference is written
    changed = [t for t in tools_a() if t.name != "delete_user"]
    changed[1] = tool("list_repositories", description="List the code repositories of a team.")
    opened, written, docs, found = await run(changed)
    assert (opened, written, docs) == (True, 1, 4)
    assert found == ["api__list_repositories"]
    # a damaged format marker: rebuilt from the catalog
    (Path(path) / "bridge-search.json").write_text("{}")
    assert (await run(changed))[:3] == (False, 4, 4)


def indexed(tool_id: str, text: str, namespace: str = "ns"):
    """An index document of a tool named `text`, for tests of the index alone."""

    return IndexedTool(tool_id=tool_id, namespace=namespace, name=text, exact_names=[tool_id])


def written_index(path: str, *tools) -> None:
    """An index at `path` holding `tools` (IndexedTools), committed and closed, as a process
    leaves it when it ends."""
    import bridge.search.index as si

    index = si.ToolIndex(path)
    try:
        index.submit(list(tools))
        assert index.flush()
    finally:
        index.close()


def hits(index, words: str, limit: int = 1) -> list[str]:
    """The ids of an index's first `limit` hits for `words`, best first."""
    return [t for t, _ in index.search(index.query(analyze_query(words)), limit=limit)]


def assert_reopens_as(path: str, digests: dict, docs: int) -> None:
    """The index at `path` is reopened as it is: its digest log agrees with its documents."""
    import bridge.search.index as si

    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened._digests == digests and reopened.num_docs == reopened.tool_count == docs
    finally:
        reopened.close()


def test_a_search_of_no_place_answers_nothing_rather_than_failing():
    import bridge.search.index as si
    from bridge.search.stages import part_scores

    index = si.ToolIndex()
    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        query = index.query(analyze_query("report"))
        assert index.search(query, limit=0) == [] and index.lookups(["report"], limit=0) == []
        assert part_scores(index, [analyze_query("report")], []) == [{}]  # no candidates, no scores
        assert [t for t, _ in index.search(query, limit=1)] in (["a"], ["b"])
    finally:
        index.close()


def test_hits_are_read_by_their_keys_and_a_key_two_ids_share_reads_the_stored_id(tmp_path, monkeypatch):
    import bridge.search.index as si

    path = str(tmp_path / "keys.index")
    index = si.ToolIndex(path)
    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report"), indexed("c", "gamma report")])
        assert sorted(t for t, _ in index.search(index.query(analyze_query("report")), limit=10)) == ["a", "b", "c"]
        assert index._by_key == {tool_key(t): t for t in "abc"}
        index.submit(deletes=[("ns", "c")])
        assert index.flush() and tool_key("c") not in index._by_key
    finally:
        index.close()
    reopened = si.ToolIndex(path)  # the keys of a reopened index's tools are known again
    try:
        assert reopened.opened_existing and reopened._by_key == {tool_key(t): t for t in "ab"}
        assert [t for t, _ in reopened.search(reopened.query(analyze_query("beta")), limit=1)] == ["b"]
    finally:
        reopened.close()
    # every id one key: each hit reads its stored id
    for module in ("document", "storage"):  # a document's key, and the keys the index maps
        monkeypatch.setattr(f"bridge.search.{module}.tool_key", lambda tool_id: 7)
    shared = si.ToolIndex(None)
    try:
        shared.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        assert shared._by_key == {7: None}
        assert [t for t, _ in shared.search(shared.query(analyze_query("beta")), limit=5)] == ["b"]
        assert sorted(t for t, _ in shared.search(shared.query(analyze_query("report")), limit=5)) == ["a", "b"]
    finally:
        shared.close()


def test_tools_scoring_alike_stand_in_one_order_whatever_order_they_came_in():
    """Forty tools tie for a word: a search answers the same ones, in the same order (by their
    keys), whether they came into the index in one order, the other, or in two segments, and its
    pages follow on from one another; the order of arrival would cut the tie otherwise. (Forty:
    a tie running on past the TIE_MARGIN hits read after those asked for is cut among those.)"""
    import bridge.search.index as si

    tools = [indexed(f"t{i:02}", f"report {chr(97 + i // 26)}{chr(97 + i % 26)}") for i in range(40)]
    by_key = [tool.tool_id for tool in sorted(tools, key=lambda tool: tool.key)]
    for batches in ([tools], [tools[::-1]], [tools[1::2], tools[::2]]):
        index = si.ToolIndex()
        try:
            for batch in batches:
                index.submit(batch)
                assert index.flush()
            query = index.query(analyze_query("report"))
            first = index.search(query, limit=10)
            assert len({score for _, score in first}) == 1  # a tie
            assert [t for t, _ in first] == by_key[:10]
            assert [t for t, _ in index.search(query, limit=10, offset=10)] == by_key[10:20]
        finally:
            index.close()


def test_a_change_submitted_while_a_long_commit_is_written_is_committed_within_commit_max_of_its_submission():
    """In a burst of changes, those submitted while the writer thread wrote a commit of hundreds
    waited for it, then for a whole COMMIT_MAX of gathering more from when the thread came to
    them: over 1 s after the catalog took them. COMMIT_MAX now counts from a change's submission."""
    import threading

    import bridge.search.index as si

    written = threading.Event()
    ended: list[float] = []

    def convert(tool_id: str):
        if tool_id == "slow":  # a long commit (hundreds of changes, a busy machine)
            written.set()
            time.sleep(0.8)
            ended.append(time.monotonic())
        return indexed(tool_id, f"report {tool_id}")

    index = si.ToolIndex(convert=convert)
    try:
        index.submit(["slow"])
        assert written.wait(10)
        ticket = index.submit(["waiting"])  # submitted while the long commit is written
        stream_until = time.monotonic() + 2.0
        found = None
        while time.monotonic() < stream_until:  # the burst goes on, a change every 20 ms
            index.submit([f"burst{int(time.monotonic() * 1000)}"])
            if found is None and index.flush(0, ticket=ticket):
                found = time.monotonic()
            time.sleep(0.02)
        assert found is not None and ended
        # its COMMIT_MAX (0.5 s) had passed when the long commit ended: committed at once, with what was queued
        assert found - ended[0] < 0.45, found - ended[0]  # before, it waited a whole COMMIT_MAX more
        assert index.flush() and hits(index, "waiting") == ["waiting"]
    finally:
        index.close()


def test_segments_merged_after_the_last_commit_are_searched_without_another_commit(tmp_path):
    import tantivy

    import bridge.search.index as si

    path = str(tmp_path / "merged.index")
    index = si.ToolIndex(path)
    try:
        # eight commits of small segments: the eighth starts a merge of all eight in the background
        for batch in range(8):
            index.submit([indexed(f"t{batch}-{i}", f"report {batch} number {i}") for i in range(2_000)])
            assert index.flush(60.0)
        assert index.num_docs == 16_000

        def merged(segments, seconds: float) -> int:  # the segment count, once under 8 or after `seconds`
            deadline = time.monotonic() + seconds
            while (count := segments()) >= 8 and time.monotonic() < deadline:
                time.sleep(0.02)
            return count

        on_disk = tantivy.Index.open(str(Path(path) / "g1"))  # a reader of what the index holds now, merges included
        done = merged(lambda: (on_disk.reload(), on_disk.searcher().num_segments)[1], 60)
        assert done < 8
        assert merged(lambda: index.segments, 10) == done
        assert index.num_docs == 16_000
    finally:
        index.close()


def test_a_compaction_writes_the_index_again_in_fewer_segments_and_keeps_its_content(tmp_path, monkeypatch):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    path = str(tmp_path / "compact.index")
    tools = {f"t{i}": indexed(f"t{i}", f"report number {i}", namespace=f"ns{i % 3}") for i in range(300)}
    index = si.ToolIndex(path)
    try:
        for batch in range(3):  # three commits, three segments (Tantivy merges eight at a time)
            index.submit([t for tool_id, t in tools.items() if int(tool_id[1:]) % 3 == batch])
            assert index.flush()
        assert index.segments == 3
        commits = index.commits
        monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 4)
        index.compact(list(tools.values()))  # fewer segments than COMPACT_SEGMENTS: nothing is done
        assert index.compacted() and index.commits == commits and index.segments == 3
        monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
        kept = [t for tool_id, t in tools.items() if tool_id != "t7"]  # t7 no longer listed
        kept[0] = indexed("t0", "forecast of the weather", namespace="ns0")  # t0 changed
        kept[1] = indexed("t1", "report number 1", namespace="moved")  # t1 listed by another upstream
        index.compact(kept)
        index.submit([indexed("late", "late report", namespace="ns1")])  # written after the compaction
        assert index.flush() and index.compacted()
        # the compaction's segment, and the late tool's unless it came in time to be written into the new index too
        assert index.segments <= 2 and index.num_docs == index.tool_count == 300
        # the new index is searched in place of the old, whose folder is gone
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g2"]
        assert hits(index, "weather forecast") == ["t0"]
        assert "t7" not in set(hits(index, "report number 7", 300))
        assert hits(index, "late") == ["late"]
        assert "t1" in index._digests["moved"] and "t1" not in index._digests["ns1"]
        # the key of the tool no longer listed is dropped; the moved tool's is kept
        assert tool_key("t7") not in index._by_key and index._by_key[tool_key("t1")] == "t1"
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 300)  # the digest log agrees with the compacted index


def test_a_compaction_left_off_at_close_keeps_the_index_as_it_was(tmp_path, monkeypatch):
    import threading

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 2)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 10)
    compacting, started, go_on = threading.Event(), threading.Event(), threading.Event()

    def convert(tool_id: str):
        if tool_id == "t5" and compacting.is_set():  # the compaction waits here until `close` has begun
            started.set()
            go_on.wait(10)
        return indexed(tool_id, f"report number {tool_id}")

    path = str(tmp_path / "closing.index")
    index = si.ToolIndex(path, convert=convert)
    for first in (0, 10):
        index.submit([f"t{i}" for i in range(first, first + 10)])
        assert index.flush()
    assert index.segments == 2
    compacting.set()
    index.compact([f"t{i}" for i in range(20)])
    assert started.wait(10)
    closing = threading.Thread(target=index.close)
    closing.start()
    deadline = time.monotonic() + 10
    while not index._closing and time.monotonic() < deadline:  # close has begun: the compaction leaves off
        time.sleep(0.001)
    go_on.set()
    closing.join(30)
    assert not closing.is_alive()
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 20
        assert reopened.segments == 2  # not written again
    finally:
        reopened.close()


def test_changes_arriving_during_a_compaction_are_searchable_before_it_ends_and_win_over_it(tmp_path, monkeypatch):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    texts = {f"t{i}": f"report number {i}" for i in range(600)}
    seen: dict[str, object] = {}  # what the compaction's converter saw of the change, while it ran
    index: si.ToolIndex

    def convert(tool_id: str):
        if "compacting" in seen and tool_id == "t100":
            # the compaction is under way, and its writing is held up here (as Tantivy's writer holds
            # its caller while it writes a full segment to a busy disk): the catalog changes
            seen["ticket"] = index.submit([indexed("t500", "forecast of the weather"), indexed("new", "fresh ledger")],
                                          deletes=[("ns", "t501")])
            seen["committed"] = index.flush(10) and not index.compacted(0)
            seen["found"] = hits(index, "weather forecast")
        return indexed(tool_id, texts[tool_id])

    path = str(tmp_path / "interleaved.index")
    index = si.ToolIndex(path, convert=convert)
    try:
        for batch in range(3):  # three commits, three segments
            index.submit([f"t{i}" for i in range(batch * 200, batch * 200 + 200)])
            assert index.flush()
        assert index.segments == 3
        seen["compacting"] = True
        index.compact(list(texts))  # its list still has t500 as it was, and t501
        assert index.compacted(30)
        # the change was committed while the compaction's writing was held up, before its last tool
        assert seen["committed"] and seen["found"] == ["t500"]
        # and the compaction left its tools alone: the changed one, the deleted one, the new one
        assert hits(index, "weather forecast") == ["t500"]
        assert hits(index, "ledger") == ["new"]
        assert "t501" not in set(hits(index, "report number 501", 600))
        assert index.num_docs == index.tool_count == 600
        assert index.segments == 1  # the new index, written in one commit, change included
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 600)  # the digest log agrees with the index


def test_a_change_whose_commit_fails_during_a_compaction_is_tried_again_and_kept_by_it(tmp_path, monkeypatch):
    import threading

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    disk: FullDisk
    index: si.ToolIndex
    changed = threading.Event()

    def convert(tool_id: str):
        if tool_id == "t100" and index.segments == 3 and disk.tries == 0:  # under way: a change whose commit fails
            disk.failing = True
            index.submit([indexed("t5", "forecast of the weather")])
            changed.set()
        return indexed(tool_id, f"report number {tool_id}")

    path = str(tmp_path / "failing.index")
    index = si.ToolIndex(path, convert=convert)
    index.retry_first = index.retry_last = 0.01
    try:
        for batch in range(3):
            index.submit([f"t{i}" for i in range(batch * 100, batch * 100 + 100)])
            assert index.flush()
        disk = index._writer = FullDisk(index._writer)
        index.compact([f"t{i}" for i in range(300)])  # t5 as it was
        assert changed.wait(10)
        assert not index.flush(0.2) and disk.tries >= 2  # the change is tried again; the compaction waits
        assert not index.compacted(0) and index.segments == 3
        disk.failing = False
        assert index.flush(10.0) and index.compacted(30)
        assert hits(index, "weather forecast") == ["t5"]
        # the new index's segment, and the change's when it came after the compaction's own commit
        assert index.num_docs == index.tool_count == 300 and index.segments in (1, 2)
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened._digests == digests and reopened.num_docs == 300
        assert hits(reopened, "weather forecast") == ["t5"]
    finally:
        reopened.close()


class FailingIndex:
    """A Tantivy index whose writers' commits fail (as on a full disk)."""

    def __init__(self, index):
        self.index = index

    def writer(self, **kwargs):
        disk = FullDisk(self.index.writer(**kwargs))
        disk.failing = True
        return disk

    def __getattr__(self, name):
        return getattr(self.index, name)


def test_a_compaction_whose_commit_fails_leaves_the_index_as_it_was(tmp_path, monkeypatch, caplog):
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    path = str(tmp_path / "full.index")
    index = si.ToolIndex(path)
    new_index = index._new_index
    index._new_index = lambda generation: FailingIndex(new_index(generation))
    try:
        for batch in range(3):
            index.submit([indexed(f"t{i}", f"report number {i}") for i in range(batch * 100, batch * 100 + 100)])
            assert index.flush()
        index.compact([indexed(f"t{i}", f"report number {i}") for i in range(300)])
        assert index.compacted(30)
        assert "compaction left off (No space left on device" in caplog.text
        assert index.segments == 3 and index.num_docs == index.tool_count == 300
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g1"]  # the new one dropped
        index.submit([indexed("t5", "forecast of the weather")])  # and the index searched takes changes as before
        assert index.flush()
        assert hits(index, "weather forecast") == ["t5"]
        digests = {ns: dict(d) for ns, d in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 300)


def test_a_reopened_index_drops_the_folder_of_a_compaction_left_off_by_a_crash(tmp_path):
    import bridge.search.index as si

    path = str(tmp_path / "crash.index")
    written_index(path, indexed("a", "alpha report"))
    (Path(path) / "g2").mkdir()  # a compaction's new index, written when the process ended
    (Path(path) / "g2" / "meta.json").write_text("{}")
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 1
        assert sorted(p.name for p in Path(path).iterdir()) == ["bridge-search.json", "g1"]
    finally:
        reopened.close()


def test_term_weights_follow_a_change_of_a_tools_words():
    """The weights of words (how few tools have them) were kept until the count of tools changed:
    a tool changing its words, which keeps the count, left them as they were."""
    import math

    import bridge.search.index as si

    index = si.ToolIndex()
    try:
        index.submit([indexed("a", "alpha beta"), indexed("b", "alpha gamma")])
        assert index.flush()
        assert index.term_weights(["beta"]) == {"beta": math.log(1 + 2 / 2)}
        index.submit([indexed("b", "beta delta")])  # two tools still, and beta in both
        assert index.flush()
        assert index.term_weights(["beta", "delta"]) == {"beta": math.log(1 + 2 / 3), "delta": math.log(1 + 2 / 2)}
    finally:
        index.close()


async def test_tools_removed_and_listed_again_score_as_in_a_fresh_index():
    """A deleted tool's document stays in its segment, and BM25 counts it, until Tantivy merges the
    segment: once deleted documents are COMPACT_DELETED of the index, it is compacted, and the same
    requests over the same tools score as in an index that never lost one."""
    from bridge.search.compaction import COMPACT_DELETED

    words = ["invoice", "customer", "refund", "payment", "report", "weather", "forecast", "city", "user", "account",
             "file", "folder", "message", "channel", "ticket", "flight"]
    listing = [tool(f"tool_{i}", description=f"{words[i % 16].title()} the {words[(i * 7) % 16]} of a {words[(i * 3 + 1) % 16]} "
                    f"and its {words[(i * 5 + 2) % 16]}.") for i in range(48)]
    fresh = await start_env([FakeUpstream(name="ops", tools=listing)])
    churned = await start_env([FakeUpstream(name="ops", tools=listing)])
    try:
        for third in range(2):  # a third of the tools gone from a listing, then back in the next
            churned.catalog.apply_tools("ops", [t for i, t in enumerate(listing) if i % 3 != third])
            assert await churned.search.wait_indexed()
            churned.catalog.apply_tools("ops", listing)
            assert await churned.search.wait_indexed()
        index = churned.search.index
        assert index.compacted() and index.deleted_share < COMPACT_DELETED and index.num_docs == 48
        for request in ["refund a customer payment", "weather forecast for a city", "user account", "file in a folder", "ticket"]:
            analyzed = analyze_query(request)
            want = fresh.search.index.search(fresh.search.index.query(analyzed), 20)
            got = index.search(index.query(analyzed), 20)
            # the same statistics: the same scores, whatever the segments (float sums aside)
            assert [tool_id for tool_id, _ in got] == [tool_id for tool_id, _ in want], request
            assert [score for _, score in got] == pytest.approx([score for _, score in want], rel=1e-6), request
            assert fresh.names(request) == churned.names(request)
    finally:
        await fresh.close()
        await churned.close()


async def test_a_small_catalog_losing_and_listing_again_its_tools_does_not_write_a_generation_each_time(tmp_path, monkeypatch):
    """Five tools, one gone from a listing and back in the next, 50 times: each removal was 20% of
    the index's documents (COMPACT_DELETED), and wrote a new generation of it; the index now waits
    for COMPACT_DELETED_MIN deleted documents, and never holds more than two generations on disk."""

    monkeypatch.setattr("bridge.search.writer.COMMIT_WINDOW", 0.005)
    listing = [tool(f"tool_{i}", description=f"Report the {word} of the ledger.")
               for i, word in enumerate(["invoice", "weather", "ticket", "flight", "folder"])]
    path = tmp_path / "bridge.index"

    def folders() -> list[str]:
        return sorted(p.name for p in path.iterdir() if p.is_dir())

    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=str(path))
    most = 0  # generation folders on disk at once
    try:
        for round_ in range(50):
            env.catalog.apply_tools("ops", [t for i, t in enumerate(listing) if i != round_ % 5])
            assert await env.search.wait_indexed() and env.search.index.compacted()
            most = max(most, len(folders()))
            env.catalog.apply_tools("ops", listing)
            assert await env.search.wait_indexed() and env.search.index.compacted()
            most = max(most, len(folders()))
        generation = env.search.index._generation
        assert generation <= 1 + 100 // 8  # a compaction for every 8 deleted documents (COMPACT_DELETED_MIN) at most, not 50
        assert env.names("flight ledger")[:1] == ["ops__tool_3"]
    finally:
        await env.close()
    assert most <= 2 and folders() == [f"g{generation}"]
    env = await start_env([FakeUpstream(name="ops", tools=listing)], path=str(path))  # a restart reopens it, and leaves no other
    try:
        assert env.search.index.opened_existing and env.search.index.num_docs == 5
        assert folders() == [f"g{generation}"]
    finally:
        await env.close()


async def test_the_index_is_compacted_once_every_upstream_has_listed(tmp_path, monkeypatch):

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 3)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 100)
    catalog = Catalog(Store())
    names = ["alpha", "beta", "gamma", "delta"]
    for name in names:
        catalog.add_upstream(FakeUpstream(name=name))
    search = ToolSearch(catalog, str(tmp_path / "bridge.index"))
    try:
        for name in names[:3]:  # listed one after another: a commit, and a segment, each
            catalog.apply_tools(name, [tool(f"{name}_report_{i}", description=f"Report {i} of {name}.") for i in range(40)])
            assert await search.wait_indexed()
        assert search.index.segments == 3 and search.index.compacted() and search.index.segments == 3
        catalog.apply_tools("delta", [tool(f"delta_report_{i}", description=f"Report {i} of delta.") for i in range(40)])
        assert await search.wait_indexed() and search.index.compacted()
        assert search.index.segments == 1 and search.index.num_docs == 160
        surface = Surface(SurfaceConfig(name="default"), catalog)
        matches = search.search("a report of gamma", surface=surface, limit=40).matches
        assert len(matches) == 40 and {m.namespace for m in matches} == {"gamma"}
    finally:
        search.close()


class FullDisk:
    """The index's writer, its commits failing while `failing` (as on a full disk)."""

    def __init__(self, writer):
        self.writer, self.failing, self.tries = writer, False, 0

    def commit(self):
        self.tries += 1
        if self.failing:
            raise ValueError("No space left on device (os error 28)")
        return self.writer.commit()

    def __getattr__(self, name):
        return getattr(self.writer, name)


def test_a_failed_commit_is_tried_again_and_loses_no_change(tmp_path, caplog):
    import bridge.search.index as si

    path = str(tmp_path / "retry.index")
    index = si.ToolIndex(path)
    disk = index._writer = FullDisk(index._writer)
    index.retry_first = index.retry_last = 0.01

    def found():
        return sorted(t for t, _ in index.search(index.query(analyze_query("report")), limit=10))

    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        disk.failing = True
        index.submit([indexed("c", "gamma report")], deletes=[("ns", "b")])
        assert not index.flush(timeout=0.3)  # not searchable while the commits fail
        assert disk.tries >= 2 and index.failing and found() == ["a", "b"]
        index.submit([indexed("d", "delta report")])  # a change arriving meanwhile joins the retries
        disk.failing = False
        assert index.flush(timeout=10.0)
        assert found() == ["a", "c", "d"] and index.tool_count == 3 and not index.failing
        assert "search index commit failed" in caplog.text
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)  # the digest log agrees with the index: reopened as it is
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 3
    finally:
        reopened.close()


def test_a_bulk_load_whose_commit_fails_keeps_nothing_and_can_be_run_again(tmp_path):
    import bridge.search.index as si

    path = str(tmp_path / "bulk.index")
    index = si.ToolIndex(path)
    disk = index._writer = FullDisk(index._writer)

    def found(words: str):
        return sorted(t for t, _ in index.search(index.query(analyze_query(words)), limit=10))

    # `c` listed twice: its second listing replaces its first within the load
    load = [indexed("a", "alpha ledger"), indexed("c", "gamma draft"), indexed("c", "gamma report")]
    try:
        index.bulk_load([indexed("a", "alpha report"), indexed("b", "beta report")])
        disk.failing = True
        with pytest.raises(ValueError, match="No space left"):
            index.bulk_load(load)
        # the index and its digests are as before the load: `a` keeps its old text, `c` is unknown
        assert index.tool_count == 2 and found("report") == ["a", "b"] and found("ledger gamma") == []
        disk.failing = False
        assert index.bulk_load(load) == 3  # nothing of the failed load is taken for written
        assert found("report") == ["b", "c"] and found("ledger") == ["a"] and index.tool_count == 3
    finally:
        disk.failing = False
        index.close()
    reopened = si.ToolIndex(path)
    try:
        assert reopened.opened_existing and reopened.num_docs == reopened.tool_count == 3
    finally:
        reopened.close()


def test_derived_search_hint():
    def decl(**kw):
        return ToolDeclaration(tool_id="t", namespace="ns", name="ns__x", native_name=kw.pop("native_name", "x"), **kw)

    assert derive_search_hint(decl(search_hint="given hint")) == "given hint"
    long = decl(description="Retrieve the current weather forecast for a city, with hourly detail and alerts. More text.")
    assert derive_search_hint(long) == "Retrieve the current weather forecast for a city with hourly"
    assert derive_search_hint(decl(title="Create issue", description="")) == "Create issue x"
    assert derive_search_hint(decl(description="", native_name="getUserById")) == "get user by id"
    assert derive_search_hint(decl(description="Echo.", native_name="echo")) == "Echo ns tool"
    # a Chinese description's first sentence ends at its full-width stop, which the hint leaves out
    chinese = decl(description="获取指定城市的天气预报，包括温度和降水概率。另外支持英文城市名。", native_name="weather_forecast")
    assert derive_search_hint(chinese) == "获取指定城市的天气预报，包括温度和降水概率 weather forecast"
    for d in (long, decl(description=""), decl(title="A b c d e f g h i j k l")):
        assert 3 <= len(derive_search_hint(d).split()) <= 10


# ---------------------------------------------------------------- text shared by an API's tools

FS_BLURB = ("This tool belongs to the Gorilla file system. It is a simple file system that allows users to perform "
            "basic file operations such as navigating directories, creating files and directories, reading and "
            "writing to files, etc. Tool description: ")
FS_TOOLS = {
    "cd": "Change the current working directory to the specified folder.",
    "ls": "List the contents of the current directory.",
    "mkdir": "Create a new directory in the current directory.",
    "mv": "Move a file or directory from one location to another.",
    "rm": "Remove a file or directory.",
    "cat": "Display the contents of a file of any extension from currrent directory.",
    "touch": "Create a new file of any extension in the current directory.",
    "wc": "Count the number of lines, words, and characters in a file of any extension from current directory.",
}


def fs_tools(names=tuple(FS_TOOLS)):
    return [tool(n, description=FS_BLURB + FS_TOOLS[n]) for n in names]


def others():
    # tools of another upstream whose own words are close to the file system's blurb
    return [tool("list_files", description="List the files of a storage bucket."),
            tool("word_count", description="Count words in a text."),
            tool("move_to", description="Move the robot arm to a position.")]


def test_shared_runs_need_several_differently_named_tools():
    from bridge.search.tooltext import SharedText

    shared = SharedText()
    blurb = "Part of the Acme API. Tool description: "
    assert shared.refresh("acme", [("a", blurb + "Create an order."), ("b", blurb + "Cancel an order.")]) is False
    assert shared.split("acme", blurb + "Create an order.") == ("", blurb + "Create an order.")  # two names: not yet
    assert shared.refresh("acme", [("a", blurb + "Create an order."), ("b", blurb + "Cancel an order."),
                                   ("c", blurb + "Refund an order.")]) is True
    assert shared.split("acme", blurb + "Ship it. Then track it.") == (blurb.strip(), "Ship it. Then track it.")
    assert shared.split("other", blurb + "Ship it.") == ("", blurb + "Ship it.")  # per namespace
    # a description that is only the shared text keeps it as its own
    assert shared.split("acme", "Part of the Acme API.") == ("", "Part of the Acme API.")
    # versions of one tool sharing their first sentence: their own words, not shared text
    versions = [("set_volume", f"Set the global volume. Range {i}.") for i in range(5)]
    assert shared.refresh("media", versions) is False
    assert shared.split("media", versions[0][1])[0] == ""


async def test_text_shared_by_an_api_is_kept_apart_from_its_tools_own_words():
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())])
    try:
        # the blurb ("creating files and directories", "reading and writing to files") is not the
        # tools' own description: the sibling whose own words match comes first
        assert e.names("list the contents of this directory", limit=3)[0] == "fs__ls"
        assert e.names("Alright, could you then go ahead and move a file to another directory?")[0] == "fs__mv"
        assert e.names("change to another folder")[0] == "fs__cd"
        assert e.names("how many lines and words are in that file?")[0] == "fs__wc"
        assert e.names("now create an empty file called notes.txt")[0] == "fs__touch"
        # the blurb's words still find the API's tools, once each
        assert set(e.names("navigating directories", limit=8)) >= {f"fs__{n}" for n in FS_TOOLS}
        # the documents hold each tool's own description apart from the blurb
        cd = e.catalog.resolve("fs__cd")
        document = e.search._indexed(cd)
        assert (document.shared, document.description) == (FS_BLURB.strip(), FS_TOOLS["cd"])
        # the search hint is the tool's own first sentence, not the blurb
        hint = e.search.search("change the working directory", surface=e.surface).matches[0]
        assert (hint.name, hint.search_hint) == ("fs__cd", "Change the current working directory to the specified folder")
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_searchs_first_matches_do_not_depend_on_its_limit(semantic):
    # the steps after the keyword score read the same candidates whatever the limit: with
    # keywords alone too, `wc` gains from its API's other tools also when one match is asked for
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())],
                        semantic=semantic)
    try:
        assert e.names("how many lines and words are in that file?", limit=1) == ["fs__wc"]
        for query in ("how many lines and words are in that file?", "move the file to another folder",
                      "list the files here", "go to another folder and show what is in it"):
            longest = e.names(query, limit=30)
            for limit in (1, 2, 3, 5, 10):
                assert e.names(query, limit=limit) == longest[:limit], (query, limit)
    finally:
        await e.close()


REPORTS = ["sales", "stock", "travel", "payroll", "budget", "audit", "traffic", "energy", "weather", "support",
           "shipping", "returns", "refunds", "hiring", "churn", "usage", "latency", "security", "tax", "margin"]


def report_tools(vendor: str) -> list:
    # 60 tools of reports and mail, worded in a vendor's way: more than a search's first page of candidates
    out = []
    for i, topic in enumerate(REPORTS):
        out += [tool(f"create_{topic}_report", description=f"{vendor} creates the {topic} report of a period, {i} pages at most."),
                tool(f"email_{topic}_report", description=f"{vendor} sends the {topic} report by email to a list of people."),
                tool(f"archive_{topic}_report", description=f"{vendor} archives an old {topic} report and its email thread.")]
    return out


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_searchs_first_matches_are_the_same_whatever_its_limit_over_many_candidates(semantic):
    # two vendors list the same 60 functions: alternatives fold, so a large limit ranks candidates
    # past the first page; a request of two parts is covered over the whole page, not its limit
    e = await start_env([FakeUpstream(name="acme", tools=report_tools("Acme")),
                         FakeUpstream(name="globex", tools=report_tools("Globex"))], semantic=semantic)
    try:
        for query in ("create the sales report and email it to the team", "archive the old travel report",
                      "report"):
            first = e.search.search(query, surface=e.surface, limit=10).matches
            assert len(first) == 10
            for limit in (20, 40, 60, 100):
                matches = e.search.search(query, surface=e.surface, limit=limit).matches
                assert [m.tool_id for m in matches[:10]] == [m.tool_id for m in first], (query, limit)
                assert len(matches) == min(limit, 60)  # each function once, the other vendor's as its alternative
                scores = [m.score for m in matches]
                assert scores == sorted(scores, reverse=True), (query, limit)  # further pages score below
                assert len({m.tool_id for m in matches}) == len(matches)
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_gains_from_the_best_match_among_its_apis_other_tools(semantic):
    from bridge.search.stages import SIBLING_WEIGHT
    from bridge.search.tooltext import SharedText

    # an API is the tools opening with one shared blurb, also those served by another upstream
    # (`part`: too few there to share it); another blurb is another API; a tool of none gains nothing
    part = FakeUpstream(name="part", tools=[tool(n, description=FS_BLURB + FS_TOOLS[n]) for n in ("mv", "wc")])
    acme_blurb = "Part of the Acme storage service, for files and folders in the cloud. Tool description: "
    acme = FakeUpstream(name="acme", tools=[tool(n, description=acme_blurb + d) for n, d in (
        ("upload", "Upload a file into a folder."), ("folders", "List the folders."), ("lines", "Count the lines of a stored file."))])
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), part, acme, FakeUpstream(name="misc", tools=others())],
                        semantic=semantic, fold_alternatives=False)
    api = {"fs": "files", "part": "files", "acme": "acme", "misc": None}
    try:
        assert e.search.sibling_weight == SIBLING_WEIGHT > 0
        for query in ("move the file to another folder", "how many lines and words are in that file?", "list the files here"):
            raised = {m.name: m.score for m in e.search.search(query, surface=e.surface, limit=30).matches}
            e.search.sibling_weight = 0.0
            alone = {m.name: m.score for m in e.search.search(query, surface=e.surface, limit=30).matches}
            e.search.sibling_weight = SIBLING_WEIGHT
            assert raised.keys() == alone.keys(), query
            assert {api[n.split("__")[0]] for n in alone} >= {"files", "acme", None}, query
            for name, score in alone.items():
                mine = api[name.split("__")[0]]
                others_best = max((s for n, s in alone.items() if n != name and api[n.split("__")[0]] == mine), default=None)
                gain = SIBLING_WEIGHT * max(others_best, 0.0) if mine is not None and others_best is not None else 0.0
                assert raised[name] == pytest.approx(score + gain, abs=2e-4), (query, name)
            assert list(raised) == sorted(raised, key=lambda n: -raised[n])  # reordered by the raised score
    finally:
        await e.close()
    shared = SharedText()
    shared.refresh("fs", [(n, FS_BLURB + d) for n, d in FS_TOOLS.items()])
    assert shared.api(FS_BLURB + "Anything else.") == shared.api(FS_BLURB + FS_TOOLS["cd"]) is not None
    # a tool's own words, also in another namespace (served apart from its API)
    assert shared.own(FS_BLURB + FS_TOOLS["cd"]) == FS_TOOLS["cd"] == shared.split("fs", FS_BLURB + FS_TOOLS["cd"])[1]
    assert shared.split("part", FS_BLURB + FS_TOOLS["cd"])[1] != FS_TOOLS["cd"]
    assert shared.own("Remove a file.") == "Remove a file."
    assert shared.api("Remove a file.") is None
    version = shared.version
    shared.refresh("fs", [])  # the upstream gone: its blurb is no API any more
    assert shared.api(FS_BLURB + FS_TOOLS["cd"]) is None and shared.version == version + 1


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_an_apis_tools_trade_places_by_their_own_words(semantic):
    from bridge.search.stages import OWN_WEIGHT

    # every file tool's vector carries the blurb ("navigating directories, creating files and
    # directories"); their own words tell which of them a request is about
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())],
                        semantic=semantic, fold_alternatives=False)
    queries = ("First, head over to the documents directory for me.", "Could you then go ahead and move it into the temp folder?",
               "what's written in the file")
    e.search.lookup_places = 0  # a tool that changes the place a match acts in is brought after it: tested apart
    try:
        assert e.search.own_weight == OWN_WEIGHT > 0
        for query in queries:
            traded = [(m.name, m.score) for m in e.search.search(query, surface=e.surface, limit=30).matches]
            e.search.own_weight = 0.0
            alone = [(m.name, m.score) for m in e.search.search(query, surface=e.surface, limit=30).matches]
            e.search.own_weight = OWN_WEIGHT
            # the same places, each with its score; another upstream's tools keep theirs
            assert [s for _, s in traded] == [s for _, s in alone], query
            assert [n if n.startswith("misc") else "" for n, _ in traded] == [n if n.startswith("misc") else "" for n, _ in alone]
            assert sorted(traded) != sorted(alone) or semantic == "off" or query == queries[1]
            if semantic == "off":  # the own words are weighed by the static table
                assert traded == alone
        head_over = e.names(queries[0], limit=3)
        assert head_over[0] == ("fs__cd" if semantic == "static" else "fs__mkdir")
        e.search.own_weight = 0.0
        assert e.names(queries[0], limit=3)[0] == "fs__mkdir"
        e.search.own_weight = OWN_WEIGHT
        # a title that is the blurb's first sentence (an OpenAPI summary) is not the tool's own words
        from bridge.search.semantic import tool_text

        ls = e.catalog.resolve("fs__ls").model_copy(update={"title": FS_BLURB.split(". ")[0] + "."})
        assert tool_text(ls, FS_TOOLS["ls"]) == f"ls: {FS_TOOLS['ls']} Parameters: text"
        assert tool_text(ls.model_copy(update={"title": "Folder listing"}), FS_TOOLS["ls"]) == f"ls: Folder listing {FS_TOOLS['ls']} Parameters: text"
        if semantic == "static":
            # the own words follow the catalog (`cd` kept from the searches above): `cd` and
            # `mkdir` swap descriptions
            swapped = {**FS_TOOLS, "cd": FS_TOOLS["mkdir"], "mkdir": FS_TOOLS["cd"]}
            e.ups["fs"].change_tools([tool(n, description=FS_BLURB + d) for n, d in swapped.items()])
            await until(lambda: e.catalog.resolve("fs__cd").description.endswith(FS_TOOLS["mkdir"]))
            assert await e.search.wait_indexed()
            cd = e.catalog.resolve("fs__cd")
            stage = e.search.semantic
            assert e.search._own_vectors(stage, [cd]) == pytest.approx(stage.text_vectors([tool_text(cd, FS_TOOLS["mkdir"])]))
            assert e.names(queries[0], limit=3)[0] == "fs__cd"  # now by its name alone
    finally:
        await e.close()


MSG_BLURB = "This tool belongs to the Message API, which is used to manage user interactions in a workspace. Tool description: "


def msg_tool(name, description, /, **params):
    """A tool of the Message API: each keyword a required parameter, with its description."""
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return tool(name, description=MSG_BLURB + description, props=props or {}, required=list(params))


def msg_tools():
    return [msg_tool("send_message", "Send a message to a user.", receiver_id="User ID of the user to send the message to.",
                     message="Message to be sent."),
            msg_tool("delete_message", "Delete the latest message sent to a receiver.", receiver_id="User ID of the user to send the message to."),
            msg_tool("view_messages_sent", "View all historical messages sent by the current user."),
            msg_tool("search_messages", "Search for messages containing a specific keyword.", keyword="The keyword to search for in messages."),
            msg_tool("add_contact", "Add a contact to the workspace.", user_name="User name of contact to be added."),
            msg_tool("list_users", "List all users in the workspace.")]


def test_a_lookup_is_a_reading_tool_asking_for_names_alone():
    from bridge.search.tooltext import input_heads, looked_up

    def decl(name, /, **params):
        up = msg_tool(name, "Anything.", **params)
        return ToolDeclaration(tool_id=name, name=name, namespace="m", native_name=name, description=up.description,
                               input_contract=InputContract(model_input_schema=up.input_schema))

    assert looked_up(decl("get_user_id", user="User name of the user.")) == {"user", "id"}
    assert looked_up(decl("get_symbol_by_name", name="Name of the company.")) == {"symbol"}  # up to *by*
    assert looked_up(decl("getZipcodeBasedOnCity", city="The name of the city.")) == {"zipcod"}  # stemmed as indexed
    assert not looked_up(decl("add_contact", user_name="User name of contact to be added."))  # not a reading verb
    assert not looked_up(decl("get_tweet", tweet_id="ID of the tweet to retrieve."))  # asks for no name
    assert not looked_up(decl("get_user_name", user_name="User name."))  # asks for what it reads
    assert not looked_up(decl("list_users")) and not looked_up(decl("get", name="A name."))
    heads = input_heads(msg_tool("send_message", "Send.", receiver_id="User ID of the user to send the message to.",
                                 message="Message to be sent.").input_schema)
    assert heads == [{"receiv", "id", "user", "of", "the"}, {"messag", "to", "be", "sent"}]  # name words, then 4 of the description


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_brings_the_lookup_its_api_offers_for_what_it_needs(semantic):
    # the Message API's lookup is served by another upstream (`part`); other vendors' lookups are
    # of no API (`misc`) or of another (`crm`)
    lookup = msg_tool("get_user_id", "Get user ID from user name.", user="User name of the user.")
    crm_blurb = "Part of the Acme CRM, for customers and their accounts. Tool description: "
    crm = [tool(n, description=crm_blurb + d, props={"name": {"type": "string", "description": "Name of the customer."}}, required=["name"])
           for n, d in (("get_user_id", "Find a customer's user id."), ("get_account", "Read an account."), ("get_notes", "Read notes."))]
    misc = [tool("find_user_id", description="Find a user id by user name.",
                 props={"name": {"type": "string", "description": "User name to look for."}}, required=["name"])]
    e = await start_env([FakeUpstream(name="msg", tools=msg_tools()), FakeUpstream(name="part", tools=[lookup]),
                         FakeUpstream(name="crm", tools=crm), FakeUpstream(name="misc", tools=misc)],
                        semantic=semantic, fold_alternatives=False)
    query = "Send Catherine a message saying the report is ready"
    try:
        assert e.search.lookup_places == LOOKUP_PLACES > 0
        result = e.search.search(query, surface=e.surface)
        names, scores = [m.name for m in result.matches], [m.score for m in result.matches]
        at = names.index("msg__send_message")
        assert at < LOOKUP_PLACES and names[at + 1] == "part__get_user_id" and scores[at + 1] == scores[at]
        assert "crm__get_user_id" not in names[:at + 2] and "misc__find_user_id" not in names[:at + 2]
        e.search.lookup_places = 0
        alone = e.names(query)  # the request's words say nothing of user ids: the blurb alone matches it
        assert alone[alone.index("msg__send_message") + 1] != "part__get_user_id"
        e.search.lookup_places = LOOKUP_PLACES
        # a lookup already above the tool keeps its place, once
        e.search.lookup_places = 10
        names = e.names("Which user ID has the user name Catherine? Then message her", limit=20)
        e.search.lookup_places = LOOKUP_PLACES
        assert names[0] == "part__get_user_id" and names.count("part__get_user_id") == 1 and "msg__send_message" in names[:10]
        # within the search's filters and the caller's surface
        assert "part__get_user_id" not in e.names(query, namespace="msg")
        blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="part")]), e.catalog)
        assert "part__get_user_id" not in e.names(query, surface=blocking)
        # the index follows a lookup that changes into something else
        e.ups["part"].change_tools([msg_tool("get_user_id", "Get user ID from an email address.", email="Email address of the user.")])
        await until(lambda: "email" in e.catalog.resolve("part__get_user_id").description)
        assert await e.search.wait_indexed()
        names = e.names(query)
        assert names[names.index("msg__send_message") + 1:][:1] != ["part__get_user_id"]
    finally:
        await e.close()


async def test_a_lookup_is_found_among_many_other_vendors_lookups(monkeypatch):

    # more other vendors' lookups of a user id than a lookup query asks for: the match's own
    # upstream is asked first
    monkeypatch.setattr("bridge.search.query.LOOKUP_LIMIT", 2)
    lookup = msg_tool("get_user_id", "Get user ID from user name.", user="User name of the user.")
    crowd = [FakeUpstream(name=f"v{i}", tools=[tool("get_user_id", description=f"Vendor {i}: find a user id.",
                                                     props={"name": {"type": "string", "description": "User name."}}, required=["name"])])
             for i in range(4)]
    e = await start_env([*crowd, FakeUpstream(name="msg", tools=[*msg_tools(), lookup])], semantic="off")
    try:
        names = e.names("Send Catherine a message saying the report is ready")
        assert names[names.index("msg__send_message") + 1] == "msg__get_user_id"
    finally:
        await e.close()


def fs_tool(name, description, /, **params):
    """A tool of the file system API: each keyword a required parameter, with its description."""
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return tool(name, description=FS_BLURB + description, props=props or {}, required=list(params))


def place_fs_tools():
    return [fs_tool("cd", FS_TOOLS["cd"], folder="The folder of the directory to change to."),
            fs_tool("wc", FS_TOOLS["wc"], file_name="Name of the file of current directory to perform wc operation on."),
            fs_tool("cat", FS_TOOLS["cat"], file_name="The name of the file from current directory to display."),
            fs_tool("mkdir", FS_TOOLS["mkdir"], dir_name="The name of the new directory at current directory."),
            fs_tool("ls", FS_TOOLS["ls"]),
            fs_tool("rm", FS_TOOLS["rm"], file_name="The name of the file or directory to remove.")]


def test_a_tool_says_the_current_place_it_acts_in_or_changes():
    from bridge.search.tooltext import acts_in_current, changes_current, here_words, place_terms

    def decl(up):
        return ToolDeclaration(tool_id=up.name, name=up.name, namespace="fs", native_name=up.name, description=up.description,
                               input_contract=InputContract(model_input_schema=up.input_schema))

    cd, wc, cat, mkdir, ls, rm = (decl(up) for up in place_fs_tools())
    # a sentence opening with change (set, switch, select) the current (active) ...: its last word before *to*
    assert changes_current(cd) == {"directori"} and acts_in_current(cd) == {"work", "directori"}
    assert place_terms(cd) == {"directori", "folder", "the", "of"}  # the noun and the parameter's head
    assert changes_current(decl(tool("use", description="Switches the active workspace for later calls."))) == {"workspac"}
    assert not changes_current(decl(tool("help", description="Lists files. You can change the current directory with cd.")))
    assert not changes_current(decl(tool("nav", description="Helps change the current directory.")))  # not a sentence's verb
    # where a tool acts: its description or its parameters' descriptions (cat's own says *currrent*)
    assert acts_in_current(mkdir) == acts_in_current(ls) == acts_in_current(wc) == acts_in_current(cat) == {"directori"}
    assert not acts_in_current(rm) and not changes_current(mkdir)
    # what a request says of the place it is in
    assert here_words("List everything in the current working directory") == {"work", "directori"}
    assert here_words("Make a folder named output in this folder.") == {"folder"}
    assert not here_words("In the logs directory, count the lines of access.log")


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_brings_the_tool_that_changes_the_place_it_acts_in(semantic):
    # another vendor's shell has a cd of its own (another API); a tool of no API says it changes
    # the current directory too
    shell_blurb = "Part of the Acme remote shell, for servers you log in to. Tool description: "
    shell = [tool(n, description=shell_blurb + d, props={"path": {"type": "string", "description": "A path on the server."}}, required=["path"])
             for n, d in (("cd", "Change the current directory on the server."), ("ls", "List the current directory on the server."),
                          ("stat", "Describe a file in the current directory on the server."))]
    misc = [tool("chdir", description="Change the current directory of the build.",
                 props={"folder": {"type": "string", "description": "Folder to build in."}}, required=["folder"])]
    e = await start_env([FakeUpstream(name="fs", tools=place_fs_tools()), FakeUpstream(name="shell", tools=shell),
                         FakeUpstream(name="misc", tools=misc)], semantic=semantic, fold_alternatives=False)
    query = "In the logs directory, count the lines of access.log"
    try:
        result = e.search.search(query, surface=e.surface)
        names, scores = [m.name for m in result.matches], [m.score for m in result.matches]
        at = names.index("fs__wc")
        assert at < e.search.lookup_places and names[at + 1] == "fs__cd" and scores[at + 1] == scores[at]
        assert "shell__cd" not in names[:at + 2] and "misc__chdir" not in names[:at + 2]
        e.search.lookup_places = 0
        alone = e.names(query)
        e.search.lookup_places = LOOKUP_PLACES
        assert alone[alone.index("fs__wc") + 1] != "fs__cd"
        # a folder named by its parameter's word; the place the request is in, or none named: not brought
        names = e.names("Display the contents of report.txt, it sits in the drafts folder")
        assert names.index("fs__cd") <= names.index("fs__cat") + 1
        for other in ("Count the lines of access.log in the current directory", "Count the lines of access.log",
                      "Make a directory named output in this folder"):
            names = e.names(other)
            e.search.lookup_places = 0
            assert names == e.names(other), other
            e.search.lookup_places = LOOKUP_PLACES
        # within the search's filters and the caller's surface
        names = e.names(query, namespace="fs")
        assert names[names.index("fs__wc") + 1] == "fs__cd"
        blocking = Surface(SurfaceConfig(name="safe", block=["fs__cd"]), e.catalog)
        names = e.names(query, surface=blocking)
        assert "fs__cd" not in names and names[0] == "fs__wc"
        # the index follows a tool that no longer changes the place
        e.ups["fs"].change_tools([*place_fs_tools()[1:], fs_tool("cd", "Print the current working directory.", folder="Unused.")])
        await until(lambda: e.catalog.resolve("fs__cd").description.endswith("Print the current working directory."))
        assert await e.search.wait_indexed()
        names = e.names(query)
        assert names[names.index("fs__wc") + 1:][:1] != ["fs__cd"]
    finally:
        await e.close()


async def test_a_title_or_hint_that_repeats_the_description_counts_once():
    # one function served as an OpenAPI operation (its summary repeated as title and hint) and as
    # an MCP tool (a description alone): the same words, the same score
    desc = "Convert an amount between two currencies. Uses the daily rates."
    summary = "Convert an amount between two currencies."
    rates = tool("rates", description="List the daily currency rates.")
    oas = [tool("convert", description=desc, title=summary, search_hint=summary.rstrip(".")), rates,
           tool("forecast", description="Weather for a city.", title="Seven-day outlook")]
    e = await start_env([FakeUpstream(name="oas", tools=oas), FakeUpstream(name="mcp", tools=[tool("convert", description=desc), rates])],
                        semantic="static", fold_alternatives=False)
    try:
        for query in ("convert currencies", "amount between two currencies", "daily rates"):
            scores = {m.name: m.score for m in e.search.search(query, surface=e.surface).matches}
            assert scores["oas__convert"] == scores["mcp__convert"], query
        # a title that says what the description does not is the tool's own words
        assert e.names("outlook")[0] == "oas__forecast"
        # said word for word, case and punctuation aside; part of a word is not the word
        from bridge.search.tooltext import unsaid
        assert (unsaid("Get a pet", "GET a pet. More."), unsaid("Pet", "A petal store.")) == ("", "Pet")
    finally:
        await e.close()

    # the first sentence of an API's blurb, given as every tool's title and hint (an OpenAPI summary):
    # the hint a match shows is the tool's own first sentence, as without them
    first = FS_BLURB.split(". ")[0] + "."
    fs = [tool(n, description=FS_BLURB + FS_TOOLS[n], title=first, search_hint=first) for n in FS_TOOLS]
    e = await start_env([FakeUpstream(name="fs", tools=fs), FakeUpstream(name="misc", tools=others())])
    try:
        match = e.search.search("change the working directory", surface=e.surface).matches[0]
        assert (match.name, match.search_hint) == ("fs__cd", "Change the current working directory to the specified folder")
        assert e.names("list the contents of this directory", limit=3)[0] == "fs__ls"
    finally:
        await e.close()


async def test_a_peer_agents_skills_are_found_by_their_own_words_not_the_message_envelope():
    from adapters.a2a.mapping import input_schema_for
    from bridge.search.semantic import tool_text

    envelope = input_schema_for([])  # message, data, context_id, task_id: alike for every skill
    skills = [tool(name, description=desc, tool_kind="peer_agent_tool").model_copy(update={"input_schema": envelope})
              for name, desc in (("plan_trip", "Plan a trip itinerary for a city."), ("pack", "Draw up a packing list."))]
    chat = tool("post_note", description="Post a note to a chat channel.", props={"message": {"type": "string"}})
    e = await start_env([FakeUpstream(name="desk", tools=skills), FakeUpstream(name="chat", tools=[chat])])
    try:
        assert e.names("plan a trip") == ["desk__plan_trip"]
        # the envelope's words find no skill: a message is what the chat tool takes
        assert e.names("message") == ["chat__post_note"]
        assert e.names("the context_id of a previous result") == []
        skill = e.catalog.resolve("desk__pack")
        assert (e.search._indexed(skill).params, e.search._indexed(skill).param_text) == ("", "")
        assert tool_text(skill) == "pack: Draw up a packing list."
        assert skill.input_schema == envelope  # still the schema a caller gets
    finally:
        await e.close()


async def test_tools_federated_from_another_bridge_are_known_by_their_origin_name():
    from bridge.search.tooltext import function_name

    def relayed(origin: str, name: str, description: str, depth: int = 1):
        # as an A2T upstream maps a tool of another bridge: `<namespace>__<name>` there
        mapping: dict = {"source": "mcp", "tool_name": name}
        for level in range(depth):
            native = name if level == 0 else f"{origin}__{name}"
            mapping = {"source": "a2t", "tool_name": f"{origin}__{native}", "upstream_native_name": native,
                       "upstream_mappings": [mapping]}
        exposed = mapping["tool_name"]
        return tool(exposed, description=description, external_mapping=mapping)

    tools = [relayed("audio", "set_volume", "Set the volume of the speakers."),
             relayed("media", "set_volume", "Set the volume of the speakers, from 0 to 100.", depth=2),
             relayed("audio", "mute", "Mute the speakers.")]
    e = await start_env([FakeUpstream(name="hub", tools=tools)], semantic="static")
    try:
        decls = {d.name: d for d in e.catalog.declarations()}
        assert {function_name(d) for d in decls.values()} == {"set_volume", "mute"}  # a chain of two bridges too
        # one function listed by two vendors behind the other bridge takes one place
        first = e.search.search("set the volume of the speakers", surface=e.surface).matches
        assert first[0].name == "hub__audio__set_volume" and [a["name"] for a in first[0].alternatives] == ["hub__media__media__set_volume"]
        # quoted by its name at the origin or at the other bridge, it comes first
        assert e.names("set_volume")[0] == "hub__audio__set_volume"
        assert e.names("audio__mute")[0] == "hub__audio__mute"
        # the name's words are the origin's: no `audio` or `media` counted as the tool's own name
        assert e.search._indexed(decls["hub__audio__mute"]).name == "mute"
    finally:
        await e.close()


async def test_shared_text_follows_the_listing_tool_by_tool():
    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    try:
        def hint(query: str) -> str:
            return e.search.search(query, surface=e.surface).matches[0].search_hint

        assert hint("working directory").startswith("This tool belongs")  # two tools: not shared yet
        up.change_tools(fs_tools(("cd", "ls", "rm")))
        await until(lambda: e.catalog.resolve("fs__rm") is not None)
        assert await e.search.wait_indexed()
        # the third tool makes the blurb shared: the first two are written again
        assert hint("working directory") == "Change the current working directory to the specified folder"
        assert e.search.index.num_docs == 3
        up.change_tools(fs_tools(("cd", "rm")))
        await until(lambda: e.catalog.resolve("fs__ls") is None)
        assert await e.search.wait_indexed()
        assert hint("working directory").startswith("This tool belongs")
        assert e.search.index.num_docs == 2
    finally:
        await e.close()


async def test_shared_text_is_looked_at_on_the_index_thread_not_the_event_loop():
    import threading

    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    threads: list[str] = []
    refresh = e.search.shared.refresh

    def recording(namespace, tools):
        threads.append(threading.current_thread().name)
        return refresh(namespace, tools)

    e.search.shared.refresh = recording  # type: ignore[method-assign]
    try:
        up.change_tools(fs_tools(("cd", "ls", "rm")))  # a pass over the whole listing
        await until(lambda: e.catalog.resolve("fs__rm") is not None)
        assert await e.search.wait_indexed()
        assert threads and threading.main_thread().name not in threads
        assert e.search.search("remove a file", surface=e.surface).matches[0].search_hint == "Remove a file or directory"
    finally:
        await e.close()


async def test_changes_of_one_upstream_committed_together_look_at_its_shared_text_once():
    """Each change of an upstream looks at its listing's shared text again (a pass over the whole
    listing); of changes committed together, the last looks, at the newest listing, and the
    upstream is written again if its shared text changed since the last look."""
    import threading

    up = FakeUpstream(name="fs", tools=fs_tools(("cd", "ls")))
    e = await start_env([up])
    looked: list[str] = []
    refresh = e.search.shared.refresh

    def recording(namespace, tools):
        looked.append(namespace)
        return refresh(namespace, tools)

    e.search.shared.refresh = recording  # type: ignore[method-assign]
    held, holding = threading.Event(), threading.Event()

    def hold():  # the writer thread is busy: the changes below queue up meanwhile
        holding.set()
        held.wait(10)

    try:
        e.search.index.submit(prepare=hold)
        assert holding.wait(10)
        e.catalog.apply_tools("fs", fs_tools(("cd", "ls", "rm")))  # the third tool makes the blurb shared
        e.catalog.apply_tools("fs", fs_tools(("cd", "ls", "rm", "mkdir")))
        e.catalog.apply_tools("fs", fs_tools(("cd", "ls", "mkdir")))
        held.set()
        assert await e.search.wait_indexed()
        assert looked == ["fs"]
        hints = {m.name: m.search_hint for m in e.search.search("directory", surface=e.surface, limit=5).matches}
        assert hints == {"fs__cd": "Change the current working directory to the specified folder",
                         "fs__ls": "List the contents of the current directory",
                         "fs__mkdir": "Create a new directory in the current directory"}
        assert e.search.index.num_docs == e.search.index.tool_count == 3
    finally:
        held.set()
        await e.close()


async def test_a_file_named_in_a_request_is_searched_as_a_file():
    # the request names the file (draft.txt, data.csv), the tools say *file*
    assert "file" in analyze_query("Show me what report.md says").terms
    assert "file" in analyze_query("grep errors in ./logs/server.LOG").terms
    for text in ("Trip to Washington D.C.", "release v1.2", "e.g. the weather", "Dr.Who tonight"):
        assert "file" not in analyze_query(text).terms
    # the file's own words are a value, as a number is: they weigh less, unless said elsewhere too
    assert analyze_query("notes.txt").terms == {"note": 0.25, "txt": 0.25, "file": 1.0}
    assert analyze_query("Read the notes in notes.txt").terms == {"read": 1.0, "note": 1.0, "txt": 0.25, "file": 1.0}
    assert meaning_text("Copy notes.txt to ./backup/notes.bak, then show it") == "Copy file to ./backup/file, then show it"
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="docs", tools=[
        tool("delete", description="Delete an entry."), tool("show_notes", description="Show the speaker notes of a slide.")])])
    try:
        assert "fs__rm" in e.names("get rid of draft.txt", limit=3)  # nothing matched before
        assert set(e.names("how big is data.csv", limit=3)) <= {f"fs__{n}" for n in FS_TOOLS}
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_the_words_of_a_named_file_do_not_choose_the_tool(semantic):
    # *quarterly.txt* names the file to show, not a request for the quarterly earnings
    e = await start_env([FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="fin", tools=[
        tool("quarterly_earnings", description="Get the quarterly earnings report of a company."),
        tool("notes_summary", description="Summarize the notes of a meeting.")])], semantic=semantic)
    try:
        assert e.names("Show me what's in quarterly.txt", limit=1) == ["fs__cat"]
        assert e.names("Count the words of meeting_notes.txt", limit=1) == ["fs__wc"]
        assert e.names("Show me the quarterly earnings of ACME", limit=1) == ["fin__quarterly_earnings"]
    finally:
        await e.close()


def test_conversational_connectives_are_filler():
    assert set(analyze_query("Alright, go ahead and afterwards delete it, oops").terms) == {"go", "delet"}


def test_filler_is_matched_as_written_not_by_its_stem():
    # the stemmer makes `current` of `currently` and `doe` of `does`: the adverb and the
    # auxiliary are filler, the adjective and the surname are what the request is about
    assert set(analyze_query("What is the current weather").terms) == {"current", "weather"}
    assert set(analyze_query("What is currently the weather").terms) == {"weather"}
    assert set(analyze_query("the final score, basically").terms) == {"final", "score"}
    assert set(analyze_query("Does John Doe have an account").terms) == {"john", "doe", "account"}
    # an inflection of a listed base form is filler too
    assert "need" not in analyze_query("I needed a taxi").terms


def test_a_request_is_read_in_parts_at_sentences_and_connectives():
    def parts(text):
        return [sorted(p.terms) for p in query_parts(text)]

    assert parts("Find the airport closest to Boston. Also book me a flight from there.") == [
        ["airport", "boston", "closest", "find"], ["book", "flight"]]
    assert parts("Copy notes.txt to backup.txt, then show me what's inside the copy") == [
        ["backup", "copi", "file", "note", "txt"], ["copi", "insid", "show"]]
    # one task: no parts; `next` qualifies a value, `and` alone joins words of one task
    assert parts("Get the weather forecast for the next 10 days") == []
    assert parts("Find the area of a rectangle with length 7 and breadth 3") == []
    # a part needs two words besides filler; at most four parts, those with the most words
    assert parts("Could you help me? I want it. Then list the open tickets") == []
    assert query_parts("Get the sales report. Then get the sales report") == []  # the same words count once
    many = query_parts(". ".join(f"get the {w} sales report" for w in ("north", "south", "east", "west", "central")))
    assert len(many) == 4
    # Chinese and Japanese end a sentence with a full-width mark and no space
    assert [sorted(p.terms)[:2] for p in query_parts("请问北京的天气如何？还有，上海的股票价格是多少？")] == [
        ["京的", "北京"], ["上海", "价格"]]


async def test_a_sentence_that_sets_the_scene_gets_no_tool_of_its_own():
    def parts(text):
        return [p.text for p in query_parts(text)]

    ask = "What will the weather be like in Paris hour by hour, with temperature, wind and rain? Then book a flight there."
    scene = "The hotel we booked in Paris last spring was lovely. "
    assert parts(scene + ask) == parts(ask) == [ask.split("? ")[0] + "?", "book a flight there."]
    # a sentence asks when it opens with a verb or says an asking word; one that only tells counts
    # when no sentence asks
    assert parts("I lost the code. Find my messages about the room code.") == []
    assert parts("I lost the room code. Please find my messages about it") == []
    assert parts("We need the room code. The printer on the third floor is jammed.") == []
    assert parts("The printer on the third floor is jammed. The room code is lost.") == [
        "The printer on the third floor is jammed.", "The room code is lost."]
    e = await start_env(forecast_desk())
    try:
        # the scene's hotel, a part of its own, took the second place from the flight
        assert e.names(scene + ask, limit=2) == ["desk__weather_forecast_hourly", "desk__book_flight"]
    finally:
        await e.close()


def test_cover_order_gives_each_part_a_place_and_keeps_scores_falling():
    overall = np.array([0.9, 0.85, 0.8, 0.5], np.float32)
    parts = np.array([[0.9, 0.9, 0.9, 0.0],    # three tools answer the first part
                      [0.0, 0.0, 0.0, 0.9]], np.float32)  # only the last answers the second
    order, scores = cover_order(overall, parts, 0.5)
    assert order[:2] == [0, 3] and sorted(order) == [0, 1, 2, 3]
    assert scores == sorted(scores, reverse=True)
    assert cover_order(overall, parts, 0.0)[0] == [0, 1, 2, 3]  # weight 0: the request's order
    assert cover_order(overall, parts, 0.5, places=1)[0] == [0, 3, 1, 2]  # the rest by its score then


def forecast_desk():
    return [FakeUpstream(name="desk", tools=[
        tool("weather_forecast", description="Get the weather forecast for a city for the coming days: temperature, wind and rain."),
        tool("weather_forecast_hourly", description="Get the hourly weather forecast for a city: temperature, wind and rain hour by hour."),
        tool("weather_now", description="Get the current weather in a city: temperature, wind and rain."),
        tool("weather_alerts", description="Get the weather alerts and storm warnings for a city."),
        tool("weather_history", description="Get the past weather of a city: temperature, wind and rain by day."),
        tool("book_flight", description="Book a seat on a flight between two airports."),
        tool("flight_status", description="Get the status of a flight: on time, delayed or cancelled."),
        tool("book_hotel", description="Book a hotel room in a city for given dates."),
        tool("book_table", description="Book a table at a restaurant."),
    ])]


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_a_request_for_several_things_gets_a_tool_for_each(semantic):
    e = await start_env(forecast_desk(), semantic=semantic)
    query = "What will the weather be like in Paris hour by hour, with temperature, wind and rain? Then book a flight there."
    try:
        if semantic == "static":  # the request's order alone: the weather tools take the first four places
            e.search.cover_weight = 0.0
            assert "desk__book_flight" not in e.names(query, limit=4)
            e.search.cover_weight = ToolSearch.cover_weight
        result = e.search.search(query, surface=e.surface, limit=4)
        names = [m.name for m in result.matches]
        assert names[:2] == ["desk__weather_forecast_hourly", "desk__book_flight"]
        assert [m.score for m in result.matches] == sorted((m.score for m in result.matches), reverse=True)
        # a request of one part keeps the order of its score
        one = "hourly weather forecast for Paris with the storm warnings and the rain to expect"
        covered = e.search.search(one, surface=e.surface, limit=4).matches
        e.search.cover_weight = 0.0
        assert [(m.name, m.score) for m in covered] == [(m.name, m.score) for m in e.search.search(one, surface=e.surface, limit=4).matches]
    finally:
        await e.close()


async def test_two_words_of_a_request_are_matched_as_the_one_word_a_tool_writes():
    # *zip code* is `zipcode` in the tool's name and description; the decoys say *code*
    analyzed = analyze_query("Get the zip code of Paris, then pre heat the oven")
    assert "zipcod" in analyzed.joined and "preheat" in analyzed.joined
    assert "getzip" not in analyzed.joined  # filler between: *the* stands between *get* and *zip*
    assert analyze_query("Get the zipcode of Paris").joined == ()  # one word: nothing to join
    e = await start_env([FakeUpstream(name="geo", tools=[
        tool("get_zipcode_based_on_city", description="Find the zipcode of a city."),
        tool("get_country_code", description="Get the dialling code of a country."),
        tool("format_code", description="Format a piece of source code."),
        tool("zip_files", description="Compress files into a zip archive.")])])
    try:
        found = e.names("what is the zip code of Paris", limit=4)
        assert set(found[:2]) == {"geo__get_zipcode_based_on_city", "geo__zip_files"}, found  # not found before
        # a word the catalog does not use is not matched: the ranking is the one of the two words
        assert e.names("format the code block", limit=1) == ["geo__format_code"]
    finally:
        await e.close()


def test_a_joined_word_too_common_in_a_large_catalog_is_not_matched(monkeypatch):
    import bridge.search.index as si

    index = si.ToolIndex(None)
    try:
        index.bulk_load([indexed("a", "zipcode of city"), indexed("b", "zipcode by address"),
                         indexed("c", "zipcode of place"), indexed("d", "weather of city")])
        query = analyze_query("zip code weather city")
        assert "zipcod" in query.joined
        assert {t for t, _ in index.search(index.query(query), limit=10)} == {"a", "b", "c", "d"}
        # a large catalog: the query's words, and the joined word, in more than 30% of it are left out
        monkeypatch.setattr("bridge.search.query.COMMON_MIN_DOCS", 1)
        monkeypatch.setattr("bridge.search.query.COMMON_SHARE", 0.3)
        monkeypatch.setattr("bridge.search.query.MIN_QUERY_TERMS", 1)
        assert {t for t, _ in index.search(index.query(query), limit=10)} == {"d"}
    finally:
        index.close()


def test_a_search_running_holds_back_background_work_for_a_while_at_most():
    """`Foreground.pause` waits while a search runs (background work steps aside for it), and
    no longer than `most` seconds (a steady stream of searches slows that work, never stops it)."""
    import threading

    from bridge.search.foreground import Foreground

    patient = Foreground(most=10.0)
    paused = threading.Event()
    answers: list[bool] = []

    def background():
        answers.append(patient.pause())
        paused.set()

    assert patient.pause()  # no search runs: at once
    with patient.running():
        worker = threading.Thread(target=background)
        worker.start()
        assert not paused.wait(0.3)  # still waiting for the search to end
    assert paused.wait(10) and answers == [True]
    worker.join(10)
    hasty = Foreground(most=0.01)
    with hasty.running():
        assert not hasty.pause()  # the search still runs: the work goes on after `most`


def test_a_compaction_steps_aside_while_a_search_runs(tmp_path, monkeypatch):
    """Between steps of 64 tools, a compaction (Python work, holding the interpreter's lock as a
    search does) waits for the searches running to end."""
    import threading

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 2)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 10)
    converted: list[str] = []
    compacting, stepped = threading.Event(), threading.Event()

    def convert(tool_id: str):
        if compacting.is_set():
            converted.append(tool_id)
            if len(converted) == 64:
                stepped.set()
        return indexed(tool_id, f"report number {tool_id}")

    foreground = Foreground(most=10.0)
    index = si.ToolIndex(str(tmp_path / "aside.index"), convert=convert, foreground=foreground)
    try:
        for first in (0, 100):
            index.submit([f"t{i}" for i in range(first, first + 100)])
            assert index.flush()
        with foreground.running():
            compacting.set()
            index.compact([f"t{i}" for i in range(200)])
            assert stepped.wait(10)
            assert not index.compacted(0.3) and len(converted) == 64  # waiting for the search
        assert index.compacted(30) and len(converted) == 200 and index.segments == 1
        assert hits(index, "report number t150")[:1] == ["t150"]
    finally:
        index.close()


def test_a_torn_or_unreadable_digest_log_empties_the_index_which_is_written_again(tmp_path, caplog):
    # a crash or a full disk in the middle of an append leaves a torn last line: every command
    # once stopped on it (ValueError: invalid literal for int()), at every restart
    import bridge.search.index as si

    for damage in (b"abc\tns\t", b"abc\tns\tnot-hex\n", b"\xff\xfe\x00garbage\n"):
        path = str(tmp_path / f"torn{len(damage)}.index")
        written_index(path, indexed("a", "alpha report"), indexed("b", "beta report"))
        log_path = next(Path(path).glob("g*/digests.log"))
        with open(log_path, "ab") as fh:
            fh.write(damage)
        reopened = si.ToolIndex(path)
        try:
            assert not reopened.opened_existing and reopened.num_docs == reopened.tool_count == 0, damage
        finally:
            reopened.close()
    assert caplog.text.count("unreadable line") == 3


def test_the_digest_log_of_a_running_index_is_written_anew_once_it_outgrows_its_tools(tmp_path, monkeypatch):
    # a line a change, for the process's whole life: a bridge whose tools kept changing grew it
    # without end (it was rewritten only at the next start)
    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.storage.LOG_SLACK", 10)
    path = str(tmp_path / "log.index")
    index = si.ToolIndex(path)
    try:
        for round_ in range(12):  # 3 tools, changed 12 times: 36 lines without the rewrite
            index.submit([indexed(t, f"{t} report version {round_}") for t in ("a", "b", "c")])
            assert index.flush()
        log_path = next(Path(path).glob("g*/digests.log"))
        assert len(log_path.read_text().splitlines()) <= 2 * 3 + 10 + 3
        assert hits(index, "version 11", limit=3) and index.tool_count == 3
        digests = {ns: dict(tools) for ns, tools in index._digests.items()}
    finally:
        index.close()
    assert_reopens_as(path, digests, 3)  # the log written anew agrees with the index


def test_an_index_whose_current_generation_is_gone_is_rebuilt_saying_so(tmp_path, caplog):
    import bridge.search.index as si

    path = str(tmp_path / "gone.index")
    written_index(path, indexed("a", "alpha report"))
    (Path(path) / "g1" / "meta.json").unlink()
    reopened = si.ToolIndex(path)
    try:
        assert not reopened.opened_existing and reopened.num_docs == 0
    finally:
        reopened.close()
    assert "names no index it holds (generation 1); rebuilding it" in caplog.text
