"""What tool search reads of a declaration (bridge.search.tooltext): search hints, the text an
API's tools share, lookups, current places, titles, origin names."""

from __future__ import annotations

from bridge.catalog import Catalog
from bridge.model import InputContract, ToolDeclaration
from bridge.search.tooltext import derive_search_hint, title_terms, tool_text
from bridge.store import Store
from tests.fakes import FakeUpstream, tool
from tests.search.support import (
    FS_BLURB,
    FS_TOOLS,
    fs_tools,
    msg_tool,
    others,
    place_fs_tools,
    start_env,
)


def test_derived_search_hint():
    def decl(**kw):
        return ToolDeclaration(
            tool_id="t", namespace="ns", name="ns__x", native_name=kw.pop("native_name", "x"), **kw
        )

    assert derive_search_hint(decl(search_hint="given hint")) == "given hint"
    long = decl(
        description="Retrieve the current weather forecast for a city, with hourly detail and alerts. More text."
    )
    assert (
        derive_search_hint(long) == "Retrieve the current weather forecast for a city with hourly"
    )
    assert derive_search_hint(decl(title="Create issue", description="")) == "Create issue x"
    assert derive_search_hint(decl(description="", native_name="getUserById")) == "get user by id"
    assert derive_search_hint(decl(description="Echo.", native_name="echo")) == "Echo ns tool"
    # a Chinese description's first sentence ends at its full-width stop, which the hint leaves out
    chinese = decl(
        description="获取指定城市的天气预报，包括温度和降水概率。另外支持英文城市名。",
        native_name="weather_forecast",
    )
    assert (
        derive_search_hint(chinese) == "获取指定城市的天气预报，包括温度和降水概率 weather forecast"
    )
    for d in (long, decl(description=""), decl(title="A b c d e f g h i j k l")):
        assert 3 <= len(derive_search_hint(d).split()) <= 10


def test_shared_runs_need_several_differently_named_tools():
    from bridge.search.tooltext import SharedText

    shared = SharedText()
    blurb = "Part of the Acme API. Tool description: "
    assert (
        shared.refresh(
            "acme", [("a", blurb + "Create an order."), ("b", blurb + "Cancel an order.")]
        )
        is False
    )
    assert shared.split("acme", blurb + "Create an order.") == (
        "",
        blurb + "Create an order.",
    )  # two names: not yet
    assert (
        shared.refresh(
            "acme",
            [
                ("a", blurb + "Create an order."),
                ("b", blurb + "Cancel an order."),
                ("c", blurb + "Refund an order."),
            ],
        )
        is True
    )
    assert shared.split("acme", blurb + "Ship it. Then track it.") == (
        blurb.strip(),
        "Ship it. Then track it.",
    )
    assert shared.split("other", blurb + "Ship it.") == ("", blurb + "Ship it.")  # per namespace
    # a description that is only the shared text keeps it as its own
    assert shared.split("acme", "Part of the Acme API.") == ("", "Part of the Acme API.")
    # versions of one tool sharing their first sentence: their own words, not shared text
    versions = [("set_volume", f"Set the global volume. Range {i}.") for i in range(5)]
    assert shared.refresh("media", versions) is False
    assert shared.split("media", versions[0][1])[0] == ""


async def test_text_shared_by_an_api_is_kept_apart_from_its_tools_own_words():
    e = await start_env(
        [FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())]
    )
    try:
        # the blurb ("creating files and directories", "reading and writing to files") is not the
        # tools' own description: the sibling whose own words match comes first
        assert e.names("list the contents of this directory", limit=3)[0] == "fs__ls"
        assert (
            e.names("Alright, could you then go ahead and move a file to another directory?")[0]
            == "fs__mv"
        )
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
        assert (hint.name, hint.search_hint) == (
            "fs__cd",
            "Change the current working directory to the specified folder",
        )
    finally:
        await e.close()


