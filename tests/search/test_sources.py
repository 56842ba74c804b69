"""The tools a tool's parameters name as their sources (bridge.search.sources), and a search
placing them right after a first match that needs them (bridge.search.stages, `_lookups`)."""

from __future__ import annotations

import pytest

from bridge.config import Rule, SurfaceConfig
from bridge.model import InputContract, ToolDeclaration
from bridge.search.sources import name_key, named_sources
from bridge.search.stages import LOOKUP_PLACES
from bridge.surface import Surface
from tests.fakes import FakeUpstream, tool
from tests.search.support import start_env


def decl(name: str, required: dict[str, str], optional: dict[str, str] | None = None):
    props = {
        p: {"type": "string", "description": d} for p, d in {**required, **(optional or {})}.items()
    }
    return ToolDeclaration(
        tool_id=name,
        name=name,
        namespace="ns",
        native_name=name,
        description=f"The {name} tool.",
        input_contract=InputContract(
            model_input_schema={"type": "object", "properties": props, "required": list(required)}
        ),
    )


def test_a_parameter_names_its_sources_as_code_or_in_parentheses():
    rentals = decl(
        "Search_Car_Rentals",
        {
            "pick_up_latitude": "Latitude. It can be retrieved from `api/v1/cars/searchDestination`"
            "**(Search Car Location)** endpoint in **Car Rental** collection.",
            "currency": "The currency code (optional).",
        },
        {"sort_by": "Can be retrieved from `getSortBy` (Get Sort By)."},
    )
    assert named_sources(rentals) == (
        (name_key("searchDestination"), name_key("Search_Car_Location")),
    )
    page = decl(
        "select_page",
        {"pageIdx": "The index of the page, as list_pages gives it.", "tab": "A tab name."},
    )
    assert named_sources(page) == ((name_key("list_pages"),),)
    # the tool's own name, its parameters' and one-word names are no sources
    own = decl(
        "get_order",
        {"order_id": "`order_id`: read it with get_order or (lookup)."},
        {"item_id": "item_id"},
    )
    assert named_sources(own) == ()
    details = decl("Vehicle_Details", {"vehicle_id": "`vehicle_id` is from `searchCarRentals`."})
    assert named_sources(details) == ((name_key("Search_Car_Rentals"),),)
    assert name_key("searchCarLocation") == name_key("Search Car Location\n")


def cars(namespace: str = "cars") -> FakeUpstream:
    def param(text: str) -> dict:
        return {"type": "string", "description": text}

    vehicle = param(
        "Vehicle ID. `vehicle_id` can be retrieved from `api/v1/cars/searchCarRentals`"
        "**(Search Car Rentals)** endpoint in **Car Rental** collection."
    )
    return FakeUpstream(
        name=namespace,
        tools=[
            tool(
                "Search_Car_Location",
                description="Find car rental location by searching for their name or address.",
                props={"query": param("Names of locations, cities, airports.")},
                required=["query"],
            ),
            tool(
                "Search_Car_Rentals",
                description="Search car rentals.",
                props={
                    "pick_up_latitude": param(
                        "`pick_up_latitude` can be retrieved from "
                        "`api/v1/cars/searchDestination`**(Search Car Location)** endpoint."
                    )
                },
                required=["pick_up_latitude"],
            ),
            tool(
                "Booking_Summary",
                description="Retrieve a summary of the booking details for a specific vehicle.",
                props={"vehicle_id": vehicle},
                required=["vehicle_id"],
            ),
            tool(
                "Vehicle_Details",
                description="Search the detail information of a car using vehicle id.",
                props={"vehicle_id": vehicle},
                required=["vehicle_id"],
            ),
        ],
    )


def browser() -> FakeUpstream:
    return FakeUpstream(
        name="web",
        tools=[
            tool(
                "select_page",
                description="Select a browser page as the context for future tool calls.",
                props={"pageIdx": {"type": "number", "description": "Index, from list_pages."}},
                required=["pageIdx"],
            ),
            tool("new_page", description="Open a new browser page at a URL."),
        ],
    )


def others() -> list[FakeUpstream]:
    return [
        FakeUpstream(name="tabs", tools=[tool("list_pages", description="List the open pages.")]),
        FakeUpstream(
            name="misc",
            tools=[
                tool("summarize_text", description="Write a summary of a text."),
                tool("Search_Car_Location", description="Another vendor's car location search."),
            ],
        ),
    ]


@pytest.mark.parametrize("semantic", ["off", "static"])
async def test_a_match_brings_the_tools_its_parameters_name_as_their_sources(semantic):
    e = await start_env([cars(), browser(), *others()], semantic=semantic)
    query = "Show me the booking summary for the vehicle I rented"
    try:
        assert e.search.lookup_places == LOOKUP_PLACES > 0
        result = e.search.search(query, surface=e.surface)
        names, scores = [m.name for m in result.matches], [m.score for m in result.matches]
        at = names.index("cars__Booking_Summary")
        # its source, and the source's own, right after it with its score; of its own upstream
        assert at < LOOKUP_PLACES and names[at + 1 : at + 3] == [
            "cars__Search_Car_Location",
            "cars__Search_Car_Rentals",
        ]
        assert scores[at + 1] == scores[at + 2] == scores[at]
        assert "misc__Search_Car_Location" not in names[: at + 3]
        e.search.lookup_places = 0
        alone = e.names(query)
        assert alone[alone.index("cars__Booking_Summary") + 1 :][:1] != [
            "cars__Search_Car_Location"
        ]
        e.search.lookup_places = LOOKUP_PLACES
        # a source of another upstream, within the filters and the caller's surface
        names = e.names("select the browser page to work in")
        assert names[names.index("web__select_page") + 1] == "tabs__list_pages"
        assert "tabs__list_pages" not in e.names("select the browser page", namespace="web")
        blocking = Surface(SurfaceConfig(name="safe", block=[Rule(upstream="tabs")]), e.catalog)
        assert "tabs__list_pages" not in e.names("select the browser page", surface=blocking)
    finally:
        await e.close()
