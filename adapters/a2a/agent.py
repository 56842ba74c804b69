"""What the bridge holds of an A2A agent: everything derived from one version of its card."""

from __future__ import annotations

from dataclasses import dataclass

from a2a.client.client import Client
from a2a.types import AgentCard, AgentInterface

from adapters.a2a.card import AgentCredentials
from bridge.model import UpstreamTool

__all__ = ["Agent"]


@dataclass
class Agent:
    """Everything derived from one version of the agent card."""

    card: AgentCard
    card_url: str
    client: Client
    tools: list[UpstreamTool]
    skill_ids: frozenset[str]
    whole_agent_tool: str | None
    streaming: bool
    interface: AgentInterface | None
    credentials: AgentCredentials
