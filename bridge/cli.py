"""The `bridge` command: check a config, list the catalog, call a tool, search, serve."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import json
import logging
import os
import resource
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from bridge import __version__
from bridge.arguments import refuse_unsendable
from bridge.config import DEFAULT_CONFIG, BridgeConfig, ConfigError, load_config
from bridge.model import BridgeError, DeferredToolRef
from bridge.runtime import Bridge
from bridge.search import MAX_LIMIT, MAX_QUERY_CHARS
from bridge.supervisor import UpstreamSlot
from bridge.telemetry import CallOrigin, configure_logging, say
from bridge.upstream import KIND_COMMANDS, kind_commands

__all__ = ["COMMANDS", "build_parser", "main"]


def _progress(total: int) -> Callable[[UpstreamSlot], None] | None:
    """A one-line progress display on a terminal; silent when piped."""
    if not sys.stderr.isatty() or total == 0:
        return None
    done = 0

    def report(slot: UpstreamSlot) -> None:
        nonlocal done
        done += 1
        sys.stderr.write(f"\r\x1b[2K[{done}/{total}] {slot.name}: {slot.health.state}")
        if done == total:
            sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()

    return report


async def _started(config: BridgeConfig) -> Bridge:
    bridge = Bridge(config)
    if sys.stderr.isatty() and config.upstreams:
        sys.stderr.write(f"starting {len(config.upstreams)} upstreams...")
        sys.stderr.flush()
    await bridge.start(wait=True, on_progress=_progress(len(config.upstreams)))
    return bridge


def _say_not_serving(command: str, bridge: Bridge) -> int:
    """Name on stderr each upstream that did not start (its tools are missing from what the
    command prints); 1 when no enabled upstream serves at all, so a script does not take an
    empty answer for an empty catalog, 0 otherwise."""
    enabled = [h for h in bridge.catalog.health() if h.state != "disabled"]
    down = [h for h in enabled if h.state in ("connecting", "failed", "unavailable")]
    for h in down:
        print(
            f"bridge {command}: upstream {h.name} is {h.state}"
            + (f": {h.reason}" if h.reason else ""),
            file=sys.stderr,
        )
    return 1 if enabled and len(down) == len(enabled) else 0


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=False)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
        for row in rows
    ]
    return "\n".join(lines)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


async def cmd_check(args: argparse.Namespace, config: BridgeConfig) -> int:
    bridge = await _started(config)
    try:
        health = bridge.catalog.health()
        rows = [[h.name, h.kind, h.state, str(h.tool_count), h.reason or ""] for h in health]
        if args.json:
            _print_json([h.to_json() for h in health])
        else:
            print(_table(rows, ["UPSTREAM", "KIND", "STATE", "TOOLS", "REASON"]))
            print(f"{len(bridge.catalog)} tools from {len(health)} upstreams ({config.source})")
        return 1 if any(h.state not in ("ready", "disabled") for h in health) else 0
    finally:
        await bridge.close()


async def cmd_tools(args: argparse.Namespace, config: BridgeConfig) -> int:
    bridge = await _started(config)
    try:
        decls = sorted(bridge.catalog.declarations(), key=lambda d: d.name)
        if args.json:
            _print_json([d.to_json() for d in decls])
        else:
            rows = [
                [
                    d.name,
                    d.upstream,
                    d.tool_kind,
                    d.lifecycle if d.loading_state == "loaded" else d.loading_state,
                    str(d.version),
                ]
                for d in decls
            ]
            print(_table(rows, ["NAME", "UPSTREAM", "KIND", "LIFECYCLE", "VERSION"]))
        return _say_not_serving("tools", bridge)
    finally:
        await bridge.close()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0 to 65535")
    return port


def _limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of matches") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{limit} matches: use 1 to {MAX_LIMIT}")
    return limit


def _query(text: str) -> str:
    if len(text) > MAX_QUERY_CHARS:
        raise argparse.ArgumentTypeError(
            f"the query is {len(text)} characters long; at most {MAX_QUERY_CHARS} are taken"
        )
    return text


def _yes_no(text: str) -> bool:
    """A `--read-only` value, read as REST reads its `read_only` parameter."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: use true or false")


