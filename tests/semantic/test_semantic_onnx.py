"""The embedder's ONNX backend (`knowledge.semantic.onnx_model`, exported at install time) computes
what sentence-transformers computes from the packaged weights: the same windows, the same vectors
(to float32 rounding), for short and long texts, code, and scripts other than Latin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from knowledge.semantic.encoder import Encoder, available, onnx_file

np = pytest.importorskip("numpy", reason="the semantic extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT.parent / "shared" / "corpus" / "docs-etcd" / "op-guide"

pytestmark = pytest.mark.skipif(not available(), reason="the semantic extra is not installed")

TEXTS = [
    "How do I restore an etcd cluster from a snapshot?",
    "etcdctl --endpoints=$ENDPOINTS snapshot save snap.db",
    "Ünïcödé, 日本語のテキスト, русский текст and emoji 🚀 in one passage.",
    "",
    "x",
    " ".join(["a long passage that runs past the model's limit of word pieces"] * 60),  # truncated at 256
    "```go\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n```\n"
    "| flag | default |\n|---|---|\n| --data-dir | ${name}.etcd |",
]


@pytest.fixture(scope="module")
def encoders() -> tuple[Encoder, Encoder]:
    if onnx_file() is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no ONNX export: run scripts/install.sh")
    onnx = Encoder(window=128, threads=2)
    before = os.environ.get("KNOWLEDGE_ENCODER")
    os.environ["KNOWLEDGE_ENCODER"] = "torch"
    try:
        torch = Encoder(window=128, threads=2)
    finally:
        os.environ.pop("KNOWLEDGE_ENCODER") if before is None else os.environ.update(KNOWLEDGE_ENCODER=before)
    return onnx, torch


def passages() -> list[tuple[tuple[str, ...], str]]:
    found = sorted(DOCS.glob("*.md"))[:6]
    if not found:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{DOCS} is missing")
    return [(("op-guide", f.stem), f.read_text()[:6000]) for f in found]


def test_the_onnx_backend_is_chosen_when_exported_and_torch_when_asked(encoders: tuple[Encoder, Encoder]) -> None:
    onnx, torch = encoders
    assert (onnx.backend, torch.backend) == ("onnx", "torch")
    assert onnx.version == torch.version  # the same model version: vectors of either serve the other


def test_onnx_vectors_equal_sentence_transformers(encoders: tuple[Encoder, Encoder]) -> None:
    onnx, torch = encoders
    a: Any = onnx.encode(TEXTS)
    b: Any = torch.encode(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert float(np.abs(a - b).max()) < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)


def test_onnx_windows_and_passage_vectors_equal_sentence_transformers(encoders: tuple[Encoder, Encoder]) -> None:
    onnx, torch = encoders
    items = passages()
    for heading, text in items:
        assert onnx.windows(heading, text) == torch.windows(heading, text)
    (va, owners_a), (vb, owners_b) = onnx.encode_passages(items), torch.encode_passages(items)
    assert owners_a == owners_b and len(owners_a) > len(items)  # several windows per passage
    assert float(np.abs(va - vb).max()) < 1e-5
