"""What the service reports of itself: `Health` (a round trip to the database; the pool, the
maintenance worker, the semantic arm, the parser pool, the embedded server's start) and
`RetrievalStatus` (how this process retrieves)."""

from __future__ import annotations

from pydantic import BaseModel

from knowledge.maintenance.worker import MaintenanceStatus
from knowledge.semantic.queue import Backlog


class SemanticStatus(BaseModel):
    model_version: str
    child_running: bool
    child_pid: int | None = None  # the embedder child's process id (a process group of its own)
    restarts: int
    #: Searches answered by the lexical arm alone because the embedder could not answer in time.
    searches_without_arm: int = 0
    #: What waits for vectors (ingest commits without them; the embedding drain adds them), or None
    #: if the database could not say.
    backlog: Backlog | None = None


class RetrievalStatus(BaseModel):
    """`KnowledgeService.retrieval`: the ranking policy's name (``knowledge-v2``: the fitted relevance
    model and its floors), the arms searches run (``lexical``, and ``semantic`` when the arm is on
    here), searches answered without an arm that did not answer in time, by arm, and the chunks this
    process's embedding drain embedded."""

    ranking: str
    arms: list[str]
    searches_without_arm: dict[str, int]
    embedded_chunks: int


class ParserStatus(BaseModel):
    """The PDF parser pool's children: those in a job now, and the warm spares it keeps."""

    in_jobs: int
    spares: int


class ServerStart(BaseModel):
    """How this service's embedded server came up: its data folder, initdb in this start, joined a
    running one, and how long the start took."""

    pgdata: str
    cold_start: bool
    reused: bool
    start_seconds: float


class ReplicaStatus(BaseModel):
    """One read replica as the read router last saw it (`knowledge.store.replicas`)."""

    name: str  # its DSN, without credentials
    healthy: bool
    why: str | None  # why it is skipped, when it is
    reads: int  # reads it served since the service opened


class Health(BaseModel):
    """What `KnowledgeService.health` reports."""

    ok: bool
    backend: str  # the event loop: "trio" or "asyncio"
    embedded: bool
    data_dir: str | None
    server_version: str | None
    database: str | None
    schema_version: int
    schema_expected: int
    pool: dict[str, int]
    latency_ms: float
    error: str | None = None
    #: The maintenance worker's supervisor and counters, when this service runs one (``ok`` is
    #: False while one of its actors is crash-looping).
    workers: MaintenanceStatus | None = None
    #: The semantic arm, when on: its model version, whether its child is up, its restarts.
    semantic: SemanticStatus | None = None
    #: With the semantic arm off here: why this database could hold no vectors (no pgvector), or None.
    semantic_unavailable: str | None = None
    #: The embedded server's start, when this service started or joined one.
    server_start: ServerStart | None = None
    #: The parser pool's children (a refused or failed job's child is reaped before the call returns).
    parsers: ParserStatus | None = None
    #: The read replicas (`Settings.replica_dsns`), and the reads the primary served that a replica
    #: could have (none healthy, or none had replayed this service's writes in time).
    replicas: list[ReplicaStatus] = []
    primary_reads: int = 0


#: Why a service with the default ``semantic_arm`` runs lexical-only on this server.
