"""`bridge atip ...`: the ATIP kind's own commands, reached by the CLI through the registry of
kinds. `bridge atip scan` probes the executables on PATH with `--agent` (opt-in, with a skip
list) and records the ATIP tools found in the agent-tools registry."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any

__all__ = ["HELP", "add_commands", "run"]

HELP = "ATIP command-line tools"


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"{text}: use a number of seconds above 0")
    return seconds


def add_commands(parser: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    """`bridge atip scan` and its options, added to `bridge atip`'s parser."""
    atip = parser.add_subparsers(dest="atip_command", required=True)
    p = atip.add_parser(
        "scan", parents=parents, help="probe PATH executables with --agent (opt-in)"
    )
    p.add_argument(
        "--path", action="append", default=[], help="folder to scan instead of $PATH (repeatable)"
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        help="glob of executable names never run (repeatable)",
    )
    p.add_argument("--no-default-skip", action="store_true", help="drop the built-in skip list")
    p.add_argument("--timeout", type=_seconds, default=2.0, help="seconds per probe (above 0)")
    p.add_argument("--data-home", default=None, help="instead of $XDG_DATA_HOME")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the executables that would be probed, run nothing",
    )
    p.add_argument("--no-write", action="store_true", help="do not update registry.json")
    p.add_argument("--all", action="store_true", help="also list executables that did not answer")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
        for row in [header, *rows]
    )


async def run(args: argparse.Namespace) -> int:
    """Run `bridge atip scan`; the exit status."""
    from adapters.atip.discovery import (
        DEFAULT_SCAN_SKIP,
        AgentToolsDirs,
        scan_candidates,
        scan_path,
    )
    from adapters.atip.upstream import DEFAULT_ENV_ALLOW

    dirs = AgentToolsDirs.resolve(args.data_home)
    not_folders = [p for p in args.path if not os.path.isdir(p)]
    if not_folders:
        print(f"bridge atip scan: --path {not_folders[0]!r} is no folder", file=sys.stderr)
        return 2
    path_dirs = args.path or [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    skip = [*([] if args.no_default_skip else DEFAULT_SCAN_SKIP), *args.skip]
    if args.dry_run:
        for exe in scan_candidates(path_dirs, skip):
            print(exe)
        return 0
    env = {k: os.environ[k] for k in DEFAULT_ENV_ALLOW if k in os.environ}
    results = await scan_path(
        dirs, path_dirs=path_dirs, skip=skip, env=env, timeout=args.timeout, write=not args.no_write
    )
    found = [r for r in results if r.name]
    shown = results if args.all else found
    if args.json:
        data: Any = [dataclasses.asdict(r) for r in shown]
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
        return 0
    rows = [
        [
            r.executable,
            r.name or "",
            r.version or "",
            r.atip_version or "",
            str(r.commands) if r.name else "",
            (r.error or "")[:60],
        ]
        for r in shown
    ]
    print(_table(rows, ["EXECUTABLE", "NAME", "VERSION", "ATIP", "COMMANDS", "ERROR"]))
    where = "not recorded (--no-write)" if args.no_write else f"recorded in {dirs.registry_path}"
    print(f"{len(found)} of {len(results)} executables answered with ATIP metadata; {where}")
    return 0
