"""Settings: where the database is, how big things may be. Read from arguments or the environment."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

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
    max_artifact_bytes: int = Field(default=DEFAULT_MAX_ARTIFACT_BYTES, ge=1)
    migrate: bool = True
    #: How often the service's own sweeper collects expired artifacts; None disables it.
    sweep_interval_seconds: float | None = Field(default=300.0, gt=0)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Settings from ``$KNOWLEDGE_DSN``, ``$KNOWLEDGE_DATA_DIR`` and ``$KNOWLEDGE_DATABASE``."""
        values: dict[str, object] = {}
        if os.environ.get("KNOWLEDGE_DSN"):
            values["dsn"] = os.environ["KNOWLEDGE_DSN"]
        if os.environ.get("KNOWLEDGE_DATABASE"):
            values["database"] = os.environ["KNOWLEDGE_DATABASE"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
