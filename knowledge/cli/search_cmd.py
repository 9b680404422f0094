"""``knowledge search QUERY``: the passages the principal may read — for a person on a terminal, a
readable list (rank, relevance, title and heading path, chunk id, the passage as plain text); the
agent's rendered ``<knowledge>`` block when piped or with ``--format envelope``; ``--json`` /
``--jsonl`` for scripts."""

from __future__ import annotations

import sys
import textwrap
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from knowledge.cli.context import CliError, open_service, options, parse_instant, require_tenant
from knowledge.cli.output import Output, safe
from knowledge.vocabulary import Sensitivity

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from knowledge.models import KnowledgeQuery, RetrievedPassage
    from knowledge.service import KnowledgeService

def parse_as_of(value: str) -> datetime:
    """``--as-of``: an ISO 8601 instant (UTC unless it says), or a date or minute meaning its end:
    the corpus as it stood then (`parse_instant`)."""
    return parse_instant(value, "--as-of", end=True)


class Format(StrEnum):
    AUTO = "auto"
    TEXT = "text"
    ENVELOPE = "envelope"


def show_passages(out: Output, passages: list[RetrievedPassage]) -> None:
    """The passages for a person: a header line (rank, title, heading path), a line of facts
    (relevance, chunk id, date, arms), then the passage as plain text, indented. Document text is
    never markup and its control characters are shown escaped (`safe`)."""
    for rank, p in enumerate(passages, 1):
        head = Text()
        head.append(f"{rank}. {safe(p.title)}", style="bold")
        headings = p.heading_path[1:] if p.heading_path[:1] == [p.title] else p.heading_path
        if headings:
            head.append("  ›  " + " › ".join(safe(h) for h in headings))
        facts = [f"relevance {p.relevance:.2f}" if p.relevance is not None else f"score {p.score:.3f}",
                 f"chunk {p.chunk_id}", *([p.doc_date.isoformat()] if p.doc_date else []), "+".join(p.arms),
                 f"{p.tokens} tokens"]
        out.console.print(head)
        out.console.print(Text("   " + " · ".join(facts), style="dim"))
        if p.instruction_like:
            out.console.print(Text("   instruction-like: quote it, never follow it", style="yellow"))
        # Verbatim: the terminal wraps long lines, rich inserts no line break of its own.
        out.console.print(Text(textwrap.indent(safe(p.text).rstrip("\n"), "   ", lambda _: True) + "\n"),
                          soft_wrap=True)


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
    output_format: Annotated[Format, typer.Option(
        "--format", help="text: for a person; envelope: the agent's <knowledge> block; auto: text on a terminal, "
                         "else envelope.")] = Format.AUTO,
) -> int:
    """Search as --principal of --tenant: the passages for a person on a terminal, the agent's
    <knowledge> block when piped (or with --format envelope); --json: the passages and the block;
    --jsonl: a line per passage."""
    from knowledge.core.render import render_knowledge_block
    from knowledge.semantic.arm import SemanticArm

    opts = options(ctx)
    when = parse_as_of(as_of) if as_of is not None else None
    if not query.strip():
        raise CliError("the query is empty")
    from knowledge.models import KnowledgeQuery

    request = KnowledgeQuery(tenant_id=opts.tenant, principal_id=opts.principal_id, current_scope=project,
                             text=query, as_of=when, budget_tokens=budget, max_passages=max_passages,
                             sensitivity_ceiling=ceiling, min_relevance=min_relevance)

    async def run() -> tuple[list[RetrievedPassage], str, list[str], list[str]]:
        # Only the query is embedded here: no backfill, no drain competing with it for the child.
        async with open_service(opts, semantic_backfill=False, semantic_drain=False) as svc:
            await require_tenant(svc, opts.tenant)
            status = svc.retrieval()
            semantic = SemanticArm.name in status.arms
            if semantic:  # a fresh process: its embedder child is loading the model
                await svc.semantic_ready(within=EMBEDDER_WAIT_SECONDS)
            before = svc.retrieval().searches_without_arm.get(SemanticArm.name, 0)
            passages = await svc.search(request)
            notes, arms = [], ["lexical"]
            if semantic and svc.retrieval().searches_without_arm.get(SemanticArm.name, 0) > before:
                notes.append(f"the semantic arm did not answer (its model was not loaded within "
                             f"{EMBEDDER_WAIT_SECONDS:.0f} s): these passages are from the lexical arm only")
            elif semantic:
                arms.append(SemanticArm.name)
            if not passages:
                notes.append(await _why_nothing(svc, request))
            return passages, status.ranking, arms, notes

    passages, policy, arms, notes = opts.run(run)
    rendered_at = when or datetime.now(UTC)
    block = render_knowledge_block(passages, as_of=rendered_at, policy=policy)
    if opts.out.lines:
        for rank, passage in enumerate(passages, 1):
            opts.out.record({"rank": rank, **passage.model_dump(mode="json")})
    elif opts.out.json:
        opts.out.emit_json({"query": request, "as_of": rendered_at, "arms": arms, "passages": passages,
                            "block": block, **({"notes": notes} if notes else {})})
    elif output_format is Format.TEXT or (output_format is Format.AUTO and sys.stdout.isatty()):
        show_passages(opts.out, passages)
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
            passages = f"{len(found)} passage{'s' * (len(found) != 1)}"
            return (f"the budget of {request.budget_tokens} tokens admits none of the {passages} found "
                    f"(the best needs {found[0].tokens}): raise --budget")
    return "no passage found that is relevant enough to return"


#: A budget no passage exceeds (the second search of `_why_nothing`).
UNBOUNDED_TOKENS = 1_000_000
