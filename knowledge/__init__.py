"""knowledge: admit documents, and hand an agent back verbatim, cited passages from them (ADR-0033).

The host-facing API is what this module exports (`__all__`); everything else is inside. The tree
(`DESIGN.md` opens with it, and `tests/test_import_contracts.py` holds the code to it):

- ``knowledge.core``        pure: normalize, scan, chunk, prepare, rank, relevance, render, budget, trace — no I/O
- ``knowledge.store``       all SQL, in named statements, and the database bridge (the only asyncpg importer)
- ``knowledge.ingest``      the ingest shell: read a source, `prepare` it, commit it; bulk; attachments
- ``knowledge.retrieval``   search (the arms, evidence, ranking) and the turn
- ``knowledge.semantic``    the semantic arm: the embedder's child, its queue, the arm
- ``knowledge.maintenance`` the maintenance worker, deletion and the invariant audit
- ``knowledge.parsers``     the extractors (the ``parsers/`` folder): bytes to text, the PDF child's code
- ``knowledge.supervisors`` every child process's owner (the ``supervisors/`` folder)
- ``knowledge.migrations``  the numbered SQL files (the ``migrations/`` folder)
- ``knowledge.cli``         the operator's command line; ``python -m knowledge`` runs it
- ``knowledge.stress``      the load, fault and signal engine behind ``scripts/stress_*.py``

Importing this module is cheap: each name below loads its module on first use (PEP 562), so the
console script can install its signal handlers before anything heavy is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each exported name, and the module that defines it.
_EXPORTS: dict[str, str] = {
    # the service and its settings
    "KnowledgeService": "knowledge.service",
    "Health": "knowledge.service",
    "RetrievalStatus": "knowledge.service",
    "Settings": "knowledge.config",
    "Faults": "knowledge.store.faults",  # the fault-injection seam (`KnowledgeService.open(faults=)`)
    # the data model
    "Principal": "knowledge.models",
    "Viewer": "knowledge.models",
    "ArtifactRef": "knowledge.models",
    "KnowledgeDocument": "knowledge.models",
    "KnowledgeChunk": "knowledge.models",
    "DeletedChunk": "knowledge.models",
    "KnowledgeQuery": "knowledge.models",
    "RetrievedPassage": "knowledge.models",
    "TrustLevel": "knowledge.vocabulary",
    "Visibility": "knowledge.vocabulary",
    "Authority": "knowledge.vocabulary",
    "Sensitivity": "knowledge.vocabulary",
    "ArtifactOrigin": "knowledge.vocabulary",
    "AttachmentState": "knowledge.vocabulary",
    "WRITE_SCOPE": "knowledge.vocabulary",
    "IngestRequest": "knowledge.core.prepare",
    # a turn and its trace
    "TurnRequest": "knowledge.core.turn",
    "TurnResult": "knowledge.core.turn",
    "ActiveEntity": "knowledge.core.turn",
    "Belief": "knowledge.core.memory_boundary",
    "RecallTrace": "knowledge.core.trace",
    "RecallTraceView": "knowledge.core.trace",
    # the tool domain
    "KNOWLEDGE_DOMAIN": "knowledge.tools",
    "ScopeVocabulary": "knowledge.tools",
    "ToolContext": "knowledge.tools",
    "ToolRegistry": "knowledge.tools",
    "ToolResult": "knowledge.tools",
    # errors: every refusal carries a reason code
    "KnowledgeError": "knowledge.errors",
    "ConfigurationError": "knowledge.errors",
    "DatabaseUnavailable": "knowledge.errors",
    "CommitUnknown": "knowledge.errors",
    "DatabaseMissing": "knowledge.errors",
    "EmbeddedServerError": "knowledge.errors",
    "MigrationError": "knowledge.errors",
    "ArtifactError": "knowledge.errors",
    "ArtifactTooLarge": "knowledge.errors",
    "ArtifactNotFound": "knowledge.errors",
    "ServiceClosed": "knowledge.errors",
    "IngestRefused": "knowledge.errors",
    "ExtractionRefused": "knowledge.errors",
    "ParserFailure": "knowledge.errors",
    "EmbedderUnavailable": "knowledge.errors",
    "DeleteRefused": "knowledge.errors",
    "ToolRefused": "knowledge.errors",
    "ToolRegistryError": "knowledge.errors",
    "TraceNotFound": "knowledge.errors",
    # cancellation: what a call cancelled by asyncio's one-shot Task.cancel() took effect with
    "took_effect": "knowledge.structured",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from knowledge.config import Settings
    from knowledge.core.memory_boundary import Belief
    from knowledge.core.prepare import IngestRequest
    from knowledge.core.trace import RecallTrace, RecallTraceView
    from knowledge.core.turn import ActiveEntity, TurnRequest, TurnResult
    from knowledge.errors import (
        ArtifactError,
        ArtifactNotFound,
        ArtifactTooLarge,
        CommitUnknown,
        ConfigurationError,
        DatabaseMissing,
        DatabaseUnavailable,
        DeleteRefused,
        EmbeddedServerError,
        EmbedderUnavailable,
        ExtractionRefused,
        IngestRefused,
        KnowledgeError,
        MigrationError,
        ParserFailure,
        ServiceClosed,
        ToolRefused,
        ToolRegistryError,
        TraceNotFound,
    )
    from knowledge.models import (
        ArtifactRef,
        DeletedChunk,
        KnowledgeChunk,
        KnowledgeDocument,
        KnowledgeQuery,
        Principal,
        RetrievedPassage,
        Viewer,
    )
    from knowledge.service import Health, KnowledgeService, RetrievalStatus
    from knowledge.store.faults import Faults
    from knowledge.structured import took_effect
    from knowledge.tools import KNOWLEDGE_DOMAIN, ScopeVocabulary, ToolContext, ToolRegistry, ToolResult
    from knowledge.vocabulary import (
        WRITE_SCOPE,
        ArtifactOrigin,
        AttachmentState,
        Authority,
        Sensitivity,
        TrustLevel,
        Visibility,
    )

    __version__: str


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("knowledge")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'knowledge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