def _search_filters(args: argparse.Namespace) -> dict[str, Any]:
    """The filters of `bridge search`, as `ToolSearch.search` takes them."""
    return {
        "namespace": args.namespace or None,
        "tags": args.tag or None,
        "kind": args.kind or None,
        "read_only": args.read_only,
    }


def _unknown_surface(command: str, name: str, config: BridgeConfig) -> bool:
    """Said before any upstream starts: a surface the config does not define."""
    known = config.surface_names()
    if name in known:
        return False
    print(
        f"bridge {command}: no surface named {name!r} (the config defines: {', '.join(known)})",
        file=sys.stderr,
    )
    return True


async def cmd_call(args: argparse.Namespace, config: BridgeConfig) -> int:
    if _unknown_surface("call", args.surface, config):
        return 2
    try:
        arguments = json.loads(args.args)
        refuse_unsendable(arguments)
    except RecursionError:
        print("bridge call: --args nests too deep to read; send flatter arguments", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(
            f"bridge call: --args is not valid JSON: {exc.msg} at column {exc.colno}",
            file=sys.stderr,
        )
        return 2
    except BridgeError as exc:
        print(f"bridge call: --args: {exc.message}", file=sys.stderr)
        return 2
    if not isinstance(arguments, dict):
        print(
            f"bridge call: --args is JSON of a {type(arguments).__name__}, not an object: write '{{\"name\": value}}'",
            file=sys.stderr,
        )
        return 2
    bridge = await _started(config)
    try:
        result = await bridge.invoker.invoke(
            args.name,
            arguments,
            version=args.version,
            surface=args.surface,
            origin=CallOrigin("cli"),
        )
        if args.json:
            _print_json(result.to_json())
        else:
            for block in result.content:
                if block.get("type") == "text":
                    print(block["text"])
                else:
                    print(json.dumps(block, ensure_ascii=False)[:2000])
            if result.structured_content is not None and not result.content:
                _print_json(result.structured_content)
            print(
                f"[{result.status}{' ' + result.error.error_class if result.error else ''}, {result.duration_ms} ms]",
                file=sys.stderr,
            )
        return 1 if result.is_error else 0
    finally:
        await bridge.close()


def _alternatives_note(match: DeferredToolRef) -> str:
    """` (+N alternatives)`: other upstreams' tools of the match's name and meaning (docs/search.md)."""
    count = match.alternatives_total or len(match.alternatives or ())
    return f" (+{count} {'alternative' if count == 1 else 'alternatives'})" if count else ""


def _match_rows(matches: list[DeferredToolRef]) -> list[list[str]]:
    return [
        [
            f"{m.score:.3f}" if m.score is not None else "",
            m.name + _alternatives_note(m),
            (m.search_hint or m.description or "")[:70],
        ]
        for m in matches
    ]


async def cmd_search(args: argparse.Namespace, config: BridgeConfig) -> int:
    if _unknown_surface("search", args.surface, config):
        return 2
    bridge = await _started(config)
    try:
        surface = bridge.surfaces.require(args.surface)
        await bridge.search.wait_indexed()  # the first listing is indexed in the background
        result = bridge.search.search(
            args.query, surface=surface, limit=args.limit, **_search_filters(args)
        )
        if args.json:
            _print_json(result.to_json())
        else:
            if result.matches:
                print(_table(_match_rows(result.matches), ["SCORE", "NAME", "HINT"]))
            if result.missing_names:
                print("missing: " + ", ".join(result.missing_names))
            if result.hint:
                print(result.hint)
            if result.suggestions:
                print(_table(_match_rows(result.suggestions), ["COSINE", "SUGGESTION", "HINT"]))
        return _say_not_serving("search", bridge)
    finally:
        await bridge.close()


async def cmd_serve(args: argparse.Namespace, config: BridgeConfig) -> int:
    """MCP over stdio with --stdio; otherwise one HTTP server for A2T REST and MCP."""
    if args.surface is not None and not args.stdio:
        print(
            "bridge serve: --surface chooses the surface of --stdio; over HTTP a caller's surface comes from its "
            "token (server.tokens) or server.default_surface",
            file=sys.stderr,
        )
        return 2
    if args.stdio:
        from bridge.serve.mcp_stdio import run_stdio

        return await run_stdio(config, surface=args.surface)
    from bridge.serve.app import run_http

    return await run_http(config, host=args.host, port=args.port, insecure=args.insecure)


async def cmd_translate(args: argparse.Namespace, config: BridgeConfig) -> int:
    """The surface's tools (loaded and deferred; blocked ones left out) as a JSON array in one
    provider's function-calling format."""
    from bridge.translate.providers import compile_tools

    if _unknown_surface("translate", args.surface, config):
        return 2
    bridge = await _started(config)
    try:
        surface = bridge.surfaces.require(args.surface)
        decls = sorted(
            (d for d in bridge.catalog.declarations() if surface.visible(d)), key=lambda d: d.name
        )
        compiled = compile_tools(decls, args.to)
        for note in compiled.notes:
            print(f"bridge translate: {note}", file=sys.stderr)
        _print_json(compiled.tools)
        return _say_not_serving("translate", bridge)
    finally:
        await bridge.close()


# commands that read no config file (a missing or broken default config must not stop them)
NO_CONFIG = set(KIND_COMMANDS)

Command = Callable[[argparse.Namespace, BridgeConfig], Awaitable[int]]
COMMANDS: dict[str, Command] = {
    "translate": cmd_translate,
    "check": cmd_check,
    "tools": cmd_tools,
    "call": cmd_call,
    "search": cmd_search,
    "serve": cmd_serve,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bridge", description="Tool federation bridge")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-c",
        "--config",
        default=os.environ.get("BRIDGE_CONFIG", DEFAULT_CONFIG),
        help=f"config file (default $BRIDGE_CONFIG, else {DEFAULT_CONFIG})",
    )
    common.add_argument(
        "-v", "--verbose", action="store_true", help="log INFO too (stderr; warnings always)"
    )
    unconfigured = argparse.ArgumentParser(add_help=False)  # for commands that read no config file
    unconfigured.add_argument(
        "-v", "--verbose", action="store_true", help="log INFO too (stderr; warnings always)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "check", parents=[common], help="validate the config and start every upstream"
    )
    p.add_argument("--json", action="store_true", help="print each upstream's health as JSON")

    p = sub.add_parser("tools", parents=[common], help="list the federated catalog")
    p.add_argument("--json", action="store_true", help="print each declaration as JSON")

    p = sub.add_parser("call", parents=[common], help="call a tool through the full pipeline")
    p.add_argument("name", help="exposed name, alias or tool_id")
    p.add_argument("--args", default="{}", help="arguments as a JSON object")
    p.add_argument("--version", type=int, default=None, help="pin a version")
    p.add_argument(
        "--surface", default="default", help="surface the call goes through (default: default)"
    )
    p.add_argument("--json", action="store_true", help="print the whole result record as JSON")

    p = sub.add_parser("search", parents=[common], help="search the catalog")
    p.add_argument(
        "query",
        type=_query,
        help="free text, or select:a,b (empty with a filter: the tools passing it)",
    )
    p.add_argument(
        "--limit", type=_limit, default=10, help=f"most matches printed (1 to {MAX_LIMIT})"
    )
    p.add_argument("--namespace", default=None, help="only tools of this upstream")
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        help="only tools carrying this tag (repeatable: every one)",
    )
    p.add_argument(
        "--kind",
        default=None,
        help="only tools of this tool_kind (mcp_tool, openapi_operation, ...)",
    )
    p.add_argument(
        "--read-only",
        type=_yes_no,
        default=None,
        help="true: only read-only tools; false: only tools that change things",
    )
    p.add_argument("--surface", default="default", help="surface searched (default: default)")
    p.add_argument("--json", action="store_true", help="print the whole search result as JSON")
    p.set_defaults(usage_of=p)  # an empty query is refused with this command's usage line

    p = sub.add_parser("serve", parents=[common], help="serve A2T REST and MCP")
    p.add_argument("--host", default=None, help="address to bind (default: server.host)")
    p.add_argument(
        "--port",
        type=_port,
        default=None,
        help="0 to 65535 (0: any free port; default: server.port)",
    )
    p.add_argument("--stdio", action="store_true", help="serve MCP over stdio instead of HTTP")
    p.add_argument(
        "--surface",
        default=None,
        help="surface served over stdio (default: server.default_surface)",
    )
    p.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback bind without tokens"
    )

    p = sub.add_parser(
        "translate",
        parents=[common],
        help="print the surface's tools in a provider's function format",
    )
    p.add_argument(
        "--to", required=True, choices=["openai", "openai-strict", "gemini", "anthropic"]
    )
    p.add_argument(
        "--surface", default="default", help="surface whose tools are printed (default: default)"
    )

    for kind, module in kind_commands().items():
        p = sub.add_parser(kind, help=module.HELP)
        module.add_commands(p, [unconfigured])
    return parser


