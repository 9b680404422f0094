"""What cuts the encoder's work per passage at the same quality? In-process survey of window designs.

    .venv/bin/python scripts/survey_embedding_cost.py [--configs s128-o4,s128-o0,...] [--sample 300]
        [--scifact-docs 2500] [--cache /tmp/survey-cache] [--no-timing] [--batching] [--retime]

Issue 11's service embedded a passage as windows of 128 word pieces overlapping by a quarter, each
headed by the heading path (`knowledge.core.windows`), and scored it by its best window; this
survey chose issue 18's design, ``s128-o8-code`` (what the service embeds today). This script
builds other window sets from the very same chunks (`knowledge.ingest.ingestor.prepare`, via
`survey_embeddings.passages_of`) and the encoder's own tokenizer offsets, and measures for each:
windows per passage, encoder throughput on a fixed sample of docs passages (one thread, encode
calls of the service's 16 passages at batch size 32, after a warm-up), docs-dev R@3 (alone and
fused with bm25s by RRF k = 60, as `survey_embeddings.py`) and SciFact nDCG@10 on the train and
test claims (choose on train; docs-dev and test are checks).

Config spec: ``s<size>-o<d>`` windows of <size> model positions (128 today, 256 the model's max)
overlapping by 1/<d> of the body budget (``o0``: no overlap), then optional rules:
``-code``: drop a window whose body is mostly (>= 75 % of its non-space characters) a fenced code
block or a table row when the passage keeps another window (the lexical arm handles code);
``-cap<K>``: only the first K windows. ``s128-o4`` is issue 11's design (the baseline of the ratios),
``s128-o8-code`` today's.

Vectors are cached by the sha256 of the exact window text in ``--cache`` (so configs sharing
windows cost only their new ones); throughput timings are cached too (``--retime`` re-measures).
SciFact: a fixed subsample (every document relevant to a train or test claim, plus seeded random
distractors, ``--scifact-docs`` in all; 0 = the full 5,183), bm25s over the same subsample.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from survey_embeddings import TOP, fuse, passages_of, semantic_ranking

from knowledge.core.windows import MIN_BODY, prefix, useful, window_spans

BASELINE = "s128-o4"
#: What `knowledge.semantic.encoder.Encoder.windows` builds today (checked below, passage by passage).
SERVICE = "s128-o8-code"
DEFAULT_CONFIGS = ("s128-o4,s128-o0,s256-o0,s128-o8,s128-o4-code,s128-o4-cap4,s128-o0-code,s128-o8-code,"
                   "s256-o0-code,s128-o0-code-cap3")
SERVICE_PASSAGES = 16  # knowledge.supervisors.embedder.BATCH_PASSAGES: passages per encode call in the service
SERVICE_BATCH = 32  # Encoder.batch_size


# --------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Config:
    spec: str
    size: int
    overlap_div: int
    code: bool
    cap: int

    @classmethod
    def parse(cls, spec: str) -> Config:
        parts = spec.split("-")
        size, overlap_div = int(parts[0][1:]), int(parts[1][1:])
        code = "code" in parts[2:]
        caps = [int(p[3:]) for p in parts[2:] if p.startswith("cap")]
        return cls(spec, size, overlap_div, code, caps[0] if caps else 0)


class Windower:
    """Tokenizes each passage once; windows it under any config (the texts `Encoder.windows` builds)."""

    def __init__(self, tokenizer: Any, passages: Sequence[tuple[Sequence[str], str]]) -> None:
        self.passages = passages
        self.heads: list[str] = []
        self.head_pieces: list[int] = []
        self.offsets: list[list[tuple[int, int]]] = []
        for heading_path, text in passages:
            head = prefix(heading_path)
            self.heads.append(head)
            self.head_pieces.append(len(tokenizer(head, add_special_tokens=False, verbose=False)["input_ids"])
                                    if head else 0)
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                            verbose=False)
            self.offsets.append([tuple(o) for o in enc["offset_mapping"]])

    def windows(self, i: int, cfg: Config) -> list[str]:
        head, text = self.heads[i], self.passages[i][1]
        size = cfg.size - 2  # [CLS] and [SEP]
        budget = max(size - self.head_pieces[i] - 1, MIN_BODY) if head else size
        spans = window_spans(text, self.offsets[i], budget, cfg.overlap_div)
        if not spans:
            return [head] if head else []
        if cfg.code:  # the service's own rule (`knowledge.core.windows.useful`)
            spans = useful(text, spans)
        if cfg.cap:
            spans = spans[:cfg.cap]
        return [f"{head}\n{text[s:e]}" if head else text[s:e] for s, e in spans]

    def all_windows(self, cfg: Config) -> tuple[list[str], np.ndarray]:
        texts: list[str] = []
        owners: list[int] = []
        for i in range(len(self.passages)):
            for w in self.windows(i, cfg):
                texts.append(w)
                owners.append(i)
        return texts, np.asarray(owners, dtype=np.int64)


# --------------------------------------------------------------------------- vector cache


def key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class VectorCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.exists() else {}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self.vectors, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(self.path)

    def fill(self, encoder: Any, texts: Sequence[str], label: str) -> None:
        """Encode every text not yet cached: longest first, in calls of 512, saved every ~2 minutes."""
        missing = list(dict.fromkeys(t for t in texts if key(t) not in self.vectors))
        if not missing:
            return
        missing.sort(key=len, reverse=True)
        print(f"  [{label}] encoding {len(missing)} new windows", file=sys.stderr, flush=True)
        began = last_save = time.perf_counter()
        for first in range(0, len(missing), 512):
            part = missing[first:first + 512]
            for t, v in zip(part, encoder.encode(part), strict=True):
                self.vectors[key(t)] = v
            now = time.perf_counter()
            if now - last_save > 120:
                self.save()
                last_save = now
                print(f"  [{label}] {first + len(part)}/{len(missing)} in {now - began:.0f}s",
                      file=sys.stderr, flush=True)
        self.save()
        print(f"  [{label}] done: {len(missing)} windows in {time.perf_counter() - began:.0f}s",
              file=sys.stderr, flush=True)

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[key(t)] for t in texts]) if texts else np.zeros((0, 384), np.float32)


# --------------------------------------------------------------------------- evaluation


@dataclass
class Docs:
    passages: list[tuple[tuple[str, ...], str]]
    questions: list[dict[str, Any]]
    bm: list[list[int]]
    q_vectors: np.ndarray


@dataclass
class Sci:
    passages: list[tuple[tuple[str, ...], str]]
    keys: list[str]
    splits: dict[str, tuple[list[str], dict[str, set[str]], list[list[int]], np.ndarray]]  # qids, qrels, bm, q


def eval_docs(d: Docs, vectors: np.ndarray, owners: np.ndarray) -> dict[str, float]:
    answerable = [i for i, q in enumerate(d.questions) if not q["unanswerable"]]
    para = [i for i in answerable if d.questions[i]["paraphrase"]]
    out: dict[str, float] = {}
    for name in ("alone", "fused"):
        ranked = {}
        for i in answerable:
            sem = semantic_ranking(d.q_vectors[i], vectors, owners, len(d.passages))
            ranked[i] = sem if name == "alone" else fuse(d.bm[i], sem)

        def rate(idx: list[int], k: int, ranked: dict[int, list[int]] = ranked) -> float:
            return sum(any(answers(d.questions[i], d.passages[j][1]) for j in ranked[i][:k]) for i in idx) / len(idx)

        out[f"r3_{name}"] = rate(answerable, 3)
        out[f"para_{name}"] = rate(para, 3)
    return out


def eval_sci(s: Sci, vectors: np.ndarray, owners: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for split, (qids, qrels, bm, q_vectors) in s.splits.items():
        for name in ("alone", "fused"):
            total = 0.0
            for n, qid in enumerate(qids):
                sem = semantic_ranking(q_vectors[n], vectors, owners, len(s.passages))
                ranking = sem if name == "alone" else fuse(bm[n], sem)
                total += ndcg_at_k(first_occurrences(s.keys[j] for j in ranking), qrels[qid], 10)
            out[f"{split}_{name}"] = total / len(qids)
    return out


# --------------------------------------------------------------------------- throughput


def time_encode(encoder: Any, groups: Sequence[Sequence[str]], batch_size: int) -> float:
    model = encoder._model
    began = time.perf_counter()
    for texts in groups:
        if texts:
            model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=False)
    return time.perf_counter() - began


def service_groups(windower: Windower, sample: Sequence[int], cfg: Config) -> list[list[str]]:
    """The sample's windows in the service's requests: `SERVICE_PASSAGES` passages per encode call."""
    groups = []
    for first in range(0, len(sample), SERVICE_PASSAGES):
        groups.append([w for i in sample[first:first + SERVICE_PASSAGES] for w in windower.windows(i, cfg)])
    return groups


# --------------------------------------------------------------------------- main


def scifact_subset(n_docs: int) -> tuple[Any, dict[str, Any]]:
    """The SciFact corpus (subsampled: every relevant document + seeded distractors) and both splits."""
    splits = {split: load_scifact(split=split) for split in ("train", "test")}
    data = splits["test"]
    if n_docs:
        relevant = set().union(*(c for sp in splits.values() for c in sp.qrels.values()))
        others = sorted(d["_id"] for d in data.corpus if d["_id"] not in relevant)
        keep = relevant | set(random.Random(0).sample(others, max(n_docs - len(relevant), 0)))
        corpus = [d for d in data.corpus if d["_id"] in keep]
        data = type(data)(corpus, data.queries, data.qrels)
    return data, splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--sample", type=int, default=300, help="docs passages timed (fixed, seeded)")
    parser.add_argument("--scifact-docs", type=int, default=2500, help="SciFact subsample size (0: all)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/survey-cache"))
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--retime", action="store_true", help="re-measure throughput even if cached")
    parser.add_argument("--batching", action="store_true", help="also time encode-call sizes and batch sizes")
    parser.add_argument("--candidate", default="s128-o0-code", help="also timed in one call (with --batching)")
    parser.add_argument("--fill-only", action="store_true", help="only encode the windows (cache), no table")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    import torch

    from knowledge.semantic.encoder import Encoder

    encoder = Encoder(window=128, threads=1)
    torch.set_num_threads(1)
    configs = [Config.parse(c) for c in dict.fromkeys([BASELINE, *args.configs.split(",")])]

    # docs
    questions = load_docs_dev()
    d_passages, _ = passages_of(docs_sources())
    d_win = Windower(encoder._tokenizer, d_passages)
    # the service's windows are exactly this survey's SERVICE config
    base, service = Config.parse(BASELINE), Config.parse(SERVICE)
    assert all(d_win.windows(i, service) == encoder.windows(*d_passages[i]) for i in range(len(d_passages)))
    # SciFact
    data, splits = scifact_subset(args.scifact_docs)
    s_passages, s_keys = passages_of(scifact_sources(data))
    s_win = Windower(encoder._tokenizer, s_passages)
    assert all(s_win.windows(i, service) == encoder.windows(*s_passages[i]) for i in range(len(s_passages)))
    print(f"# {len(d_passages)} docs passages; SciFact {len(data.corpus)} documents "
          f"({'subsample: all relevant to a train/test claim + seeded distractors' if args.scifact_docs else 'all'}),"
          f" {len(s_passages)} passages; encoder: 1 thread", flush=True)

    cache = VectorCache(args.cache / "vectors.pkl")
    for cfg in configs:  # docs then SciFact per config: the most useful first, if interrupted
        cache.fill(encoder, d_win.all_windows(cfg)[0], f"docs {cfg.spec}")
        cache.fill(encoder, s_win.all_windows(cfg)[0], f"scifact {cfg.spec}")
    if args.fill_only:
        return

    d_bm_index = Bm25s([" ".join(h) + "\n" + t for h, t in d_passages], k1=1.2, b=0.75)
    docs = Docs(d_passages, questions, [d_bm_index.top(q["question"], TOP) for q in questions],
                encoder.encode([q["question"] for q in questions]))
    s_bm_index = Bm25s([" ".join(h) + "\n" + t for h, t in s_passages], k1=1.2, b=0.75)
    sci = Sci(s_passages, s_keys, {})
    for split, sp in splits.items():
        qids = list(sp.queries)
        sci.splits[split] = (qids, sp.qrels, [s_bm_index.top(sp.queries[q], TOP) for q in qids],
                             encoder.encode([sp.queries[q] for q in qids]))

    def rate_bm(idx: list[int]) -> float:
        return sum(any(answers(questions[i], d_passages[j][1]) for j in docs.bm[i][:3]) for i in idx) / len(idx)

    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    para = [i for i in answerable if questions[i]["paraphrase"]]
    bm_sci = {split: sum(ndcg_at_k(first_occurrences(s_keys[j] for j in bm[n]), qrels[q], 10)
                         for n, q in enumerate(qids)) / len(qids)
              for split, (qids, qrels, bm, _) in sci.splits.items()}
    print(f"# bm25s alone: docs R@3 {rate_bm(answerable):.3f} (para {rate_bm(para):.3f}); SciFact nDCG@10 "
          f"train {bm_sci['train']:.3f}, test {bm_sci['test']:.3f}", flush=True)

    # throughput on a fixed sample of docs passages
    sample = sorted(random.Random(1).sample(range(len(d_passages)), min(args.sample, len(d_passages))))
    timing_path = args.cache / "timings.json"
    timings: dict[str, float] = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    tag = hashlib.sha256(repr(sample).encode()).hexdigest()[:8]

    def timed(label: str, fn: Callable[[], float]) -> float:
        k = f"{label}@{tag}"
        if args.retime or k not in timings:
            timings[k] = fn()
            timing_path.write_text(json.dumps(timings, indent=1))
        return timings[k]

    if not args.no_timing:
        time_encode(encoder, service_groups(d_win, sample[:32], base), SERVICE_BATCH)  # warm-up

    rows = []
    for cfg in configs:
        d_texts, d_owners = d_win.all_windows(cfg)
        s_texts, s_owners = s_win.all_windows(cfg)
        q = eval_docs(docs, cache.matrix(d_texts), d_owners)
        q.update(eval_sci(sci, cache.matrix(s_texts), s_owners))
        groups = service_groups(d_win, sample, cfg)
        n_windows = sum(len(g) for g in groups)
        seconds = (float("nan") if args.no_timing else
                   timed(cfg.spec, lambda g=groups: time_encode(encoder, g, SERVICE_BATCH)))
        rows.append((cfg.spec, len(d_texts) / len(d_passages), len(s_texts) / len(s_passages),
                     n_windows, seconds, q))
        print(f"  {cfg.spec}: done", file=sys.stderr, flush=True)
    if not args.no_timing:  # the baseline again at the end: how steady the machine was
        again = timed(BASELINE + "#again", lambda: time_encode(encoder, service_groups(d_win, sample, base),
                                                                SERVICE_BATCH))
        print(f"# baseline timed twice: {rows[0][4]:.1f}s and {again:.1f}s for {rows[0][3]} windows", flush=True)

    base_pps = len(sample) / rows[0][4]
    print("\n| config | windows/passage docs, SciFact | sample windows | passages/s (x base) | windows/s "
          "| docs R@3 fused (alone) | para R@3 fused | SciFact nDCG@10 train fused (alone) | test fused (alone) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec, dw, sw, n_windows, seconds, q in rows:
        pps = len(sample) / seconds
        print(f"| {spec} | {dw:.2f}, {sw:.2f} | {n_windows} | {pps:.2f} ({pps / base_pps:.2f}x) | "
              f"{n_windows / seconds:.1f} | {q['r3_fused']:.3f} ({q['r3_alone']:.3f}) | {q['para_fused']:.3f} | "
              f"{q['train_fused']:.3f} ({q['train_alone']:.3f}) | {q['test_fused']:.3f} ({q['test_alone']:.3f}) |",
              flush=True)

    if args.batching and not args.no_timing:
        flat = [w for g in service_groups(d_win, sample, base) for w in g]
        print(f"\nbatching, today's windows of the sample ({len(flat)} windows):")
        print("| encode calls | batch_size | seconds | windows/s | x service |")
        print("|---|---|---|---|---|")
        variants = [("service: 16 passages per call", SERVICE_PASSAGES, 64),
                    ("one call, all sample windows", 0, 16), ("one call, all sample windows", 0, 32),
                    ("one call, all sample windows", 0, 64)]
        base_s = rows[0][4]
        print(f"| service: 16 passages per call | 32 | {base_s:.1f} | {len(flat) / base_s:.1f} | 1.00x |")
        for label, per_call, bs in variants:
            groups = service_groups(d_win, sample, base) if per_call else [flat]
            s = timed(f"batch:{per_call}:{bs}", lambda g=groups, b=bs: time_encode(encoder, g, b))
            print(f"| {label} | {bs} | {s:.1f} | {len(flat) / s:.1f} | {base_s / s:.2f}x |", flush=True)
        cand = Config.parse(args.candidate)
        c_flat = [w for g in service_groups(d_win, sample, cand) for w in g]
        for bs in (32, 64):
            s = timed(f"batch:{cand.spec}:0:{bs}", lambda b=bs: time_encode(encoder, [c_flat], b))
            print(f"| {cand.spec} windows ({len(c_flat)}), one call | {bs} | {s:.1f} | {len(c_flat) / s:.1f} | "
                  f"{base_s / s:.2f}x (passages/s vs baseline) |", flush=True)

    print(f"\ntotal {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
