"""`notes`: a small command-line tool that describes itself over ATIP (`--agent`, with
`--depth` and `--commands` for partial discovery) and does real work otherwise: it keeps notes
as JSON files in a folder and inspects text.

Run it as `python -m bridge.demo.atip_cli <command>`. Notes live in `$NOTES_DIR`, or `./notes-data`
under the working directory. `note delete` is declared destructive; `note edit` reads the new
body from stdin (declared interactive)."""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["METADATA", "main", "metadata_for"]

VERSION = "1.0.0"
_READ_ONLY = {"network": False, "filesystem": {"read": True, "write": False}, "idempotent": True}

METADATA: dict[str, Any] = {
    "atip": {
        "version": "0.6",
        "features": ["partial-discovery", "interactive-effects", "trust-v1"],
    },
    "name": "notes",
    "version": VERSION,
    "description": "Keep short notes in a folder and inspect text",
    "trust": {"source": "native", "verified": True},
    "effects": {
        "network": False,
        "cost": {"estimate": "free", "billable": False},
        "duration": {"typical": "0-1s", "timeout": "10s"},
    },
    "commands": {
        "note": {
            "description": "Manage notes",
            "commands": {
                "add": {
                    "description": "Add a note and print it as JSON",
                    "arguments": [
                        {"name": "title", "type": "string", "description": "Title of the note"}
                    ],
                    "options": [
                        {
                            "name": "body",
                            "flags": ["-b", "--body"],
                            "type": "string",
                            "description": "Text of the note",
                            "default": "",
                        },
                        {
                            "name": "tag",
                            "flags": ["-t", "--tag"],
                            "type": "string",
                            "variadic": True,
                            "description": "A tag (repeatable)",
                        },
                        {
                            "name": "pinned",
                            "flags": ["--pinned"],
                            "type": "boolean",
                            "description": "Pin the note to the top of lists",
                        },
                    ],
                    "effects": {
                        "filesystem": {
                            "read": True,
                            "write": True,
                            "delete": False,
                            "paths": ["./notes-data/"],
                        },
                        "idempotent": False,
                        "reversible": True,
                        "destructive": False,
                        "creates": ["note"],
                    },
                    "examples": ['notes note add "Groceries" --body "milk, eggs" --tag home'],
                },
                "list": {
                    "description": "List notes, pinned first, newest first",
                    "options": [
                        {
                            "name": "tag",
                            "flags": ["-t", "--tag"],
                            "type": "string",
                            "description": "Only notes with this tag",
                        },
                        {
                            "name": "limit",
                            "flags": ["-n", "--limit"],
                            "type": "integer",
                            "description": "At most this many notes",
                            "default": 20,
                        },
                    ],
                    "effects": _READ_ONLY,
                },
                "show": {
                    "description": "Print one note as JSON",
                    "arguments": [{"name": "id", "type": "integer", "description": "Note id"}],
                    "effects": _READ_ONLY,
                },
                "delete": {
                    "description": "Delete notes permanently",
                    "arguments": [
                        {
                            "name": "ids",
                            "type": "integer",
                            "variadic": True,
                            "description": "Ids of the notes to delete",
                        }
                    ],
                    "options": [
                        {
                            "name": "missing_ok",
                            "flags": ["--missing-ok"],
                            "type": "boolean",
                            "description": "Do not fail on unknown ids",
                        }
                    ],
                    "effects": {
                        "filesystem": {"write": True, "delete": True},
                        "destructive": True,
                        "reversible": False,
                        "idempotent": True,
                        "deletes": ["note"],
                    },
                },
                "edit": {
                    "description": "Replace the body of a note with text read from stdin",
                    "arguments": [{"name": "id", "type": "integer", "description": "Note id"}],
                    "effects": {
                        "filesystem": {"read": True, "write": True},
                        "idempotent": True,
                        "reversible": False,
                        "interactive": {"stdin": "required", "prompts": True, "tty": False},
                    },
                },
            },
        },
        "text": {
            "description": "Inspect text",
            "commands": {
                "stats": {
                    "description": "Count words, lines and characters, with the most frequent words",
                    "arguments": [
                        {
                            "name": "text",
                            "type": "string",
                            "variadic": True,
                            "description": "Text to inspect",
                        }
                    ],
                    "options": [
                        {
                            "name": "top",
                            "flags": ["--top"],
                            "type": "integer",
                            "description": "How many frequent words",
                            "default": 3,
                        }
                    ],
                    "effects": _READ_ONLY,
                },
                "hash": {
                    "description": "Hash text",
                    "arguments": [
                        {"name": "text", "type": "string", "description": "Text to hash"}
                    ],
                    "options": [
                        {
                            "name": "algorithm",
                            "flags": ["-a", "--algorithm"],
                            "type": "enum",
                            "enum": ["sha256", "sha1", "md5"],
                            "default": "sha256",
                            "description": "Hash algorithm",
                        }
                    ],
                    "effects": _READ_ONLY,
                },
            },
        },
        "version": {"description": "Print the tool's name and version", "effects": _READ_ONLY},
    },
}