def _loop_factory(
    command: str, config: BridgeConfig | None
) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop for `bridge serve` (server.event_loop: auto, when installed; or uvloop), asyncio's
    loop otherwise. uvloop's C event loop and transports take about a fifth off the CPU the
    bridge spends per proxied REST call (bench/bench_rest_invoke.py)."""
    choice = config.server.event_loop if config is not None and command == "serve" else "asyncio"
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeError(
                "server.event_loop is uvloop, but uvloop is not installed: pip install uvloop, "
                "or set server.event_loop to auto"
            ) from None
        return None
    return uvloop.new_event_loop


def _open_files_limit_raised() -> None:
    """The soft limit of open file descriptors raised to the hard one: a stdio upstream holds
    three, so a bridge of 300 MCP servers under the soft limit shells and systemd give (1,024,
    while the hard one is far higher) ran out as they started."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:  # macOS: the kernel takes no more than its own maximum
        hard = max(soft, 65536) if soft != resource.RLIM_INFINITY else soft
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            )


@contextlib.contextmanager
def _loaded_for_good() -> Iterator[None]:
    """The cyclic collector held while the modules a command runs on load (the adapters the
    config names, the frontends of `serve`), then what exists frozen (`gc.freeze`): modules live
    as long as the process, and a collection among them finds next to no garbage. The
    collector's runs of a `bridge serve` start went from 0.44 to 0.20 s of its 3 s of CPU; the
    later ones walk only what the command makes."""
    held = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if held:
            gc.freeze()
            gc.enable()


