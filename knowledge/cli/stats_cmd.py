"""``knowledge stats``: the spec's tracked metrics for one tenant.

Corpus size; ingestion outcomes by cause and the instruction-like rate (`KnowledgeService.ingest_stats`);
budget pressure (`KnowledgeService.budget_pressure`, from the turn counters, with the agent's
``knowledge.search`` calls); the passages the agent was given (from the recall traces still
retained); citations of the agent's recorded answers — hallucinated ones, citation accuracy and rate
(`KnowledgeService.citation_stats`); owner-sent attachments by state and reason, with the signs of a
worker that is gone (`KnowledgeService.attachment_overview`). Budget pressure and passages given
read "n/a" until a turn was traced, citations until an answer was recorded. The semantic arm's
backlog is read from the queue (never the model); on a database
without pgvector the arm shows as unavailable, with the reason, instead. A tenant nothing was ever
put in gets a line saying so above its empty report (``--json``: ``tenant_known: false`` and a ``note``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Annotated, Any

import typer

from knowledge.cli.context import configured_model_version, options, parse_instant, semantic_arm_state
from knowledge.cli.output import human_bytes, safe
from knowledge.cli.reading import open_reader

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from knowledge.ingest.attachments import QueueOverview
    from knowledge.semantic.queue import Backlog
    from knowledge.store.answers import CitationStats
    from knowledge.store.catalog import CorpusSize, PassagesGiven, TenantSummary
    from knowledge.store.metrics import BudgetPressure, IngestDay, IngestStats

NO_TRACES = "n/a (no turns traced)"


def unknown_tenant_note(tenant: str) -> str:
    return (f"tenant {tenant!r} has nothing stored: nothing was ever ingested or uploaded there "
            "(knowledge tenants lists the tenants)")


@dataclass
class _Read:
    known: bool
    corpus: CorpusSize
    ingest: IngestStats
    pressure: BudgetPressure
    given: PassagesGiven | None
    citations: CitationStats
    attachments: QueueOverview
    #: Why the configured semantic arm has no vectors in this database (no pgvector), or None.
    semantic_missing: str | None
    backlog: Backlog | None
    trend: list[IngestDay]


def stats(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(
        help="Count from this day on (a date or an ISO 8601 instant: its UTC day), and show the ingestion "
             "trend day by day (refusals by cause, instruction-like rate).", show_default=False)] = None,
) -> int:
    """Corpus size, ingestion outcomes by cause, instruction-like rate, budget pressure, passages given,
    citations; with ``--since``, counted from that day, and the ingestion trend day by day."""
    opts = options(ctx)
    day: date | None = parse_instant(since, "--since", end=False).date() if since is not None else None
    # The queue is read without the arm: stats never starts the model. (Before the loop: `enabled`
    # looks for the extra's packages and model files.)
    version = configured_model_version(opts.settings())

    async def run() -> _Read:
        from knowledge.ingest.attachments import AttachmentQueue
        from knowledge.semantic.queue import queue_backlog
        from knowledge.store.answers import citation_stats
        from knowledge.store.metrics import budget_pressure, ingest_stats, ingest_trend
        from knowledge.store.vectors import missing_reason

        async with open_reader(opts) as cat:
            # Without pgvector there is no vector table to count against: the arm is unavailable, not an error.
            missing = await cat.read("semantic_missing", missing_reason) if version is not None else None
            return _Read(
                known=await cat.tenant_known(opts.tenant), corpus=await cat.corpus_size(opts.tenant),
                ingest=await cat.read("ingest_stats", ingest_stats, opts.tenant, day),
                pressure=await cat.read("budget_pressure", budget_pressure, opts.tenant, day),
                given=await cat.passages_given(opts.tenant),
                citations=await cat.read("citation_stats", citation_stats, opts.tenant, day),
                trend=await cat.read("ingest_trend", ingest_trend, opts.tenant, day) if day is not None else [],
                attachments=await cat.read("attachment_overview",
                                           lambda db, tenant: AttachmentQueue(db).overview(tenant), opts.tenant),
                semantic_missing=missing,
                backlog=await cat.read("queued_for", queue_backlog, version, opts.tenant)
                if version is not None and missing is None else None)

    read = opts.run(run, read_only=True)
    corpus, ingest, pressure, given, citations, attachments, backlog = (
        read.corpus, read.ingest, read.pressure, read.given, read.citations, read.attachments, read.backlog)
    arm = semantic_arm_state(version, read.semantic_missing)
    traced = pressure.turns > 0 or pressure.tool_calls > 0
    if opts.out.json:
        opts.out.emit_json({
            "tenant": opts.tenant,
            "tenant_known": read.known,
            **({} if read.known else {"note": unknown_tenant_note(opts.tenant)}),
            "corpus": corpus,
            "ingestion": {"accepted": ingest.accepted, "refused": ingest.refused, "failed": ingest.failed,
                          "live_chunks": ingest.live_chunks, "instruction_like_chunks": ingest.instruction_like_chunks,
                          "instruction_like_rate": ingest.instruction_like_rate},
            "since": day.isoformat() if day is not None else None,
            "trend": [{**d.model_dump(mode="json"), "refusal_rate": d.refusal_rate,
                       "instruction_like_rate": d.instruction_like_rate} for d in read.trend],
            "budget_pressure": ({**pressure.model_dump(), "yield_rate": pressure.yield_rate,
                                 "yielded_passage_share": pressure.yielded_passage_share} if traced else None),
            "passages_given": given if given is not None and given.traces else None,
            "citations": ({**citations.model_dump(), "hallucination_rate": citations.hallucination_rate,
                           "citing_share": citations.citing_share, "citation_accuracy": citations.accuracy,
                           "citation_rate": citations.rate} if citations.answers else None),
            "attachments": attachments,
            "semantic_arm": arm,
            "embedding_backlog": backlog,
        })
        return 0
    out = opts.out
    if not read.known:  # the note first, then the (empty) report
        out.text(safe(unknown_tenant_note(opts.tenant)))  # (plain: a tenant name is not markup)
    out.fields(f"Corpus (tenant {opts.tenant})", {
        "documents": corpus.documents, "versions": corpus.versions, "chunks": corpus.chunks, "tokens": corpus.tokens,
        "source bytes": f"{human_bytes(corpus.source_bytes)} live, {human_bytes(corpus.retained_source_bytes)} "
                        "with earlier versions",
        "deleted citations": f"{corpus.deleted_chunks} chunk ids resolve to deleted",
    })
    rows: list[tuple[Any, ...]] = [("accepted", "-", ingest.accepted)]
    rows += [("refused", reason, n) for reason, n in sorted(ingest.refused.items(), key=lambda kv: -kv[1])]
    rows += [("failed", reason, n) for reason, n in sorted(ingest.failed.items(), key=lambda kv: -kv[1])]
    out.table("Ingestion outcomes", ["outcome", "cause", "count"], rows)
    out.line(f"instruction-like rate: {ingest.instruction_like_rate:.2%} "
             f"({ingest.instruction_like_chunks} of {ingest.live_chunks} live chunks)")
    if day is not None:
        out.table(f"Ingestion by day since {day.isoformat()}",
                  ["day", "accepted", "refused", "refusal rate", "top causes", "chunks", "instruction-like"],
                  [(d.day.isoformat(), d.accepted, sum(d.refused.values()), f"{d.refusal_rate:.1%}",
                    ", ".join(f"{cause} {n}" for cause, n in sorted(d.refused.items(), key=lambda kv: -kv[1])[:3])
                    or "-", d.chunks, f"{d.instruction_like_rate:.2%}") for d in read.trend],
                  wrap=["top causes"])
    if not traced:
        out.line(f"budget pressure: {NO_TRACES}")
    else:
        out.fields("Budget pressure", {
            "turns": pressure.turns, "turns with knowledge": pressure.knowledge_turns,
            "knowledge yielded": f"{pressure.yielded_turns} turns ({pressure.yield_rate:.1%})",
            "passages yielded": f"{pressure.passages_yielded} of {pressure.passages_admitted} admitted "
                                f"({pressure.yielded_passage_share:.1%}), {pressure.tokens_yielded} tokens",
            "recall yielded too": f"{pressure.recall_yielded_turns} turns",
            "knowledge.search calls": f"{pressure.tool_calls} ({pressure.tool_passages} passages returned)",
        })
    if given is None or not given.traces:
        out.line(f"passages given: {NO_TRACES}")
    else:
        out.fields("Passages given to the agent (retained traces)", {
            "traces": f"{given.traces} ({given.traces_with_passages} with passages)",
            "passages": given.passages, "distinct chunks": given.distinct_chunks,
            "distinct documents": given.distinct_documents, "since deleted": given.since_deleted,
        })
        if given.top_documents:
            out.table("Most given", ["document", "title", "passages"],
                      [(t.document_id, t.title or "(deleted)", t.passages) for t in given.top_documents],
                      wrap=["title"])
    if not citations.answers:
        out.line("citations: n/a (no answer recorded: svc.record_answer)")
    else:
        out.fields("Citations (recorded answers)", {
            "answers": f"{citations.answers} ({citations.answers_citing} citing, {citations.citing_share:.1%})",
            "citations": citations.citations,
            "hallucinated": f"{citations.hallucinated} ({citations.hallucination_rate:.1%}: ids the turn never showed)",
            "citation accuracy": "n/a (no citation judged)" if citations.accuracy is None else
            f"{citations.accuracy:.1%} ({citations.supported} of {citations.supported + citations.unsupported} "
            "citations: the cited passage supports the claim)",
            "citation rate": "n/a (no answer drew on a passage)" if citations.rate is None else
            f"{citations.rate:.1%} ({citations.answers_citing_drawn} of {citations.answers_drawing} answers "
            "that drew on a passage cite every one)",
        })
    _attachments(opts, attachments)
    if arm["state"] == "unavailable":
        out.line(f"semantic arm ({arm['model_version']}): unavailable, search is lexical-only — {arm['reason']}")
    if backlog is not None:
        out.fields(f"Semantic arm ({backlog.model_version})", {
            "waiting for vectors": f"{backlog.chunks} chunks in {backlog.chunk_sets} chunk sets"
                                   + (f" ({backlog.stuck_sets} stuck: `knowledge docs reembed` retries them)"
                                      if backlog.stuck_sets else ""),
            "oldest wait": f"{backlog.oldest_wait_seconds:.0f} s",
        })
    return 0


def _attachments(opts: Any, queue: QueueOverview) -> None:
    out = opts.out
    if not queue.by_state:
        out.line("attachments: none sent")
        return
    rows: list[tuple[Any, ...]] = []
    for state in ("pending", "ingesting", "ingested", "refused", "failed", "awaiting_extractor"):
        if state not in queue.by_state:
            continue
        causes = queue.reasons.get(state)
        if causes:
            rows += [(state, reason, n) for reason, n in sorted(causes.items(), key=lambda kv: -kv[1])]
        else:
            rows.append((state, "-", queue.by_state[state]))
    out.table("Attachments (owner-sent)", ["state", "reason", "count"], rows)
    if queue.expired_leases:
        out.line(f"[bold red]{queue.expired_leases} attachment(s) ingesting under an expired lease[/]: their "
                 "worker died or stalls; a live worker takes them over")
    if queue.oldest_pending_seconds is not None and queue.oldest_pending_seconds > 60:
        out.line(f"[bold yellow]oldest pending attachment waits {queue.oldest_pending_seconds:.0f} s[/]: is a "
                 "worker running? (knowledge worker)")


def tenants(ctx: typer.Context) -> int:
    """Every tenant of the store, with its live documents."""
    opts = options(ctx)

    async def run() -> list[TenantSummary]:
        async with open_reader(opts) as cat:
            return await cat.tenants()

    found = opts.run(run, read_only=True)
    if opts.out.json:
        opts.out.emit_json(found)
        return 0
    opts.out.table(None, ["tenant", "documents"], [(t.tenant_id, t.documents) for t in found])
    opts.out.line(f"{len(found)} tenant{'s' * (len(found) != 1)}")
    return 0
