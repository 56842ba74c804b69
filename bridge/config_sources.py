"""Where a config's values come from: YAML read with every key once, `${VAR}` and `${VAR:-default}`
from the environment, and the `mcpServers` block MCP clients already use, read as upstreams."""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

from bridge.config_problems import join_path

__all__ = ["DuplicateYamlKey", "UniqueKeyLoader", "interpolate", "mcp_servers_to_upstreams"]


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def interpolate(
    value: Any, path: str, problems: list[tuple[str, str, str]], taken: set[str]
) -> Any:
    """`value` with each `${VAR}` replaced; `taken` gets the values read from the environment,
    which an error never shows (a secret may land in a field whose name does not say so)."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            var, default = match.group(1), match.group(2)
            found = os.environ.get(var)
            if found is not None and (found or default is None):
                taken.add(found)
                return found
            if default is not None:
                return default
            problems.append(
                (
                    path,
                    f"environment variable {var} is not set",
                    f"export {var}=... or write ${{{var}:-default}}",
                )
            )
            return ""

        if "$" not in value:
            return value
        parts = value.split("$${")  # `$${` writes a literal `${`
        done = [_ENV.sub(sub, part) for part in parts]
        for part in parts:
            left = _ENV.sub(
                "", part
            )  # what no reference matched (a value read may hold `${` itself)
            if "${" in left:
                at = left[left.index("${") :][:40]
                problems.append(
                    (
                        path,
                        f"holds {at!r}, which is no ${{NAME}} or ${{NAME:-default}} (a NAME is letters, "
                        "digits and _, not first a digit)",
                        "write ${NAME} or ${NAME:-default}, or $${ for a literal ${",
                    )
                )
                break
        return "${".join(done)
    if isinstance(value, dict):
        return {k: interpolate(v, join_path(path, k), problems, taken) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]", problems, taken) for i, v in enumerate(value)]
    return value


def mcp_servers_to_upstreams(
    servers: Any, problems: list[tuple[str, str, str]]
) -> list[tuple[str, dict[str, Any]]]:
    """Entries of the Claude Desktop / Cursor / VS Code `mcpServers` block as `kind: mcp` upstreams."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(servers, dict):
        problems.append(
            (
                "mcpServers",
                "must be a mapping of server name to server entry",
                'write {"name": {"command": ...}}',
            )
        )
        return out
    for name, entry in servers.items():
        path = f"mcpServers.{name}"
        if not isinstance(entry, dict):
            problems.append((path, "must be a mapping", "give `command` (stdio) or `url` (HTTP)"))
            continue
        entry = dict(entry)
        given = {key: entry.pop(key) for key in ("type", "transport") if key in entry}
        _http = {
            "http": "http",
            "streamable-http": "http",
            "streamableHttp": "http",
        }  # three spellings of one transport
        if len({_http.get(str(v), str(v)) for v in given.values()}) > 1:
            problems.append(
                (
                    f"{path}.transport",
                    f"`type` says {given['type']!r} and `transport` says {given['transport']!r}",
                    "keep one of them",
                )
            )
            continue
        key, transport = next(iter(given.items()), ("type", None))
        if transport == "sse":
            problems.append(
                (
                    f"{path}.{key}",
                    "the legacy HTTP+SSE transport is not supported",
                    "point `url` at the server's streamable HTTP endpoint and use `type: http`",
                )
            )
            continue
        if transport not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
            problems.append(
                (f"{path}.{key}", f"unknown transport {transport!r}", "use stdio or http")
            )
            continue
        if (transport == "stdio" and "command" not in entry) or (
            transport not in (None, "stdio") and "url" not in entry
        ):
            needs = "command" if transport == "stdio" else "url"
            problems.append(
                (
                    f"{path}.{key}",
                    f"transport {transport!r} needs `{needs}`",
                    f"give `{needs}`, or change `{key}`",
                )
            )
            continue
        for own in ("name", "kind"):
            if own in entry:
                problems.append(
                    (
                        f"{path}.{own}",
                        "an mcpServers entry takes its name from its key and is always an MCP server",
                        "remove it, or declare the upstream under `upstreams:`",
                    )
                )
        disabled = entry.pop("disabled", False)
        if not isinstance(disabled, bool):
            problems.append(
                (
                    f"{path}.disabled",
                    f"must be true or false, not {disabled!r}",
                    "write disabled: true",
                )
            )
            continue
        for ignored in ("autoApprove", "alwaysAllow", "envFile", "description", "timeout_ms"):
            entry.pop(ignored, None)
        entry = {**entry, "name": re.sub(r"[^A-Za-z0-9_.-]", "_", str(name))[:48], "kind": "mcp"}
        if disabled:
            entry["enabled"] = False
        out.append((path, entry))
    return out


class DuplicateYamlKey(yaml.constructor.ConstructorError):
    pass


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (it would keep the last
    silently: a second `store:` replacing the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for (
            key_node,
            _,
        ) in node.value:  # the mapping's own keys: one may override a merged (`<<`) one
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise DuplicateYamlKey(
                        None,
                        None,
                        f"the key {key!r} is given twice in one mapping",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)
