"""The semantic arm's parts as the service starts them (`start_semantic`, from the settings) or as a
test hands them in (`SemanticParts`, a seam)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import anyio
from anyio.abc import TaskGroup

from knowledge import semantic
from knowledge.config import Settings
from knowledge.semantic.arm import SemanticArm
from knowledge.semantic.encoder import DIM, model_version
from knowledge.semantic.queue import EmbeddingDrain
from knowledge.store.db import Database
from knowledge.store.vectors import ensure_index, table_exists
from knowledge.supervisors.embedder import Embedder

_log = logging.getLogger("knowledge.service")


NO_PGVECTOR = ("the semantic arm is off: this server has no pgvector (the vector extension is not available, or "
               "this role may not create it), so search is lexical-only. To turn it on, have an administrator run "
               "CREATE EXTENSION vector in this database, then restart; to silence this, set "
               "KNOWLEDGE_SEMANTIC_ARM=off")


@dataclass(frozen=True)
class SemanticParts:
    """The semantic arm's parts, when it is on: the model version chunk sets are queued and
    searched under, and — where this process loads the model (``semantic_model``) — the embedder
    (the actor that owns its child), the embedding drain (the queue's consumer) and the arm.

    Also a seam, as httpx's ``Client(transport=)``: a test makes these itself (`Embedder`,
    `EmbeddingDrain` over a pool of its own on the same database, `SemanticArm`) and hands them to
    `KnowledgeService.open` (``semantic=``), keeping them to look at; the service starts the
    embedder and the drain in its task group and stops them on close, as it does its own."""

    version: str
    embedder: Embedder | None = None
    drain: EmbeddingDrain | None = None
    arm: SemanticArm | None = None

    async def start(self, db: Database, task_group: TaskGroup) -> SemanticParts:
        """Make sure the version's HNSW index exists, then start the embedder and the drain (those given)."""
        await ensure_index(db, self.version, DIM)
        if self.embedder is not None:
            await task_group.start(self.embedder.run)
        if self.drain is not None:
            await task_group.start(self.drain.run)
        return self


async def start_semantic(settings: Settings, db: Database, task_group: TaskGroup) -> SemanticParts | None:
    """Start the semantic arm's actors in ``task_group`` when ``settings`` turn it on: make sure the
    model version's HNSW index exists; then, with ``semantic_model``, start the embedder and (with
    ``semantic_drain``) the drain. Ingest queues its chunk sets and commits without waiting for
    vectors (`knowledge.semantic.queue`). None: the arm is off (or, by default, this server has no
    pgvector: lexical-only, with a warning)."""
    # `enabled` looks for the extra's packages and model files (stat calls): not on the loop
    if not await anyio.to_thread.run_sync(semantic.enabled, settings.semantic_arm):
        return None
    if settings.semantic_arm is None and not await table_exists(db):
        _log.warning(NO_PGVECTOR)  # the default, not a requirement: lexical-only
        return None
    window = settings.semantic_window
    version = model_version(window)
    if not settings.semantic_model:  # queue for the arm; another process embeds
        return await SemanticParts(version).start(db, task_group)
    embedder = Embedder(window=window, threads=settings.embedder_threads,
                        restart_base_seconds=settings.embedder_restart_base_seconds,
                        restart_max_seconds=settings.embedder_restart_max_seconds)
    drain = EmbeddingDrain(db, embedder, version, tenant=settings.embedding_tenant)
    parts = SemanticParts(version, embedder, drain if settings.semantic_drain else None)
    await parts.start(db, task_group)
    return replace(parts, drain=drain)
