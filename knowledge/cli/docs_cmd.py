"""``knowledge docs list | show | versions | delete | rechunk | reembed`` and ``knowledge chunk show``.

The operator's view of one tenant (``--tenant``): every document in it, whatever its visibility.
Deleting and re-chunking act as ``--principal``, who must be the principal that ingested the document.
"""

from __future__ import annotations

import re
import sys
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from knowledge.cli import signals
from knowledge.cli.context import (
    EXIT_REFUSED,
    CliError,
    Options,
    TenantReads,
    open_service,
    options,
    parse_instant,
    require_tenant,
)
from knowledge.cli.output import human_bytes, safe
from knowledge.cli.reading import open_reader

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from knowledge.models import DeletedChunk
    from knowledge.store.catalog import Catalog, Citation, DocumentDetail, DocumentSummary, VersionInfo

docs_app = typer.Typer(help="List, inspect, delete, re-chunk and re-extract documents.", no_args_is_help=True)
chunk_app = typer.Typer(help="Resolve citations (chunk ids).", no_args_is_help=True)


_PREFIX = re.compile(r"^[0-9a-f]{4,32}$")


def document_ref(value: str) -> uuid.UUID | str:
    """A document id, or (as git takes commits) a prefix of one: at least 4 hex digits, dashes
    ignored — checked here, resolved in the tenant by `resolve_document` within the command."""
    try:
        return uuid.UUID(value)
    except ValueError:
        pass
    prefix = value.strip().lower().replace("-", "")
    if not _PREFIX.match(prefix):
        raise CliError(f"not a document id (a UUID, or a unique prefix of at least 4 hex digits): {value!r}")
    return prefix


async def resolve_document(cat: TenantReads, tenant: str, ref: uuid.UUID | str) -> uuid.UUID:
    """The document a `document_ref` names: an ambiguous or unknown prefix is refused, naming the
    candidates."""
    if isinstance(ref, uuid.UUID):
        return ref
    found = await cat.document_ids_starting(tenant, ref)
    if len(found) == 1:
        return found[0]
    if not found:
        raise CliError(f"document_not_found: no document id in tenant {tenant} starts with {ref!r}", EXIT_REFUSED)
    raise CliError(f"{ref!r} is ambiguous: {', '.join(str(d) for d in found[:5])}"
                   f"{' …' if len(found) > 5 else ''}; give more digits")


_CHUNK_ID = re.compile(r"^kc_[a-z0-9]+$")
#: Characters of a chunk id a prefix must give after ``kc_`` (as a document prefix needs 4 hex digits).
MIN_CHUNK_PREFIX = 4
#: Candidates an ambiguous chunk prefix lists.
SHOWN_CANDIDATES = 6


def chunk_ref(value: str) -> str:
    """A chunk id (``kc_…``), or a prefix of one with at least `MIN_CHUNK_PREFIX` characters after
    ``kc_`` (which may be left out) — checked here, resolved in the tenant by `resolve_chunk_ref`."""
    text = value.strip().lower()
    text = text if text.startswith("kc_") else "kc_" + text
    if not _CHUNK_ID.match(text) or len(text) < len("kc_") + MIN_CHUNK_PREFIX:
        raise CliError(f"not a chunk id (kc_…, or a unique prefix of one with at least {MIN_CHUNK_PREFIX} "
                       f"characters after kc_): {value!r}")
    return text


async def resolve_chunk_ref(cat: Catalog, tenant: str, ref: str) -> tuple[str, Citation | DeletedChunk]:
    """The chunk a `chunk_ref` names and what it resolves to: the id itself if the tenant has (or
    had) it, else the one chunk id starting with it. An unknown prefix is refused (exit 1), an
    ambiguous one lists its candidates (at most `SHOWN_CANDIDATES`; exit 2)."""
    found = await cat.resolve_citation(tenant, ref)
    if found is not None:
        return ref, found
    candidates = await cat.chunk_ids_starting(tenant, ref, SHOWN_CANDIDATES + 1)
    if len(candidates) == 1:
        resolved = await cat.resolve_citation(tenant, candidates[0])
        if resolved is not None:  # (unless deleted in between)
            return candidates[0], resolved
    if len(candidates) > 1:
        raise CliError(f"{ref!r} is ambiguous: {', '.join(candidates[:SHOWN_CANDIDATES])}"
                       f"{' …' if len(candidates) > SHOWN_CANDIDATES else ''}; give more characters")
    raise CliError(f"chunk_not_found: no chunk id in tenant {tenant} is or starts with {ref!r}", EXIT_REFUSED)


