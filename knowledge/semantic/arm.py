"""The semantic arm: nearest windows by cosine distance, inside the same isolation predicates.

One statement per search (`knowledge.store.vectors.nearest_sql`), in a transaction that sets
pgvector's scan options locally:

1. the query's vector (from the embedder child) against the tenant's windows of this model
   version, joined to their chunk and document version under `knowledge.store.retrieval.ADMIT` (tenant,
   visibility, project, sensitivity, live version or ``as_of``) and `knowledge.store.retrieval.LIVE_SET`
   (the chunk set live then) — the very predicates of the lexical arm, in the SQL that fetches
   candidates, never applied after ranking;
2. ordered by distance over the model version's partial HNSW index with **iterative index scans**
   (pgvector 0.8, ``hnsw.iterative_scan = relaxed_order``): when the predicates reject most of what
   the graph returns — a small tenant, a private document among tenant-wide ones — the scan goes on
   past ``ef_search`` until enough admitted windows are found (up to ``hnsw.max_scan_tuples``), and
   the materialized result is re-sorted exactly;
3. windows folded into chunks by their best window.

A tenant with at most `EXACT_MAX_WINDOWS` windows of the version is searched exactly instead (a
sequential pass over its rows through the (tenant, model) btree, a few milliseconds): an
approximate graph over the whole table has nothing to offer a tenant that small, and this keeps
its recall at 1.0 however large the rest of the table grows (`scripts/bench_semantic.py` measures
both paths).

Strength (the relevance floor's evidence): ``(cosine - floor) / (1 - floor)`` clamped to 0..1, with
``floor`` = `COSINE_FLOOR`: below it a window is no evidence at all.

The arm never makes a search wait on the model: while no embedder child serves (the service just
started, or a dead child is being replaced) it raises `knowledge.retrieval.search.ArmUnavailable` at once, and
if the query's vector takes longer than `QUERY_WAIT_SECONDS` (a child busy past one ingest batch) it
gives up the same way; the search then goes on lexical-only and is counted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from knowledge.core.ranking import Candidate
from knowledge.errors import ArmUnavailable, EmbedderUnavailable
from knowledge.models import KnowledgeQuery
from knowledge.store.db import Database
from knowledge.store.retrieval import VectorStatements
from knowledge.supervisors.embedder import Embedder

#: all-MiniLM-L6-v2 puts unrelated English text at cosine 0.0-0.2 and paraphrases above 0.5.
COSINE_FLOOR = 0.2
EXACT_MAX_WINDOWS = 20_000
#: Windows fetched per chunk wanted (a chunk has 1-9 windows; its best few crowd the top).
WINDOWS_PER_CHUNK = 4
EF_SEARCH = 400
MAX_SCAN_TUPLES = 40_000
#: How long a search waits for its query's vector: queries alternate with ingest batches, so it
#: waits for at most the batch in flight (a second or two on 2 busy cores) plus its own ~20 ms.
QUERY_WAIT_SECONDS = 5.0


#: Query vectors kept (by query text): the relevance model asks for the cosines of a search's
#: candidates right after the arm embedded its query.
VECTOR_CACHE = 256


@dataclass
class SemanticArm:
    """Nearest windows under the isolation predicates; see the module docstring."""

    embedder: Embedder
    version: str
    dim: int
    name: str = "semantic"
    exact_max_windows: int = EXACT_MAX_WINDOWS
    cosine_floor: float = COSINE_FLOOR
    query_wait_seconds: float = QUERY_WAIT_SECONDS
    _vectors: OrderedDict[str, str] = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        self._statements = VectorStatements(self.version, self.dim, ef_search=EF_SEARCH,
                                            max_scan_tuples=MAX_SCAN_TUPLES)

    async def _query_vector(self, text: str, *, cached: bool) -> str:
        """The query's vector, or `ArmUnavailable` at once while no child serves (starting,
        restarting) and after `query_wait_seconds` (a child busy past one batch). With ``cached``,
        a vector this arm computed for the same text lately is reused (`cosines` right after
        `search`); `search` itself always asks the child, so a search during an outage is exactly
        the lexical-only one."""
        if cached and (known := self._vectors.get(text)) is not None:
            self._vectors.move_to_end(text)
            return known
        if not self.embedder.serving:
            raise ArmUnavailable(EmbedderUnavailable(message="the embedder child is starting"))
        try:
            with anyio.move_on_after(self.query_wait_seconds):
                vector = await self.embedder.embed_query(text)
                self._vectors[text] = vector
                while len(self._vectors) > VECTOR_CACHE:
                    self._vectors.popitem(last=False)
                return vector
        except EmbedderUnavailable as exc:
            raise ArmUnavailable(exc) from exc
        raise ArmUnavailable(EmbedderUnavailable(
            message=f"the query's embedding took over {self.query_wait_seconds:g} s"))

    async def search(self, db: Database, query: KnowledgeQuery, limit: int) -> list[Candidate]:
        vector = await self._query_vector(query.text, cached=False)
        hits = await self._statements.nearest(db, query=query, vector=vector, windows=limit * WINDOWS_PER_CHUNK,
                                              limit=limit, exact_max_windows=self.exact_max_windows, arm=self.name)
        floor = self.cosine_floor
        return [hit.ranked(rank_no, (hit.score - floor) / (1 - floor)) for rank_no, hit in enumerate(hits, start=1)]

    async def cosines(self, db: Database, query: KnowledgeQuery, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The best window's cosine to the query for each of ``chunk_ids`` that has vectors of this
        model version (candidates already admitted by an arm; read within the tenant)."""
        vector = await self._query_vector(query.text, cached=True)
        return await self._statements.cosines(db, tenant_id=query.tenant_id, vector=vector, chunk_ids=chunk_ids)
