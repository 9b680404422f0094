"""The semantic arm (issues 11, 18): the embedding queue (ingest commits without vectors; vectors follow,
never outliving their chunks), re-embedding through the same queue, the embedder child's supervision. Runs
the real packaged model in its real child process; skipped where the ``semantic`` extra is not installed.
Isolation inside the ANN query (the visibility gate's semantic arm) is in
`tests/gates/test_visibility_isolation.py`."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from knowledge.config import Settings
from knowledge.errors import ConfigurationError
from knowledge.ingest.ingestor import Ingestor
from knowledge.maintenance.audit import audit_storage
from knowledge.models import KnowledgeQuery, TrustLevel
from knowledge.retrieval.search import LexicalArm, Searcher
from knowledge.semantic import enabled
from knowledge.semantic.arm import SemanticArm
from knowledge.semantic.encoder import DIM, available, model_version
from knowledge.semantic.queue import MAX_ATTEMPTS, EmbeddingDrain
from knowledge.service import KnowledgeService, SemanticParts
from knowledge.store.db import Connection, Database
from knowledge.supervisors.embedder import BATCH_PASSAGES, Embedder
from tests.cli.test_cli import knowledge  # noqa: F401  (the CLI fixture)
from tests.conftest import open_sql
from tests.helpers.progress import hang_detector, wait_embedded
from tests.ingest.test_ingest import footprint, nothing_but_inputs, put, writer
from tests.ingest.test_versions import ParagraphChunker

pytestmark = pytest.mark.skipif(not available(), reason="the semantic extra is not installed")

BACKUPS = """# Disaster recovery

## Restoring a cluster

After losing the machines, bring the cluster back from the saved snapshot file: stop every member,
run etcdutl snapshot restore on each with the new data directory, then start them again.

## Credentials

