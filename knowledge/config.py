"""Settings: where the database is, how big things may be. Read from arguments or the environment."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowledge.errors import ConfigurationError

#: The largest source the artifact store accepts (and the parser child's input bound).
DEFAULT_MAX_ARTIFACT_BYTES = 32 * 1024 * 1024


def default_data_dir() -> Path:
    """Where the embedded server keeps its data when nothing says otherwise.

    ``$KNOWLEDGE_DATA_DIR``; else ``$XDG_DATA_HOME/knowledge`` (or ``~/.local/share/knowledge``)
    for an ordinary user; else, for root, ``/var/lib/knowledge``. Never under ``/root``: as root
    the server runs as an unprivileged ``pgserver`` user, which must be able to reach the folder.
    """
    explicit = os.environ.get("KNOWLEDGE_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/knowledge")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg).expanduser().resolve() / "knowledge"


def default_semantic_arm() -> bool | None:
    """``$KNOWLEDGE_SEMANTIC_ARM``: ``on``, ``off``, or unset / ``auto`` (the measured default)."""
    value = os.environ.get("KNOWLEDGE_SEMANTIC_ARM", "auto").strip().lower()
    if value in ("on", "1", "true"):
        return True
    if value in ("off", "0", "false"):
        return False
    return None


#: Postings the lexical arm reads per query term, strongest first, by default (issue 36: chosen on
#: SciFact's train queries with the pool margin, `scripts/fit_lexical_depth.py`).
LEXICAL_DEPTH = 400


def default_lexical_depth() -> int | None:
    """``$KNOWLEDGE_LEXICAL_DEPTH``: postings the lexical arm reads per query term, strongest first
    (a whole number), or ``all`` (the exhaustive arm); unset, `LEXICAL_DEPTH`."""
    value = os.environ.get("KNOWLEDGE_LEXICAL_DEPTH", "").strip().lower()
    if not value:
        return LEXICAL_DEPTH
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(message=f"KNOWLEDGE_LEXICAL_DEPTH must be a whole number of postings or 'all', "
                                         f"not {value!r}")
    return int(value)


class Settings(BaseModel):
    """How a `KnowledgeService` reaches its database.

    With ``dsn`` unset the service starts (or reuses) its own embedded PostgreSQL in
    ``data_dir``; with ``dsn`` set (argument or ``$KNOWLEDGE_DSN``) the same code uses that server.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dsn: str | None = None
    data_dir: Path = Field(default_factory=default_data_dir)
    database: str = Field(default="knowledge", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
    application_name: str = "knowledge"
    #: Streaming standbys of the primary (``dsn``) that serve searches and catalog reads
    #: (`knowledge.store.replicas`; ``$KNOWLEDGE_REPLICA_DSNS``, comma-separated). Writes go to the
    #: primary; a read after this service's acknowledged write waits (at most
    #: ``replica_wait_seconds``) for a replica to replay it, else reads the primary.
    replica_dsns: tuple[str, ...] = ()
    #: A replica more than this far behind the primary (seconds it has not caught up to where the
    #: primary was), or unreachable, is skipped until it is healthy again.
    replica_max_lag_seconds: float = Field(default=5.0, gt=0)
    replica_wait_seconds: float = Field(default=0.5, ge=0)
    replica_check_seconds: float = Field(default=1.0, gt=0)
    max_artifact_bytes: int = Field(default=DEFAULT_MAX_ARTIFACT_BYTES, ge=1)
    migrate: bool = True
    #: How often the maintenance worker's sweeper collects expired artifacts and applies the traces'
    #: retention; None disables it.
    sweep_interval_seconds: float | None = Field(default=300.0, gt=0)
    #: Attachment workers (owner-sent attachments, ADR-0120) the service runs in its own task group,
    #: beside the sweeper under one supervisor; 0: none here (e.g. `knowledge worker` runs them in a
    #: process of its own).
    attachment_workers: int = Field(default=0, ge=0, le=64)
    #: Restrict this service's attachment workers to one tenant (a dedicated worker); None: all.
    attachment_tenant: str | None = None
    #: A claimed attachment's lease: renewed every third of it while a worker works; a worker that
    #: dies stops renewing, and another takes the attachment over once it expires.
    attachment_lease_seconds: float = Field(default=60.0, gt=0)
    #: How often an idle worker looks for work another process marked (marks in this process wake it).
    attachment_poll_seconds: float = Field(default=2.0, gt=0)
    #: Transient failures retried at most this many times (with backoff), then recorded as failed.
    attachment_max_retries: int = Field(default=3, ge=0)
    #: The first retry's backoff; each further retry doubles it, up to the maximum.
    attachment_retry_base_seconds: float = Field(default=5.0, ge=0)
    attachment_retry_max_seconds: float = Field(default=300.0, ge=0)
    #: One attachment's bound for reading, extracting, chunking and scanning (a batch's, that times
    #: its size); passing it is a transient failure.
    attachment_job_timeout_seconds: float = Field(default=300.0, gt=0)
    #: Attachments a worker claims at once and ingests through the bulk path (`knowledge.ingest.bulk`):
    #: prepared while the previous group is written, committed in groups, each still all-or-nothing.
    attachment_batch: int = Field(default=32, ge=1, le=256)
    #: A crashed worker task restarts after this, doubling per consecutive crash up to the maximum.
    worker_restart_base_seconds: float = Field(default=1.0, ge=0)
    worker_restart_max_seconds: float = Field(default=60.0, ge=0)

    #: The semantic arm (pgvector; its candidates join the lexical arm's before the relevance model
    #: ranks them, or RRF fuses the two under ``knowledge-v1``): True requires the
    #: ``semantic`` extra and pgvector; False is lexical-only; None, the measured default
    #: (`knowledge.semantic.MEASURED_DEFAULT`) where the extra is installed. ``$KNOWLEDGE_SEMANTIC_ARM``.
    semantic_arm: bool | None = Field(default_factory=default_semantic_arm)
    #: Postings the lexical arm reads per query term, strongest first (`knowledge.store.retrieval.
    #: LEXICAL_SQL`); None reads them all (the exhaustive arm, whose cost grows with the tenant).
    #: ``$KNOWLEDGE_LEXICAL_DEPTH`` (a number, or ``all``).
    lexical_depth: int | None = Field(default_factory=default_lexical_depth, ge=1)
    #: With the arm on, embed at start (in the background) every chunk lacking a vector under its
    #: model version (ingested with the arm off, or under another version).
    semantic_backfill: bool = True
    #: With the arm on, embed queued chunk sets in this process (the embedding drain). Off for a
    #: short-lived process that only searches: the drain's batches would compete with its query.
    semantic_drain: bool = True
    #: With the arm on, this process's drain embeds one tenant's queued chunk sets only (a command
    #: waiting for its own vectors: ``knowledge ingest --wait-embedded``, ``docs reembed``); None: every
    #: tenant's, in turn.
    embedding_tenant: str | None = None
    #: With the arm on, load the model in this process (its embedder child). Off for a short-lived
    #: process that only writes: ingest still queues its chunk sets for the arm's model version, and a
    #: long-running service (a host, ``knowledge worker``) embeds them; search here is lexical.
    semantic_model: bool = True
    #: Word pieces per embedded window of a passage (0: the whole passage, cut by the model at 256).
    semantic_window: int = Field(default=128, ge=0, le=256)
    #: Threads the embedder child's encoder uses, waiting passively (OMP_WAIT_POLICY=PASSIVE): on
    #: these 2 cores, 76-85 windows/s when the other core is idle and 43-49 when it is busy, where
    #: spinning threads fall to 7-33 (`scripts/bench_embedder.py`, README).
    embedder_threads: int = Field(default=2, ge=1, le=64)
    #: The embedder child restarts after this when it died before serving, doubling per consecutive
    #: such death up to the maximum (a child that had served restarts after the base at once).
    embedder_restart_base_seconds: float = Field(default=1.0, ge=0)
    embedder_restart_max_seconds: float = Field(default=30.0, ge=0)
    #: The ranking policy's relevance floor (`knowledge.core.ranking.KNOWLEDGE_V2`): passages that
    #: probably answer nothing are not returned, and a question nothing answers gets nothing.
    #: False returns the best passages whatever their relevance (each still carries it).
    relevance_floor: bool = True
    #: Pre-turn retrieval: `KnowledgeService.turn` retrieves knowledge into the turn's block without
    #: an explicit tool call. Off by default (ADR-0033 build step 5: "enabled only if the corpus
    #: gate improves with it"): the agent's ``knowledge.search`` is the path, and a turn budgets its
    #: beliefs and opens the trace the tool's results join. A turn may ask otherwise
    #: (`TurnRequest.retrieve`).
    preturn_retrieval: bool = False
    #: Candidates each arm hands to the relevance model per search: fewer is faster and finds less
    #: (`scripts/eval_retrieval.py` prints recall@3 and latency per value; README "Search").
    search_candidates: int = Field(default=50, ge=1, le=1000)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from ``$KNOWLEDGE_DSN``, ``$KNOWLEDGE_DATA_DIR``, ``$KNOWLEDGE_DATABASE``,
        ``$KNOWLEDGE_REPLICA_DSNS`` and ``$KNOWLEDGE_ATTACHMENT_WORKERS``."""
        values: dict[str, object] = {}
        if os.environ.get("KNOWLEDGE_DSN"):
            values["dsn"] = os.environ["KNOWLEDGE_DSN"]
        if os.environ.get("KNOWLEDGE_DATABASE"):
            values["database"] = os.environ["KNOWLEDGE_DATABASE"]
        if os.environ.get("KNOWLEDGE_REPLICA_DSNS"):
            listed = os.environ["KNOWLEDGE_REPLICA_DSNS"].split(",")
            values["replica_dsns"] = tuple(d.strip() for d in listed if d.strip())
        if os.environ.get("KNOWLEDGE_ATTACHMENT_WORKERS"):
            values["attachment_workers"] = int(os.environ["KNOWLEDGE_ATTACHMENT_WORKERS"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
