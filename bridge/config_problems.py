"""Config errors that name the file, the field and the fix: `ConfigError`, and the problems of a
pydantic validation error told in the config's own terms (its field paths, the keys it knows,
never a secret's value)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from bridge.upstream import ConfigValueError, UpstreamConfig

__all__ = ["ConfigError", "join_path", "problems_of"]


class ConfigError(Exception):
    """A config problem, or several: each names where (file and field path), what and the fix."""

    def __init__(self, file: str, problems: list[tuple[str, str, str]]) -> None:
        self.file = file
        self.problems = problems
        lines = [
            f"{file}: {len(problems)} problem{'s' if len(problems) != 1 else ''} in the config"
        ]
        for path, what, fix in problems:
            where = path or "(top level)"
            lines.append(f"  {where}: {what}" + (f"\n    fix: {fix}" if fix else ""))
        super().__init__("\n".join(lines))

    def one_line(self) -> str:
        """The same on one line (for a log)."""
        return f"{self.file}: " + "; ".join(
            f"{path or '(top level)'}: {what}" + (f" (fix: {fix})" if fix else "")
            for path, what, fix in self.problems
        )


def join_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _loc(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else join_path(out, part)
    return out


def _fields_of(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Known keys at a location inside a model, for 'did you mean' suggestions."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        current = None
        for candidate in (ann, *getattr(ann, "__args__", ())):
            for inner in (candidate, *getattr(candidate, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    current = inner
    return list(getattr(current, "model_fields", {})) if current else []


_SECRET_WORDS = ("token", "secret", "password", "key", "auth", "env", "header", "credential")


def _shown_input(loc: tuple[Any, ...], value: Any, hidden: set[str]) -> str:
    """The offending value, unless it is a whole mapping or list (which may carry secrets such
    as env or headers), sits under a key that names a secret, or holds a value read from the
    environment (`hidden`)."""
    if isinstance(value, (dict, list)) or any(
        w in str(part).lower() for part in loc for w in _SECRET_WORDS
    ):
        return ""
    if isinstance(value, str) and any(h and h in value for h in hidden):
        return " (a value read from the environment, not shown)"
    return f" (got {value!r})"


def problems_of(
    exc: ValidationError,
    prefix: str,
    model: type[BaseModel],
    hidden: set[str],
    doc: str = "docs/config.md",
) -> list[tuple[str, str, str]]:
    """Each validation error as (path, what, fix); `doc` is the page a fix points to when the
    error itself names none (an upstream's keys are on its kind's page)."""
    problems = []
    errors = exc.errors()
    locs = [
        tuple(
            p
            for p in e["loc"]
            if not (isinstance(p, str) and p in ("str", "Rule", "function-after"))
        )
        for e in errors
    ]
    paths = [_loc(prefix, loc) for loc in locs]
    for err, loc, path in zip(errors, locs, paths, strict=True):
        kind = err["type"]
        if kind == "string_type" and any(other.startswith(path + ".") for other in paths):
            continue  # a mapping where a string or a mapping may go: its own errors say what is wrong
        if kind == "extra_forbidden":
            key = str(loc[-1])
            known = [k for k in _fields_of(model, loc) if k not in ("source", "base_dir")]
            if (
                prefix.startswith("mcpServers.") and len(loc) == 1
            ):  # an entry's key names it, and it is always mcp
                known = [k for k in known if k not in ("name", "kind")]
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            fix = (
                f"did you mean `{close[0]}`?"
                if close
                else f"remove it; known keys: {', '.join(known)}"
            )
            problems.append((path, f"unknown key `{key}`", fix))
        elif kind == "missing":
            problems.append((path, "is required", f"add `{loc[-1]}:` here"))
        elif isinstance(err.get("ctx", {}).get("error"), ConfigValueError):
            refusal = err["ctx"]["error"]
            problems.append((path, refusal.what, refusal.fix))
        else:
            expected = err.get("ctx", {}).get("expected") or err.get("ctx", {}).get("pattern")
            common = (
                loc and loc[0] in UpstreamConfig.model_fields
            )  # a key every upstream has: on config.md
            fix = (
                f"expected {expected}" if expected else f"see {'docs/config.md' if common else doc}"
            )
            what = err["msg"].removeprefix("Value error, ")
            problems.append((path, f"{what}{_shown_input(loc, err.get('input'), hidden)}", fix))
    return problems
