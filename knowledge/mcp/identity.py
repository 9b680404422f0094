"""Who asks through the MCP server: fixed when the server starts, from its flags or environment.

An MCP client is a program the principal runs (a desktop agent, an IDE); it reaches the corpus as
the identity its operator configured, and nothing a model writes into a tool's arguments can widen
it — the tools' argument models forbid unknown fields, so a ``tenant_id`` or ``scopes`` argument is
refused (``invalid_arguments``) before any work.

The origin trust is the configuration's word for every call. The default is ``TOOL_OUTPUT``: the
server cannot tell a person's request from a model's that read a fetched page, and the spec's admit
step is that an agent cannot admit what it fetched — so ``knowledge.ingest`` (which requires
``USER``) is neither offered nor accepted. An operator whose client asks the person before each tool
call (Claude Desktop, Claude Code and Cursor do) says so with ``--origin-trust USER``, and with the
``knowledge.write`` scope the tool is offered: the admission is then that person's act.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from knowledge.errors import ConfigurationError
from knowledge.models import Principal, Viewer
from knowledge.tools import KNOWLEDGE_DOMAIN, ScopeVocabulary, ToolContext
from knowledge.vocabulary import Sensitivity, TrustLevel

#: The environment the identity is read from where no flag gives it.
ENV_SCOPES = "KNOWLEDGE_MCP_SCOPES"
ENV_PROJECT = "KNOWLEDGE_MCP_PROJECT"
ENV_SENSITIVITY = "KNOWLEDGE_MCP_SENSITIVITY"
ENV_ORIGIN_TRUST = "KNOWLEDGE_MCP_ORIGIN_TRUST"

#: The scopes an MCP principal may hold: the tool domain's (no host adds its own here).
VOCABULARY = ScopeVocabulary.with_domain((), KNOWLEDGE_DOMAIN)


class McpIdentity(BaseModel):
    """The principal every call of one server acts as, and the surface it reads through."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    principal: Principal
    origin_trust: TrustLevel = TrustLevel.TOOL_OUTPUT
    #: The project a ``project``-visibility document must belong to for this surface to see it.
    current_scope: str | None = Field(default=None, min_length=1, max_length=256)
    sensitivity_ceiling: Sensitivity = Sensitivity.INTERNAL

    @classmethod
    def configured(cls, tenant_id: str, principal_id: str, *, scopes: list[str] | None = None,
                   project: str | None = None, sensitivity: str | None = None, origin_trust: str | None = None,
                   env: Mapping[str, str] | None = None) -> McpIdentity:
        """The identity from flags, each falling back to its environment variable (`ENV_SCOPES`: a
        comma- or space-separated list). Raises `ConfigurationError` for a scope outside the
        vocabulary (a typo must not silently grant nothing) or an unknown level."""
        environ = os.environ if env is None else env
        if scopes is None:
            scopes = environ.get(ENV_SCOPES, "").replace(",", " ").split()
        unknown = sorted(s for s in scopes if s not in VOCABULARY)
        if unknown:
            raise ConfigurationError("configuration", f"unknown scopes {unknown}; the MCP server knows "
                                                      f"{sorted(VOCABULARY.scopes)}")
        project = project if project is not None else environ.get(ENV_PROJECT) or None
        sensitivity = sensitivity or environ.get(ENV_SENSITIVITY) or Sensitivity.INTERNAL.value
        origin_trust = origin_trust or environ.get(ENV_ORIGIN_TRUST) or TrustLevel.TOOL_OUTPUT.value
        try:
            ceiling = Sensitivity(sensitivity.lower())
            trust = TrustLevel(origin_trust.upper())
        except ValueError as exc:
            raise ConfigurationError("configuration", str(exc)) from None
        principal = Principal(tenant_id=tenant_id, principal_id=principal_id, scopes=frozenset(scopes))
        return cls(principal=principal, origin_trust=trust, current_scope=project, sensitivity_ceiling=ceiling)

    def tool_context(self, *, session_id: str | None = None, turn_id: str | None = None) -> ToolContext:
        """The context of one tool call (its trace is the call's own, grouped by the MCP session)."""
        return ToolContext(principal=self.principal, origin_trust=self.origin_trust, current_scope=self.current_scope,
                           sensitivity_ceiling=self.sensitivity_ceiling, session_id=session_id, turn_id=turn_id)

    def viewer(self) -> Viewer:
        """Who opens a cited chunk: the same principal, project and ceiling a search is scoped by."""
        return Viewer(tenant_id=self.principal.tenant_id, principal_id=self.principal.principal_id,
                      current_scope=self.current_scope, sensitivity_ceiling=self.sensitivity_ceiling)
