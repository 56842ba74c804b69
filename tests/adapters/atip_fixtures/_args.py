"""Tiny argv reader shared by the fixture tools: `--name=value` options (repeatable), bare
`--flag` booleans, and positionals after `--`."""

from __future__ import annotations


def parse(words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    options: dict[str, list[str]] = {}
    positionals: list[str] = []
    for i, word in enumerate(words):
        if word == "--":
            positionals.extend(words[i + 1 :])
            break
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            options.setdefault(name, []).append(value)
        else:
            positionals.append(word)
    return options, positionals
