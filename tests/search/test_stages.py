"""The ranking stages of tool search (bridge.search.stages): alternatives folded, the gain of an
API's other tools, own words, lookups and places brought after a match, the cover of a
request's parts, titles, and the suggestions of a search no tool matched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bridge.catalog import Catalog
from bridge.config import Rule, SurfaceConfig
from bridge.search.analysis import analyze_query
from bridge.search.cover import cover_order
from bridge.search.service import ToolSearch
from bridge.search.stages import LOOKUP_PLACES
from bridge.store import Store
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool
from tests.search.support import (
    DEFERRED_SCHEMA,
    FS_BLURB,
    FS_TOOLS,
    forecast_desk,
    fs_tool,
    fs_tools,
    msg_tool,
    msg_tools,
    others,
    place_fs_tools,
    start_env,
)
from tests.servers import until

VOLUME = {  # one function, three vendors' wording
    "audio": "Set the global volume for all audio playback, from 0 (mute) to 100.",
    "speakers": "Change the playback volume of every speaker to a level between 0 and 100 percent.",
    "media": "Adjust the audio output loudness for all players.",
}


def vendors():
    ups = [
        FakeUpstream(
            name=ns,
            tools=[tool("set_volume", description=text, props={"volume": {"type": "integer"}})],
        )
        for ns, text in VOLUME.items()
    ]
    ups[0].tools.append(tool("mute_audio", description="Mute all audio playback at once."))
    ups.append(
        FakeUpstream(
            name="code",
            tools=[
                tool(
                    "search",
                    description="Search source code across the organization's repositories.",
                )
            ],
        )
    )
    ups.append(
        FakeUpstream(
            name="tickets",
            tools=[
                tool("search", description="Find support tickets by customer, status or priority.")
            ],
        )
    )
    return ups


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_one_function_from_several_upstreams_takes_one_place(semantic):
    e = await start_env(vendors(), semantic=semantic)
    try:
        result = e.search.search("set the audio volume", surface=e.surface, limit=2)
        first, second = result.matches
        assert first.name.endswith("__set_volume") and second.name == "audio__mute_audio"
        assert sorted(c["name"] for c in first.alternatives) == sorted(
            {"audio__set_volume", "speakers__set_volume", "media__set_volume"} - {first.name}
        )
        assert {c["tool_id"] for c in first.alternatives} == {
            e.catalog.resolve(c["name"]).tool_id for c in first.alternatives
        }
        assert second.alternatives is None and "alternatives" not in second.to_json()
        jsonschema.validate(first.to_json(), DEFERRED_SCHEMA)
        # one native name, two meanings: two matches with the semantic stage, one without
        names = e.names("search", limit=5)
        assert sorted(names) == (
            ["code__search", "tickets__search"] if semantic == "static" else names
        )
        assert len(names) == (2 if semantic == "static" else 1)
        # filter-only listings and exact selection list every tool
        assert len(e.names("", namespace="speakers", limit=10)) == 1
        assert (
            len(
                e.search.search(
                    "select:audio__set_volume,media__set_volume", surface=e.surface
                ).matches
            )
            == 2
        )
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
    ups = [
        FakeUpstream(
            name=f"v{i:03d}", tools=[tool("get_weather", description="Get the weather for a city.")]
        )
        for i in range(300)
    ]
    ups.append(
        FakeUpstream(
            name="other",
            tools=[
                tool(f"weather_{i}", description=f"Weather report number {i}.") for i in range(12)
            ],
        )
    )
    e = await start_env(ups)
    try:
        matches = e.search.search("get the weather of a city", surface=e.surface, limit=10).matches
        assert len(matches) == 10 and len({m.name.split("__")[-1] for m in matches}) == 10
        (weather,) = [m for m in matches if m.name.endswith("__get_weather")]
        assert len(weather.alternatives) == 20 and weather.alternatives_total == 299
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_gains_from_the_best_match_among_its_apis_other_tools(semantic):
    from bridge.search.stages import SIBLING_WEIGHT
    from bridge.search.tooltext import SharedText

    # an API is the tools opening with one shared blurb, also those served by another upstream
    # (`part`: too few there to share it); another blurb is another API; a tool of none gains nothing
    part = FakeUpstream(
        name="part", tools=[tool(n, description=FS_BLURB + FS_TOOLS[n]) for n in ("mv", "wc")]
    )
    acme_blurb = (
        "Part of the Acme storage service, for files and folders in the cloud. Tool description: "
    )
    acme = FakeUpstream(
        name="acme",
        tools=[
            tool(n, description=acme_blurb + d)
            for n, d in (
                ("upload", "Upload a file into a folder."),
                ("folders", "List the folders."),
                ("lines", "Count the lines of a stored file."),
            )
        ],
    )
    e = await start_env(
        [
            FakeUpstream(name="fs", tools=fs_tools()),
            part,
            acme,
            FakeUpstream(name="misc", tools=others()),
        ],
        semantic=semantic,
        fold_alternatives=False,
    )
    api = {"fs": "files", "part": "files", "acme": "acme", "misc": None}
    try:
        assert e.search.sibling_weight == SIBLING_WEIGHT > 0
        for query in (
            "move the file to another folder",
            "how many lines and words are in that file?",
            "list the files here",
        ):
            raised = {
                m.name: m.score for m in e.search.search(query, surface=e.surface, limit=30).matches
            }
            e.search.sibling_weight = 0.0
            alone = {
                m.name: m.score for m in e.search.search(query, surface=e.surface, limit=30).matches
            }
            e.search.sibling_weight = SIBLING_WEIGHT
            assert raised.keys() == alone.keys(), query
            assert {api[n.split("__")[0]] for n in alone} >= {"files", "acme", None}, query
            for name, score in alone.items():
                mine = api[name.split("__")[0]]
                others_best = max(
                    (s for n, s in alone.items() if n != name and api[n.split("__")[0]] == mine),
                    default=None,
                )
                gain = (
                    SIBLING_WEIGHT * max(others_best, 0.0)
                    if mine is not None and others_best is not None
                    else 0.0
                )
                assert raised[name] == pytest.approx(score + gain, abs=2e-4), (query, name)
            assert list(raised) == sorted(
                raised, key=lambda n: -raised[n]
            )  # reordered by the raised score
    finally:
        await e.close()
    shared = SharedText()
    shared.refresh("fs", [(n, FS_BLURB + d) for n, d in FS_TOOLS.items()])
    assert (
        shared.api(FS_BLURB + "Anything else.") == shared.api(FS_BLURB + FS_TOOLS["cd"]) is not None
    )
    # a tool's own words, also in another namespace (served apart from its API)
    assert (
        shared.own(FS_BLURB + FS_TOOLS["cd"])
        == FS_TOOLS["cd"]
        == shared.split("fs", FS_BLURB + FS_TOOLS["cd"])[1]
    )
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
    e = await start_env(
        [FakeUpstream(name="fs", tools=fs_tools()), FakeUpstream(name="misc", tools=others())],
        semantic=semantic,
        fold_alternatives=False,
    )
    queries = (
        "First, head over to the documents directory for me.",
        "Could you then go ahead and move it into the temp folder?",
        "what's written in the file",
    )
    e.search.lookup_places = (
        0  # a tool that changes the place a match acts in is brought after it: tested apart
    )
    try:
        assert e.search.own_weight == OWN_WEIGHT > 0
        for query in queries:
            traded = [
                (m.name, m.score)
                for m in e.search.search(query, surface=e.surface, limit=30).matches
            ]
            e.search.own_weight = 0.0
            alone = [
                (m.name, m.score)
                for m in e.search.search(query, surface=e.surface, limit=30).matches
            ]
            e.search.own_weight = OWN_WEIGHT
            # the same places, each with its score; another upstream's tools keep theirs
            assert [s for _, s in traded] == [s for _, s in alone], query
            assert [n if n.startswith("misc") else "" for n, _ in traded] == [
                n if n.startswith("misc") else "" for n, _ in alone
            ]
            assert sorted(traded) != sorted(alone) or semantic == "off" or query == queries[1]
            if semantic == "off":  # the own words are weighed by the static table
                assert traded == alone
        head_over = e.names(queries[0], limit=3)
        assert head_over[0] == ("fs__cd" if semantic == "static" else "fs__mkdir")
        e.search.own_weight = 0.0
        assert e.names(queries[0], limit=3)[0] == "fs__mkdir"
        e.search.own_weight = OWN_WEIGHT
        # a title that is the blurb's first sentence (an OpenAPI summary) is not the tool's own words
        from bridge.search.tooltext import tool_text

        ls = e.catalog.resolve("fs__ls").model_copy(update={"title": FS_BLURB.split(". ")[0] + "."})
        assert tool_text(ls, FS_TOOLS["ls"]) == f"ls: {FS_TOOLS['ls']} Parameters: text"
        assert (
            tool_text(ls.model_copy(update={"title": "Folder listing"}), FS_TOOLS["ls"])
            == f"ls: Folder listing {FS_TOOLS['ls']} Parameters: text"
        )
        if semantic == "static":
            # the own words follow the catalog (`cd` kept from the searches above): `cd` and
            # `mkdir` swap descriptions
            swapped = {**FS_TOOLS, "cd": FS_TOOLS["mkdir"], "mkdir": FS_TOOLS["cd"]}
            e.ups["fs"].change_tools(
                [tool(n, description=FS_BLURB + d) for n, d in swapped.items()]
            )
            await until(lambda: e.catalog.resolve("fs__cd").description.endswith(FS_TOOLS["mkdir"]))
            assert await e.search.wait_indexed()
            cd = e.catalog.resolve("fs__cd")
            stage = e.search.semantic
            assert e.search._own_vectors(stage, [cd]) == pytest.approx(
                stage.text_vectors([tool_text(cd, FS_TOOLS["mkdir"])])
            )
            assert e.names(queries[0], limit=3)[0] == "fs__cd"  # now by its name alone
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_brings_the_lookup_its_api_offers_for_what_it_needs(semantic):
    # the Message API's lookup is served by another upstream (`part`); other vendors' lookups are
    # of no API (`misc`) or of another (`crm`)
    lookup = msg_tool("get_user_id", "Get user ID from user name.", user="User name of the user.")
    crm_blurb = "Part of the Acme CRM, for customers and their accounts. Tool description: "
    crm = [
        tool(
            n,
            description=crm_blurb + d,
            props={"name": {"type": "string", "description": "Name of the customer."}},
            required=["name"],
        )
        for n, d in (
            ("get_user_id", "Find a customer's user id."),
            ("get_account", "Read an account."),
            ("get_notes", "Read notes."),
        )
    ]
    misc = [
        tool(
            "find_user_id",
            description="Find a user id by user name.",
            props={"name": {"type": "string", "description": "User name to look for."}},
            required=["name"],
        )
    ]
    e = await start_env(
        [
            FakeUpstream(name="msg", tools=msg_tools()),
            FakeUpstream(name="part", tools=[lookup]),
            FakeUpstream(name="crm", tools=crm),
            FakeUpstream(name="misc", tools=misc),
        ],
        semantic=semantic,
        fold_alternatives=False,
    )
    query = "Send Catherine a message saying the report is ready"
    try:
        assert e.search.lookup_places == LOOKUP_PLACES > 0
        result = e.search.search(query, surface=e.surface)
        names, scores = [m.name for m in result.matches], [m.score for m in result.matches]
        at = names.index("msg__send_message")
        assert (
            at < LOOKUP_PLACES
            and names[at + 1] == "part__get_user_id"
            and scores[at + 1] == scores[at]
        )
        assert (
            "crm__get_user_id" not in names[: at + 2]
            and "misc__find_user_id" not in names[: at + 2]
        )
        e.search.lookup_places = 0
        alone = e.names(
            query
        )  # the request's words say nothing of user ids: the blurb alone matches it
        assert alone[alone.index("msg__send_message") + 1] != "part__get_user_id"
        e.search.lookup_places = LOOKUP_PLACES
        # a lookup already above the tool keeps its place, once
        e.search.lookup_places = 10
        names = e.names("Which user ID has the user name Catherine? Then message her", limit=20)
        e.search.lookup_places = LOOKUP_PLACES
        assert (
            names[0] == "part__get_user_id"
            and names.count("part__get_user_id") == 1
            and "msg__send_message" in names[:10]
        )
        # within the search's filters and the caller's surface
        assert "part__get_user_id" not in e.names(query, namespace="msg")
        blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="part")]), e.catalog)
        assert "part__get_user_id" not in e.names(query, surface=blocking)
        # the index follows a lookup that changes into something else
        e.ups["part"].change_tools(
            [
                msg_tool(
                    "get_user_id",
                    "Get user ID from an email address.",
                    email="Email address of the user.",
                )
            ]
        )
        await until(lambda: "email" in e.catalog.resolve("part__get_user_id").description)
        assert await e.search.wait_indexed()
        names = e.names(query)
        assert names[names.index("msg__send_message") + 1 :][:1] != ["part__get_user_id"]
    finally:
        await e.close()


async def test_a_lookup_is_found_among_many_other_vendors_lookups(monkeypatch):

    # more other vendors' lookups of a user id than a lookup query asks for: the match's own
    # upstream is asked first
    monkeypatch.setattr("bridge.search.query.LOOKUP_LIMIT", 2)
    lookup = msg_tool("get_user_id", "Get user ID from user name.", user="User name of the user.")
    crowd = [
        FakeUpstream(
            name=f"v{i}",
            tools=[
                tool(
                    "get_user_id",
                    description=f"Vendor {i}: find a user id.",
                    props={"name": {"type": "string", "description": "User name."}},
                    required=["name"],
                )
            ],
        )
        for i in range(4)
    ]
    e = await start_env(
        [*crowd, FakeUpstream(name="msg", tools=[*msg_tools(), lookup])], semantic="off"
    )
    try:
        names = e.names("Send Catherine a message saying the report is ready")
        assert names[names.index("msg__send_message") + 1] == "msg__get_user_id"
    finally:
        await e.close()


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_tool_brings_the_tool_that_changes_the_place_it_acts_in(semantic):
    # another vendor's shell has a cd of its own (another API); a tool of no API says it changes
    # the current directory too
    shell_blurb = "Part of the Acme remote shell, for servers you log in to. Tool description: "
    shell = [
        tool(
            n,
            description=shell_blurb + d,
            props={"path": {"type": "string", "description": "A path on the server."}},
            required=["path"],
        )
        for n, d in (
            ("cd", "Change the current directory on the server."),
            ("ls", "List the current directory on the server."),
            ("stat", "Describe a file in the current directory on the server."),
        )
    ]
    misc = [
        tool(
            "chdir",
            description="Change the current directory of the build.",
            props={"folder": {"type": "string", "description": "Folder to build in."}},
            required=["folder"],
        )
    ]
    e = await start_env(
        [
            FakeUpstream(name="fs", tools=place_fs_tools()),
            FakeUpstream(name="shell", tools=shell),
            FakeUpstream(name="misc", tools=misc),
        ],
        semantic=semantic,
        fold_alternatives=False,
    )
    query = "In the logs directory, count the lines of access.log"
    try:
        result = e.search.search(query, surface=e.surface)
        names, scores = [m.name for m in result.matches], [m.score for m in result.matches]
        at = names.index("fs__wc")
        assert (
            at < e.search.lookup_places
            and names[at + 1] == "fs__cd"
            and scores[at + 1] == scores[at]
        )
        assert "shell__cd" not in names[: at + 2] and "misc__chdir" not in names[: at + 2]
        e.search.lookup_places = 0
        alone = e.names(query)
        e.search.lookup_places = LOOKUP_PLACES
        assert alone[alone.index("fs__wc") + 1] != "fs__cd"
        # a folder named by its parameter's word; the place the request is in, or none named: not brought
        names = e.names("Display the contents of report.txt, it sits in the drafts folder")
        assert names.index("fs__cd") <= names.index("fs__cat") + 1
        for other in (
            "Count the lines of access.log in the current directory",
            "Count the lines of access.log",
            "Make a directory named output in this folder",
        ):
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
        e.ups["fs"].change_tools(
            [
                *place_fs_tools()[1:],
                fs_tool("cd", "Print the current working directory.", folder="Unused."),
            ]
        )
        await until(
            lambda: e.catalog.resolve("fs__cd").description.endswith(
                "Print the current working directory."
            )
        )
        assert await e.search.wait_indexed()
        names = e.names(query)
        assert names[names.index("fs__wc") + 1 :][:1] != ["fs__cd"]
    finally:
        await e.close()


def test_cover_order_gives_each_part_a_place_and_keeps_scores_falling():
    overall = np.array([0.9, 0.85, 0.8, 0.5], np.float32)
    parts = np.array(
        [
            [0.9, 0.9, 0.9, 0.0],  # three tools answer the first part
            [0.0, 0.0, 0.0, 0.9],
        ],
        np.float32,
    )  # only the last answers the second
    order, scores = cover_order(overall, parts, 0.5)
    assert order[:2] == [0, 3] and sorted(order) == [0, 1, 2, 3]
    assert scores == sorted(scores, reverse=True)
    assert cover_order(overall, parts, 0.0)[0] == [0, 1, 2, 3]  # weight 0: the request's order
    assert cover_order(overall, parts, 0.5, places=1)[0] == [
        0,
        3,
        1,
        2,
    ]  # the rest by its score then


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_a_request_for_several_things_gets_a_tool_for_each(semantic):
    e = await start_env(forecast_desk(), semantic=semantic)
    query = "What will the weather be like in Paris hour by hour, with temperature, wind and rain? Then book a flight there."
    try:
        if semantic == "static":  # the request's order alone: a weather tool takes the second place
            e.search.cover_weight = 0.0
            assert e.names(query, limit=4)[1] != "desk__book_flight"
            e.search.cover_weight = ToolSearch.cover_weight
        result = e.search.search(query, surface=e.surface, limit=4)
        names = [m.name for m in result.matches]
        assert names[:2] == ["desk__weather_forecast_hourly", "desk__book_flight"]
        assert [m.score for m in result.matches] == sorted(
            (m.score for m in result.matches), reverse=True
        )
        # a request of one part keeps the order of its score
        one = "hourly weather forecast for Paris with the storm warnings and the rain to expect"
        covered = e.search.search(one, surface=e.surface, limit=4).matches
        e.search.cover_weight = 0.0
        assert [(m.name, m.score) for m in covered] == [
            (m.name, m.score) for m in e.search.search(one, surface=e.surface, limit=4).matches
        ]
    finally:
        await e.close()


GITHUB_BRANCHES = (
    Path(__file__).parent.parent / "adapters" / "openapi_fixtures" / "github_branches.json"
)


@pytest.mark.parametrize("semantic", ["static", "off"])
async def test_a_title_tells_the_many_tools_of_one_api_apart(semantic):
    """Among 22 operations of GitHub's REST API about branches (their summaries and the first
    160 characters of their descriptions, from GitHub's description of its API, MIT licence),
    the words of *show the protection of the main branch* are in many and the meaning of each
    is near; the operation whose summary says it comes first, with the static table's rerank or
    by keywords alone."""
    from adapters.openapi.config import OpenAPIConfig
    from adapters.openapi.upstream import OpenAPIUpstream

    catalog = Catalog(Store())
    catalog.add_upstream(OpenAPIUpstream(OpenAPIConfig(name="github", spec=str(GITHUB_BRANCHES))))
    search = ToolSearch(catalog, semantic=semantic)
    try:
        await catalog.start()
        assert await search.wait_indexed()
        surface = Surface(SurfaceConfig(name="default"), catalog)

        def first(query: str) -> str:
            return search.search(query, surface=surface, limit=3).matches[0].name

        assert (
            first("show the protection of the main branch") == "github__repos_get-branch-protection"
        )
        assert first("list the branches") == "github__repos_list-branches"
        search.title_weight = 0.0
        assert (
            first("show the protection of the main branch") != "github__repos_get-branch-protection"
        )
    finally:
        search.close()
        await catalog.close()


async def test_titles_reorder_an_upstreams_own_candidates_only():
    """A vendor whose tools have no titles loses no place to one whose tools have: each
    upstream's candidates trade the places they hold, and each place keeps its score."""
    catalog = Catalog(Store())
    catalog.add_upstream(
        FakeUpstream(
            name="plain", tools=[tool("branches", description="Branches of a repository.")]
        )
    )
    catalog.add_upstream(
        FakeUpstream(
            name="hub",
            tools=[
                tool(
                    "repos_get-branch",
                    title="Get a branch",
                    description="Get a branch of a repository.",
                ),
                tool(
                    "repos_list-branches",
                    title="List branches",
                    description="List branches of a repository.",
                ),
            ],
        )
    )
    search = ToolSearch(catalog, semantic="static")
    try:
        await catalog.start()
        assert await search.wait_indexed()
        decls = {d.name: d for d in catalog.declarations()}
        ranked = [
            (decls["hub__repos_get-branch"], 0.9),
            (decls["plain__branches"], 0.85),
            (decls["hub__repos_list-branches"], 0.8),
        ]
        out, _ = search._titled(analyze_query("list the branches"), ranked, None)
        assert [(d.name, s) for d, s in out] == [
            ("hub__repos_list-branches", 0.9),
            ("plain__branches", 0.85),
            ("hub__repos_get-branch", 0.8),
        ]
    finally:
        search.close()
        await catalog.close()


