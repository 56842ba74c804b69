"""Fixture ATIP tool `legacy`: metadata in the legacy `"atip": "0.3"` string form, no partial
discovery (any flag after `--agent` is refused), and commands that echo their argv, sleep with
a child process (declaring timeouts of 1s, 99…9s and 1h), fail, read stdin, flood stdout or
claim to wipe everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _args import parse

METADATA = {
    "atip": "0.3",
    "name": "legacy",
    "version": "0.3.1",
    "description": "Fixture tool in the legacy metadata form",
    "authentication": {
        "required": False,
        "methods": [{"type": "token", "envVar": "FIXTURE_TOKEN", "description": "A token"}],
    },
    "commands": {
        "echo": {
            "description": "Print the argv it received as JSON",
            "arguments": [
                {
                    "name": "words",
                    "type": "string",
                    "variadic": True,
                    "required": False,
                    "description": "Words",
                }
            ],
            "options": [
                {
                    "name": "title",
                    "flags": ["-t", "--title"],
                    "type": "string",
                    "description": "A title",
                },
                {
                    "name": "count",
                    "flags": ["-c", "--count"],
                    "type": "integer",
                    "description": "A count",
                },
                {"name": "ratio", "flags": ["--ratio"], "type": "number", "description": "A ratio"},
                {
                    "name": "verbose",
                    "flags": ["-v", "--verbose"],
                    "type": "boolean",
                    "description": "Talk more",
                },
                {
                    "name": "label",
                    "flags": ["-l", "--label"],
                    "type": "array",
                    "description": "Labels",
                },
                {
                    "name": "mode",
                    "flags": ["--mode"],
                    "type": "enum",
                    "enum": ["fast", "slow"],
                    "default": "fast",
                    "description": "Mode",
                },
                {
                    "name": "short",
                    "flags": ["-s"],
                    "type": "string",
                    "description": "A short-only option",
                },
                {
                    "name": "input",
                    "flags": ["--input"],
                    "type": "file",
                    "description": "Input file",
                },
                {"name": "site", "flags": ["--site"], "type": "url", "description": "A site"},
            ],
            "effects": {
                "network": False,
                "filesystem": {"read": True, "write": False},
                "idempotent": True,
            },
        },
        "sleep": {
            "description": "Start a child process, write its pid to a file, then sleep",
            "arguments": [
                {"name": "pid_file", "type": "file", "description": "Where the child's pid goes"}
            ],
            "options": [
                {
                    "name": "seconds",
                    "flags": ["--seconds"],
                    "type": "number",
                    "description": "How long",
                }
            ],
            "effects": {"duration": {"typical": "1-2s", "timeout": "1s"}},
        },
        "linger": {
            "description": "Like sleep, declaring a timeout that reads as infinity",
            "arguments": [
                {"name": "pid_file", "type": "file", "description": "Where the child's pid goes"}
            ],
            "options": [
                {
                    "name": "seconds",
                    "flags": ["--seconds"],
                    "type": "number",
                    "description": "How long",
                }
            ],
            "effects": {"duration": {"timeout": "9" * 400 + "s"}},
        },
        "doze": {
            "description": "Like sleep, declaring a timeout of an hour",
            "arguments": [
                {"name": "pid_file", "type": "file", "description": "Where the child's pid goes"}
            ],
            "options": [
                {
                    "name": "seconds",
                    "flags": ["--seconds"],
                    "type": "number",
                    "description": "How long",
                }
            ],
            "effects": {"duration": {"timeout": "1h"}},
        },
        "fail": {
            "description": "Write a message to stderr and exit with code 3",
            "options": [
                {
                    "name": "message",
                    "flags": ["--message"],
                    "type": "string",
                    "description": "Message",
                }
            ],
        },
        "ask": {
            "description": "Read an answer from stdin",
            "effects": {"interactive": {"stdin": "required", "prompts": True, "tty": False}},
        },
        "login": {
            "description": "Read a password from stdin",
            "effects": {"interactive": {"stdin": "password"}},
        },
        "wipe": {
            "description": "Claim to wipe everything",
            "effects": {"destructive": True, "reversible": False},
        },
        "flood": {
            "description": "Print many bytes",
            "options": [
                {
                    "name": "bytes",
                    "flags": ["--bytes"],
                    "type": "integer",
                    "description": "How many",
                }
            ],
        },
    },
}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--agent"]:
        if os.environ.get("LEGACY_AGENT_BROKEN"):
            print("legacy: metadata unavailable", file=sys.stderr)
            return 1
        if argv[1:]:
            print(f"legacy: unknown option {argv[1]}", file=sys.stderr)
            return 2
        print(json.dumps(METADATA))
        return 0
    command, rest = argv[0], argv[1:]
    options, positionals = parse(rest)
    if command == "echo":
        env = {k: os.environ[k] for k in sorted(os.environ) if k not in ("PWD", "SHLVL", "_")}
        print(json.dumps({"argv": rest, "cwd": os.getcwd(), "env": env}))
    elif command in ("sleep", "linger", "doze"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(positionals[0], "w") as fh:
            fh.write(f"{os.getpid()} {child.pid}")
        time.sleep(float(options.get("seconds", ["30"])[0]))
        print("woke up")
    elif command == "fail":
        print("some output before failing")
        print(f"legacy: {options.get('message', ['it broke'])[0]}", file=sys.stderr)
        return 3
    elif command == "ask":
        answer = sys.stdin.read()
        if not answer:
            print("legacy: no answer", file=sys.stderr)
            return 2
        print(json.dumps({"answer": answer.strip(), "argv": rest}))
    elif command == "login":
        print(json.dumps({"logged_in": bool(sys.stdin.read().strip())}))
    elif command == "wipe":
        print(json.dumps({"wiped": True}))
    elif command == "flood":
        sys.stdout.write("x" * int(options["bytes"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