def _leaves(node: dict[str, Any]) -> int:
    children = node.get("commands")
    return sum(_leaves(c) for c in children.values()) if children else 1


def _cut(node: dict[str, Any], depth: int | None, level: int) -> dict[str, Any]:
    """A command node limited to `depth` levels; a group at the limit keeps `commands: {}`."""
    out = {k: v for k, v in node.items() if k != "commands"}
    children = node.get("commands")
    if children:
        out["commands"] = (
            {}
            if depth is not None and level >= depth
            else {n: _cut(c, depth, level + 1) for n, c in children.items()}
        )
    return out


def metadata_for(depth: int | None = None, commands: list[str] | None = None) -> dict[str, Any]:
    """The `--agent` document, filtered as ATIP partial discovery asks."""
    document = copy.deepcopy(METADATA)
    if depth is None and commands is None:
        return document
    tree = METADATA["commands"]
    selected = {n: c for n, c in tree.items() if commands is None or n in commands}
    document["commands"] = {n: _cut(c, depth, 1) for n, c in selected.items()}
    document["partial"] = True
    document["filter"] = {
        "depth": depth,
        **({"commands": commands} if commands is not None else {}),
    }
    document["totalCommands"] = sum(_leaves(c) for c in tree.values())
    document["includedCommands"] = sum(
        _leaves(c) for c in document["commands"].values() if c.get("commands") != {}
    )
    document["omitted"] = {
        "reason": "depth-limited" if depth is not None else "filtered",
        "safetyAssumption": "unknown",
    }
    return document


