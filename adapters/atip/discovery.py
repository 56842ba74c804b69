"""Where ATIP metadata comes from: `tool --agent` probes (full or partial), the JSON Schema
check, the XDG file locations (cached tools, shims, system folders, user overrides) and the
`registry.json` index kept there with atomic writes; plus the opt-in PATH scan."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fcntl
import fnmatch
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from adapters.atip.commands import atip_version_of, flatten
from adapters.atip.exec import run_process, tail
from bridge.model import BridgeError, now_iso

__all__ = [
    "DEFAULT_SCAN_SKIP",
    "DEFAULT_SYSTEM_DIRS",
    "SUPPORTED_VERSIONS",
    "ATIPMetadataError",
    "AgentToolsDirs",
    "FoundMetadata",
    "ScanResult",
    "atomic_write_json",
    "deep_merge",
    "probe_agent",
    "scan_candidates",
    "scan_path",
    "validate_metadata",
]

SUPPORTED_VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
DEFAULT_SYSTEM_DIRS = ("/usr/local/share/agent-tools", "/usr/share/agent-tools")
_SCHEMA_FILE = Path(__file__).parent / "schemas" / "atip-0.6.schema.json"
# Programs a PATH scan never runs: they act on the system, wait for a terminal or are shells.
DEFAULT_SCAN_SKIP = (
    "rm",
    "rmdir",
    "dd",
    "mkfs*",
    "fdisk",
    "sfdisk",
    "parted",
    "wipefs",
    "shred",
    "truncate",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "init",
    "telinit",
    "systemctl",
    "service",
    "kill",
    "killall",
    "pkill",
    "sudo",
    "su",
    "doas",
    "passwd",
    "chsh",
    "chfn",
    "login",
    "mount",
    "umount",
    "swapon",
    "swapoff",
    "chown",
    "chmod",
    "chgrp",
    "ln",
    "mv",
    "cp",
    "sh",
    "bash",
    "dash",
    "zsh",
    "fish",
    "ksh",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "xargs",
    "yes",
    "cat",
    "tee",
    "vi",
    "vim",
    "nvim",
    "nano",
    "emacs",
    "less",
    "more",
    "top",
    "watch",
    "python*",
    "perl*",
    "ruby*",
    "node",
    "nodejs",
    "java",
    "php*",
    "lua*",
    "ssh",
    "scp",
    "sftp",
    "telnet",
    "nc",
    "ncat",
    "curl",
    "wget",
)


class ATIPMetadataError(BridgeError):
    """Metadata that is not valid ATIP: says where it came from, where in it, and what."""

    default_class = "dependency_unavailable"
    default_recoverability = "setup"


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads(_SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(schema)


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def validate_metadata(document: Any, origin: str) -> dict[str, Any]:
    """Check a document against the ATIP 0.6 schema (which accepts 0.1-0.6 metadata).
    Raises ATIPMetadataError naming the origin, the JSON path and the problem."""
    if not isinstance(document, dict):
        raise ATIPMetadataError(
            f"invalid ATIP metadata from {origin}: expected a JSON object, got {type(document).__name__}"
        )
    version = atip_version_of(document)
    if "atip" in document and version and version not in SUPPORTED_VERSIONS:
        raise ATIPMetadataError(
            f"invalid ATIP metadata from {origin}: protocol version {version!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_VERSIONS)})"
        )
    errors = sorted(
        _validator().iter_errors(document),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        shown = "; ".join(f"at {_where(e.absolute_path)}: {e.message}" for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise ATIPMetadataError(
            f"invalid ATIP metadata from {origin}: {shown}{more}",
            details={
                "errors": [
                    {"path": _where(e.absolute_path), "message": e.message} for e in errors[:20]
                ]
            },
        )
    return document


def deep_merge(base: Any, override: Any) -> Any:
    """Objects merge key by key (recursively); anything else in `override` replaces `base`.
    A key set to null in the override removes it."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = (
                deep_merge(merged.get(key), value)
                if isinstance(value, dict)
                else copy.deepcopy(value)
            )
    return merged


