"""What the tests of tool search share: a started catalog with its search index, documents
written to an index directly, an index whose commits fail, a few catalogs of tools, and a
small deterministic encoder."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re

import numpy as np

from bridge.catalog import Catalog
from bridge.config import SurfaceConfig
from bridge.search.analysis import analyze_query
from bridge.search.document import IndexedTool
from bridge.search.encoder import Encoder
from bridge.search.semantic import SemanticStage
from bridge.search.service import ToolSearch
from bridge.search.vectorfile import vector_path
from bridge.store import Store
from bridge.surface import Surface
from tests.conftest import ROOT
from tests.fakes import FakeUpstream, tool


def forecast_desk():
    return [
        FakeUpstream(
            name="desk",
            tools=[
                tool(
                    "weather_forecast",
                    description="Get the weather forecast for a city for the coming days: temperature, wind and rain.",
                ),
                tool(
                    "weather_forecast_hourly",
                    description="Get the hourly weather forecast for a city: temperature, wind and rain hour by hour.",
                ),
                tool(
                    "weather_now",
                    description="Get the current weather in a city: temperature, wind and rain.",
                ),
                tool(
                    "weather_alerts",
                    description="Get the weather alerts and storm warnings for a city.",
                ),
                tool(
                    "weather_history",
                    description="Get the past weather of a city: temperature, wind and rain by day.",
                ),
                tool("book_flight", description="Book a seat on a flight between two airports."),
                tool(
                    "flight_status",
                    description="Get the status of a flight: on time, delayed or cancelled.",
                ),
                tool("book_hotel", description="Book a hotel room in a city for given dates."),
                tool("book_table", description="Book a table at a restaurant."),
            ],
        )
    ]


DEFERRED_SCHEMA = json.loads(
    (ROOT / "specs/agenttool/agenttool-deferred-tool.schema.json").read_text()
)


# The tool_search_result shape (the Agent Tool spec defines it in prose; no JSON Schema ships).
SEARCH_RESULT_SCHEMA = {
    "type": "object",
    "required": [
        "schema_version",
        "query",
        "query_type",
        "matches",
        "total_deferred_tools",
        "pending_providers",
        "missing_names",
        "next_action",
    ],
    "properties": {
        "schema_version": {"const": "0.2.0"},
        "query": {"type": "string"},
        "query_type": {"enum": ["select", "keyword"]},
        "matches": {
            "type": "array",
            "items": {"type": "object", "required": ["tool_id", "name", "score"]},
        },
        "total_deferred_tools": {"type": "integer", "minimum": 0},
        "pending_providers": {"type": "array", "items": {"type": "string"}},
        "missing_names": {"type": "array", "items": {"type": "string"}},
        "next_action": {"type": "string"},
        "hint": {"type": "string"},
    },
}


def tools_a():
    return [
        tool(
            "getUserById",
            description="Fetch one user account by its id.",
            read_only=True,
            tags=["users"],
        ),
        tool(
            "list_repositories",
            description="List the repositories of an organization.",
            read_only=True,
        ),
        tool("files/read-text", description="Read a text file from the workspace.", read_only=True),
        tool(
            "delete_user",
            description="Delete a user account for good.",
            destructive=True,
            tags=["users", "admin"],
        ),
        tool(
            "send_invoice",
            description="Email an invoice to a customer.",
            props={"customerEmail": {"type": "string", "description": "where the invoice goes"}},
        ),
    ]


class Env:
    """A started catalog with its search index and a surface or two."""

    def __init__(self, catalog: Catalog, search: ToolSearch, ups: dict[str, FakeUpstream]) -> None:
        self.catalog, self.search, self.ups = catalog, search, ups
        self.surface = Surface(SurfaceConfig(name="default"), catalog)

    def names(self, query: str, surface: Surface | None = None, **kw) -> list[str]:
        return [
            m.name for m in self.search.search(query, surface=surface or self.surface, **kw).matches
        ]

    async def close(self) -> None:
        self.search.close()
        await self.catalog.close()


async def start_env(
    ups: list[FakeUpstream], path: str | None = None, store: Store | None = None, **search_kw
) -> Env:
    catalog = Catalog(store or Store())
    for up in ups:
        catalog.add_upstream(up)
    search = ToolSearch(catalog, path, **search_kw)
    await catalog.start()
    assert await search.wait_indexed()
    return Env(catalog, search, {u.name: u for u in ups})


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
        assert (
            reopened.opened_existing
            and reopened._digests == digests
            and reopened.num_docs == reopened.tool_count == docs
        )
    finally:
        reopened.close()


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


FS_BLURB = (
    "This tool belongs to the Gorilla file system. It is a simple file system that allows users to perform "
    "basic file operations such as navigating directories, creating files and directories, reading and "
    "writing to files, etc. Tool description: "
)


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
    return [
        tool("list_files", description="List the files of a storage bucket."),
        tool("word_count", description="Count words in a text."),
        tool("move_to", description="Move the robot arm to a position."),
    ]


MSG_BLURB = "This tool belongs to the Message API, which is used to manage user interactions in a workspace. Tool description: "


def msg_tool(name, description, /, **params):
    """A tool of the Message API: each keyword a required parameter, with its description."""
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return tool(name, description=MSG_BLURB + description, props=props or {}, required=list(params))


def msg_tools():
    return [
        msg_tool(
            "send_message",
            "Send a message to a user.",
            receiver_id="User ID of the user to send the message to.",
            message="Message to be sent.",
        ),
        msg_tool(
            "delete_message",
            "Delete the latest message sent to a receiver.",
            receiver_id="User ID of the user to send the message to.",
        ),
        msg_tool("view_messages_sent", "View all historical messages sent by the current user."),
        msg_tool(
            "search_messages",
            "Search for messages containing a specific keyword.",
            keyword="The keyword to search for in messages.",
        ),
        msg_tool(
            "add_contact",
            "Add a contact to the workspace.",
            user_name="User name of contact to be added.",
        ),
        msg_tool("list_users", "List all users in the workspace."),
    ]


def fs_tool(name, description, /, **params):
    """A tool of the file system API: each keyword a required parameter, with its description."""
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return tool(name, description=FS_BLURB + description, props=props or {}, required=list(params))


def place_fs_tools():
    return [
        fs_tool("cd", FS_TOOLS["cd"], folder="The folder of the directory to change to."),
        fs_tool(
            "wc",
            FS_TOOLS["wc"],
            file_name="Name of the file of current directory to perform wc operation on.",
        ),
        fs_tool(
            "cat",
            FS_TOOLS["cat"],
            file_name="The name of the file from current directory to display.",
        ),
        fs_tool(
            "mkdir",
            FS_TOOLS["mkdir"],
            dir_name="The name of the new directory at current directory.",
        ),
        fs_tool("ls", FS_TOOLS["ls"]),
        fs_tool("rm", FS_TOOLS["rm"], file_name="The name of the file or directory to remove."),
    ]


class WordsEncoder(Encoder):
    """A small deterministic encoder: each word hashed to one of 64 dimensions, unit length.
    Texts sharing words are similar; it counts what it encodes."""

    name = "test-words"
    dim = 64

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, texts, max_tokens=128):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            self.encoded.append(text)
            for word in re.findall(r"[a-z]+", text.lower()):
                out[i, hashlib.blake2b(word.encode(), digest_size=1).digest()[0] % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


def three_tools():
    return [
        tool("read_file", description="Read a text file from disk."),
        tool("send_mail", description="Send an email message to someone."),
        tool("forecast", description="Weather forecast for a city."),
    ]


def one_upstream(listed):
    """A catalog of one upstream, `a`, listing these tools once started."""
    catalog = Catalog(Store())
    catalog.add_upstream(FakeUpstream(name="a", tools=listed))
    return catalog


async def started(ups, path=None, encoder=None):
    catalog = Catalog(Store())
    for up in ups:
        catalog.add_upstream(up)
    search = ToolSearch(catalog, path, semantic=False)
    stage = SemanticStage(encoder or WordsEncoder(), vector_path(path) if path else None)
    search.semantic = stage
    stage.submit([d for slot in catalog.slots.values() for d in slot.tools.values()])
    await catalog.start()
    assert await search.wait_indexed()
    assert await asyncio.to_thread(stage.flush, 10.0)
    return catalog, search, stage


def relisted(catalog: Catalog, number: int) -> list:
    """Upstream `a` lists 1,200 tools again, every description changed: their declarations."""
    catalog.apply_tools(
        "a",
        [
            tool(f"t{i}", description=f"Tool {i} of edition {number} alpha{number}")
            for i in range(1200)
        ],
    )
    return list(catalog.slots["a"].tools.values())
