"""Query analysis (bridge.search.analysis): names split into words, filler set aside, CJK pairs,
related and joined words, named files, and the parts of a request."""

from __future__ import annotations

import pytest

from bridge.search.analysis import (
    analyze_query,
    cjk_pairs,
    meaning_text,
    name_tokens,
    name_words,
    query_parts,
    spelled_words,
)
from tests.conftest import ROOT
from tests.fakes import FakeUpstream, tool
from tests.search.support import FS_TOOLS, forecast_desk, fs_tools, start_env


def test_name_tokens_split_every_style():
    assert name_tokens("getUserById") == ["get", "user", "by", "id"]
    assert name_tokens("get_user_by_id") == ["get", "user", "by", "id"]
    assert name_tokens("users/get-by.id") == ["users", "get", "by", "id"]
    assert name_tokens("HTTPServerError") == ["http", "server", "error"]
    assert (
        name_words("users/getById") == "users get by id" == name_words("users/getById")
    )  # kept, the same


async def test_conversational_filler_does_not_decide(env):
    assert (
        env.names("could you please help me, I would like to read the text of a file")[0]
        == "api__files_read-text"
    )


async def test_a_query_of_filler_alone_matches_whole_names_only():
    env = await start_env(
        [
            FakeUpstream(
                name="ops",
                tools=[
                    tool("who_is", description="Look up who owns a domain name."),
                    tool("more", description="Show a file one page at a time."),
                    tool(
                        "purge_cache",
                        description="Purge the cache; do that when it is stale.",
                        props={
                            "missing_ok": {
                                "type": "boolean",
                                "description": "Do not fail when there is no cache: ok.",
                            }
                        },
                    ),
                    tool("http_status", description="Explain an HTTP status code such as 404."),
                ],
            )
        ],
        semantic="static",
    )
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


async def test_a_word_the_language_knows_is_not_read_as_a_typing_error():
    assert {"monkey", "money", "weather"} <= spelled_words() and "califronia" not in spelled_words()
    env = await start_env(
        [
            FakeUpstream(
                name="fx",
                tools=[
                    tool(
                        "convert_currency",
                        description="Convert an amount of money between currencies.",
                    )
                ],
            )
        ]
    )
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
    assert (
        cjk_pairs("mbox系统") == "mbox 系统 "
    )  # a run of two is its own pair, set apart from the Latin word
    assert cjk_pairs("东 x") == " 东  x"  # a lone character stays
    assert cjk_pairs("天気予報を取得") == " 天気 気予 予報 報を を取 取得 "  # kanji and kana alike
    assert (
        cjk_pairs("날씨 예보를") == " 날씨   예보 보를 "
    )  # a Korean word keeps its stem apart from its particle
    assert (
        cjk_pairs("Café déjà vu・テスト") == "Café déjà vu・ テス スト "
    )  # other scripts as they are; the middle dot splits
    text = "get_weather: Get the weather for a city."
    assert cjk_pairs(text) is text  # ASCII text, without a look
    # a query's pairs are its terms; a lone character, like a one-letter word, is set aside
    assert set(analyze_query("北京的天气").terms) == {"北京", "京的", "的天", "天气"}
    assert set(analyze_query("天 weather").terms) == {"weather"}


