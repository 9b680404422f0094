"""The service's parts, built by a test over a database handle of its own: for tests of one part
(the attachment worker, a second ingest, the searcher) beside or without a `KnowledgeService`, whose
parts are private (a closed facade). State lives in PostgreSQL, so a part built here over the same
database sees what the service wrote, and the service sees what it writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from knowledge.config import Settings
from knowledge.ingest.ingestor import Ingestor, VectorQueue
from knowledge.parsers.registry import default_registry
from knowledge.store.artifacts import ArtifactStore
from knowledge.store.db import Database
from knowledge.store.faults import Faults
from knowledge.supervisors.parser_pool import ParserPool


@dataclass
class Kit:
    """An artifact store, the extractors (with a parser pool of the kit's own) and an ingest over
    ``db``, with a `Faults` seam of their own."""

    db: Database
    faults: Faults = field(default_factory=Faults)
    max_bytes: int = Settings().max_artifact_bytes
    vectors: VectorQueue | None = None

    def __post_init__(self) -> None:
        self.artifacts = ArtifactStore(self.db, self.max_bytes)
        self.parser_pool = ParserPool()
        self.extractors = default_registry(self.parser_pool)
        self.ingestor = Ingestor(self.db, self.artifacts, self.extractors, faults=self.faults, vectors=self.vectors)
