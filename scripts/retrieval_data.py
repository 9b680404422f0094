"""Shared by `eval_retrieval.py` and `bench_search.py` (and tests): loading the evaluation sets, deciding
whether a passage answers a question, the ranking metrics, ingesting a corpus through the real path,
and the bare-SQL and bm25s baselines.

Nothing here needs the network: the corpora are files under ``../shared/corpus``; bm25s and
PyStemmer come from the project's ``eval`` extra (``pip install -e .[eval]``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio

from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.models import ArtifactOrigin, Principal, TrustLevel
from knowledge.retrieval.search import Arm, LexicalArm, Searcher
from knowledge.semantic.arm import SemanticArm
from knowledge.semantic.encoder import DIM
from knowledge.store.db import Database, open_pool
from knowledge.store.documents import TS_CONFIG
from knowledge.structured import HeldError
from knowledge.supervisors.embedder import Embedder

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SCIFACT = CORPUS / "scifact"
DOCS_DEV = CORPUS / "qa" / "docs-dev.jsonl"
DOCS_SETS = ("docs-argocd", "docs-etcd")

@contextlib.contextmanager
def searching_with(searcher: Searcher, **attrs: Any) -> Iterator[None]:
    """``searcher`` (a script's own, `own_searcher`) with ``attrs`` set (``policy``, ``arms``,
    ``arm_limit``) for the block, then restored: one searcher measured under several configurations."""
    saved = {name: getattr(searcher, name) for name in attrs}
    for name, value in attrs.items():
        setattr(searcher, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(searcher, name, value)


@contextlib.asynccontextmanager
async def own_db(svc: Any, name: str, max_size: int = 4) -> AsyncIterator[Database]:
    """A pool of the script's own on the service's database (``svc.dsn``), for what it reads or writes
    behind the service's back: the service's parts, its pool included, are private (a closed facade)."""
    async with open_pool(svc.dsn, min_size=1, max_size=max_size, application_name=name) as db:
        yield db


@contextlib.asynccontextmanager
async def own_searcher(svc: Any, db: Database) -> AsyncIterator[Searcher]:
    """A `Searcher` over ``db`` built as ``svc`` builds its own (whose parts are private): the lexical
    arm, the semantic arm where the service runs it — with an embedder child of the script's own,
    serving before the block starts — and the service's arm limit and ranking policy. For a script that
    measures the searcher's parts alone (`Searcher.candidates`, an arm) or under another configuration
    (`searching_with`). Leaving the block stops the child."""
    status = svc.retrieval()
    arms: list[Arm] = [LexicalArm(depth=svc.settings.lexical_depth)]
    policy = DEFAULT_POLICY if svc.settings.relevance_floor else DEFAULT_POLICY.unfloored()
    held = HeldError()
    async with anyio.create_task_group() as tg:
        with held:
            if SemanticArm.name in status.arms:
                embedder = Embedder(window=svc.settings.semantic_window, threads=svc.settings.embedder_threads)
                await tg.start(embedder.run)
                with anyio.fail_after(300):
                    await embedder.wait_ready()
                arms.append(SemanticArm(embedder, svc.semantic_version, DIM))
            searcher = Searcher(db, arms, arm_limit=svc.settings.search_candidates, policy=policy)
            assert [a.name for a in arms] == status.arms and policy.name == status.ranking, status
            yield searcher
        tg.cancel_scope.cancel()
    held.reraise()


# --------------------------------------------------------------------------- loading


def load_docs_dev(path: Path | None = None) -> list[dict[str, Any]]:
    """The hand-labelled docs questions (``qa/docs-dev.jsonl``), in file order."""
    with (path or DOCS_DEV).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True)
class SciFact:
    corpus: list[dict[str, str]]  # {_id, title, text}
    queries: dict[str, str]  # test query id -> text, in qrels order
    qrels: dict[str, set[str]]  # test query id -> relevant corpus ids


def load_scifact(root: Path | None = None, split: str = "test") -> SciFact:
    root = root or SCIFACT
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh if line.strip()]
    qrels: dict[str, set[str]] = {}
    lines = (root / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()  # CRLF-safe
    for line in lines[1:]:  # header: query-id corpus-id score
        if not line.strip():
            continue
        qid, cid, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(cid)
    texts = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                texts[q["_id"]] = q["text"]
    return SciFact(corpus, {qid: texts[qid] for qid in qrels}, qrels)


def docs_files(root: Path | None = None) -> list[Path]:
    """Every Markdown file of the two docs sets, sorted."""
    root = root or CORPUS
    found = sorted(p for name in DOCS_SETS for p in (root / name).rglob("*.md"))
    if not found:
        raise SystemExit(f"no docs corpus under {root}")
    return found


# --------------------------------------------------------------------------- answer matching

_WS = re.compile(r"\s+")  # str patterns: Unicode whitespace, so NBSP and newlines too


def normalize_ws(text: str) -> str:
    """Every run of whitespace (NBSP and newlines included) collapsed to one space (qa/README.md)."""
    return _WS.sub(" ", text).strip()


def answers(question: dict[str, Any], passage_text: str) -> bool:
    """Whether a passage answers a docs-dev question: after whitespace normalization of both sides,
    it contains any of the question's ``answer_quotes``. Never true for an unanswerable question."""
    quotes = question.get("answer_quotes") or []
    if not quotes:
        return False
    text = normalize_ws(passage_text)
    return any(normalize_ws(q) in text for q in quotes)


