"""Fixture legacy program `oldtool` that knows nothing of ATIP (`--agent` is an unknown option)
and prints its argv as JSON otherwise; its metadata comes from a shim file."""

from __future__ import annotations

import json
import sys


def main(argv):
    if "--agent" in argv:
        print("oldtool: unknown option --agent", file=sys.stderr)
        return 2
    print(json.dumps({"argv": argv}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
