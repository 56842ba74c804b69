"""What the identity tests share: the real OpenID provider of tests/oidc (`oidc-provider`,
started by provider.mjs on loopback), one process for the whole package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

OIDC = Path(__file__).resolve().parents[1] / "oidc"


def _missing_provider() -> str | None:
    if shutil.which("node") is None:
        return "Node.js is not installed"
    if not (OIDC / "node_modules" / "oidc-provider").is_dir():
        return "oidc-provider is not installed (make setup runs npm ci in tests/oidc when npm is present)"
    return None


@pytest.fixture(scope="package")
def provider() -> Iterator[str]:
    """The provider's issuer URL; the process ends with the package's tests (its stdin closes)."""
    missing = _missing_provider()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the OpenID provider cannot run under CI: {missing}")
        pytest.skip(missing)
    process = subprocess.Popen(
        ["node", "provider.mjs"],
        cwd=OIDC,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once it listens
        assert line, "the provider ended before it listened"
        yield json.loads(line)["issuer"]
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