def _agent(argv: list[str]) -> int:
    depth: int | None = None
    commands: list[str] | None = None
    for word in argv:
        if word.startswith("--depth="):
            depth = int(word.split("=", 1)[1])
            if depth < 1:
                print("notes: --depth must be at least 1", file=sys.stderr)
                return 2
        elif word.startswith("--commands="):
            commands = [c for c in word.split("=", 1)[1].split(",") if c]
    json.dump(metadata_for(depth, commands), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


# ---------------------------------------------------------------------- notes


def _store() -> Path:
    folder = Path(os.environ.get("NOTES_DIR") or "notes-data")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _load(note_id: int) -> dict[str, Any] | None:
    path = _store() / f"{note_id}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _all_notes() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in _store().glob("*.json")]


def _save(note: dict[str, Any]) -> None:
    path = _store() / f"{note['id']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(note, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _emit(value: Any) -> int:
    json.dump(value, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _fail(message: str, code: int = 1) -> int:
    print(f"notes: {message}", file=sys.stderr)
    return code


def note_add(args: argparse.Namespace) -> int:
    ids = [n["id"] for n in _all_notes()]
    note = {
        "id": max(ids, default=0) + 1,
        "title": args.title,
        "body": args.body,
        "tags": args.tag or [],
        "pinned": args.pinned,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _save(note)
    return _emit(note)


def note_list(args: argparse.Namespace) -> int:
    notes = [n for n in _all_notes() if args.tag is None or args.tag in n["tags"]]
    notes.sort(key=lambda n: (not n["pinned"], -n["id"]))
    return _emit({"notes": notes[: args.limit], "total": len(notes)})


def note_show(args: argparse.Namespace) -> int:
    note = _load(args.id)
    return _emit(note) if note else _fail(f"no note {args.id}")


def note_delete(args: argparse.Namespace) -> int:
    missing = [i for i in args.ids if _load(i) is None]
    if missing and not args.missing_ok:
        return _fail(f"no note {', '.join(map(str, missing))}")
    deleted = []
    for note_id in args.ids:
        path = _store() / f"{note_id}.json"
        if path.exists():
            path.unlink()
            deleted.append(note_id)
    return _emit({"deleted": deleted})


def note_edit(args: argparse.Namespace) -> int:
    note = _load(args.id)
    if note is None:
        return _fail(f"no note {args.id}")
    print(f"New body for note {args.id} (end with EOF): ", end="", file=sys.stderr, flush=True)
    body = sys.stdin.read()
    if not body:
        return _fail("no input on stdin", 2)
    note["body"] = body.rstrip("\n")
    _save(note)
    return _emit(note)


def text_stats(args: argparse.Namespace) -> int:
    text = " ".join(args.text)
    words = re.findall(r"[\w']+", text.lower())
    return _emit(
        {
            "words": len(words),
            "lines": len(text.splitlines()) or (1 if text else 0),
            "chars": len(text),
            "top": Counter(words).most_common(args.top),
        }
    )


def text_hash(args: argparse.Namespace) -> int:
    digest = hashlib.new(args.algorithm, args.text.encode()).hexdigest()
    return _emit({"algorithm": args.algorithm, "hex": digest})


def version(_args: argparse.Namespace) -> int:
    return _emit({"name": METADATA["name"], "version": VERSION})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="notes", description=METADATA["description"])
    parser.add_argument("--agent", action="store_true", help="print ATIP metadata and exit")
    top = parser.add_subparsers(dest="group", required=True)

    note = top.add_parser("note", help="manage notes").add_subparsers(dest="command", required=True)
    p = note.add_parser("add")
    p.add_argument("title")
    p.add_argument("-b", "--body", default="")
    p.add_argument("-t", "--tag", action="append")
    p.add_argument("--pinned", action="store_true")
    p.set_defaults(run=note_add)
    p = note.add_parser("list")
    p.add_argument("-t", "--tag")
    p.add_argument("-n", "--limit", type=int, default=20)
    p.set_defaults(run=note_list)
    p = note.add_parser("show")
    p.add_argument("id", type=int)
    p.set_defaults(run=note_show)
    p = note.add_parser("delete")
    p.add_argument("ids", type=int, nargs="+")
    p.add_argument("--missing-ok", action="store_true")
    p.set_defaults(run=note_delete)
    p = note.add_parser("edit")
    p.add_argument("id", type=int)
    p.set_defaults(run=note_edit)

    text = top.add_parser("text", help="inspect text").add_subparsers(dest="command", required=True)
    p = text.add_parser("stats")
    p.add_argument("text", nargs="+")
    p.add_argument("--top", type=int, default=3)
    p.set_defaults(run=text_stats)
    p = text.add_parser("hash")
    p.add_argument("text")
    p.add_argument("-a", "--algorithm", choices=["sha256", "sha1", "md5"], default="sha256")
    p.set_defaults(run=text_hash)

    p = top.add_parser("version")
    p.set_defaults(run=version)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--agent" in argv[:1]:
        return _agent(argv[1:])
    args = _parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