async def test_a_search_no_tool_matches_suggests_the_tools_nearest_in_meaning(monkeypatch):
    """A request sharing no word with any tool gets no match, and the tools nearest to it in
    meaning as `suggestions`: only tools the surface shows and the filters pass, alternatives
    folded as in a ranking, none above the floor's cosine or in too large a pool, and none
    without the static table."""

    catalog = Catalog(Store())
    catalog.add_upstream(
        FakeUpstream(
            name="a",
            tools=[
                tool("get_weather", description="Current weather for a city."),
                tool("send_mail", description="Send an email message."),
                tool("read_file", description="Read a text file from disk."),
            ],
        )
    )
    catalog.add_upstream(
        FakeUpstream(
            name="b", tools=[tool("get_weather", description="The weather in a city now.")]
        )
    )
    catalog.add_upstream(
        FakeUpstream(
            name="c", tools=[tool("weather_report", description="Weather report for a region.")]
        )
    )
    await catalog.start()
    surface = Surface(SurfaceConfig(name="s", block=["c__*"]), catalog)
    search = ToolSearch(catalog, semantic="static")
    keyword = ToolSearch(catalog, semantic="off")
    query = "will it rain in Paris tomorrow"
    try:
        assert await search.wait_indexed() and await keyword.wait_indexed()
        result = search.search(query, surface=surface)
        assert result.matches == [] and result.next_action == "refine_query"
        assert "suggestions" in result.hint and "select:" in result.hint
        assert result.suggestions is not None
        first = result.suggestions[0]
        assert first.name in ("a__get_weather", "b__get_weather")
        assert [c["name"] for c in first.alternatives] == [
            {"a__get_weather": "b__get_weather"}.get(first.name, "a__get_weather")
        ]
        assert all(0.25 <= s.score <= 1 for s in result.suggestions)
        assert result.suggestions == sorted(result.suggestions, key=lambda s: -s.score)
        assert "c__weather_report" not in {s.name for s in result.suggestions}  # blocked
        for ref in result.suggestions:
            jsonschema.validate(ref.to_json(), DEFERRED_SCHEMA)
        assert "suggestions" in result.to_json()
        one = search.search(query, surface=surface, limit=1, namespace="b")
        assert [s.name for s in one.suggestions] == [
            "b__get_weather"
        ] and "filters namespace" in one.hint
        unfolded = search.search(query, surface=surface, fold_alternatives=False)
        assert {s.name for s in unfolded.suggestions[:2]} == {"a__get_weather", "b__get_weather"}
        # a search something matched, and a select:, suggest nothing
        assert search.search("weather", surface=surface).suggestions is None
        assert search.search("select:nope", surface=surface).suggestions is None
        # without the static table, over too many tools, or below the floor: no suggestion
        off = keyword.search(query, surface=surface)
        assert (
            off.suggestions is None
            and "suggestions" not in off.hint
            and "suggestions" not in off.to_json()
        )
        monkeypatch.setattr("bridge.search.suggest.SUGGEST_POOL", 3)
        assert search.search(query, surface=surface).suggestions is None
        assert search.search(query, surface=surface, namespace="a").suggestions is not None
        # a surface showing few tools of a larger catalog: those
        few = Surface(
            SurfaceConfig(name="few", block=["c__*", "a__send_mail", "a__read_file"]), catalog
        )
        assert [s.name for s in search.search(query, surface=few).suggestions] in (
            ["a__get_weather"],
            ["b__get_weather"],
        )
        assert (
            search.search(query, surface=few, namespace="a").suggestions[0].name == "a__get_weather"
        )
        assert search.search(query, surface=few, namespace="c").suggestions is None
        listed = list(catalog.slots["a"].upstream.tools)
        catalog.apply_tools("a", [])  # the tools it shows change with the catalog
        assert await search.wait_indexed()
        assert [s.name for s in search.search(query, surface=few).suggestions] == ["b__get_weather"]
        catalog.apply_tools("a", listed)
        assert await search.wait_indexed()
        monkeypatch.setattr("bridge.search.suggest.SUGGEST_POOL", 2_000)
        monkeypatch.setattr(
            "bridge.search.suggest.SUGGEST_COSINE", -1.0
        )  # at most SUGGESTIONS, and at most the limit
        assert len(search.search(query, surface=surface).suggestions) == 3
        assert len(search.search(query, surface=surface, limit=2).suggestions) == 2
        monkeypatch.setattr("bridge.search.suggest.SUGGEST_COSINE", 0.99)
        assert search.search(query, surface=surface).suggestions is None
    finally:
        search.close()
        keyword.close()
        await catalog.close()
