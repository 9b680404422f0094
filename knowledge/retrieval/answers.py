"""Recording an agent's answer (`KnowledgeService.record_answer`): its citations found and judged,
their claims checked against the passages they cite, and what it drew on — then stored with the
turn's trace in one transaction (`knowledge.store.answers.store_answer`).

1. One read: every passage the turn showed the agent (its block and its tool calls) with its text.
2. One read: the tenant's weights of the answer's words (`knowledge.store.evidence.term_weights`).
3. The lexical check (`knowledge.core.grounding.AnswerCheck`), a checkpoint every few dozen
   features so a long answer never holds the event loop.
4. With the semantic arm's embedder serving, one request for the vectors of the citations' claims
   and their sentences (`AnswerCheck.semantic_pairs`), waited for at most
   `knowledge.semantic.arm.QUERY_WAIT_SECONDS`; without them the lexical model decides (the
   fallback's measured precision is lower: docs/embedding.md, "Recording the agent's answer").
5. The write.

Nothing holds a lock while the model works: the trace row is locked only by the write, which judges
the citations again should the turn have shown more in between.
"""

from __future__ import annotations

from uuid import UUID

import anyio
import anyio.lowlevel

from knowledge.core.citations import judge
from knowledge.core.grounding import AnswerCheck
from knowledge.errors import EmbedderUnavailable
from knowledge.semantic.arm import QUERY_WAIT_SECONDS
from knowledge.store.answers import RecordedAnswer, shown_passages, store_answer
from knowledge.store.db import Database
from knowledge.store.evidence import term_weights
from knowledge.supervisors.embedder import Embedder


def _vector(literal: str) -> list[float]:
    return [float(x) for x in literal.strip("[]").split(",")]


async def _cosines(embedder: Embedder | None, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """The cosine of each (claim, sentence) by the embedder child, or {} when it cannot answer in
    time (not serving, restarting, busy past the wait)."""
    if embedder is None or not embedder.serving or not pairs:
        return {}
    texts = sorted({t for pair in pairs for t in pair})
    try:
        with anyio.move_on_after(QUERY_WAIT_SECONDS):
            vectors = dict(zip(texts, map(_vector, await embedder.embed_queries(texts)), strict=True))
            return {(a, b): sum(x * y for x, y in zip(vectors[a], vectors[b], strict=True)) for a, b in pairs}
    except EmbedderUnavailable:
        return {}
    return {}


async def record_answer(db: Database, embedder: Embedder | None, tenant_id: str, trace_id: UUID, answer: str
                        ) -> RecordedAnswer | None:
    """See the module docstring; None if the tenant holds no such trace. Cancellation: nothing is
    written (the write is one transaction, rolled back)."""
    shown = await shown_passages(db, tenant_id, trace_id)
    if shown is None:
        return None
    judged = judge(answer, shown.keys())
    weights = await term_weights(db, tenant_id, AnswerCheck.words(answer, judged))
    check = AnswerCheck(answer, judged, {cid: text for cid, text in shown.items() if text is not None}, weights)
    for _ in check.steps():
        await anyio.lowlevel.checkpoint()
    grounding = check.result(await _cosines(embedder, check.semantic_pairs()))
    return await store_answer(db, tenant_id, trace_id, answer, grounding)
