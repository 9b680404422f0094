"""Who may read a document version: the one SQL predicate every read path applies (the search arms'
candidates, a citation a host resolves for a person, a trace a person views).

A document version ``d`` is visible to a principal in a tenant when its visibility is ``tenant``,
or ``principal`` and that principal ingested it, or ``project`` and it belongs to the current scope;
and its sensitivity is at or below the surface's ceiling (`Sensitivity.admitted`). The tenant is a
separate, hard filter that every caller writes first.
"""

from __future__ import annotations


def visible(principal: str, scope: str, sensitivities: str, d: str = "d") -> str:
    """The predicate over the document version ``d``, with the placeholders (``"$5"`` …) of the
    principal (text), the current scope (text, NULL for none) and the admitted sensitivities (text[])."""
    return f"""(({d}.visibility = 'tenant'
          OR ({d}.visibility = 'principal' AND {d}.ingested_by_principal_id = {principal})
          OR ({d}.visibility = 'project' AND {d}.project_scope = {scope}))
         AND {d}.sensitivity = ANY({sensitivities}::text[]))"""
