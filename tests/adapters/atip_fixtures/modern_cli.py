"""Fixture ATIP tool `cloud`: metadata in the `{"version": "0.6"}` object form with partial
discovery (`--depth=N`, `--commands=a,b`), three levels of subcommands. Every `--agent` call is
appended to $FIXTURE_LOG (with whether FIXTURE_TOKEN was visible)."""

from __future__ import annotations

import copy
import json
import os
import sys

_RO = {"network": False, "filesystem": {"write": False}, "idempotent": True}

METADATA = {
    "atip": {"version": "0.6", "features": ["partial-discovery"]},
    "name": "cloud",
    "version": "2.0.0",
    "description": "Fixture tool in the object metadata form",
    "commands": {
        "status": {"description": "Show status", "effects": _RO},
        "vm": {
            "description": "Virtual machines",
            "commands": {
                "create": {
                    "description": "Create a virtual machine",
                    "arguments": [{"name": "name", "type": "string", "description": "VM name"}],
                    "options": [
                        {
                            "name": "size",
                            "flags": ["--size"],
                            "type": "enum",
                            "enum": ["s", "m", "l"],
                            "description": "Size",
                        }
                    ],
                    "effects": {"network": True, "idempotent": False, "cost": {"billable": True}},
                },
                "delete": {
                    "description": "Delete a virtual machine",
                    "arguments": [{"name": "name", "type": "string", "description": "VM name"}],
                    "effects": {"network": True, "destructive": True, "reversible": False},
                },
                "list": {"description": "List virtual machines", "effects": _RO},
                "snapshot": {
                    "description": "Snapshots",
                    "commands": {
                        "create": {
                            "description": "Snapshot a VM",
                            "arguments": [{"name": "vm", "type": "string", "description": "VM"}],
                        },
                        "list": {"description": "List snapshots", "effects": _RO},
                    },
                },
            },
        },
        "disk": {
            "description": "Disks",
            "commands": {"list": {"description": "List disks", "effects": _RO}},
        },
    },
}


def _leaves(node):
    children = node.get("commands")
    return sum(_leaves(c) for c in children.values()) if children else 1


def _cut(node, depth, level):
    out = {k: v for k, v in node.items() if k != "commands"}
    if node.get("commands"):
        out["commands"] = (
            {}
            if depth is not None and level >= depth
            else {n: _cut(c, depth, level + 1) for n, c in node["commands"].items()}
        )
    return out


def agent(args):
    log = os.environ.get("FIXTURE_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(
                json.dumps({"argv": args, "token_visible": "FIXTURE_TOKEN" in os.environ}) + "\n"
            )
    depth = commands = None
    for word in args:
        if word.startswith("--depth="):
            depth = int(word.split("=", 1)[1])
        elif word.startswith("--commands="):
            commands = word.split("=", 1)[1].split(",")
    doc = copy.deepcopy(METADATA)
    if depth is None and commands is None:
        return doc
    selected = {n: c for n, c in METADATA["commands"].items() if commands is None or n in commands}
    doc["commands"] = {n: _cut(c, depth, 1) for n, c in selected.items()}
    doc["partial"] = True
    doc["filter"] = {"depth": depth, **({"commands": commands} if commands else {})}
    doc["totalCommands"] = sum(_leaves(c) for c in METADATA["commands"].values())
    doc["omitted"] = {
        "reason": "depth-limited" if depth else "filtered",
        "safetyAssumption": "unknown",
    }
    return doc


def main(argv):
    if argv[:1] == ["--agent"]:
        print(json.dumps(agent(argv[1:])))
        return 0
    print(json.dumps({"argv": argv, "token": os.environ.get("FIXTURE_TOKEN")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