def _path(heading_path: list[str]) -> str:
    from knowledge.core.render import PATH_SEPARATOR

    return PATH_SEPARATOR.join(heading_path)


@docs_app.command("list")
def list_documents(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project's documents.")] = None,
    ingested_by: Annotated[str | None, typer.Option(help="Only documents this principal ingested.")] = None,
    title: Annotated[str | None, typer.Option(help="Only documents whose title contains this (any case).",
                                              show_default=False)] = None,
    since: Annotated[str | None, typer.Option(help="Only documents ingested since then (a date, a minute as the "
                                                   "tables print it, or an ISO 8601 instant).",
                                              show_default=False)] = None,
    limit: Annotated[int, typer.Option(min=1)] = 1000,
) -> int:
    """The tenant's live documents, newest first."""
    opts = options(ctx)
    after = parse_instant(since, "--since", end=False) if since is not None else None

    async def run() -> list[DocumentSummary]:
        async with open_reader(opts) as cat:
            await require_tenant(cat, opts.tenant)
            return await cat.documents(opts.tenant, project=project, ingested_by=ingested_by, limit=limit,
                                       title=title, since=after)

    docs = opts.run(run, read_only=True)
    if opts.out.json:
        opts.out.emit_json(docs)
        return 0
    rows = [(d.document_id, d.version, d.title, d.chunks, f"{d.ingested_at:%Y-%m-%d}") for d in docs]
    opts.out.table(None, ["document", "v", "title", "chunks", "ingested"], rows, wrap=["title"])
    opts.out.line(f"{len(rows)} document{'s' * (len(rows) != 1)} in tenant {safe(opts.tenant)}")
    return 0


def _show_document(opts: Options, detail: DocumentDetail) -> None:
    d, s = detail.document, detail.source
    opts.out.fields(f"Document {d.document_id}", {
        "title": d.title, "version": f"{d.version} (of {detail.versions})", "visibility": d.visibility,
        "project scope": d.project_scope or "-", "sensitivity": d.sensitivity, "authority": d.authority,
        "doc date": d.doc_date or "-", "ingested": f"{d.ingested_at:%Y-%m-%d %H:%M:%S %Z} by {d.ingested_by}",
        "chunker": d.chunker_version,
        "chunks": f"{d.chunks} ({d.tokens} tokens, {d.instruction_like_chunks} instruction-like)",
        "source": f"{s.artifact_id} ({s.origin})", "source sha256": s.sha256,
        "source size": f"{human_bytes(s.size_bytes)} {s.media_type}", "file name": s.file_name or "-",
    })
    opts.out.table("Chunks", ["#", "chunk", "heading path", "tokens", "instruction-like"],
                   [(c.ordinal, c.chunk_id, _path(c.heading_path), c.tokens, "yes" if c.instruction_like else "")
                    for c in detail.chunks], wrap=["heading path"])


@docs_app.command("show")
def show(ctx: typer.Context, document_id: Annotated[str, typer.Argument(metavar="ID")]) -> int:
    """A document's live version, its source, and its chunks (without their text)."""
    opts = options(ctx)
    ref = document_ref(document_id)

    async def run() -> tuple[uuid.UUID, DocumentDetail | None]:
        async with open_reader(opts) as cat:
            doc_id = await resolve_document(cat, opts.tenant, ref)
            return doc_id, await cat.document(opts.tenant, doc_id)

    doc_id, detail = opts.run(run, read_only=True)
    if detail is None:
        raise CliError(f"document_not_found: no live document {doc_id} in tenant {opts.tenant}", EXIT_REFUSED)
    if opts.out.json:
        opts.out.emit_json(detail)
    else:
        _show_document(opts, detail)
    return 0