def test_a_lookup_is_a_reading_tool_asking_for_names_alone():
    from bridge.search.tooltext import input_heads, looked_up

    def decl(name, /, **params):
        up = msg_tool(name, "Anything.", **params)
        return ToolDeclaration(
            tool_id=name,
            name=name,
            namespace="m",
            native_name=name,
            description=up.description,
            input_contract=InputContract(model_input_schema=up.input_schema),
        )

    assert looked_up(decl("get_user_id", user="User name of the user.")) == {"user", "id"}
    assert looked_up(decl("get_symbol_by_name", name="Name of the company.")) == {
        "symbol"
    }  # up to *by*
    assert looked_up(decl("getZipcodeBasedOnCity", city="The name of the city.")) == {
        "zipcod"
    }  # stemmed as indexed
    assert not looked_up(
        decl("add_contact", user_name="User name of contact to be added.")
    )  # not a reading verb
    assert not looked_up(
        decl("get_tweet", tweet_id="ID of the tweet to retrieve.")
    )  # asks for no name
    assert not looked_up(decl("get_user_name", user_name="User name."))  # asks for what it reads
    assert not looked_up(decl("list_users")) and not looked_up(decl("get", name="A name."))
    heads = input_heads(
        msg_tool(
            "send_message",
            "Send.",
            receiver_id="User ID of the user to send the message to.",
            message="Message to be sent.",
        ).input_schema
    )
    assert heads == [
        {"receiv", "id", "user", "of", "the"},
        {"messag", "to", "be", "sent"},
    ]  # name words, then 4 of the description


def test_a_tool_says_the_current_place_it_acts_in_or_changes():
    from bridge.search.tooltext import acts_in_current, changes_current, here_words, place_terms

    def decl(up):
        return ToolDeclaration(
            tool_id=up.name,
            name=up.name,
            namespace="fs",
            native_name=up.name,
            description=up.description,
            input_contract=InputContract(model_input_schema=up.input_schema),
        )

    cd, wc, cat, mkdir, ls, rm = (decl(up) for up in place_fs_tools())
    # a sentence opening with change (set, switch, select) the current (active) ...: its last word before *to*
    assert changes_current(cd) == {"directori"} and acts_in_current(cd) == {"work", "directori"}
    assert place_terms(cd) == {
        "directori",
        "folder",
        "the",
        "of",
    }  # the noun and the parameter's head
    assert changes_current(
        decl(tool("use", description="Switches the active workspace for later calls."))
    ) == {"workspac"}
    assert not changes_current(
        decl(tool("help", description="Lists files. You can change the current directory with cd."))
    )
    assert not changes_current(
        decl(tool("nav", description="Helps change the current directory."))
    )  # not a sentence's verb
    # where a tool acts: its description or its parameters' descriptions (cat's own says *currrent*)
    assert (
        acts_in_current(mkdir)
        == acts_in_current(ls)
        == acts_in_current(wc)
        == acts_in_current(cat)
        == {"directori"}
    )
    assert not acts_in_current(rm) and not changes_current(mkdir)
    # what a request says of the place it is in
    assert here_words("List everything in the current working directory") == {"work", "directori"}
    assert here_words("Make a folder named output in this folder.") == {"folder"}
    assert not here_words("In the logs directory, count the lines of access.log")


async def test_a_title_or_hint_that_repeats_the_description_counts_once():
    # one function served as an OpenAPI operation (its summary repeated as title and hint) and as
    # an MCP tool (a description alone): the same words, the same score
    desc = "Convert an amount between two currencies. Uses the daily rates."
    summary = "Convert an amount between two currencies."
    rates = tool("rates", description="List the daily currency rates.")
    oas = [
        tool("convert", description=desc, title=summary, search_hint=summary.rstrip(".")),
        rates,
        tool("forecast", description="Weather for a city.", title="Seven-day outlook"),
    ]
    e = await start_env(
        [
            FakeUpstream(name="oas", tools=oas),
            FakeUpstream(name="mcp", tools=[tool("convert", description=desc), rates]),
        ],
        semantic="static",
        fold_alternatives=False,
    )
    try:
        for query in ("convert currencies", "amount between two currencies", "daily rates"):
            scores = {m.name: m.score for m in e.search.search(query, surface=e.surface).matches}
            assert scores["oas__convert"] == scores["mcp__convert"], query
        # a title that says what the description does not is the tool's own words
        assert e.names("outlook")[0] == "oas__forecast"
        # said word for word, case and punctuation aside; part of a word is not the word
        from bridge.search.tooltext import unsaid

        assert (unsaid("Get a pet", "GET a pet. More."), unsaid("Pet", "A petal store.")) == (
            "",
            "Pet",
        )
    finally:
        await e.close()

    # the first sentence of an API's blurb, given as every tool's title and hint (an OpenAPI summary):
    # the hint a match shows is the tool's own first sentence, as without them
    first = FS_BLURB.split(". ")[0] + "."
    fs = [
        tool(n, description=FS_BLURB + FS_TOOLS[n], title=first, search_hint=first)
        for n in FS_TOOLS
    ]
    e = await start_env(
        [FakeUpstream(name="fs", tools=fs), FakeUpstream(name="misc", tools=others())]
    )
    try:
        match = e.search.search("change the working directory", surface=e.surface).matches[0]
        assert (match.name, match.search_hint) == (
            "fs__cd",
            "Change the current working directory to the specified folder",
        )
        assert e.names("list the contents of this directory", limit=3)[0] == "fs__ls"
    finally:
        await e.close()


