"""`bridge serve` loads at start only what every configuration needs: the Redis client, PyJWT
and aiohttp load with the first use of what needs them (`redis`, `server.oauth`, a token
exchange, an OTLP audit, an HTTP upstream), since each start of the bridge pays for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# loaded on demand only; each costs a quarter to half a second of CPU per start
ON_DEMAND = ("redis", "jwt", "cryptography.hazmat.primitives.asymmetric.rsa", "aiohttp")


def test_serve_loads_no_library_of_an_unconfigured_feature() -> None:
    script = (
        "import json, sys\n"
        "import bridge.cli, bridge.serve.app\n"
        f"print(json.dumps([m for m in {ON_DEMAND!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
