"""The ATIP upstream: a command-line tool that describes itself with `tool --agent`. Its
subcommands become discrete `shell_command` tools, run directly as argv lists (no shell, no
server in between)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from adapters.atip.asking import input_from_caller
from adapters.atip.commands import (
    ATIPCommand,
    asks_caller,
    atip_version_of,
    flatten,
    needs_interaction,
    parse_duration,
    to_upstream_tool,
)
from adapters.atip.discovery import (
    DEFAULT_SYSTEM_DIRS,
    AgentToolsDirs,
    ATIPMetadataError,
    FoundMetadata,
    probe_agent,
    validate_metadata,
)
from adapters.atip.exec import build_argv, result_of, run_process
from bridge.model import BridgeError, UpstreamResult, UpstreamTool
from bridge.upstream import CallContext, ConfigValueError, Upstream, UpstreamConfig, UpstreamEvent

__all__ = ["DEFAULT_ENV_ALLOW", "ATIPConfig", "ATIPUpstream", "AnswerRule"]

log = logging.getLogger("adapters.atip")

DEFAULT_ENV_ALLOW = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"]
_PYTHON = ("python", "python3")


class AnswerRule(BaseModel):
    """How the bridge answers commands that would wait for a user: text written to stdin
    and/or flags added to the argv (e.g. `--yes`). Matching commands are no longer blocked."""

    model_config = ConfigDict(extra="forbid")

    commands: list[str] = Field(
        default_factory=lambda: ["*"], description="globs over `note edit` or `notes_note_edit`"
    )
    stdin: str | None = Field(
        default=None, description="written to the command's stdin, then closed"
    )
    flags: list[str] = Field(default_factory=list, description="added before the positionals")

    @model_validator(mode="after")
    def _something(self) -> AnswerRule:
        if self.stdin is None and not self.flags:
            raise ConfigValueError(
                "an answer needs `stdin` or `flags`",
                "add `stdin: ...` (text written to the command) or `flags: [--yes]`",
            )
        if any(not f.startswith("-") for f in self.flags):
            raise ConfigValueError(
                "answer flags must start with '-'", "write each flag as it is typed, e.g. --yes"
            )
        return self


class ATIPConfig(UpstreamConfig):
    kind: str = "atip"
    command: str | list[str] = Field(
        description="executable name, path (relative to the config file) or argv prefix list; "
        "`python`/`python3` mean the bridge's own interpreter"
    )
    tool_name: str | None = Field(
        default=None, description="name for metadata file look-ups; default: executable's basename"
    )
    discovery: Literal["auto", "agent", "files"] = Field(
        default="auto",
        description="agent: only `--agent`; files: only cached/shim files; auto: `--agent`, then files",
    )
    discovery_timeout: float = Field(default=2.0, gt=0)
    partial_discovery: bool = Field(
        default=False, description="ask `--depth=1` first, then expand subtrees with `--commands=`"
    )
    expand: list[str] = Field(
        default_factory=lambda: ["*"], description="globs over top-level commands to expand"
    )
    expand_batch: int = Field(
        default=10, ge=1, description="subtrees asked for per `--commands=` probe"
    )
    expand_in_background: bool = Field(
        default=True, description="start answers after `--depth=1`; subtrees follow"
    )
    cwd: str | None = Field(
        default=None, description="working directory; default: the config file's folder"
    )
    env_allow: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV_ALLOW),
        description="variables copied from the bridge's environment",
    )
    env: dict[str, str] = Field(default_factory=dict, description="variables set for every run")
    auth_env: list[str] = Field(
        default_factory=list,
        description="credential variables passed to commands (never to `--agent`)",
    )
    answers: list[AnswerRule] = Field(default_factory=list)
    command_timeouts: dict[str, float] = Field(
        default_factory=dict, description="seconds per command line or native name"
    )
    option_style: Literal["equals", "separate"] = "equals"
    max_stdout_bytes: int = Field(default=1_000_000, ge=1024)
    max_stderr_bytes: int = Field(default=65_536, ge=1024)
    kill_grace: float = Field(
        default=0.5, ge=0, description="seconds between SIGTERM and SIGKILL on timeout"
    )
    xdg_data_home: str | None = Field(
        default=None, description="default $XDG_DATA_HOME or ~/.local/share"
    )
    xdg_config_home: str | None = Field(
        default=None, description="default $XDG_CONFIG_HOME or ~/.config"
    )
    system_dirs: list[str] = Field(default_factory=lambda: list(DEFAULT_SYSTEM_DIRS))
    cache: bool = Field(
        default=True, description="cache live metadata under tools/ and record it in registry.json"
    )

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, list) and not all(value)):
            raise ConfigValueError(
                "command must name an executable",
                "write the program's name or path, or an argv list such as [python, -m, tool]",
            )
        return value

    @field_validator("command_timeouts")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        if any(not 0 < v < math.inf for v in value.values()):
            raise ConfigValueError(
                "timeouts must be positive, finite numbers of seconds",
                "give each command a number of seconds above 0",
            )
        return value

    def secrets(self) -> list[str]:
        """The environment set for runs, and the credentials `auth_env` passes on from the
        bridge's."""
        passed = [os.environ.get(name, "") for name in self.auth_env]
        return [*super().secrets(), *self.env.values(), *passed]

    def dirs(self) -> AgentToolsDirs:
        return AgentToolsDirs.resolve(
            self.resolve_path(self.xdg_data_home) if self.xdg_data_home else None,
            self.resolve_path(self.xdg_config_home) if self.xdg_config_home else None,
            self.system_dirs,
        )


