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
