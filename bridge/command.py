"""The `bridge` command's entry point. Its imports take a moment (about half a second, more
with the adapters a config names): a Ctrl-C meanwhile ends it quietly with 130, as one while
it runs does, instead of a KeyboardInterrupt traceback."""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    previous = signal.signal(signal.SIGINT, _quit_loading)
    try:
        from bridge.cli import main as run
    finally:
        signal.signal(signal.SIGINT, previous)
    return run()


def _quit_loading(signum: int, frame: object) -> None:
    sys.stderr.flush()
    os._exit(130)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
