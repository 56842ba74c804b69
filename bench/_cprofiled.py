"""`bridge` under cProfile timed by CPU time, not wall time: on a loaded machine a wall clock
charges a function for the time its process waited to run. The profile is written on exit.

Run by bench/bench_mcp_proxy.py: `_cprofiled.py OUT.prof serve -c CONFIG`."""

from __future__ import annotations

import cProfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.cli import main

if __name__ == "__main__":
    profile = cProfile.Profile(time.process_time)
    try:
        code = profile.runcall(main, sys.argv[2:])
    finally:
        profile.dump_stats(sys.argv[1])
    sys.exit(code)
