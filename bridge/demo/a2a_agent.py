"""Travel Desk: a local A2A agent (a2a-sdk server) for the demo federation.

Three skills: `plan_trip` asks for the destination when the message names none (the task goes
to input-required and is continued with its task and context ids), `convert_currency` answers
at fixed demo rates with text and a data part, and `packing_list` is a longer task that streams
a status update per step. Serves protocol 1.0 over JSON-RPC (at `/`, also answering 0.3 clients)
and HTTP+JSON (under `/rest`), with the card at `/.well-known/agent-card.json` and the older
`/.well-known/agent.json`.

    python -m bridge.demo.a2a_agent --port 9102
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_data_part, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.routing import BaseRoute

__all__ = ["TravelDesk", "build_app", "build_card", "main"]

DESTINATIONS: dict[str, list[str]] = {
    "lisbon": [
        "Alfama walk and a tram 28 ride",
        "Belém tower and pastéis de nata",
        "Day trip to Sintra",
    ],
    "kyoto": ["Fushimi Inari at dawn", "Arashiyama bamboo grove", "Gion in the evening"],
    "oslo": ["Opera house roof and the harbour", "Vigeland park", "Fjord ferry to Bygdøy museums"],
    "paris": ["Île de la Cité and Notre-Dame", "Musée d'Orsay", "Montmartre at sunset"],
}
# Demo rates: units of each currency per 1 EUR.
RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "JPY": 162.0, "NOK": 11.6, "CHF": 0.95}
PACKING_STEPS = [
    ("checking the forecast", ["rain jacket", "light sweater"]),
    ("picking clothes", ["3 shirts", "2 trousers", "walking shoes"]),
    ("gathering documents", ["passport", "travel insurance card"]),
    ("adding gadgets", ["phone charger", "plug adapter"]),
]


def build_card(public_url: str) -> AgentCard:
    root = public_url.rstrip("/")
    return AgentCard(
        name="Travel Desk",
        description="Plans short trips, converts currencies and builds packing lists (demo agent).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{root}/", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(
                url=f"{root}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="plan_trip",
                name="Plan a trip",
                description="Plans a three-day itinerary. Asks for the destination when the message names none.",
                tags=["travel", "itinerary", "planning"],
                examples=["Plan a trip to Lisbon", "Plan a 2-day trip"],
            ),
            AgentSkill(
                id="convert_currency",
                name="Convert currency",
                description="Converts an amount between EUR, USD, GBP, JPY, NOK and CHF at fixed demo rates.",
                tags=["currency", "money", "exchange"],
                examples=["100 EUR to JPY"],
            ),
            AgentSkill(
                id="packing_list",
                name="Packing list",
                description="Builds a packing list step by step, reporting each step as it goes.",
                tags=["travel", "packing"],
                examples=["Packing list for Oslo"],
            ),
        ],
    )


def _say(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


class TravelDesk(AgentExecutor):
    """Routes on the skill named in the message metadata (`skill_id`), else on the wording."""

    def __init__(self, step_seconds: float = 0.3) -> None:
        self.step_seconds = step_seconds

    async def execute(self, context: RequestContext, event_queue: Any) -> None:
        message = context.message
        assert message is not None
        text = context.get_user_input()
        data: dict[str, Any] = next(
            (MessageToDict(p.data) for p in message.parts if p.HasField("data")), {}
        )
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        skill = (
            message.metadata["skill_id"]
            if "skill_id" in message.metadata
            else self._guess(text, task)
        )
        if skill == "convert_currency":
            await self._convert(updater, text, data)
        elif skill == "packing_list":
            await self._pack(updater, text, data)
        else:
            await self._plan(updater, context, text, data)

    @staticmethod
    def _guess(text: str, task: Any) -> str:
        lowered = text.lower()
        if re.search(r"\d+(\.\d+)?\s*[a-z]{3}\s+(to|in)\s+[a-z]{3}", lowered):
            return "convert_currency"
        return "packing_list" if "pack" in lowered else "plan_trip"

    async def _plan(
        self, up: TaskUpdater, context: RequestContext, text: str, data: dict[str, Any]
    ) -> None:
        asked_before = (
            context.current_task is not None
            and context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        )
        wanted = str(data.get("destination", "")) or text
        city = next((c for c in DESTINATIONS if c in wanted.lower()), None)
        if city is None:
            known = ", ".join(c.title() for c in DESTINATIONS)
            prefix = "I don't know that place. " if asked_before else ""
            await up.requires_input(
                _say(
                    f"{prefix}Where would you like to go? I know {known}.",
                    up.task_id,
                    up.context_id,
                )
            )
            return
        days_match = re.search(r"(\d+)[ -]day", text)
        days = max(1, min(3, int(data.get("days") or (days_match.group(1) if days_match else 3))))
        plan = DESTINATIONS[city][:days]
        lines = [f"{days}-day plan for {city.title()}:"] + [
            f"Day {i}: {item}" for i, item in enumerate(plan, 1)
        ]
        await up.add_artifact(
            [
                new_text_part("\n".join(lines)),
                new_data_part({"destination": city.title(), "days": days, "plan": plan}),
            ],
            name="itinerary",
        )
        await up.complete()

    async def _convert(self, up: TaskUpdater, text: str, data: dict[str, Any]) -> None:
        match = re.search(r"(\d+(?:\.\d+)?)\s*([A-Za-z]{3})\s+(?:to|in)\s+([A-Za-z]{3})", text)
        amount = data.get("amount", match.group(1) if match else None)
        source = str(data.get("from", match.group(2) if match else "")).upper()
        target = str(data.get("to", match.group(3) if match else "")).upper()
        if amount is None or source not in RATES or target not in RATES:
            await up.reject(
                _say(
                    f"I convert between {', '.join(RATES)}; say e.g. '100 EUR to JPY'.",
                    up.task_id,
                    up.context_id,
                )
            )
            return
        value = round(float(amount) / RATES[source] * RATES[target], 2)
        await up.add_artifact(
            [
                new_text_part(f"{float(amount):g} {source} = {value:g} {target} (demo rate)"),
                new_data_part(
                    {"amount": float(amount), "from": source, "to": target, "result": value}
                ),
            ],
            name="conversion",
        )
        await up.complete()

    async def _pack(self, up: TaskUpdater, text: str, data: dict[str, Any]) -> None:
        items: list[str] = []
        for step, (what, found) in enumerate(PACKING_STEPS, 1):
            await up.start_work(
                _say(f"step {step} of {len(PACKING_STEPS)}: {what}", up.task_id, up.context_id)
            )
            await asyncio.sleep(self.step_seconds)  # stands in for real work
            items.extend(found)
        await up.add_artifact(
            [
                new_text_part("Packing list:\n" + "\n".join(f"- {i}" for i in items)),
                new_data_part({"items": items}),
            ],
            name="packing_list",
        )
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: Any) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def build_app(public_url: str, step_seconds: float = 0.3) -> Starlette:
    card = build_card(public_url)
    handler = DefaultRequestHandlerV2(
        agent_executor=TravelDesk(step_seconds), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes: list[BaseRoute] = [*create_agent_card_routes(card)]
    routes += create_agent_card_routes(card, card_url="/.well-known/agent.json")
    routes += create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)
    routes += create_rest_routes(handler, path_prefix="/rest")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await handler.aclose()

    return Starlette(routes=routes, lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.demo.a2a_agent", description="Travel Desk demo A2A agent"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("PORT", "9102")),
        help="default: $PORT (the bridge sets it for a launch: whose URL names port 0), else 9102",
    )
    parser.add_argument(
        "--public-url", default=None, help="URL put in the agent card (default http://HOST:PORT)"
    )
    parser.add_argument(
        "--step-seconds", type=float, default=0.3, help="duration of each packing_list step"
    )
    args = parser.parse_args(argv)
    public_url = args.public_url or f"http://{args.host}:{args.port}"
    print(
        f"Travel Desk A2A agent on {public_url} (card at {public_url}/.well-known/agent-card.json)",
        flush=True,
    )
    uvicorn.run(
        build_app(public_url, args.step_seconds),
        host=args.host,
        port=args.port,
        log_level="warning",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
