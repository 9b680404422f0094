"""Typed errors. Every refusal carries a machine-readable reason code."""

from __future__ import annotations


class KnowledgeError(Exception):
    """Base of every error this package raises on purpose."""

    reason: str = "error"

    def __init__(self, reason: str | None = None, message: str | None = None) -> None:
        if reason is not None:
            self.reason = reason
        self.message = message or self.reason
        super().__init__(f"{self.reason}: {self.message}" if message else self.reason)


class ConfigurationError(KnowledgeError):
    reason = "configuration"


class DatabaseUnavailable(KnowledgeError):
    """The database could not be reached or started; transient from a caller's view."""

    reason = "database_unavailable"


class EmbeddedServerError(DatabaseUnavailable):
    reason = "embedded_server"


class CommitUnknown(DatabaseUnavailable):
    """COMMIT was sent, its answer was lost, and the database could not be asked since whether it
    took effect: the write is in, or nothing of it is (never part of it). Ask again once the
    database answers: a first version's id is fixed, so the same request again is
    ``document_exists`` if it was in (``unchanged`` to the CLI); a new version's outcome is in
    `KnowledgeService.document_versions`."""

    reason = "commit_unknown"

    @classmethod
    def of(cls, document_id: object, cause: BaseException | None) -> CommitUnknown:
        """The error for one document, ``cause`` the fault that kept the database from answering."""
        detail = f" ({cause})" if cause is not None else ""
        error = cls(message=f"document {document_id}: COMMIT was sent and its answer lost; the database could "
                            f"not be asked since whether it took effect{detail}")
        error.__cause__ = cause
        return error


class MigrationError(KnowledgeError):
    reason = "migration"


class ArtifactError(KnowledgeError):
    reason = "artifact"


class ArtifactTooLarge(ArtifactError):
    reason = "artifact_too_large"


class ArtifactNotFound(ArtifactError):
    """The artifact does not exist in this tenant, or it expired and was swept."""

    reason = "artifact_not_found"


class ServiceClosed(KnowledgeError):
    """The service closed before (or while) the operation ran."""

    reason = "service_closed"


class DatabaseMissing(DatabaseUnavailable):
    """The DSN names a database the server does not have."""


class IngestRefused(KnowledgeError):
    """An ingest refused at one of its steps. ``reason`` is the cause; for a secret, the chunk
    that holds it is named by ordinal and heading path, never by its text."""

    reason = "refused"

    def __init__(self, reason: str, message: str | None = None, *, chunk_ordinal: int | None = None,
                 heading_path: tuple[str, ...] | None = None) -> None:
        super().__init__(reason, message)
        self.chunk_ordinal = chunk_ordinal
        self.heading_path = heading_path


class ExtractionRefused(KnowledgeError):
    """The source cannot become text: ``unsupported_media_type``, ``no_text``, ``undecodable``,
    ``too_large``, or an adapter's own reason (``pdf_encrypted`` …)."""

    reason = "extraction_refused"


#: The parser failures a retry may cure: the child died or could not start (a limit, a crash, a kill,
#: the host's memory pressure). Never a timeout: the pool judges a file by its own progress, so a
#: timeout is the file's answer (`knowledge.supervisors.parser_pool`). The one list: `ParserFailure.transient`,
#: the attachment worker's retries (`knowledge.ingest.attachments.TRANSIENT_REFUSALS`) and the upload
#: inspection's marker all read it.
TRANSIENT_PARSER_REASONS = frozenset({"pdf_killed", "html_killed", "docx_killed"})


class ParserFailure(ExtractionRefused):
    """The parse did not finish (``<format>_`` for HTML and DOCX jobs): ``pdf_timeout`` — its
    deadline passed, the queue included, or the pool stopped it sooner: it stalled, its page rate
    showed it could not finish in its budget, or it was too slow while others waited
    (`knowledge.supervisors.parser_pool`) — or ``pdf_killed``: the child died (a limit, a crash, a
    kill, the host's memory pressure) or could not start. ``transient``: a killed child (see
    `TRANSIENT_PARSER_REASONS`)."""

    reason = "pdf_killed"

    @property
    def transient(self) -> bool:
        return self.reason in TRANSIENT_PARSER_REASONS


class EmbedderUnavailable(KnowledgeError):
    """The embedder child could not answer (not started, died, overran its deadline). Transient."""

    reason = "embedder_unavailable"
    transient = True


class DeleteRefused(KnowledgeError):
    """``document_not_found`` or ``not_document_owner``."""

    reason = "delete_refused"


class ToolRefused(KnowledgeError):
    """A tool call refused before any work: ``unknown_tool``, ``missing_scope``, ``origin_trust``
    or ``invalid_arguments``; ``unknown_trace`` for a search naming a trace that is not the
    principal's."""

    reason = "tool_refused"


class TraceNotFound(KnowledgeError):
    """An answer recorded against a trace the tenant does not hold (or no longer holds: retention)."""

    reason = "unknown_trace"


class ToolRegistryError(KnowledgeError):
    """A domain that cannot be registered: ``duplicate_tool`` or ``unknown_scope``."""

    reason = "tool_registry"


class NotARegularFile(KnowledgeError):
    reason = "not_a_regular_file"


class ArmUnavailable(Exception):
    """An arm cannot answer for now; the search goes on without it (see the module docstring).
    ``error`` is the typed reason, raised should no arm answer."""

    def __init__(self, error: KnowledgeError) -> None:
        super().__init__(str(error))
        self.error = error
