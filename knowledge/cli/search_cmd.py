"""``knowledge search QUERY``: the passages the principal may read, as the rendered ``<knowledge>`` block."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Annotated

import anyio
import typer

from knowledge.cli.context import CliError, open_service, options, require_tenant
from knowledge.models import KnowledgeQuery, RetrievedPassage, Sensitivity
from knowledge.render import render_knowledge_block
from knowledge.semantic.arm import SemanticArm
from knowledge.service import KnowledgeService

_MINUTE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(Z|[+-]\d{2}:?\d{2})?$")


def parse_as_of(value: str) -> datetime:
    """``--as-of``: an ISO 8601 instant (``Z`` or an offset; without one, UTC — the time the tables
    print); a minute (``2026-12-02 20:13``, as ``docs versions`` prints it) means the end of that
    minute, a date (``2026-12-02``) the end of that day: the corpus as it stood then."""
    text = value.strip().removesuffix(" UTC")
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time.max, UTC)
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--as-of must be a date or an ISO 8601 datetime (e.g. 2026-12-02 or 2026-12-02T20:13Z), "
                       f"not {value!r}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        when = when.replace(tzinfo=UTC)
    if _MINUTE.match(text):
        when = when.replace(second=59, microsecond=999999)
    return when


#: How long a search waits for its process's embedder child to load the model (then: lexical only, said).
EMBEDDER_WAIT_SECONDS = 60.0


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for.", metavar="QUERY", show_default=False)],
    project: Annotated[str | None, typer.Option(help="The current project scope (ranking, and project "
                                                     "visibility).")] = None,
    as_of: Annotated[str | None, typer.Option(help="Search the corpus as it was then: a date (its end), a minute "
                                                   "as the tables print it (its end), or an ISO 8601 instant "
                                                   "(UTC unless it says otherwise).",
                                              show_default=False)] = None,
    budget: Annotated[int, typer.Option(min=0, help="Token budget for the passages.")] = 3000,
    max_passages: Annotated[int, typer.Option(min=0)] = 3,
    ceiling: Annotated[Sensitivity, typer.Option(help="The surface's sensitivity ceiling.")] = Sensitivity.INTERNAL,
    min_relevance: Annotated[float, typer.Option(min=0.0, max=1.0, help="Return only passages at least this likely "
                                                 "to answer (the passages' calibrated relevance).")] = 0.0,
) -> int:
    """Search as --principal of --tenant and print the rendered <knowledge> block (or, with --json,
    the passages and the block)."""
    opts = options(ctx)
    when = parse_as_of(as_of) if as_of is not None else None
    if not query.strip():
        raise CliError("the query is empty")
    request = KnowledgeQuery(tenant_id=opts.tenant, principal_id=opts.principal_id, current_scope=project,
                             text=query, as_of=when, budget_tokens=budget, max_passages=max_passages,
                             sensitivity_ceiling=ceiling, min_relevance=min_relevance)

    async def run() -> tuple[list[RetrievedPassage], str, list[str], list[str]]:
        # Only the query is embedded here: no backfill, no drain competing with it for the child.
        async with open_service(opts, semantic_backfill=False, semantic_drain=False) as svc:
            await require_tenant(svc, opts.tenant)
            embedder = svc.embedder
            if embedder is not None:  # a fresh process: its embedder child is loading the model
                with anyio.move_on_after(EMBEDDER_WAIT_SECONDS):
                    await embedder.wait_ready()
            before = svc.searcher.without[SemanticArm.name]
            passages = await svc.search(request)
            notes, arms = [], ["lexical"]
            if embedder is not None and svc.searcher.without[SemanticArm.name] > before:
                notes.append(f"the semantic arm did not answer (its model was not loaded within "
                             f"{EMBEDDER_WAIT_SECONDS:.0f} s): these passages are from the lexical arm only")
            elif embedder is not None:
                arms.append(SemanticArm.name)
            if not passages:
                notes.append(await _why_nothing(svc, request))
            return passages, svc.searcher.policy.name, arms, notes

    passages, policy, arms, notes = opts.run(run)
    rendered_at = when or datetime.now(UTC)
    block = render_knowledge_block(passages, as_of=rendered_at, policy=policy)
    if opts.out.json:
        opts.out.emit_json({"query": request, "as_of": rendered_at, "arms": arms, "passages": passages,
                            "block": block, **({"notes": notes} if notes else {})})
    else:
        opts.out.text(block)
    for note in notes:
        opts.out.note(note)
    return 0


async def _why_nothing(svc: KnowledgeService, request: KnowledgeQuery) -> str:
    """Why a search returned no passage: its budget admitted none of those found, or none was
    relevant enough (a second search without the budget tells which)."""
    if request.max_passages == 0:
        return "--max-passages 0 admits no passage"
    if request.budget_tokens < UNBOUNDED_TOKENS:
        found = await svc.search(request.model_copy(update={"budget_tokens": UNBOUNDED_TOKENS}))
        if found:
            return (f"the budget of {request.budget_tokens} tokens admits none of the {len(found)} passages found "
                    f"(the best needs {found[0].tokens}): raise --budget")
    return "no passage found that is relevant enough to return"


#: A budget no passage exceeds (the second search of `_why_nothing`).
UNBOUNDED_TOKENS = 1_000_000