async def test_a_peer_agents_skills_are_found_by_their_own_words_not_the_message_envelope():
    from adapters.a2a.mapping import input_schema_for

    envelope = input_schema_for([])  # message, data, context_id, task_id: alike for every skill
    skills = [
        tool(name, description=desc, tool_kind="peer_agent_tool").model_copy(
            update={"input_schema": envelope}
        )
        for name, desc in (
            ("plan_trip", "Plan a trip itinerary for a city."),
            ("pack", "Draw up a packing list."),
        )
    ]
    chat = tool(
        "post_note",
        description="Post a note to a chat channel.",
        props={"message": {"type": "string"}},
    )
    e = await start_env(
        [FakeUpstream(name="desk", tools=skills), FakeUpstream(name="chat", tools=[chat])]
    )
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
            mapping = {
                "source": "a2t",
                "tool_name": f"{origin}__{native}",
                "upstream_native_name": native,
                "upstream_mappings": [mapping],
            }
        exposed = mapping["tool_name"]
        return tool(exposed, description=description, external_mapping=mapping)

    tools = [
        relayed("audio", "set_volume", "Set the volume of the speakers."),
        relayed("media", "set_volume", "Set the volume of the speakers, from 0 to 100.", depth=2),
        relayed("audio", "mute", "Mute the speakers."),
    ]
    e = await start_env([FakeUpstream(name="hub", tools=tools)], semantic="static")
    try:
        decls = {d.name: d for d in e.catalog.declarations()}
        assert {function_name(d) for d in decls.values()} == {
            "set_volume",
            "mute",
        }  # a chain of two bridges too
        # one function listed by two vendors behind the other bridge takes one place
        first = e.search.search("set the volume of the speakers", surface=e.surface).matches
        assert first[0].name == "hub__audio__set_volume" and [
            a["name"] for a in first[0].alternatives
        ] == ["hub__media__media__set_volume"]
        # quoted by its name at the origin or at the other bridge, it comes first
        assert e.names("set_volume")[0] == "hub__audio__set_volume"
        assert e.names("audio__mute")[0] == "hub__audio__mute"
        # the name's words are the origin's: no `audio` or `media` counted as the tool's own name
        assert e.search._indexed(decls["hub__audio__mute"]).name == "mute"
    finally:
        await e.close()


def test_title_terms_are_a_short_label_other_than_the_name():
    def decl(name: str, title: str | None):
        catalog = Catalog(Store())
        catalog.add_upstream(FakeUpstream(name="ns", tools=[]))
        catalog.apply_tools("ns", [tool(name, title=title)])
        return next(iter(catalog.declarations()))

    assert title_terms(decl("repos/list-branches", "List branches")) == {"list", "branch"}
    assert title_terms(decl("meetingCreate", "Create a meeting")) == {
        "creat",
        "meet",
    }  # its own words, in its own order
    assert title_terms(decl("get_weather", None)) == frozenset()
    for name, title in (
        ("addCards", "addCards()"),
        ("get_weather", "Get Weather"),
        ("notes_note_delete", "notes note delete"),
    ):
        assert title_terms(decl(name, title)) == frozenset(), title  # the name again
    assert (
        title_terms(decl("plan", "Plans a three-day itinerary for the destination given"))
        == frozenset()
    )  # a sentence