class ATIPUpstream(Upstream):
    kind = "atip"
    config_model = ATIPConfig
    config: ATIPConfig

    def __init__(self, config: ATIPConfig) -> None:
        super().__init__(config)
        self.dirs = config.dirs()
        self._prefix: list[str] = []
        self._cwd: str | None = None
        self._probe_env: dict[str, str] = {}
        self._run_env: dict[str, str] = {}
        self._raw: dict[str, Any] = {}  # the tool's own metadata (expanded subtrees merged in)
        self._found: FoundMetadata | None = None
        self._metadata: dict[str, Any] = {}  # with the user's override merged over it
        self._override: str | None = None
        self._commands: dict[str, ATIPCommand] = {}
        self._answers: dict[str, AnswerRule] = {}
        self._tools: list[UpstreamTool] = []
        self._pending: list[str] = []
        self._expander: asyncio.Task[None] | None = None
        self._problems: list[str] = []
        self._listed = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        self._probe_env = self._environment(with_auth=False)
        self._run_env = self._environment(with_auth=True)
        self._cwd = cfg.resolve_path(cfg.cwd) if cfg.cwd else cfg.base_dir
        if not Path(self._cwd).is_dir():
            raise BridgeError(
                f"working directory {self._cwd} does not exist (set `cwd:`)",
                error_class="setup_required",
            )
        self._prefix = self._resolve_command()
        await self._load(expand_in_background=cfg.expand_in_background)

    async def list_tools(self) -> list[UpstreamTool]:
        if self._listed:
            # a later listing (a refresh) asks the tool again, expanding subtrees before answering
            await self._stop_expander()
            await self._load(expand_in_background=False)
        self._listed = True
        return list(self._tools)

    async def invoke(
        self, native_id: str, arguments: dict[str, Any], ctx: CallContext
    ) -> UpstreamResult:
        command = self._commands.get(native_id)
        if command is None:
            raise BridgeError(f"{self.name}: no command {native_id!r}", error_class="unknown_tool")
        answer = self._answers.get(native_id)
        if (
            answer is None
            and needs_interaction(command.effects)
            and not asks_caller(command.effects)
        ):
            raise BridgeError(
                f"`{command.native_id}` waits for a user (stdin, prompt or terminal) and no answer is configured",
                error_class="policy_blocked",
                error_code="requires_user_interaction",
                recoverability="change_arguments_or_policy",
                status="denied",
            )
        if not isinstance(arguments, dict):
            raise BridgeError(
                "arguments must be an object",
                error_class="invalid_arguments",
                recoverability="change_arguments",
            )
        argv = build_argv(
            self._prefix,
            command,
            arguments,
            extra_flags=answer.flags if answer else None,
            option_style=self.config.option_style,
        )
        stdin = answer.stdin if answer else None
        if answer is None and asks_caller(command.effects):
            stdin = await input_from_caller(command, arguments)
        timeout = ctx.timeout if ctx.timeout_fixed else self._timeout_for(command, ctx.timeout)
        env = self._run_env
        if ctx.traceparent is not None:  # the W3C trace context, as OpenTelemetry's SDKs read it
            env = {**env, "TRACEPARENT": ctx.traceparent}
            if ctx.tracestate is not None:
                env["TRACESTATE"] = ctx.tracestate
        outcome = await run_process(
            argv,
            env=env,
            cwd=self._cwd,
            timeout=timeout,
            stdin=stdin,
            stdout_limit=self.config.max_stdout_bytes,
            stderr_limit=self.config.max_stderr_bytes,
            kill_grace=self.config.kill_grace,
        )
        if outcome.timed_out:
            raise BridgeError(
                f"`{command.native_id}` did not finish within {timeout:g}s; its process group was killed",
                error_class="timeout",
                recoverability="retry",
                status="timed_out",
                details={"timeout_seconds": timeout},
            )
        return result_of(outcome, command.native_id)

    async def close(self) -> None:
        await self._stop_expander()
        self._listed = False

    async def _stop_expander(self) -> None:
        task, self._expander = self._expander, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def health(self) -> dict[str, Any]:
        found = self._found
        details: dict[str, Any] = {
            "executable": self._prefix[0] if self._prefix else None,
            "tool": self._metadata.get("name"),
            "tool_version": self._metadata.get("version"),
            "atip_version": atip_version_of(self._metadata) if self._metadata else None,
            "metadata_source": found.source if found else None,
            "metadata_origin": found.origin if found else None,
            "override": self._override,
            "commands": len(self._commands),
            "pending_subtrees": list(self._pending),
        }
        auth = self._metadata.get("authentication") or {}
        declared = [m["envVar"] for m in auth.get("methods") or [] if m.get("envVar")]
        if declared:
            details["auth_env_declared"] = declared
            details["auth_env_passed"] = [v for v in self.config.auth_env if v in self._run_env]
        if self._problems:
            details["problems"] = list(self._problems)
        return details

    # ------------------------------------------------------------------ discovery

    def _environment(self, with_auth: bool) -> dict[str, str]:
        cfg = self.config
        env = {k: os.environ[k] for k in cfg.env_allow if k in os.environ}
        if with_auth:
            env.update({k: os.environ[k] for k in cfg.auth_env if k in os.environ})
        env.update(cfg.env)
        env.setdefault("PATH", os.defpath)
        return env

    def _resolve_command(self) -> list[str]:
        """`python`/`python3` -> this interpreter; a word with a slash -> a path relative to the
        config file; a bare name -> the child's PATH, then registry.json."""
        cfg = self.config
        words = [cfg.command] if isinstance(cfg.command, str) else list(cfg.command)
        first = words[0]
        if first in _PYTHON:
            exe: str | None = sys.executable
        elif "/" in first:
            exe = cfg.resolve_path(first)
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                exe = None
        else:
            exe = shutil.which(first, path=self._probe_env.get("PATH"))
            if exe is None:
                entry = self.dirs.read_registry()["tools"].get(first) or {}
                candidate = entry.get("executable")
                if (
                    isinstance(candidate, str)
                    and os.path.isfile(candidate)
                    and os.access(candidate, os.X_OK)
                ):
                    exe = candidate
        if exe is None:
            raise BridgeError(
                f"executable {first!r} not found (PATH={self._probe_env.get('PATH')!r}); install it, give a path, "
                "or set `env: {PATH: ...}`",
                error_class="dependency_unavailable",
                recoverability="setup",
            )
        return [exe, *words[1:]]

    async def _probe(self, extra: list[str] | None = None) -> tuple[dict[str, Any], str]:
        """The validated answer to `--agent [extra]` and the command line that gave it."""
        document = await probe_agent(
            self._prefix,
            env=self._probe_env,
            cwd=self._cwd,
            timeout=self.config.discovery_timeout,
            extra=extra,
        )
        shown = (
            "`"
            + " ".join(
                [os.path.basename(self._prefix[0]), *self._prefix[1:], "--agent", *(extra or [])]
            )
            + "`"
        )
        return validate_metadata(document, shown), shown

    async def _discover(self) -> FoundMetadata:
        cfg = self.config
        problems: list[str] = []
        if cfg.discovery != "files":
            try:
                if cfg.partial_discovery:
                    try:
                        document, origin = await self._probe(["--depth=1"])
                    except ATIPMetadataError as exc:
                        if exc.error_code != "discovery_failed":
                            raise
                        (
                            document,
                            origin,
                        ) = await self._probe()  # no partial discovery: ask for everything
                else:
                    document, origin = await self._probe()
                return FoundMetadata(document, "agent", origin)
            except ATIPMetadataError as exc:
                if cfg.discovery == "agent":
                    raise
                problems.append(exc.message)
        name = cfg.tool_name or Path(self._prefix[0]).name
        found = await asyncio.to_thread(self.dirs.load_file_metadata, name)
        if found is None:
            places = ", ".join(str(p) for p, _ in self.dirs.candidates(name))
            raise ATIPMetadataError(
                f"no ATIP metadata for {name!r}: "
                + "; ".join([*problems, f"no metadata file in {places}"])
            )
        if problems:
            log.warning("upstream %s: %s; using %s", self.name, problems[0], found.origin)
            self._problems.extend(problems)
        return found

    async def _load(self, expand_in_background: bool) -> None:
        self._problems = []
        self._found = await self._discover()
        self._raw = self._found.document
        self._commands = {}
        await self._install()
        self._pending = self._cut_subtrees() if self._found.source == "agent" else []
        if self._pending and expand_in_background:
            self._expander = asyncio.create_task(
                self._expand_pending(), name=f"atip-expand:{self.name}"
            )
        elif self._pending:
            await self._expand_pending()
        elif self._found.source == "agent":
            await self._save_cache()

    async def _install(self) -> list[UpstreamTool]:
        """Apply the override, flatten, and rebuild the tool list; returns tools that are new."""
        assert self._found is not None
        current = FoundMetadata(self._raw, self._found.source, self._found.origin)
        self._metadata, self._override = await asyncio.to_thread(self.dirs.apply_override, current)
        commands = {c.native_id: c for c in flatten(self._metadata)}
        answers = {
            nid: rule for nid, c in commands.items() if (rule := self._answer_for(c)) is not None
        }
        version = atip_version_of(self._metadata)
        tools = [
            to_upstream_tool(
                c,
                executable=self._prefix[0],
                atip_version=version,
                metadata=self._metadata,
                interaction_answered=nid in answers,
            )
            for nid, c in commands.items()
        ]
        for tool in tools:
            tool.timeout = self._declared_timeout(commands[tool.native_id])
        added = [t for t in tools if t.native_id not in self._commands]
        self._commands, self._answers, self._tools = commands, answers, tools
        return added

    def _cut_subtrees(self, selected_only: bool = True) -> list[str]:
        """Top-level commands of a partial answer whose subtree was cut off (an empty
        `commands` object somewhere inside), limited to those `expand` selects."""
        if self._raw.get("partial") is not True:
            return []

        def cut(node: dict[str, Any]) -> bool:
            children = node.get("commands")
            return isinstance(children, dict) and (
                not children or any(cut(c) for c in children.values())
            )

        globs = self.config.expand if selected_only else ["*"]
        return [
            name
            for name, node in (self._raw.get("commands") or {}).items()
            if name and cut(node) and any(fnmatch.fnmatchcase(name, g) for g in globs)
        ]

    async def _expand_pending(self) -> None:
        """Fetch cut-off subtrees with `--agent --commands=a,b,...` and announce the new tools.
        Once nothing is cut off any more, the complete metadata is cached."""
        pending, size = list(self._pending), self.config.expand_batch
        expanded: set[str] = set()
        for start in range(0, len(pending), size):
            batch = pending[start : start + size]
            try:
                document, _origin = await self._probe([f"--commands={','.join(batch)}"])
            except BridgeError as exc:
                log.warning(
                    "upstream %s: expanding %s failed: %s", self.name, ",".join(batch), exc.message
                )
                self._problems.append(exc.message)
                continue
            commands = dict(self._raw.get("commands") or {})
            for name in batch:
                subtree = (document.get("commands") or {}).get(name)
                if isinstance(subtree, dict):
                    commands[name] = subtree
                    expanded.add(name)
            self._raw = {**self._raw, "commands": commands}
            try:
                added = await self._install()
            except BridgeError as exc:
                self._problems.append(exc.message)
                continue
            self._pending = pending[start + size :]
            if added:
                self.emit(
                    UpstreamEvent(
                        "tools_added", reason=f"expanded {','.join(batch)}", tools=tuple(added)
                    )
                )
        self._pending = [n for n in pending if n not in expanded]
        if not self._cut_subtrees(selected_only=False):
            self._raw = {
                k: v for k, v in self._raw.items() if k not in ("partial", "filter", "omitted")
            }
            await self._save_cache()

    async def _save_cache(self) -> None:
        if not self.config.cache or self._raw.get("partial") is True:
            return
        try:
            await asyncio.to_thread(self.dirs.save, self._raw, self._prefix[0], "agent")
        except OSError as exc:
            log.warning(
                "upstream %s: cannot write the ATIP cache in %s: %s", self.name, self.dirs.data, exc
            )

    # ------------------------------------------------------------------ calls

    def _answer_for(self, command: ATIPCommand) -> AnswerRule | None:
        if not needs_interaction(command.effects):
            return None
        names = (command.command_line, command.native_name, command.native_id)
        for rule in self.config.answers:
            if any(fnmatch.fnmatchcase(n, g) for g in rule.commands for n in names):
                return rule
        return None

    def _declared_timeout(self, command: ATIPCommand) -> float | None:
        """A command's own timeout: its `command_timeouts` entry (the operator's word, any
        length), else the metadata's `effects.duration.timeout` never longer than the upstream's
        `timeout` (the tool may ask for less time, not more). The pipeline then allows the call
        that long instead of `timeout`."""
        overrides = self.config.command_timeouts
        configured = overrides.get(command.command_line) or overrides.get(command.native_name)
        if configured:
            return configured
        declared = parse_duration((command.effects.get("duration") or {}).get("timeout"))
        return min(declared, self.config.timeout) if declared else None

    def _timeout_for(self, command: ATIPCommand, ceiling: float) -> float:
        """The command's own timeout, else `timeout`; never longer than the pipeline's own limit
        for the call."""
        return min(self._declared_timeout(command) or self.config.timeout, ceiling)
