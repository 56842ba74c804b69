"""A2A records to bridge records and back: agent skills as tool declarations, tool arguments as
the message sent to the agent, and the agent's replies (messages, tasks, artifacts, parts) as
upstream results. Pure functions over a2a-sdk's protobuf types; no I/O."""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from a2a.types import (
    AgentCard,
    AgentSkill,
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import DecodeError

from bridge.model import (
    BridgeError,
    SafetyHints,
    ToolError,
    UpstreamResult,
    UpstreamTool,
)

log = logging.getLogger("adapters.a2a")

__all__ = [
    "INTERRUPTED_STATES",
    "SKILL_METADATA_KEY",
    "TERMINAL_STATES",
    "TOOL_KIND",
    "TaskTracker",
    "agent_tool_id",
    "build_message",
    "build_request",
    "input_schema_for",
    "result_from_tracker",
    "state_name",
    "tools_from_card",
]

TOOL_KIND = "peer_agent_tool"
# A2A has no field naming the skill a message is for; the bridge names it in the message
# metadata under this key, which agents may read to route (and may ignore).
SKILL_METADATA_KEY = "skill_id"

TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED_STATES = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
)


def state_name(state: int) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input_required`."""
    try:
        return TaskState.Name(state).removeprefix("TASK_STATE_").lower()
    except ValueError:
        return "unspecified"


# ------------------------------------------------------------------------- declarations


def agent_tool_id(card: AgentCard) -> str:
    """The native id of the one tool a skill-less agent gets: its name as a slug."""
    return re.sub(r"[^a-z0-9]+", "_", card.name.lower()).strip("_") or "agent"


def _accepts(modes: list[str]) -> tuple[bool, bool]:
    """(accepts text, accepts structured data) for a list of media types; none listed = both."""
    if not modes:
        return True, True
    text = any(m.startswith("text/") or m in ("*/*", "*") for m in modes)
    data = any("json" in m or m in ("*/*", "*") for m in modes)
    return text, data


def input_schema_for(input_modes: list[str]) -> dict[str, Any]:
    """The input schema of a skill. `message` is required unless the skill takes only structured
    data, in which case `data` is; the accepted media types ride along as `x-a2a-input-modes`."""
    accepts_text, accepts_data = _accepts(input_modes)
    modes_note = f" The agent accepts: {', '.join(input_modes)}." if input_modes else ""
    properties: dict[str, Any] = {
        "message": {
            "type": "string",
            "description": "What to ask the agent, sent as a text part." + modes_note,
        },
        "data": {
            "type": "object",
            "description": "Structured input sent as a data part (application/json).",
        },
        "context_id": {
            "type": "string",
            "description": "Continue an earlier conversation: the context_id of a previous result.",
        },
        "task_id": {
            "type": "string",
            "description": "Answer a task that needs input: the task_id of the needs_input result.",
        },
    }
    if not accepts_data:
        properties["data"]["description"] += " The agent does not list a JSON input mode."
    required = ["message"] if accepts_text or not accepts_data else ["data"]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if input_modes:
        schema["x-a2a-input-modes"] = list(input_modes)
    return schema


def _description(base: str, examples: list[str]) -> str:
    text = base.strip()
    if examples:
        text += "\n\nExamples:\n" + "\n".join(f"- {e}" for e in examples)
    return text


def _skill_tool(card: AgentCard, card_url: str, skill: AgentSkill) -> UpstreamTool:
    input_modes = list(skill.input_modes) or list(card.default_input_modes)
    output_modes = list(skill.output_modes) or list(card.default_output_modes)
    tags = list(skill.tags)
    return UpstreamTool(
        native_id=skill.id,
        name=skill.id,
        title=skill.name or None,
        description=_description(skill.description, list(skill.examples)),
        tool_kind=TOOL_KIND,
        input_schema=input_schema_for(input_modes),
        tags=tags,
        search_hint=" ".join(tags) or None,
        safety=SafetyHints(open_world=True, sources={"open_world": "inferred"}),
        external_mapping={
            "source": "a2a",
            "agent_card_url": card_url,
            "agent_skill_id": skill.id,
            "agent_name": card.name,
            "input_modes": input_modes,
            "output_modes": output_modes,
        },
    )


def _agent_tool(card: AgentCard, card_url: str) -> UpstreamTool:
    input_modes = list(card.default_input_modes)
    return UpstreamTool(
        native_id=agent_tool_id(card),
        name=agent_tool_id(card),
        title=card.name or None,
        description=card.description.strip(),
        tool_kind=TOOL_KIND,
        input_schema=input_schema_for(input_modes),
        safety=SafetyHints(open_world=True, sources={"open_world": "inferred"}),
        external_mapping={
            "source": "a2a",
            "agent_card_url": card_url,
            "agent_skill_id": None,
            "agent_name": card.name,
            "input_modes": input_modes,
            "output_modes": list(card.default_output_modes),
        },
    )


def tools_from_card(card: AgentCard, card_url: str) -> list[UpstreamTool]:
    """One tool per skill; an agent that lists no skills (or none with an id) is one tool as a
    whole. A skill without an id cannot be named to the agent, so it is left out, with a warning."""
    seen: set[str] = set()
    tools = []
    for skill in card.skills:
        if not skill.id:
            log.warning(
                "A2A agent %r at %s: skill %r has no id and is left out",
                card.name,
                card_url,
                skill.name,
            )
        elif skill.id not in seen:
            seen.add(skill.id)
            tools.append(_skill_tool(card, card_url, skill))
    return tools or [_agent_tool(card, card_url)]


# ------------------------------------------------------------------------- the outgoing message


def build_request(arguments: dict[str, Any], skill_id: str | None) -> SendMessageRequest:
    """`build_message` as a request. Protobuf holds `data` a few dozen levels deep, 32 objects
    within each other (each level of JSON is several of its messages, and the request copies the
    message): deeper is an invalid_arguments error."""
    try:
        return SendMessageRequest(message=build_message(arguments, skill_id))
    except (ParseError, DecodeError) as exc:
        raise BridgeError(
            f"`data` nests too deep to send as an A2A data part ({exc}); send flatter data",
            error_class="invalid_arguments",
            recoverability="change_arguments",
            status="rejected",
            details={
                "errors": [
                    {"path": "/data", "message": "nests too deep to send as an A2A data part"}
                ]
            },
        ) from None


def build_message(arguments: dict[str, Any], skill_id: str | None) -> Message:
    """The user message for one call: a text part, an optional data part, the conversation and
    task to continue, and the skill named in the metadata."""
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER)
    text = arguments.get("message")
    if isinstance(text, str) and text:
        message.parts.append(Part(text=text, media_type="text/plain"))
    data = arguments.get("data")
    if data is not None:
        message.parts.append(
            Part(data=ParseDict(data, struct_pb2.Value()), media_type="application/json")
        )
    if not message.parts:
        message.parts.append(Part(text="", media_type="text/plain"))
    if arguments.get("context_id"):
        message.context_id = str(arguments["context_id"])
    if arguments.get("task_id"):
        message.task_id = str(arguments["task_id"])
    if skill_id:
        message.metadata.update({SKILL_METADATA_KEY: skill_id})
    return message


# ------------------------------------------------------------------------- following a task


@dataclass
class TaskTracker:
    """The task of one call as its events arrive: snapshots replace it, status updates move it,
    artifact updates add or extend artifacts (A2A `append` semantics)."""

    task: Task | None = None
    message: Message | None = None
    sent_message_id: str = ""
    # when the message sent answers a question: the status timestamp of that question, when the
    # bridge gave it (ns since the epoch), and the bridge's clock when the message was sent
    question_at: int | None = None
    sent_at: int = 0
    _last_status: tuple[int, str] | None = field(default=None, repr=False)

    @property
    def task_id(self) -> str | None:
        return self.task.id if self.task is not None and self.task.id else None

    @property
    def state(self) -> int:
        return self.task.status.state if self.task is not None else TaskState.TASK_STATE_UNSPECIFIED

    @property
    def settled(self) -> bool:
        """A reply to give back: a message, a terminal task, or a task waiting for input (other
        than the input this call sends)."""
        if self.message is not None or self.state in TERMINAL_STATES:
            return True
        return self.state in INTERRUPTED_STATES and not self._still_asking_what_was_answered()

    def _still_asking_what_was_answered(self) -> bool:
        """The task as it stood when the answer sent by this call arrived: its question moved to
        the history, no status message, the answer last in the history, and the status as old as
        the question. An a2a-sdk 0.3 agent answers a non-blocking send with this snapshot when the
        agent's first event is no status change (an artifact, say); the task is followed until its
        state moves on. An agent asking again without a new status message leaves the same
        snapshot but for the status timestamp, which is then newer: the question it gave (when the
        bridge gave it), else the moment the answer was sent."""
        assert self.task is not None
        status, history = self.task.status, self.task.history
        if not (
            self.sent_message_id
            and not status.HasField("message")
            and len(history) > 0
            and history[-1].message_id == self.sent_message_id
        ):
            return False
        if not status.HasField("timestamp"):
            return True  # nothing tells the question asked again from the one answered
        at = status.timestamp.ToNanoseconds()
        return at <= (self.question_at if self.question_at is not None else self.sent_at)

    def _ensure(self, task_id: str, context_id: str) -> Task:
        if self.task is None:
            self.task = Task(id=task_id, context_id=context_id)
        return self.task

    def apply(self, event: StreamResponse) -> list[str]:
        """Fold one event in; returns progress lines worth reporting (status changes, new artifacts)."""
        kind = event.WhichOneof("payload")
        if kind == "message":
            self.message = event.message
            return []
        if kind == "task":
            return self.replace(event.task)
        if kind == "status_update":
            update = event.status_update
            task = self._ensure(update.task_id, update.context_id)
            task.status.CopyFrom(update.status)
            return self._status_changed()
        if kind == "artifact_update":
            update = event.artifact_update
            task = self._ensure(update.task_id, update.context_id)
            artifact = update.artifact
            for existing in task.artifacts:
                if existing.artifact_id == artifact.artifact_id:
                    if update.append:
                        existing.parts.extend(artifact.parts)
                    else:
                        existing.CopyFrom(artifact)
                    return []
            task.artifacts.append(artifact)
            return [f"artifact {artifact.name or artifact.artifact_id}"]
        return []

    def replace(self, task: Task) -> list[str]:
        """A full snapshot of the task (a send reply, a GetTask poll, a stream's first event)."""
        if self.task is None:
            self.task = Task()
        self.task.CopyFrom(task)
        return self._status_changed()

    def _status_changed(self) -> list[str]:
        assert self.task is not None
        status = self.task.status
        text = _text_of(status.message.parts) if status.HasField("message") else ""
        current = (status.state, text)
        if current == self._last_status:
            return []
        self._last_status = current
        name = state_name(status.state)
        return [f"{name}: {text}" if text else name]


# ------------------------------------------------------------------------- replies to results


def _text_of(parts: Any) -> str:
    return "\n".join(p.text for p in parts if p.HasField("text"))


def _plain(value: Any) -> Any:
    """protobuf Value numbers are doubles; whole ones go back to ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _part_blocks(part: Part, data_out: list[Any]) -> list[dict[str, Any]]:
    kind = part.WhichOneof("content")
    media_type = part.media_type or None
    if kind == "text":
        return [{"type": "text", "text": part.text}]
    if kind == "data":
        value = _plain(MessageToDict(part.data))
        data_out.append(value)
        return [{"type": "text", "text": json.dumps(value, ensure_ascii=False)}]
    if kind == "url":
        block: dict[str, Any] = {
            "type": "resource_link",
            "uri": part.url,
            "name": part.filename or part.url.rsplit("/", 1)[-1] or part.url,
        }
        if media_type:
            block["mimeType"] = media_type
        return [block]
    if kind == "raw":
        encoded = base64.b64encode(part.raw).decode()
        if media_type and media_type.split("/")[0] in ("image", "audio"):
            return [{"type": media_type.split("/")[0], "data": encoded, "mimeType": media_type}]
        resource: dict[str, Any] = {"uri": f"a2a:file/{part.filename or 'part'}", "blob": encoded}
        if media_type:
            resource["mimeType"] = media_type
        return [{"type": "resource", "resource": resource}]
    return []


def _content(parts: Any, data_out: list[Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        blocks.extend(_part_blocks(part, data_out))
    return blocks


def _structured(data: list[Any]) -> Any:
    if not data:
        return None
    return data[0] if len(data) == 1 else data


def _artifact_refs(artifacts: Any) -> dict[str, Any]:
    ids = [a.artifact_id for a in artifacts if a.artifact_id]
    return {"artifact_id": ids[0], "artifact_ids": ids} if ids else {}


def _reply_parts(task: Task) -> tuple[list[Artifact], Any]:
    """What a finished task says: its artifacts, else its final status message, else the
    agent's last message in the history."""
    if task.artifacts:
        return list(task.artifacts), None
    if task.status.HasField("message") and task.status.message.parts:
        return [], task.status.message.parts
    for message in reversed(task.history):
        if message.role == Role.ROLE_AGENT and message.parts:
            return [], message.parts
    return [], []


_FAILURES: dict[int, tuple[str, str, str, str]] = {
    # state: (error_class, result status, recoverability, default message)
    TaskState.TASK_STATE_FAILED: (
        "execution_failed",
        "failed",
        "not_recoverable",
        "the agent failed the task",
    ),
    TaskState.TASK_STATE_REJECTED: (
        "execution_failed",
        "rejected",
        "change_arguments",
        "the agent rejected the task",
    ),
    TaskState.TASK_STATE_CANCELED: ("canceled", "canceled", "retry", "the agent canceled the task"),
}


def result_from_tracker(tracker: TaskTracker, ref: dict[str, Any]) -> UpstreamResult:
    """The result of a settled call. `ref` is the call's native reference so far
    (source, card URL, skill id, sent message id); ids of the task and artifacts are added."""
    if tracker.message is not None:
        return _message_result(tracker.message, ref)
    task = tracker.task
    assert task is not None
    native_ref = {
        **ref,
        "task_id": task.id,
        "context_id": task.context_id,
        "state": state_name(task.status.state),
        **_artifact_refs(task.artifacts),
    }
    state = task.status.state
    if state in INTERRUPTED_STATES:
        return _needs_input(task, native_ref)
    data: list[Any] = []
    artifacts, loose_parts = _reply_parts(task)
    content: list[dict[str, Any]] = []
    for artifact in artifacts:
        content.extend(_content(artifact.parts, data))
    if loose_parts is not None:
        content.extend(_content(loose_parts, data))
    if state in _FAILURES:
        error_class, status, recoverability, default = _FAILURES[state]
        reason = _text_of(task.status.message.parts) if task.status.HasField("message") else ""
        message = f"{default}: {reason}" if reason else default
        error = ToolError(
            error_class=error_class,
            message=message,
            error_code=f"task_{state_name(state)}",
            recoverability=recoverability,
            native_error_ref={
                "task_id": task.id,
                "context_id": task.context_id,
                "state": state_name(state),
            },
        )
        blocks = [{"type": "text", "text": f"{error_class}: {message}"}]
        blocks += [b for b in content if not (b.get("type") == "text" and b.get("text") == reason)]
        return UpstreamResult(
            content=blocks,
            structured_content=_structured(data),
            is_error=True,
            status=status,
            error=error,
            native_ref=native_ref,
        )
    return UpstreamResult(
        content=content, structured_content=_structured(data), native_ref=native_ref
    )


def _message_result(message: Message, ref: dict[str, Any]) -> UpstreamResult:
    data: list[Any] = []
    content = _content(message.parts, data)
    native_ref = {**ref, "reply_message_id": message.message_id}
    if message.context_id:
        native_ref["context_id"] = message.context_id
    if message.task_id:
        native_ref["task_id"] = message.task_id
    return UpstreamResult(
        content=content, structured_content=_structured(data), native_ref=native_ref
    )


def _needs_input(task: Task, native_ref: dict[str, Any]) -> UpstreamResult:
    data: list[Any] = []
    question_parts = task.status.message.parts if task.status.HasField("message") else []
    content = _content(question_parts, data)
    question = _text_of(question_parts)
    state = state_name(task.status.state)
    what = (
        "authorization" if task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED else "more input"
    )
    hint = (
        f"The agent needs {what} ({state}). To answer, call this tool again with "
        f'task_id="{task.id}" and context_id="{task.context_id}" and your reply in `message`.'
    )
    structured: dict[str, Any] = {"state": state, "task_id": task.id, "context_id": task.context_id}
    if question:
        structured["question"] = question
    if data:
        structured["data"] = _structured(data)
    return UpstreamResult(
        content=[*content, {"type": "text", "text": hint}],
        structured_content=structured,
        status="needs_input",
        native_ref=native_ref,
    )