@docs_app.command("versions")
def versions(ctx: typer.Context, document_id: Annotated[str, typer.Argument(metavar="ID")]) -> int:
    """Every version of a document still held (superseded ones stay readable with search --as-of)."""
    opts = options(ctx)
    ref = document_ref(document_id)

    async def run() -> tuple[uuid.UUID, list[VersionInfo]]:
        async with open_reader(opts) as cat:
            doc_id = await resolve_document(cat, opts.tenant, ref)
            return doc_id, await cat.document_versions(opts.tenant, doc_id)

    doc_id, held = opts.run(run, read_only=True)
    if not held:
        raise CliError(f"document_not_found: no document {doc_id} in tenant {opts.tenant}", EXIT_REFUSED)
    if opts.out.json:
        opts.out.emit_json(held)
        return 0
    opts.out.table(f"Document {doc_id}", ["v", "state", "valid from", "valid to", "title", "chunk sets", "source"], [
        (v.document.version, "live" if v.document.live else "superseded", v.document.valid_from,
         v.document.valid_to or "-", v.document.title,
         ", ".join(f"{s.chunker_version}:{s.chunk_count}{'' if s.superseded_at is None else ' (re-chunked)'}"
                   for s in v.chunk_sets),
         f"{v.source.sha256[:12]} {human_bytes(v.source.size_bytes)}")
        for v in held], wrap=["title", "chunk sets"])
    return 0