CJK_TOOLS = [
    tool(
        "weather_forecast",
        description="获取指定城市未来几天的天气预报，包括温度和降水概率。",
        props={"city": {"type": "string", "description": "城市名称"}},
    ),
    tool(
        "stock_quote",
        description="查询股票的实时价格和涨跌幅。",
        props={"symbol": {"type": "string", "description": "股票代码"}},
    ),
    tool(
        "ticket_list",
        description="列出指定公司所有未解决的工单。",
        props={"company": {"type": "string", "description": "公司名称"}},
    ),
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
    e = await start_env(
        [
            FakeUpstream(
                name="fs",
                tools=[
                    tool("mkdir", description="Create a new directory."),
                    tool("ls", description="List the contents of the current directory."),
                    tool("start_engine", description="Start the vehicle's engine."),
                    tool("archive", description="Pack a folder into a zip archive."),
                    tool("flights", description="Find flights to a city."),
                ],
            )
        ]
    )
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


def test_long_queries_are_read_in_time_linear_in_their_length():
    """Patterns that looked past a run of letters or spaces from each of its places took seconds
    for 20,000 characters (the server's event loop stalled) and grew with the square of the
    length; 200,000 characters of each (a hundred times the seconds of 20,000, were it still
    quadratic) now take a blink. Run apart, so a regression fails by its timeout instead of
    stalling the suite."""
    import subprocess
    import sys

    script = (
        "from bridge.search.analysis import _FILE_NAME, MAX_QUERY_CHARS, _names, analyze_query, identifier_words, query_parts\n"
        "n = 200_000\n"
        "for text in ('a' * n, 'ab1' * (n // 3), 'aB' * (n // 2), 'x' + ' ' * n + 'x', 'Aa' + ' ' * n + 'Bb', ', ' * n + 'also'):\n"
        "    identifier_words(text), _names(text), query_parts(text)\n"
        "    assert len(analyze_query(text).text) == min(len(text), MAX_QUERY_CHARS)\n"
        "    _FILE_NAME.search(text), _FILE_NAME.search(text.replace('b', '-'))\n"
        "assert identifier_words('call getUserById then lawyer.find_nearby, not x2fooBar') == ['getuserbyid', 'lawyer.find_nearby']\n"
        "assert _names('Weather in Santa Barbara.\\n  Then Seattle  too') == {'santa', 'barbara', 'seattle'}\n"
        "assert [p.text for p in query_parts('Book a flight to Paris.   Also    reserve a hotel there')] == "
        "['Book a flight to Paris.', 'reserve a hotel there']\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]


async def test_a_file_named_in_a_request_is_searched_as_a_file():
    # the request names the file (draft.txt, data.csv), the tools say *file*
    assert "file" in analyze_query("Show me what report.md says").terms
    assert "file" in analyze_query("grep errors in ./logs/server.LOG").terms
    for text in ("Trip to Washington D.C.", "release v1.2", "e.g. the weather", "Dr.Who tonight"):
        assert "file" not in analyze_query(text).terms
    # the file's own words are a value, as a number is: they weigh less, unless said elsewhere too
    assert analyze_query("notes.txt").terms == {"note": 0.25, "txt": 0.25, "file": 1.0}
    assert analyze_query("Read the notes in notes.txt").terms == {
        "read": 1.0,
        "note": 1.0,
        "txt": 0.25,
        "file": 1.0,
    }
    assert (
        meaning_text("Copy notes.txt to ./backup/notes.bak, then show it")
        == "Copy file to ./backup/file, then show it"
    )
    e = await start_env(
        [
            FakeUpstream(name="fs", tools=fs_tools()),
            FakeUpstream(
                name="docs",
                tools=[
                    tool("delete", description="Delete an entry."),
                    tool("show_notes", description="Show the speaker notes of a slide."),
                ],
            ),
        ]
    )
    try:
        assert "fs__rm" in e.names("get rid of draft.txt", limit=3)  # nothing matched before
        assert set(e.names("how big is data.csv", limit=3)) <= {f"fs__{n}" for n in FS_TOOLS}
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_the_words_of_a_named_file_do_not_choose_the_tool(semantic):
    # *quarterly.txt* names the file to show, not a request for the quarterly earnings
    e = await start_env(
        [
            FakeUpstream(name="fs", tools=fs_tools()),
            FakeUpstream(
                name="fin",
                tools=[
                    tool(
                        "quarterly_earnings",
                        description="Get the quarterly earnings report of a company.",
                    ),
                    tool("notes_summary", description="Summarize the notes of a meeting."),
                ],
            ),
        ],
        semantic=semantic,
    )
    try:
        assert e.names("Show me what's in quarterly.txt", limit=1) == ["fs__cat"]
        assert e.names("Count the words of meeting_notes.txt", limit=1) == ["fs__wc"]
        assert e.names("Show me the quarterly earnings of ACME", limit=1) == [
            "fin__quarterly_earnings"
        ]
    finally:
        await e.close()


def test_conversational_connectives_are_filler():
    assert set(analyze_query("Alright, go ahead and afterwards delete it, oops").terms) == {
        "go",
        "delet",
    }


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
        ["airport", "boston", "closest", "find"],
        ["book", "flight"],
    ]
    assert parts("Copy notes.txt to backup.txt, then show me what's inside the copy") == [
        ["backup", "copi", "file", "note", "txt"],
        ["copi", "insid", "show"],
    ]
    # one task: no parts; `next` qualifies a value, `and` alone joins words of one task
    assert parts("Get the weather forecast for the next 10 days") == []
    assert parts("Find the area of a rectangle with length 7 and breadth 3") == []
    # a part needs two words besides filler; at most four parts, those with the most words
    assert parts("Could you help me? I want it. Then list the open tickets") == []
    assert (
        query_parts("Get the sales report. Then get the sales report") == []
    )  # the same words count once
    many = query_parts(
        ". ".join(
            f"get the {w} sales report" for w in ("north", "south", "east", "west", "central")
        )
    )
    assert len(many) == 4
    # Chinese and Japanese end a sentence with a full-width mark and no space
    assert [
        sorted(p.terms)[:2] for p in query_parts("请问北京的天气如何？还有，上海的股票价格是多少？")
    ] == [["京的", "北京"], ["上海", "价格"]]


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
        "The printer on the third floor is jammed.",
        "The room code is lost.",
    ]
    e = await start_env(forecast_desk())
    try:
        # the scene's hotel, a part of its own, took the second place from the flight
        assert e.names(scene + ask, limit=2) == [
            "desk__weather_forecast_hourly",
            "desk__book_flight",
        ]
    finally:
        await e.close()


async def test_two_words_of_a_request_are_matched_as_the_one_word_a_tool_writes():
    # *zip code* is `zipcode` in the tool's name and description; the decoys say *code*
    analyzed = analyze_query("Get the zip code of Paris, then pre heat the oven")
    assert "zipcod" in analyzed.joined and "preheat" in analyzed.joined
    assert "getzip" not in analyzed.joined  # filler between: *the* stands between *get* and *zip*
    assert analyze_query("Get the zipcode of Paris").joined == ()  # one word: nothing to join
    e = await start_env(
        [
            FakeUpstream(
                name="geo",
                tools=[
                    tool("get_zipcode_based_on_city", description="Find the zipcode of a city."),
                    tool("get_country_code", description="Get the dialling code of a country."),
                    tool("format_code", description="Format a piece of source code."),
                    tool("zip_files", description="Compress files into a zip archive."),
                ],
            )
        ]
    )
    try:
        found = e.names("what is the zip code of Paris", limit=4)
        assert set(found[:2]) == {"geo__get_zipcode_based_on_city", "geo__zip_files"}, (
            found
        )  # not found before
        # a word the catalog does not use is not matched: the ranking is the one of the two words
        assert e.names("format the code block", limit=1) == ["geo__format_code"]
    finally:
        await e.close()
