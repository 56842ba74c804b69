"""Fixture tool `broken` whose `--agent` answer is wrong in the way $BROKEN_MODE says:
schema (invalid ATIP), json (not JSON), version (an unknown protocol version), exit (fails),
hang (never answers)."""

from __future__ import annotations

import json
import os
import sys
import time

GOOD = {
    "atip": "0.2",
    "name": "broken",
    "version": "1",
    "description": "Broken on purpose",
    "commands": {},
}


def main(argv):
    mode = os.environ.get("BROKEN_MODE", "schema")
    if argv[:1] != ["--agent"]:
        print("broken: ran")
        return 0
    if mode == "schema":
        doc = dict(
            GOOD,
            commands={
                "go": {
                    "options": [{"name": "x", "flags": ["x"], "type": "text", "description": "X"}]
                }
            },
        )
        print(json.dumps(doc))
    elif mode == "json":
        print('{"atip": "0.2", "name": ')
    elif mode == "version":
        print(json.dumps(dict(GOOD, atip={"version": "0.9"})))
    elif mode == "exit":
        print("broken: cannot describe myself", file=sys.stderr)
        return 1
    elif mode == "hang":
        time.sleep(30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