@docs_app.command("delete")
def delete(
    ctx: typer.Context,
    document_id: Annotated[str, typer.Argument(metavar="ID")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> int:
    """Delete every version of a document, its chunks, index rows and postings, and its source bytes.
    Citations of it then resolve to "deleted"."""
    opts = options(ctx)
    ref = document_ref(document_id)
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("refusing to delete without --yes (standard input is not a terminal)")

        async def named() -> uuid.UUID:  # the whole id in the question
            async with open_reader(opts) as cat:
                return await resolve_document(cat, opts.tenant, ref)

        ref = opts.run(named, read_only=True)
        with signals.raising():
            confirmed = typer.confirm(f"Delete document {ref} and every version of it?")
        if not confirmed:
            raise CliError("not deleted", EXIT_REFUSED)
    principal = opts.principal()

    async def run() -> tuple[uuid.UUID, int, int]:
        async with open_service(opts, semantic_arm=False) as svc:
            doc_id = await resolve_document(svc, opts.tenant, ref)
            chunks = await svc.delete(doc_id, principal)
            return doc_id, chunks, await svc.sweep_artifacts()

    doc_id, chunks, swept = opts.run(run)
    if opts.out.json:
        opts.out.emit_json({"document_id": doc_id, "deleted": True, "chunks": chunks, "artifacts_swept": swept})
    else:
        opts.out.line(f"deleted document {doc_id}: {chunks} chunk{'s' * (chunks != 1)}, every version and "
                      f"its source bytes ({swept} artifact{'s' * (swept != 1)} swept)")
    return 0


class ChunkerChoice(StrEnum):
    CURRENT = "current"  # the chunker this build ingests with (Markdown structure or paragraphs, by media type)
    PARAGRAPHS = "paragraphs"  # paragraphs only, headings ignored


@docs_app.command("rechunk")
def rechunk(
    ctx: typer.Context,
    document_id: Annotated[str, typer.Argument(metavar="ID")],
    chunker: Annotated[ChunkerChoice, typer.Option(help="current: this build's chunker (after an upgrade); "
                                                       "paragraphs: headings ignored.")] = ChunkerChoice.CURRENT,
) -> int:
    """Re-chunk a document's live version from its stored source under another chunker version. The old
    chunk set's citations keep resolving; live search reads the new one."""
    opts = options(ctx)
    ref = document_ref(document_id)
    principal = opts.principal()

    async def run() -> tuple[uuid.UUID, int, str]:
        # The new chunk set is queued for the semantic arm; this process loads no model.
        async with open_service(opts, semantic_model=False, semantic_backfill=False) as svc:
            doc_id = await resolve_document(svc, opts.tenant, ref)
            live = await svc.document(doc_id, tenant_id=opts.tenant)
            if live is None:
                raise CliError(f"document_not_found: no live document {doc_id} in tenant {opts.tenant}",
                               EXIT_REFUSED)
            from knowledge.core.chunking import Chunker, PlainTextChunker

            choice: Chunker = PlainTextChunker() if chunker is ChunkerChoice.PARAGRAPHS \
                else svc.chunker_for(live.document.media_type)
            return doc_id, await svc.rechunk(doc_id, choice, principal), choice.version

    doc_id, count, version = opts.run(run)
    if opts.out.json:
        opts.out.emit_json({"document_id": doc_id, "chunker_version": version, "chunks": count})
    else:
        opts.out.line(f"re-chunked document {doc_id} under {version}: {count} chunk{'s' * (count != 1)}")
    return 0


@docs_app.command("reembed")
def reembed(
    ctx: typer.Context,
    window: Annotated[int | None, typer.Option(help="word pieces per window (another window is another model "
                                                    "version); default: the configured one")] = None,
) -> int:
    """Embed, under the semantic arm's model version, every chunk of the tenant that has no vector under it
    (ingested with the arm off, or under another version), from stored chunk text. Old vectors stay."""
    opts = options(ctx)

    async def run() -> tuple[int, str]:
        overrides: dict[str, object] = {"semantic_arm": True, "semantic_backfill": False,
                                        "embedding_tenant": opts.tenant}  # its drain serves this tenant only
        if window is not None:
            overrides["semantic_window"] = window
        async with open_service(opts, **overrides) as svc:
            return await svc.reembed(opts.tenant), str(svc.semantic_version)

    count, version = opts.run(run)
    if opts.out.json:
        opts.out.emit_json({"tenant": opts.tenant, "model_version": version, "chunks": count})
    else:
        opts.out.line(f"embedded {count} chunk{'s' * (count != 1)} of tenant {opts.tenant} under {version}")
    return 0


@docs_app.command("reextract")
def reextract(
    ctx: typer.Context,
    media_type: Annotated[str | None, typer.Option("--media-type", help="Only sources and documents of this media "
                                                                        "type (e.g. text/html).")] = None,
) -> int:
    """Re-run ingestion over stored sources, never asking for a re-upload: sources refused as
    unsupported_media_type (kept 30 days) whose type now has an extractor become documents, such
    attachments become pending, and documents whose extractor's version changed get a new version."""
    opts = options(ctx)

    async def run() -> Any:
        # The new documents are queued for the semantic arm; this process loads no model.
        async with open_service(opts, semantic_model=False, semantic_backfill=False) as svc:
            return await svc.reextract(opts.tenant, media_type=media_type)

    done = opts.run(run)
    if opts.out.json:
        opts.out.emit_json({"tenant": opts.tenant, "media_type": media_type, **done.model_dump(mode="json")})
        return 0
    refused = ", ".join(f"{reason} {n}" for reason, n in sorted(done.refused.items())) or "none"
    opts.out.fields(f"Re-extraction of tenant {opts.tenant}" + (f" ({media_type})" if media_type else ""), {
        "new documents": done.ingested, "new versions": done.versioned, "attachments now pending": done.attachments,
        "unchanged documents": done.unchanged, "still unsupported": done.still_unsupported, "refused": refused,
        "still awaiting an extractor": ", ".join(f"{t} {n}" for t, n in done.awaiting.items()) or "none"})
    return 0


@chunk_app.command("show")
def chunk_show(ctx: typer.Context, chunk_id: Annotated[str, typer.Argument(
        metavar="CHUNK_ID", help="A chunk id, or a unique prefix of one (at least 4 characters after kc_).")]) -> int:
    """Resolve a citation: the passage, its document version and its source; a deleted one shows as deleted."""
    opts = options(ctx)
    ref = chunk_ref(chunk_id)

    async def run() -> tuple[str, Citation | DeletedChunk]:
        async with open_reader(opts) as cat:
            return await resolve_chunk_ref(cat, opts.tenant, ref)

    from knowledge.models import DeletedChunk

    chunk_id, found = opts.run(run, read_only=True)
    if isinstance(found, DeletedChunk):
        if opts.out.json:
            opts.out.emit_json({"status": "deleted", **found.model_dump(mode="json")})
        else:
            opts.out.line(f"chunk {safe(chunk_id)}: this passage has been deleted "
                          f"(document {found.document_id}, deleted {found.deleted_at:%Y-%m-%d %H:%M:%S %Z})")
        return 0
    status = "live" if found.live else "historical"
    if opts.out.json:
        opts.out.emit_json({"status": status, **found.model_dump(mode="json")})
        return 0
    c, d, s = found.chunk, found.document, found.source
    opts.out.fields(f"Chunk {c.chunk_id} ({status})", {
        "document": f"{d.document_id} v{d.version}{'' if d.live else ' (superseded)'}", "title": d.title,
        "heading path": _path(c.heading_path) or "-", "ordinal": c.ordinal, "tokens": c.tokens,
        "instruction-like": "yes" if c.contains_instruction_like_text else "no", "content sha256": c.content_sha256,
        "source": f"{s.artifact_id} {s.media_type} {human_bytes(s.size_bytes)} sha256 {s.sha256[:16]}…",
        "file name": s.file_name or "-",
    })
    opts.out.line("")
    opts.out.text(safe(c.text))
    return 0
