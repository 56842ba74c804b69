"""A configurable test agent on a2a-sdk: protocol 1.0 or 0.3 cards, JSON-RPC and HTTP+JSON,
streaming or not, optional bearer/API-key security, and skills that exercise every path of the
adapter (reply message, artifacts of every part kind, long tasks, input-required, failure,
rejection, a task that runs until canceled). The skill is picked from the message metadata."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.helpers.proto_helpers import (
    new_data_part,
    new_raw_part,
    new_task_from_user_message,
    new_text_part,
    new_url_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

SKILLS = [
    AgentSkill(
        id="echo",
        name="Echo",
        description="Repeat the input back.",
        tags=["util", "echo"],
        examples=["say hi"],
        input_modes=["text/plain", "application/json"],
        output_modes=["text/plain", "application/json"],
    ),
    AgentSkill(
        id="slow", name="Slow", description="A long task reporting each step.", tags=["long"]
    ),
    AgentSkill(
        id="ask", name="Booking", description="Books a trip; asks which city.", tags=["travel"]
    ),
    AgentSkill(
        id="reask",
        name="Insist",
        description="Asks which city; asks again, with no new question, until told Lisbon.",
        tags=["travel"],
    ),
    AgentSkill(id="fail", name="Fail", description="Always fails.", tags=["broken"]),
    AgentSkill(id="reject", name="Reject", description="Always rejects.", tags=["broken"]),
    AgentSkill(id="wait", name="Wait", description="Works until canceled.", tags=["long"]),
    AgentSkill(
        id="reply", name="Reply", description="Answers with a message, no task.", tags=["chat"]
    ),
    AgentSkill(
        id="files",
        name="Files",
        description="Returns a link, an image and data.",
        tags=["files"],
        input_modes=["application/json"],
    ),
]


@dataclass
class AgentControl:
    """What the test sees of the agent and how it steers it."""

    card: AgentCard
    requests: list[dict[str, Any]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_seen: asyncio.Event = field(default_factory=asyncio.Event)
    required_bearer: str | None = None
    required_api_key: tuple[str, str] | None = None  # (header, value)

    def methods(self) -> list[str]:
        """JSON-RPC methods, or REST paths, of the calls the agent received (cards excluded)."""
        out = []
        for entry in self.requests:
            if entry["path"].startswith("/.well-known"):
                continue
            try:
                out.append(json.loads(entry["body"])["method"])
            except (ValueError, KeyError, TypeError):
                out.append(f"{entry['method']} {entry['path']}")
        return out

    def add_skill(self, skill: AgentSkill) -> None:
        self.card.skills.append(skill)


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


class ScriptedExecutor(AgentExecutor):
    def __init__(self, control: AgentControl) -> None:
        self.control = control

    async def execute(self, context: RequestContext, event_queue: Any) -> None:
        message = context.message
        assert message is not None
        # a protobuf Struct: no .get
        skill = message.metadata["skill_id"] if "skill_id" in message.metadata else "echo"  # noqa: SIM401
        text = context.get_user_input()
        data = [MessageToDict(p.data) for p in message.parts if p.HasField("data")]
        if skill == "reply":
            await event_queue.enqueue_event(
                Message(
                    message_id=str(uuid.uuid4()),
                    role=Role.ROLE_AGENT,
                    parts=[Part(text=f"hello {text}")],
                    context_id=context.context_id,
                )
            )
            return
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if skill == "echo":
            parts = [new_text_part(f"echo: {text}")] + [
                new_data_part({"received": d}) for d in data
            ]
            await up.add_artifact(parts, name="echo")
            await up.complete()
        elif skill == "slow":
            steps = int(data[0].get("steps", 3)) if data else 3
            for i in range(1, steps + 1):
                await up.start_work(
                    _agent_message(f"step {i} of {steps}", task.id, task.context_id)
                )
                await asyncio.sleep(0.03)
            await up.add_artifact([new_text_part(f"done after {steps} steps")], name="report")
            await up.complete()
        elif skill == "ask":
            current = context.current_task
            if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                await up.add_artifact([new_text_part(f"booked a trip to {text}")], name="booking")
                await up.complete()
            else:
                await up.requires_input(_agent_message("Which city?", task.id, task.context_id))
        elif skill == "reask":
            current = context.current_task
            if current is None:
                await up.requires_input(_agent_message("Which city?", task.id, task.context_id))
            elif text == "Lisbon":
                await up.add_artifact([new_text_part("booked Lisbon")], name="booking")
                await up.complete()
            else:
                await up.requires_input()  # the same question stands: no new status message
        elif skill == "fail":
            await up.start_work()
            await up.failed(_agent_message("the oven is on fire", task.id, task.context_id))
        elif skill == "reject":
            await up.reject(_agent_message("not my kind of job", task.id, task.context_id))
        elif skill == "wait":
            await up.start_work(_agent_message("waiting", task.id, task.context_id))
            self.control.started.set()
            await asyncio.Event().wait()
        elif skill == "files":
            await up.add_artifact(
                [
                    new_url_part(
                        "https://example.org/report.pdf",
                        media_type="application/pdf",
                        filename="report.pdf",
                    ),
                    new_raw_part(b"\x89PNG fake", media_type="image/png", filename="dot.png"),
                    new_data_part({"rows": 2, "ok": True}),
                ],
                name="files",
            )
            await up.complete()
        else:
            await up.add_artifact([new_text_part(f"{skill}: {text}")], name=skill)
            await up.complete()

    async def cancel(self, context: RequestContext, event_queue: Any) -> None:
        self.control.cancel_seen.set()
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def _security(card: AgentCard, bearer: bool, api_key_header: str | None) -> None:
    if bearer:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    if api_key_header:
        card.security_schemes["key"].CopyFrom(
            SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(location="header", name=api_key_header)
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={"key": StringList()}))


def build_agent(
    base_url: str,
    *,
    version: Literal["1.0", "0.3"] = "1.0",
    streaming: bool = True,
    skills: list[AgentSkill] | None = None,
    bearer: str | None = None,
    api_key: tuple[str, str] | None = None,
    name: str = "Test Agent",
) -> tuple[Any, AgentControl]:
    """An ASGI app serving one agent at `base_url` and the control handle of it.

    1.0: the card at /.well-known/agent-card.json, JSON-RPC at / and HTTP+JSON under /rest.
    0.3: a 0.3 card (top-level url, preferredTransport) only at the older /.well-known/agent.json,
    JSON-RPC with the 0.3 method names."""
    root = base_url.rstrip("/")
    interfaces = [
        AgentInterface(url=f"{root}/", protocol_binding="JSONRPC", protocol_version=version)
    ]
    if version == "1.0":
        interfaces.append(
            AgentInterface(url=f"{root}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0")
        )
    card = AgentCard(
        name=name,
        description="An agent for tests.",
        version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=list(SKILLS if skills is None else skills),
    )
    _security(card, bearer is not None, api_key[0] if api_key else None)
    control = AgentControl(card=card, required_bearer=bearer, required_api_key=api_key)
    handler = DefaultRequestHandlerV2(
        agent_executor=ScriptedExecutor(control), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def current_card(_: AgentCard) -> AgentCard:
        return control.card

    if version == "1.0":
        routes = create_agent_card_routes(card, card_modifier=current_card)
        routes += create_jsonrpc_routes(handler, rpc_url="/")
        routes += create_rest_routes(handler, path_prefix="/rest")
    else:

        async def legacy_card(_: Any) -> JSONResponse:
            body = to_compat_agent_card(control.card).model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )
            body["protocolVersion"] = "0.3.0"
            return JSONResponse(body)

        routes = [Route("/.well-known/agent.json", legacy_card, methods=["GET"])]
        routes += create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        await handler.aclose()  # tasks still running (a waiting skill) end with the server

    return _Recorder(Starlette(routes=routes, lifespan=lifespan), control), control


class _Recorder:
    """ASGI middleware: records each request (path, headers, body) and enforces the agent's
    credentials on everything but the card."""

    def __init__(self, app: Any, control: AgentControl) -> None:
        self.app = app
        self.control = control

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        entry: dict[str, Any] = {
            "path": scope["path"],
            "method": scope["method"],
            "headers": headers,
            "body": b"",
            "client": tuple(scope.get("client") or ()),
        }  # (host, port): the connection it came on
        self.control.requests.append(entry)
        if not scope["path"].startswith("/.well-known"):
            denied = (
                self.control.required_bearer is not None
                and headers.get("authorization") != f"Bearer {self.control.required_bearer}"
            )
            if self.control.required_api_key is not None:
                header, value = self.control.required_api_key
                denied = denied or headers.get(header.lower()) != value
            if denied:
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return

        async def recording_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                entry["body"] += message.get("body", b"")
            return message

        await self.app(scope, recording_receive, send)