The admin account's password is changed with argocd account update-password; the old one stops
working at once.
"""


def semantic_settings(dsn: str, **kw: Any) -> Settings:
    return Settings(dsn=dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None, semantic_arm=True,
                    semantic_backfill=False, embedder_threads=1, application_name=f"ks-{uuid.uuid4().hex[:10]}",
                    **kw)


@dataclass
class Semantic:
    """A service with the semantic arm on whose parts the test made and keeps (`SemanticParts`, the
    service's seam; its own parts are private): the embedder (the actor owning the child), the drain
    (over the test's own pool on the same database) and the arm, beside a lexical arm of its own."""

    svc: KnowledgeService
    db: Database
    embedder: Embedder
    drain: EmbeddingDrain
    lexical: LexicalArm
    arm: SemanticArm


@contextlib.asynccontextmanager
async def semantic_service(dsn: str, **kw: Any) -> AsyncIterator[Semantic]:
    settings = semantic_settings(dsn, **kw)
    version = model_version(settings.semantic_window)
    async with open_sql(dsn) as db:
        embedder = Embedder(window=settings.semantic_window, threads=settings.embedder_threads)
        drain = EmbeddingDrain(db, embedder, version)
        arm = SemanticArm(embedder, version, DIM)
        async with KnowledgeService.open(settings, semantic=SemanticParts(version, embedder, drain, arm)) as svc:
            yield Semantic(svc, db, embedder, drain, LexicalArm(), arm)


@pytest.fixture
async def semantic(database_dsn: str) -> AsyncIterator[Semantic]:
    async with semantic_service(database_dsn) as made:
        yield made


def arms(semantic: Semantic) -> tuple[LexicalArm, SemanticArm]:
    return semantic.lexical, semantic.arm


async def vectors_of(semantic: Semantic, tenant: str, version: str | None = None) -> int:
    return int(await semantic.db.fetchval(
        "SELECT count(*) FROM knowledge_embeddings WHERE tenant_id = $1 AND ($2::text IS NULL OR model_version = $2)",
        tenant, version))


async def chunks_without_vectors(semantic: Semantic, tenant: str) -> int:
    return int(await semantic.db.fetchval(
        """SELECT count(*) FROM knowledge_chunks c WHERE c.tenant_id = $1 AND NOT EXISTS (
               SELECT 1 FROM knowledge_embeddings e WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id
                 AND e.model_version = $2)""", tenant, semantic.svc.semantic_version))


async def ingest(semantic: Semantic, tenant: str, text: str, *, embedded: bool = True, **kw: Any) -> uuid.UUID:
    """Ingest ``text``; with ``embedded``, also wait until its vectors are written (a hang detector)."""
    svc = semantic.svc
    ref = await put(svc, tenant, text)
    doc = await svc.ingest(ref, kw.pop("title", "ops.md"), kw.pop("visibility", "tenant"), writer(tenant),
                           origin_trust=TrustLevel.USER, **kw)
    if embedded:
        await wait_embedded(svc, document_id=doc.document_id, tenant_id=tenant)
    return doc.document_id


async def queued(semantic: Semantic, tenant: str) -> list[Any]:
    return list(await semantic.db.fetch(
        "SELECT document_id, version, chunker_version, leased_until FROM knowledge_embedding_queue "
        "WHERE tenant_id = $1 AND model_version = $2", tenant, semantic.svc.semantic_version))


def q(tenant: str, text: str, **kw: Any) -> KnowledgeQuery:
    return KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=text, **kw)


# ------------------------------------------------------------------ the queue


@pytest.mark.anyio
async def test_gate_queued_with_its_chunks_and_vectors_never_outlive_them(semantic: Semantic,
                                                                          tenant: str) -> None:
    """Ingest commits the chunks, their index rows and their queue row in one transaction, and
    nothing of a failed or cancelled one; the lexical arm finds a passage at once, the semantic arm
    once the drain wrote its vectors; then the row is gone and every chunk has vectors."""
    in_tx: dict[str, int] = {}

    async def look(at: str, conn: Connection | None) -> None:
        if at == "before_commit" and conn is not None:
            in_tx["queued"] = await conn.fetchval(
                "SELECT count(*) FROM knowledge_embedding_queue WHERE tenant_id = $1", tenant)
            in_tx["vectors"] = await conn.fetchval(
                "SELECT count(*) FROM knowledge_embeddings WHERE tenant_id = $1", tenant)

    semantic.svc.faults.ingest_step = look
    doc = await ingest(semantic, tenant, BACKUPS, embedded=False)
    semantic.svc.faults.ingest_step = None
    assert in_tx == {"queued": 1, "vectors": 0}  # queued inside the ingest's transaction, no vector yet
    lexical, sem = arms(semantic)
    assert {c.document_id for c in await lexical.search(semantic.db, q(tenant, "snapshot restore"), 50)} == {doc}
    await wait_embedded(semantic.svc, document_id=doc, tenant_id=tenant)
    fp = await footprint(semantic.svc, tenant)
    assert fp["chunks"] == fp["index_rows"] > 0 and await queued(semantic, tenant) == []
    assert await chunks_without_vectors(semantic, tenant) == 0 and await vectors_of(semantic, tenant) >= fp["chunks"]
    assert {c.document_id for c in await sem.search(semantic.db, q(tenant, "snapshot restore"), 50)} == {doc}

    other = f"{tenant}-x"
    ref = await put(semantic.svc, other, BACKUPS)

    async def boom(at: str, conn: Connection | None) -> None:
        if at == "before_commit":
            raise RuntimeError("injected after the queue row was written")

    semantic.svc.faults.ingest_step = boom
    with pytest.raises(RuntimeError, match="injected"):
        await semantic.svc.ingest(ref, "ops.md", "tenant", writer(other), origin_trust=TrustLevel.USER)
    caller = anyio.CancelScope()

    async def cancel(at: str, conn: Connection | None) -> None:
        if at == "before_commit":
            caller.cancel()
            await anyio.sleep_forever()

    semantic.svc.faults.ingest_step = cancel
    with caller:
        await semantic.svc.ingest(ref, "ops.md", "tenant", writer(other), origin_trust=TrustLevel.USER)
    semantic.svc.faults.ingest_step = None
    assert caller.cancelled_caught
    assert nothing_but_inputs(await footprint(semantic.svc, other))
    assert await queued(semantic, other) == [] and await vectors_of(semantic, other) == 0
    audit = await audit_storage(semantic.db, None, [tenant, other], semantic_version=semantic.svc.semantic_version,
                                drained=True)
    assert audit.ok and audit.live_documents == 1, audit


@pytest.mark.anyio
async def test_a_document_deleted_while_its_batch_is_in_the_child_leaves_no_vector(semantic: Semantic,
                                                                                  tenant: str) -> None:
    """The drain has read the chunks and the child is embedding them (stopped, so it stays there)
    when the document is deleted: the queue row goes with the chunk set, and the vectors that come
    back are not written — no vector outlives its chunk."""
    embedder, drain = semantic.embedder, semantic.drain
    assert embedder is not None and drain is not None
    await ingest(semantic, tenant, BACKUPS)  # the child is up and warm
    pid = embedder.pid
    assert pid is not None
    os.killpg(pid, signal.SIGSTOP)
    try:
        doc = await ingest(semantic, tenant, BACKUPS.replace("Disaster", "Cluster"), embedded=False, title="b.md")
        with hang_detector():
            while not drain.in_flight:  # noqa: ASYNC110  (the drain's state, polled)
                await anyio.sleep(0.02)
        await semantic.svc.delete(doc, writer(tenant))
        assert await queued(semantic, tenant) == []
    finally:
        os.killpg(pid, signal.SIGCONT)
    with hang_detector():
        while drain.in_flight:  # noqa: ASYNC110  (the batch comes back; its vectors are skipped)
            await anyio.sleep(0.02)
    assert embedder.pid == pid and embedder.restarts == 0
    assert int(await semantic.db.fetchval(
        "SELECT count(*) FROM knowledge_embeddings e WHERE e.tenant_id = $1 AND NOT EXISTS ("
        "SELECT 1 FROM knowledge_chunks c WHERE c.tenant_id = e.tenant_id AND c.chunk_id = e.chunk_id)", tenant)) == 0
    assert await chunks_without_vectors(semantic, tenant) == 0  # the first document's


@pytest.mark.anyio
async def test_a_set_that_keeps_failing_is_left_for_an_operator_and_reembed_retries_it(semantic: Semantic,
                                                                                      tenant: str) -> None:
    """A queued set whose claims failed `MAX_ATTEMPTS` times in a row (a passage that crashes the
    encoder, say) is not claimed again — it must not block the queue — and is shown as stuck;
    ``reembed`` tries it again."""
    drain = semantic.drain
    assert drain is not None
    doc = await ingest(semantic, tenant, BACKUPS)
    await semantic.db.execute("DELETE FROM knowledge_embeddings WHERE tenant_id = $1", tenant)
    await semantic.db.execute(
        """INSERT INTO knowledge_embedding_queue (tenant_id, document_id, version, chunker_version, model_version,
                                                 chunk_count, attempts)
           SELECT tenant_id, document_id, version, chunker_version, $2, chunk_count, $3
           FROM knowledge_chunk_sets WHERE tenant_id = $1""", tenant, semantic.svc.semantic_version, MAX_ATTEMPTS)
    for _ in range(2):  # two claims that find nothing to take
        drain.wake()
        await drain.progressed(at_most=10)
    backlog = await semantic.svc.embedding_backlog(tenant)
    assert (backlog.chunk_sets, backlog.stuck_sets) == (1, 1) and backlog.chunks > 0
    assert "waiting" in backlog.describe()
    with anyio.fail_after(300):
        assert await semantic.svc.reembed(tenant) == backlog.chunks  # the stuck set, queued again
    assert await chunks_without_vectors(semantic, tenant) == 0 and await queued(semantic, tenant) == []
    assert doc in {c.document_id for c in await arms(semantic)[1].search(semantic.db, q(tenant, "snapshot"), 10)}


@pytest.mark.anyio
@pytest.mark.slow
async def test_an_embedder_killed_mid_backlog_loses_nothing(semantic: Semantic, tenant: str) -> None:
    """The drain is writing a long document's batches when the child is killed: the batch in flight
    fails, its rows go back to the queue, the actor restarts the child, and the drain finishes —
    every chunk embedded, the ingest itself long since committed and searchable lexically."""
    embedder, drain = semantic.embedder, semantic.drain
    assert embedder is not None and drain is not None
    await ingest(semantic, tenant, BACKUPS)  # the child is up
    first = embedder.pid
    assert first is not None
    big = f"{tenant}-k"
    before = drain.embedded_chunks
    doc = await ingest(semantic, big, BACKUPS * 400, embedded=False, title="big.md")  # 4 batches or more
    assert (await footprint(semantic.svc, big))["chunks"] > BATCH_PASSAGES  # two batches at least
    assert doc in {c.document_id for c in await arms(semantic)[0].search(semantic.db, q(big, "snapshot"), 50)}
    with hang_detector():  # a first batch written and the next one in the child: mid-backlog
        while drain.embedded_chunks == before or not drain.in_flight:  # noqa: ASYNC110  (the drain's state)
            await anyio.sleep(0.01)
    os.killpg(first, signal.SIGKILL)
    await wait_embedded(semantic.svc, document_id=doc, tenant_id=big)
    assert embedder.pid not in (None, first) and embedder.restarts == 1
    assert await chunks_without_vectors(semantic, big) == 0 and await queued(semantic, big) == []
    assert doc in {c.document_id for c in await arms(semantic)[1].search(
        semantic.db, q(big, "restore the cluster from a snapshot"), 10)}
    health = await semantic.svc.health()
    assert health.semantic is not None and health.semantic.backlog is not None
    assert health.semantic.backlog.model_version == semantic.svc.semantic_version


@pytest.mark.anyio
async def test_cancelled_callers_keep_the_child_and_close_reaps_it(database_dsn: str, tenant: str) -> None:
    """The service's own embedder (not one a test made), seen through its health."""
    async with KnowledgeService.open(semantic_settings(database_dsn)) as svc:
        ref = await put(svc, tenant, BACKUPS)
        doc = await svc.ingest(ref, "ops.md", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
        await wait_embedded(svc, document_id=doc.document_id, tenant_id=tenant)
        before = (await svc.health()).semantic
        assert before is not None and before.child_pid is not None
        pid = before.child_pid
        for _ in range(5):
            with anyio.move_on_after(0.01):
                await svc.search(q(tenant, "how do I recover a lost cluster"))
        assert await svc.search(q(tenant, "how do I recover a lost cluster"))
        health = await svc.health()
        assert health.semantic is not None and health.semantic.child_running and health.semantic.restarts == 0
        assert health.semantic.child_pid == pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: gone, not a zombie


def ranking(passages: Any) -> list[tuple[str, float]]:
    return [(p.chunk_id, round(p.score, 9)) for p in passages]


async def until_serving(semantic: Semantic) -> None:
    with hang_detector():
        while not semantic.embedder.serving:  # noqa: ASYNC110  (a test polling the actor's state)
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_searches_go_on_lexical_only_while_the_embedder_child_is_replaced(semantic: Semantic,
                                                                               tenant: str) -> None:
    await ingest(semantic, tenant, BACKUPS)
    await ingest(semantic, tenant, "# Snapshots\n\nA snapshot of the cluster is taken with etcdctl.\n", title="s.md")
    embedder = semantic.embedder
    assert embedder is not None and embedder.pid is not None
    lexical, _ = arms(semantic)
    question = q(tenant, "restore the cluster from a snapshot")
    fused = ranking(await semantic.svc.search(question))
    lexical_only = ranking(await Searcher(semantic.db, [lexical]).search(question))
    assert fused and lexical_only and fused != lexical_only  # the arm changes this ranking
    first = embedder.pid
    os.killpg(first, signal.SIGKILL)
    # The search that finds the child dead, and those while the next one loads, answer lexical-only.
    assert ranking(await semantic.svc.search(question)) == lexical_only
    assert not embedder.serving
    assert ranking(await semantic.svc.search(question)) == lexical_only
    health = await semantic.svc.health()
    assert health.semantic is not None and health.semantic.searches_without_arm == 2
    await until_serving(semantic)
    assert embedder.pid not in (None, first) and embedder.restarts == 1
    assert ranking(await semantic.svc.search(question)) == fused


@pytest.mark.anyio
async def test_a_child_that_dies_idle_is_replaced_unasked_and_backoff_forgives_children_that_served(
        semantic: Semantic, tenant: str) -> None:
    await ingest(semantic, tenant, BACKUPS)
    embedder = semantic.embedder
    assert embedder is not None
    for n in range(1, 4):
        first = embedder.pid
        assert first is not None
        os.killpg(first, signal.SIGKILL)  # idle: no request is in flight
        with hang_detector():
            while embedder.pid in (None, first) or not embedder.serving:  # noqa: ASYNC110  (polling the actor)
                await anyio.sleep(0.05)
        assert embedder.restarts == n and embedder.failures == 1  # each child had served: no growing backoff
    # Nothing that came after the deaths failed or went without the arm.
    await ingest(semantic, f"{tenant}-2", BACKUPS)
    assert await chunks_without_vectors(semantic, f"{tenant}-2") == 0
    assert await semantic.svc.search(q(tenant, "restore the cluster from a snapshot"))
    assert semantic.svc.retrieval().searches_without_arm.get("semantic", 0) == 0


@pytest.mark.anyio
async def test_a_stream_of_searches_does_not_starve_the_embedding_drain(semantic: Semantic,
                                                                         tenant: str) -> None:
    await ingest(semantic, tenant, BACKUPS)
    _, sem = arms(semantic)
    sem.query_wait_seconds = 120  # every search waits for its vector here, however loaded the machine
    done, searched = anyio.Event(), [0]

    async def searcher() -> None:
        while not done.is_set():
            await semantic.svc.search(q(tenant, "restore the cluster from a snapshot"))
            searched[0] += 1

    async with anyio.create_task_group() as tg:
        for _ in range(8):  # always a query waiting: served strictly first, they would starve the batches
            tg.start_soon(searcher)
        await ingest(semantic, f"{tenant}-big", BACKUPS * 20)  # waits for the drain, under the searches
        done.set()
    assert searched[0] > 8 and semantic.svc.retrieval().searches_without_arm.get("semantic", 0) == 0
    assert await chunks_without_vectors(semantic, f"{tenant}-big") == 0


@pytest.mark.anyio
async def test_a_stalled_query_embedding_gives_up_without_a_restart(semantic: Semantic, tenant: str) -> None:
    await ingest(semantic, tenant, BACKUPS)
    embedder = semantic.embedder
    assert embedder is not None and embedder.pid is not None
    lexical, sem = arms(semantic)
    sem.query_wait_seconds = 0.5
    question = q(tenant, "restore the cluster from a snapshot")
    fused = ranking(await semantic.svc.search(question))
    os.killpg(embedder.pid, signal.SIGSTOP)  # a child that does not answer in time
    try:
        assert ranking(await semantic.svc.search(question)) == ranking(await Searcher(semantic.db, [lexical]).search(
            question))
    finally:
        os.killpg(embedder.pid, signal.SIGCONT)
    # The late reply is read and discarded; the same child serves the next search.
    assert ranking(await semantic.svc.search(question)) == fused
    assert embedder.restarts == 0 and semantic.svc.retrieval().searches_without_arm.get("semantic", 0) == 1


# ------------------------------------------------------------------ what the arm adds


@pytest.mark.anyio
async def test_semantic_arm_finds_a_paraphrase_lexical_search_misses(semantic: Semantic, tenant: str) -> None:
    await ingest(semantic, tenant, BACKUPS)
    await ingest(semantic, tenant, "# Logging\n\nLog lines are written as JSON to standard error.\n", title="log.md")
    lexical, sem = arms(semantic)
    question = q(tenant, "what should I do when all my servers died")  # no word shared with the answer
    assert await lexical.search(semantic.db, question, 50) == []
    top = (await sem.search(semantic.db, question, 50))[0]
    assert "snapshot restore" in top.text
    passages = await semantic.svc.search(question)
    assert passages and "snapshot restore" in passages[0].text


@pytest.mark.anyio
async def test_as_of_reads_the_vectors_of_the_version_valid_then(semantic: Semantic, tenant: str) -> None:
    doc = await ingest(semantic, tenant, BACKUPS)
    between = datetime.now(UTC)
    ref = await put(semantic.svc, tenant, "# Disaster recovery\n\nCall the on-call engineer; never restore alone.\n")
    await semantic.svc.ingest(ref, "ops.md", "tenant", writer(tenant), origin_trust=TrustLevel.USER, replaces=doc)
    await semantic.svc.wait_embedded(doc, tenant_id=tenant)  # version 2's vectors follow the ingest
    _, sem = arms(semantic)
    then = await sem.search(semantic.db, q(tenant, "restore from the snapshot file", as_of=between), 10)
    now = await sem.search(semantic.db, q(tenant, "restore from the snapshot file"), 10)
    assert {c.version for c in then} == {1} and {c.version for c in now} == {2}


@pytest.mark.anyio
async def test_deletion_removes_the_vectors(semantic: Semantic, tenant: str) -> None:
    doc = await ingest(semantic, tenant, BACKUPS)
    assert await vectors_of(semantic, tenant) > 0
    await semantic.svc.delete(doc, writer(tenant))
    assert await vectors_of(semantic, tenant) == 0
    assert await arms(semantic)[1].search(semantic.db, q(tenant, "restore the cluster"), 10) == []


@pytest.mark.anyio
async def test_rechunk_embeds_the_new_chunk_set(semantic: Semantic, tenant: str) -> None:
    doc = await ingest(semantic, tenant, BACKUPS)
    count = await semantic.svc.rechunk(doc, ParagraphChunker(), writer(tenant))
    assert len(await queued(semantic, tenant)) <= 1  # the new set, queued in the re-chunk's transaction
    await wait_embedded(semantic.svc, document_id=doc, tenant_id=tenant)
    assert count >= 1 and await chunks_without_vectors(semantic, tenant) == 0
    found = await arms(semantic)[1].search(semantic.db, q(tenant, "change the admin password"), 10)
    assert found and all(c.chunk_id.startswith("kc_") for c in found)
    rows = await semantic.db.fetch(
        "SELECT DISTINCT c.chunker_version FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = ANY($2)",
        tenant, [c.chunk_id for c in found])
    assert {r["chunker_version"] for r in rows} == {ParagraphChunker.version}


# ------------------------------------------------------------------ re-embedding


@pytest.mark.anyio
async def test_reembedding_under_a_new_model_version_keeps_old_citations(database_dsn: str, tenant: str) -> None:
    async with semantic_service(database_dsn) as old:
        await ingest(old, tenant, BACKUPS)
        cited = [p.chunk_id for p in await old.svc.search(q(tenant, "restore the cluster from a snapshot"))]
        old_version = old.svc.semantic_version
        old_vectors = await vectors_of(old, tenant, old_version)
    assert cited and old_vectors > 0
    # A new model version (windows of 64 word pieces): a new set of vectors beside the old, from
    # the stored chunk text, made by an explicit reembed (the suite's services run no backfill: the
    # shared test database holds every other test's chunks).
    async with semantic_service(database_dsn, semantic_window=64) as new:
        assert new.svc.semantic_version != old_version
        await new.svc.reembed(tenant)
        assert await chunks_without_vectors(new, tenant) == 0
        assert await vectors_of(new, tenant, old_version) == old_vectors  # the old set is untouched
        assert await vectors_of(new, tenant, new.svc.semantic_version) >= old_vectors
        for chunk_id in cited:
            assert await new.svc.operator_get_chunk(chunk_id, tenant_id=tenant) is not None
        found = {c.chunk_id for c in await arms(new)[1].search(new.db, q(tenant, "restore from a snapshot"), 10)}
        assert set(cited) & found
        assert await new.svc.reembed(tenant) == 0  # nothing left to do


def test_semantic_arm_on_needs_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import knowledge.semantic as semantic_pkg

    monkeypatch.setattr(semantic_pkg, "available", lambda: False)
    with pytest.raises(ConfigurationError, match="semantic extra"):
        semantic_pkg.enabled(True)
    assert semantic_pkg.enabled(None) is False and semantic_pkg.enabled(False) is False
    assert enabled(False) is False


def test_ingestor_without_a_vector_queue_queues_nothing() -> None:
    assert Ingestor.__dataclass_fields__["vectors"].default is None


def test_cli_reembed_fills_a_tenant_ingested_lexical_only(knowledge: Any, tmp_path: Any) -> None:  # noqa: F811
    (tmp_path / "ops.md").write_text(BACKUPS)
    assert knowledge("ingest", str(tmp_path / "ops.md")).code == 0  # the suite runs lexical-only
    done = knowledge("--json", "docs", "reembed")
    assert done.code == 0, done.err
    assert done.json()["chunks"] >= 1 and done.json()["model_version"] == "minilm-l6-v2-w128-o8-code"
    again = knowledge("--json", "docs", "reembed")
    assert again.code == 0 and again.json()["chunks"] == 0


@pytest.mark.anyio
async def test_recorded_citations_are_judged_with_the_claims_cosine_while_the_model_serves(
        semantic: Semantic, tenant: str) -> None:
    """`record_answer` asks the embedder child for the claim's and its sentence's vectors, and the
    semantic support model decides; this paraphrase is one the lexical model alone would refuse."""
    from dataclasses import replace

    from knowledge.core.support import LEXICAL_SUPPORT_MODEL, SUPPORT_MODEL, content_words, features
    from knowledge.retrieval.answers import _cosines
    from knowledge.store.evidence import term_weights
    from tests.retrieval.test_grounding import COMPACTION, PASSWORD, RESTORE
    from tests.retrieval.test_turn import ingest_text, request

    for title, text in (("restore", RESTORE), ("password", PASSWORD), ("compaction", COMPACTION)):
        await ingest_text(semantic.svc, tenant, text, title=title)
    await semantic.embedder.wait_ready()  # type: ignore[union-attr]
    turn = await semantic.svc.turn(request(tenant, "compaction retention window revisions", 10_000))
    passage = next(p for p in turn.passages if p.heading_path[-1] == "Compaction")
    claim = "Compaction drops revisions older than the retention window."
    f = features(claim, passage.text, await term_weights(semantic.db, tenant, content_words(claim)))
    cosine = (await _cosines(semantic.embedder, [(f.claim, f.sentence)]))[(f.claim, f.sentence)]
    assert SUPPORT_MODEL.decide(replace(f, cosine=cosine)) and not LEXICAL_SUPPORT_MODEL.decide(f), (
        "pick a claim the two models judge apart: this test tells the paths apart by it")
    recorded = await semantic.svc.record_answer(turn.trace.trace_id, f"{claim[:-1]} [{passage.chunk_id}].",
                                            tenant_id=tenant)
    assert [c.supported for c in recorded.citations] == [True]
    assert recorded.drawn_on == {passage.chunk_id} and recorded.cites_what_it_drew_on