def _cause(exc: BaseException) -> BaseException:
    """The error a command failed with, out of the task groups that wrapped it: `bridge serve
    --stdio` makes its bridge inside the MCP SDK's stdio server, whose task group raises an
    ExceptionGroup, and the line said only *unhandled errors in a TaskGroup (1 sub-exception)*."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (
        args.command == "search"
        and not args.query.strip()
        and not any(v is not None for v in _search_filters(args).values())
    ):
        args.usage_of.error(
            "the query is empty: give keywords, select:name1,name2, or a filter (--namespace, --tag, --kind, --read-only) "
            "that lists tools by itself"
        )
    _open_files_limit_raised()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config: BridgeConfig | None = None
    if args.command not in NO_CONFIG:
        try:
            with _loaded_for_good():
                config = load_config(args.config)  # imports the adapters the config names
                if args.command == "serve":
                    importlib.import_module(
                        "bridge.serve.mcp_stdio" if args.stdio else "bridge.serve.app"
                    )
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
        level = getattr(logging, (config.logging.level or "warning").upper())
        configure_logging(
            config.logging.format, min(level, logging.INFO) if args.verbose else level
        )
    try:
        with asyncio.Runner(loop_factory=_loop_factory(args.command, config)) as runner:
            if args.command in KIND_COMMANDS:
                return runner.run(kind_commands()[args.command].run(args))
            return runner.run(COMMANDS[args.command](args, config))  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 130
    except Exception as failed:  # a clear line, never a traceback (unless -v asks for it)
        if args.verbose:  # the details the line below offers (logged at INFO, -v's level: a debug record was never shown)
            logging.getLogger("bridge.cli").error("bridge %s failed", args.command, exc_info=True)
        cause = _cause(failed)
        said = f"bridge {args.command}: {type(cause).__name__}: {cause}"
        say(
            said + ("" if args.verbose else " (run with -v for details)"),
            logging.ERROR,
            "bridge.cli",
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