def atomic_write_json(path: Path, data: Any) -> None:
    """Write to a temporary file in the same folder, flush it to disk, then rename over `path`:
    a reader sees the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class FoundMetadata:
    document: dict[str, Any]
    source: str  # agent | cache | shim | system
    origin: str  # the command line or file it came from


@dataclass
class AgentToolsDirs:
    """The agent-tools folders: `data` ($XDG_DATA_HOME/agent-tools) holds `registry.json`,
    `tools/` (cached metadata) and `shims/`; `config` ($XDG_CONFIG_HOME/agent-tools) holds
    `overrides/`; `system` folders hold read-only definitions."""

    data: Path
    config: Path
    system: list[Path] = field(default_factory=list)

    @classmethod
    def resolve(
        cls,
        data_home: str | None = None,
        config_home: str | None = None,
        system_dirs: list[str] | tuple[str, ...] = DEFAULT_SYSTEM_DIRS,
        environ: dict[str, str] | os._Environ[str] | None = None,
    ) -> AgentToolsDirs:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOME") or Path.home())
        data = Path(data_home or env.get("XDG_DATA_HOME") or home / ".local" / "share")
        config = Path(config_home or env.get("XDG_CONFIG_HOME") or home / ".config")
        return cls(data / "agent-tools", config / "agent-tools", [Path(p) for p in system_dirs])

    @property
    def registry_path(self) -> Path:
        return self.data / "registry.json"

    def cache_path(self, name: str) -> Path:
        return self.data / "tools" / f"{name}.json"

    def override_path(self, name: str) -> Path:
        return self.config / "overrides" / f"{name}.json"

    def candidates(self, name: str) -> list[tuple[Path, str]]:
        """Metadata files for `name`, best first: the user's cache and shims, then each system
        folder's `tools/`, `shims/` and top level."""
        out = [(self.cache_path(name), "cache"), (self.data / "shims" / f"{name}.json", "shim")]
        for base in self.system:
            out += [
                (base / "tools" / f"{name}.json", "system"),
                (base / "shims" / f"{name}.json", "system"),
                (base / f"{name}.json", "system"),
            ]
        return out

    def load_file_metadata(self, name: str) -> FoundMetadata | None:
        """The first readable candidate file; a file that is not valid ATIP raises."""
        for path, source in self.candidates(name):
            try:
                text = path.read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            document = _parse_json(text, str(path))
            return FoundMetadata(validate_metadata(document, str(path)), source, str(path))
        return None

    def apply_override(self, found: FoundMetadata) -> tuple[dict[str, Any], str | None]:
        """The metadata with the user's override for its tool merged over it (and re-checked)."""
        path = self.override_path(found.document["name"])
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return found.document, None
        override = _parse_json(text, str(path))
        if not isinstance(override, dict):
            raise ATIPMetadataError(f"invalid ATIP override {path}: expected a JSON object")
        merged = deep_merge(found.document, override)
        return validate_metadata(merged, f"{found.origin} with override {path}"), str(path)

    def save(self, document: dict[str, Any], executable: str, source: str) -> None:
        """Cache complete metadata under `tools/` and record it in `registry.json`."""
        name = document["name"]
        clean = {
            k: v
            for k, v in document.items()
            if k not in ("partial", "filter", "totalCommands", "includedCommands", "omitted")
        }
        atomic_write_json(self.cache_path(name), clean)
        self.update_registry(
            name,
            {
                "executable": executable,
                "version": document.get("version"),
                "atip_version": atip_version_of(document),
                "metadata": str(self.cache_path(name)),
                "source": source,
                "discovered_at": now_iso(),
            },
        )

    def read_registry(self) -> dict[str, Any]:
        try:
            data = json.loads(self.registry_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return {"version": 1, "tools": {}}
        if not isinstance(data, dict) or not isinstance(data.get("tools"), dict):
            return {"version": 1, "tools": {}}
        return data

    def update_registry(self, name: str, entry: dict[str, Any]) -> None:
        """Read-modify-write under an advisory lock (writers queue; readers never wait), then an
        atomic rename."""
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.data / ".registry.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                registry = self.read_registry()
                registry["version"] = 1
                registry["tools"][name] = entry
                registry["updated_at"] = now_iso()
                atomic_write_json(self.registry_path, registry)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _parse_json(text: str, origin: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", "?")
        col = getattr(exc, "colno", "?")
        msg = getattr(exc, "msg", str(exc))
        raise ATIPMetadataError(
            f"invalid ATIP metadata from {origin}: not valid JSON ({msg} at line {line}, column {col})"
        ) from None


async def probe_agent(
    prefix: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    extra: list[str] | None = None,
    max_bytes: int = 16_000_000,
) -> Any:
    """Run `<prefix> --agent [extra...]` with empty stdin and return the parsed JSON (not yet
    schema-checked). Raises ATIPMetadataError when the program fails, times out or prints
    something that is not JSON."""
    argv = [*prefix, "--agent", *(extra or [])]
    shown = " ".join([os.path.basename(prefix[0]), *prefix[1:], "--agent", *(extra or [])])
    outcome = await run_process(
        argv, env=env, cwd=cwd, timeout=timeout, stdout_limit=max_bytes, stderr_limit=16_384
    )
    if outcome.timed_out:
        raise ATIPMetadataError(
            f"`{shown}` did not answer within {timeout:g}s", error_code="discovery_timeout"
        )
    if outcome.returncode != 0:
        err = tail(outcome.stderr, 300)
        raise ATIPMetadataError(
            f"`{shown}` exited with code {outcome.returncode}" + (f": {err}" if err else ""),
            error_code="discovery_failed",
        )
    if outcome.stdout_dropped:
        raise ATIPMetadataError(
            f"`{shown}` printed more than {max_bytes} bytes", error_code="discovery_too_large"
        )
    return _parse_json(outcome.stdout.decode("utf-8", errors="replace"), f"`{shown}`")


@dataclass
class ScanResult:
    executable: str
    name: str | None = None
    version: str | None = None
    atip_version: str | None = None
    commands: int = 0
    error: str | None = None


def scan_candidates(path_dirs: list[str], skip: list[str]) -> list[Path]:
    """Executables a scan would probe: the first of each name along `path_dirs`, minus the skip
    globs, regular files only, never setuid or setgid."""
    seen: set[str] = set()
    out: list[Path] = []
    for folder in path_dirs:
        try:
            entries = sorted(os.scandir(folder or "."), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            if entry.name in seen or any(
                fnmatch.fnmatchcase(entry.name, pattern) for pattern in skip
            ):
                continue
            try:
                info = os.stat(entry.path)
            except OSError:
                continue
            # plain executable files only; setuid/setgid programs are never probed
            if (
                not stat.S_ISREG(info.st_mode)
                or not os.access(entry.path, os.X_OK)
                or info.st_mode & (stat.S_ISUID | stat.S_ISGID)
            ):
                continue
            seen.add(entry.name)
            out.append(Path(entry.path))
    return out


async def scan_path(
    dirs: AgentToolsDirs,
    *,
    path_dirs: list[str],
    skip: list[str],
    env: dict[str, str],
    timeout: float = 2.0,
    concurrency: int = 8,
    write: bool = True,
) -> list[ScanResult]:
    """Probe every executable of `path_dirs` (first of each name, minus the skip globs) with
    `--agent`; the ones answering valid ATIP are cached and recorded in `registry.json`."""
    candidates = scan_candidates(path_dirs, skip)
    gate = asyncio.Semaphore(concurrency)

    async def one(exe: Path) -> ScanResult:
        result = ScanResult(executable=str(exe))
        async with gate:
            try:
                document = validate_metadata(
                    await probe_agent([str(exe)], env=env, cwd=None, timeout=timeout),
                    f"`{exe.name} --agent`",
                )
            except BridgeError as exc:
                result.error = exc.message
                return result
        result.name, result.version = document["name"], document.get("version")
        result.atip_version = atip_version_of(document)
        result.commands = len(flatten(document))
        if write:
            await asyncio.to_thread(dirs.save, document, str(exe), "scan")
        return result

    return list(await asyncio.gather(*(one(exe) for exe in candidates)))