# --------------------------------------------------------------------------- metrics


def first_occurrences(ids: Iterable[Any]) -> list[Any]:
    """A ranked list of chunks' documents, each document at its first (best) rank."""
    seen: set[Any] = set()
    out = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def ndcg_at_k(ranked: Sequence[str], relevant: set[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k (BEIR's, as pytrec_eval computes it)."""
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000 if seconds else float("nan")


def p99_ms(seconds: Sequence[float]) -> float:
    if not seconds:
        return float("nan")
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] * 1000


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    began = time.perf_counter()
    result = await fn()
    return result, time.perf_counter() - began


def add_semantic_option(parser: argparse.ArgumentParser) -> None:
    """``--semantic/--no-semantic``: whether the evaluated service runs the semantic arm (default off)."""
    parser.add_argument("--semantic", action=argparse.BooleanOptionalAction, default=False,
                        help="run the semantic arm beside the lexical one (needs the semantic extra)")


def print_run(run: Callable[[argparse.Namespace], Awaitable[list[str]]], args: argparse.Namespace) -> None:
    """A script's main: ``run(args)`` under ``args.loop``, its lines printed, then the total time."""
    began = time.perf_counter()
    print("\n".join(anyio.run(run, args, backend=args.loop)))
    print(f"\ntotal {time.perf_counter() - began:.0f}s")


# --------------------------------------------------------------------------- ingest through the real path


@dataclass(frozen=True)
class Source:
    key: str  # what results map back to (a SciFact _id, a docs path)
    title: str
    data: bytes
    media_type: str


def scifact_sources(scifact: SciFact) -> list[Source]:
    """One text/plain document per abstract; the SciFact title is the document title (the heading path)."""
    return [Source(d["_id"], (d["title"].strip() or d["_id"])[:1024], d["text"].encode(), "text/plain")
            for d in scifact.corpus]


def docs_sources(root: Path | None = None) -> list[Source]:
    """Every docs Markdown file, titled by its path relative to the corpus folder."""
    root = root or CORPUS
    return [Source(str(p.relative_to(root)), str(p.relative_to(root)), p.read_bytes(), "text/markdown")
            for p in docs_files(root)]


async def ingest_sources(svc: Any, tenant: str, sources: Sequence[Source], concurrency: int = 4
                         ) -> tuple[dict[UUID, str], dict[str, int]]:
    """Put and ingest every source through `KnowledgeService.ingest`, ``concurrency`` at a time, and
    with the semantic arm on wait until their vectors are written. Returns document_id -> source
    key, and refusals by reason."""
    principal = Principal(tenant_id=tenant, principal_id="eval", scopes=frozenset({"knowledge.write"}))
    doc_keys: dict[UUID, str] = {}
    refused: dict[str, int] = {}
    pending = list(reversed(sources))

    async def worker() -> None:
        while pending:
            src = pending.pop()
            ref = await svc.put_artifact(tenant, src.data, media_type=src.media_type, origin=ArtifactOrigin.UPLOAD,
                                          trust=TrustLevel.USER, file_name=src.key.rsplit("/", 1)[-1][:255])
            try:
                doc = await svc.ingest(ref, src.title, "tenant", principal, origin_trust=TrustLevel.USER)
            except Exception as exc:
                reason = getattr(exc, "reason", type(exc).__name__)
                refused[reason] = refused.get(reason, 0) + 1
                continue
            doc_keys[doc.document_id] = src.key

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    if SemanticArm.name in svc.retrieval().arms:  # the semantic arm: its vectors follow the ingest
        await svc.wait_embedded(tenant_id=tenant)
    return doc_keys, refused


# --------------------------------------------------------------------------- bare-SQL baselines

#: The baselines need a GIN index over the tsvectors, which the schema does not have (the arm reads
#: the postings btree). Created by the eval and the bench in their own throwaway database only.
GIN_SQL = "CREATE INDEX IF NOT EXISTS bench_tsv_gin ON knowledge_chunk_index USING gin (tsv)"

# The best `limit` chunks of tenant $1 by ts_rank (normalization 1: divided by 1 + log(length)),
# with their text. $2 the query text, $3 the limit.
_TS_RANK_TAIL = """
SELECT s.chunk_id, s.document_id, s.score, c.text, c.heading_path
FROM (SELECT ci.chunk_id, ci.document_id, ts_rank(ci.tsv, q.q, 1) AS score
      FROM q, knowledge_chunk_index ci
      WHERE ci.tenant_id = $1 AND ci.tsv @@ q.q
      ORDER BY score DESC, ci.chunk_id
      LIMIT $3) AS s
JOIN knowledge_chunks c ON c.tenant_id = $1 AND c.chunk_id = s.chunk_id
ORDER BY s.score DESC, s.chunk_id
"""

#: OR of the query's lexemes (as the index's configuration makes them), each quoted for tsquery input.
TS_OR_SQL = f"""
WITH q AS (
    SELECT coalesce(string_agg('''' || replace(replace(u.lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | '),
                    '')::tsquery AS q
    FROM unnest(to_tsvector('{TS_CONFIG}', $2)) AS u)
{_TS_RANK_TAIL}"""

#: websearch_to_tsquery: every word required (AND), quoted phrases, ``or``, ``-`` negation.
TS_AND_SQL = f"""
WITH q AS (SELECT websearch_to_tsquery('{TS_CONFIG}', $2) AS q)
{_TS_RANK_TAIL}"""

BASELINE_SQL = {"ts_rank OR": TS_OR_SQL, "ts_rank AND (websearch)": TS_AND_SQL}


# --------------------------------------------------------------------------- bm25s baseline


class Bm25s:
    """bm25s (method ``lucene``) with PyStemmer's English stemmer and bm25s's English stopwords."""

    def __init__(self, texts: Sequence[str], k1: float, b: float) -> None:
        import bm25s
        import Stemmer

        self._bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.k1, self.b = k1, b
        self.retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        tokens = bm25s.tokenize(list(texts), stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.retriever.index(tokens, show_progress=False)

    def top(self, query: str, k: int) -> list[int]:
        """Indices of the best ``k`` texts with a positive score, best first."""
        import numpy as np

        words = self._bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer, return_ids=False,
                                     show_progress=False)[0]
        ids = self.retriever.get_tokens_ids(words)
        if not ids:
            return []
        scores = self.retriever.get_scores_from_ids(ids)
        k = min(k, len(scores))
        part = np.argpartition(-scores, k - 1)[:k]
        best = part[np.lexsort((part, -scores[part]))]
        return [int(i) for i in best if scores[i] > 0]
