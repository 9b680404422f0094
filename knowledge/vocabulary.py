"""The data model's closed vocabularies (ADR-0033, "Ports and data model"): trust levels, artifact
origins, visibility, authority, sensitivity and attachment states.

Plain string enums, apart from `knowledge.models` so that what only names them — the command
line's options — imports no pydantic. `knowledge.models` re-exports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class _RankedEnum(StrEnum):
    """A string enum whose members compare by a declared rank, not alphabetically."""

    @classmethod
    def _ranks(cls) -> dict[str, int]:
        raise NotImplementedError

    @property
    def rank(self) -> int:
        return type(self)._ranks()[self.value]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.rank < other.rank

    # StrEnum would otherwise inherit str's alphabetical ordering.
    def __le__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.rank >= other.rank

    def __hash__(self) -> int:
        return hash(self.value)


class TrustLevel(_RankedEnum):
    """How far the host trusts content, ordered: ``TrustLevel.USER > TrustLevel.KNOWLEDGE``.

    ``KNOWLEDGE`` labels every retrieved passage; ingest requires origin trust ``>= USER``.
    """

    SYSTEM = "SYSTEM"
    USER = "USER"
    MEMORY = "MEMORY"
    KNOWLEDGE = "KNOWLEDGE"
    TOOL_OUTPUT = "TOOL_OUTPUT"
    EXTERNAL_UNTRUSTED = "EXTERNAL_UNTRUSTED"

    @classmethod
    def _ranks(cls) -> dict[str, int]:
        return _TRUST_RANKS


_TRUST_RANKS = {
    "SYSTEM": 50,
    "USER": 40,
    "MEMORY": 30,
    "KNOWLEDGE": 20,
    "TOOL_OUTPUT": 10,
    "EXTERNAL_UNTRUSTED": 0,
}


class ArtifactOrigin(StrEnum):
    SANDBOX_EXPORT = "SANDBOX_EXPORT"
    TOOL_OUTPUT = "TOOL_OUTPUT"
    MODEL_OUTPUT = "MODEL_OUTPUT"
    UPLOAD = "UPLOAD"
    TRAJECTORY_EXPORT = "TRAJECTORY_EXPORT"
    KNOWLEDGE_SOURCE = "KNOWLEDGE_SOURCE"


class Visibility(StrEnum):
    """Who may read a document; resolved in SQL against the querying principal and scope."""

    PRINCIPAL = "principal"
    PROJECT = "project"
    TENANT = "tenant"


class Authority(_RankedEnum):
    """How the document was obtained (never what it says): authored > supplied > fetched."""

    PRINCIPAL_AUTHORED = "principal_authored"
    PRINCIPAL_SUPPLIED = "principal_supplied"
    FETCHED = "fetched"

    @classmethod
    def _ranks(cls) -> dict[str, int]:
        return _AUTHORITY_RANKS


_AUTHORITY_RANKS = {"principal_authored": 2, "principal_supplied": 1, "fetched": 0}


class Sensitivity(_RankedEnum):
    """Sensitivity of a document; a surface reads up to its ceiling, inclusive."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"

    @classmethod
    def _ranks(cls) -> dict[str, int]:
        return _SENSITIVITY_RANKS

    def admitted(self) -> list[str]:
        """Every level this ceiling admits (for an SQL ``= ANY($n)`` predicate)."""
        return [s.value for s in Sensitivity if s <= self]


_SENSITIVITY_RANKS = {"public": 0, "internal": 1, "confidential": 2, "restricted": 3}


class AttachmentState(StrEnum):
    PENDING = "pending"
    INGESTING = "ingesting"
    INGESTED = "ingested"
    REFUSED = "refused"
    FAILED = "failed"
    #: Of a type no extractor reads yet: kept (its thirty-day expiry), pending once one exists
    #: (``knowledge docs reextract``).
    AWAITING_EXTRACTOR = "awaiting_extractor"


#: The scope a principal needs to ingest (`knowledge.tools`, `knowledge.ingest`).
WRITE_SCOPE = "knowledge.write"
#: The event an ingest writes in its transaction.
INGESTED_EVENT = "knowledge.document.ingested"

#: How an extracted text is structured: what the chunker reads it as.
Structure = Literal["markdown", "plain"]
