"""``knowledge ingest PATH…``: files and folders (recursive), with a progress bar and outcomes by reason.

What the paths hold — the files, their media types, their document identity (where the file
really is, or the logical key ``--as`` / ``--root`` states), what cannot be read — is
`knowledge.cli.files`. Ingesting a folder again finds what is already there: an unchanged file is
``unchanged``, a changed one becomes a new version of its document. A file named by its location
whose 0.2 key (its folder's name and its path inside it) names a live document leaves that
document alone; the command says how many did (``folder_name_matches``), and that ``--as`` makes
them new versions of those documents. The upload is only the vehicle: it expires once ingested, the document
keeps its own copy of the source; a file of a type no extractor reads yet is kept thirty days, awaiting
one (``knowledge docs reextract``). Output: tables, ``--json``, or ``--jsonl`` (each file's outcome
as it settles, then a summary record). Interrupted (SIGINT, SIGTERM) or cut off from its database,
a ``--jsonl`` ingest still writes a record for every file — each document that committed as what
it came to — and then the summary, which says why it stopped (``interrupted``, ``error``).
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from knowledge.cli.context import EXIT_OK, EXIT_REFUSED, EXIT_UNAVAILABLE, CliError, Options, open_service, options
from knowledge.cli.files import (
    Found,
    collect,
    detect_media_type,
    document_id_for,
    document_identity,
    earlier_document_id,
    logical_name,
    read_source,
    stdin_file,
)
from knowledge.cli.output import Output, human_bytes
from knowledge.cli.signals import Interrupted
from knowledge.errors import KnowledgeError
from knowledge.vocabulary import ArtifactOrigin, Authority, Sensitivity, TrustLevel, Visibility

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from rich.progress import Progress

    from knowledge.core.prepare import IngestRequest
    from knowledge.ingest.bulk import Outcome
    from knowledge.models import Principal
    from knowledge.semantic.queue import Backlog
    from knowledge.service import KnowledgeService

#: What counts as success: no refusal among these outcomes.
OK_OUTCOMES = ("ingested", "new_version", "unchanged")


@dataclass(frozen=True)
class FileOutcome:
    """What happened to one file."""

    path: str
    outcome: str  # ingested | new_version | unchanged | refused
    reason: str | None = None  # the refusal's reason code
    message: str | None = None  # the refusal's message (never a secret: the scanner names kind and line)
    media_type: str | None = None
    size_bytes: int | None = None
    title: str | None = None
    document_id: uuid.UUID | None = None
    version: int | None = None
    chunks: int | None = None
    chunk_ordinal: int | None = None  # secret_detected: the chunk holding the credential
    heading_path: list[str] | None = None


#: How long an upload lives if the command is interrupted before it expires it (it is the vehicle
#: only: the document keeps its own copy of the source).
UPLOAD_LIFETIME = timedelta(hours=1)


@dataclass
class _Upload:
    """A file read and put, ready to be ingested (or already settled: unchanged, refused).
    ``earlier``: the ``--as`` NAME under which 0.2 ingested the live document its folder-name key
    names (this file, named by its location, is not that document); ``settled``: ``out`` is final
    (and under ``--jsonl`` written)."""

    out: FileOutcome
    request: IngestRequest | None = None
    existing: bool = False
    earlier: str | None = None
    settled: bool = False


async def upload_file(svc: KnowledgeService, principal: Principal, found: Found, request: dict[str, Any]) -> _Upload:
    """Read one file and put it as an upload with an expiry; an unchanged file or an unreadable
    one is settled here. A refusal is an outcome, not an exception."""
    from knowledge.core.prepare import IngestRequest

    file, title = found.file, found.title
    stdin_name = request.get("stdin", {}).get(file)
    out = FileOutcome(path="-" if stdin_name else str(file), outcome="refused", title=title)
    if found.error is not None:
        return _Upload(replace(out, reason="unreadable", message=f"folder not read: {found.error}"))
    tenant = principal.tenant_id
    try:
        data = await anyio.to_thread.run_sync(read_source, file, svc.settings.max_artifact_bytes)
    except OSError as exc:
        return _Upload(replace(out, reason="unreadable", message=exc.strerror or str(exc)))
    except KnowledgeError as exc:
        return _Upload(replace(out, reason=exc.reason, message=exc.message))
    media_type = detect_media_type(file, data, as_text=request.get("as_text", False))
    out = replace(out, media_type=media_type, size_bytes=len(data))
    if stdin_name is not None:
        document_id, earlier = document_id_for(tenant, "", stdin_name), None
    else:
        document_id, earlier = document_identity(tenant, found), earlier_document_id(tenant, found)
    known = await svc.document_summaries([document_id] if earlier is None else [document_id, earlier],
                                         tenant_id=tenant)
    existing = known.get(document_id)
    folder_as = found.folder_as if existing is None and earlier in known else None
    if existing is not None and existing.source_sha256 == hashlib.sha256(data).hexdigest():
        return _Upload(replace(out, outcome="unchanged", document_id=document_id, version=existing.version,
                               chunks=existing.chunks))
    try:
        ref = await svc.put_artifact(tenant, data, media_type=media_type, origin=ArtifactOrigin.UPLOAD,
                                     trust=TrustLevel.USER, file_name=file.name,
                                     expires_at=datetime.now(UTC) + UPLOAD_LIFETIME)
    except KnowledgeError as exc:
        if exc.reason in UNAVAILABLE:
            raise
        return _Upload(replace(out, reason=exc.reason, message=exc.message))
    return _Upload(out, IngestRequest(
        source=ref, title=title, visibility=request["visibility"], principal=principal,
        origin_trust=TrustLevel.USER, project_scope=request["project_scope"], doc_date=request["doc_date"],
        authority=request["authority"], sensitivity=request["sensitivity"],
        document_id=None if existing else document_id, replaces=document_id if existing else None),
        existing=existing is not None, earlier=folder_as)


#: Errors that end the command (exit 3) rather than refuse one file.
UNAVAILABLE = ("database_unavailable", "embedded_server", "commit_unknown")
#: Files the database went away from: not written, or committing as it went (in, or not at all).
CUT_REASONS = ("not_ingested", "commit_unknown")


def lost_database(exc: BaseException) -> KnowledgeError | None:
    """The typed error if ``exc`` (or the one leaf of its group) means the database went away."""
    from knowledge.store.db import is_transient
    from knowledge.store.retry import unavailable

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, KnowledgeError) and exc.reason in UNAVAILABLE:
        return exc
    if isinstance(exc, Exception) and is_transient(exc):
        return unavailable("ingest", exc)
    return None


class IngestCut(Exception):
    """The database went away mid-command: what each file came to until then (`FileOutcome`s), and
    the error. Every document reported committed is whole and stays; the rest were not written."""

    def __init__(self, results: list[FileOutcome], error: KnowledgeError) -> None:
        super().__init__(error.message)
        self.results = results
        self.error = error


async def settle(svc: KnowledgeService, upload: _Upload, outcome: Outcome) -> FileOutcome:
    """One file's outcome from its ingest's. A file another process ingested meanwhile (two
    ingests of one folder at once) is ``unchanged`` when that process stored the same bytes."""
    from knowledge.errors import IngestRefused
    from knowledge.models import KnowledgeDocument

    out = upload.out
    if isinstance(outcome, IngestRefused) and outcome.reason == "document_exists" and upload.request is not None:
        tenant, document_id = upload.request.principal.tenant_id, upload.request.document_id
        assert document_id is not None  # (document_exists: a first version was asked for)
        there = (await svc.document_summaries([document_id], tenant_id=tenant)).get(document_id)
        if there is not None and there.source_sha256 == upload.request.source.sha256:
            return replace(out, outcome="unchanged", document_id=document_id, version=there.version,
                           chunks=there.chunks)
    if isinstance(outcome, KnowledgeError):
        if outcome.reason in UNAVAILABLE:
            raise outcome
        return landed(upload, outcome)
    if not isinstance(outcome, KnowledgeDocument):
        raise outcome
    summary = (await svc.document_summaries([outcome.document_id], tenant_id=outcome.tenant_id)).get(
        outcome.document_id)
    return landed(upload, outcome, chunks=summary.chunks if summary else None)


def tally(results: list[FileOutcome]) -> dict[str, int]:
    """Outcomes by reason: ``ingested``, ``new_version``, ``unchanged``, then each refusal's reason."""
    counts: dict[str, int] = {}
    for r in results:
        key = r.outcome if r.outcome in OK_OUTCOMES else (r.reason or "refused")
        counts[key] = counts.get(key, 0) + 1
    return counts


def _detail(r: FileOutcome) -> str:
    if r.reason == "secret_detected" and r.chunk_ordinal is not None:
        from knowledge.core.render import PATH_SEPARATOR

        path = PATH_SEPARATOR.join(r.heading_path or []) or "(no heading)"
        return f"chunk {r.chunk_ordinal} under {path}"
    return r.message or ""


def ingest(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(help="Files and folders (folders recursively); - reads one "
                                                     "document from standard input (with --name).",
                                                metavar="PATH", show_default=False)],
    visibility: Annotated[Visibility, typer.Option(help="Who may read the documents.")] = Visibility.TENANT,
    project: Annotated[str | None, typer.Option(help="Project scope (required with --visibility project).")] = None,
    sensitivity: Annotated[Sensitivity, typer.Option()] = Sensitivity.INTERNAL,
    authority: Annotated[Authority, typer.Option(help="How the documents were obtained.")] = (
        Authority.PRINCIPAL_SUPPLIED),
    title: Annotated[str | None, typer.Option(help="Title (one file only; default: the file's name, or "
                                                   "its path inside the folder).")] = None,
    doc_date: Annotated[str | None, typer.Option(help="The documents' date, YYYY-MM-DD.")] = None,
    glob: Annotated[list[str] | None, typer.Option(
        "--glob", help="Only files whose path inside the folder (or name) matches; repeatable, e.g. '*.md'.",
        metavar="PATTERN", show_default=False)] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        help="Skip files whose path inside the folder (or name) matches; repeatable.", metavar="PATTERN",
        show_default=False)] = None,
    as_text: Annotated[bool, typer.Option("--as-text", help="Read UTF-8 files of any name as plain text.")] = False,
    as_name: Annotated[str | None, typer.Option(
        "--as", help="A stable name for the one path given, wherever it is (a folder's files are "
                     "NAME/<path inside it>; a file is NAME): moved, it keeps its documents. Default: each "
                     "file is named by where it really is.", metavar="NAME", show_default=False)] = None,
    root: Annotated[Path | None, typer.Option(
        help="Name each file by its path from this folder (a project's root), wherever the project is.",
        metavar="DIR", show_default=False)] = None,
    name: Annotated[str | None, typer.Option(help="With -: the document's file name (its identity in the tenant, "
                                                  "its media type by extension, its default title).",
                                             show_default=False)] = None,
    wait_embedded: Annotated[float | None, typer.Option(
        help="With the semantic arm on: wait up to this many seconds for the documents' vectors (ingest "
             "commits without them; they are added in the background by any service running the arm).",
        metavar="SECONDS")] = None,
) -> int:
    """Ingest files and folders: media type from content and extension, a progress bar, outcomes by
    reason. Exit 0 if every file was ingested (or was already there, unchanged), 1 if any was refused."""
    opts = options(ctx)
    if visibility is Visibility.PROJECT and not project:
        raise CliError("--visibility project requires --project")
    try:
        when = date.fromisoformat(doc_date) if doc_date else None
    except ValueError:
        raise CliError(f"--doc-date must be YYYY-MM-DD, not {doc_date!r}") from None
    if as_name is not None and root is not None:
        raise CliError("--as and --root both name the files: give one of them")
    stdin: dict[Path, str] = {}
    if any(str(p) == "-" for p in paths):
        if as_name is not None or root is not None:
            raise CliError("- is named by --name, not by --as or --root")
        if len(paths) != 1 or not name or "/" in name:
            raise CliError("- reads one document from standard input: give it alone, with --name FILE_NAME")
        paths = [stdin_file(name, opts.settings().max_artifact_bytes)]
        stdin[paths[0]] = name
    if as_name is not None and len(paths) != 1:
        raise CliError("--as names one file or folder: give one path (or name them by --root)")
    files = collect(paths, glob or (), exclude or (), as_name=None if as_name is None else logical_name(as_name),
                    root=root)
    if title is not None and (len(files) != 1 or paths[0].is_dir()):
        raise CliError("--title applies to a single file")
    if title is not None:
        files = [files[0]._replace(title=title)]
    principal = opts.principal()
    request: dict[str, Any] = {"visibility": visibility, "project_scope": project, "doc_date": when,
                               "authority": authority, "sensitivity": sensitivity, "as_text": as_text,
                               "stdin": stdin}
    mimetypes.init()  # reads the system's type maps (`detect_media_type`): here, not on the loop
    began = time.perf_counter()
    run = _Run(files=files, stdin=stdin, records=opts.out if opts.out.lines else None)
    cut: IngestCut | None = None
    try:
        results, backlog = opts.run(lambda: _ingest_all(opts, principal, run, request, wait_embedded))
    except IngestCut as exc:
        cut, results, backlog = exc, exc.results, None
    except Interrupted as exc:
        if opts.out.lines:  # every file gets its record (each committed document as it landed), then the summary
            results = run.finish("interrupted first")
            opts.out.record(_summary(results, run, None, exc.exit_code) | {"interrupted": str(exc)})
        raise
    elapsed = time.perf_counter() - began
    counts = tally(results)
    code = EXIT_OK if all(r.outcome in OK_OUTCOMES for r in results) else EXIT_REFUSED
    if cut is not None:
        code = EXIT_UNAVAILABLE
    error = {"error": f"database unavailable: {cut.error.message}"} if cut else {}
    if opts.out.lines:  # the files were streamed: the summary is the last record
        opts.out.record(_summary(results, run, backlog, code) | error)
    elif opts.out.json:
        opts.out.emit_json({"files": results, **_summary(results, run, backlog, code), **error})
    else:
        _report(opts, results, counts, elapsed)
        if note := _earlier_note(run):
            opts.out.line(note)
        if backlog is not None:
            opts.out.line(backlog.describe())
            if backlog.chunks and not wait_embedded:
                opts.out.line("they are added by a service running the semantic arm (a host, or: knowledge worker); "
                              "--wait-embedded SECONDS waits for them here")
    if cut is not None:
        landed = sum(r.outcome in OK_OUTCOMES for r in results)
        in_doubt = counts.get("commit_unknown", 0)
        raise CliError(f"database unavailable: {' '.join(cut.error.message.split())[:300]} — {landed} of "
                       f"{len(results)} files were in before it went away (whole documents"
                       + (f"; {in_doubt} more were committing as it went and are whole or not at all"
                          if in_doubt else "")
                       + "; run the same command again for the rest: what is in is unchanged)", EXIT_UNAVAILABLE)
    return code


def _summary(results: list[FileOutcome], run: _Run, backlog: Backlog | None, code: int) -> dict[str, Any]:
    """The summary of ``--json`` and ``--jsonl``: outcomes by reason, the embedding backlog, the
    exit code, and how many files match a document 0.2 ingested under their folder's name
    (`_earlier_note`)."""
    return {"outcomes": tally(results), "embedding_backlog": backlog, "exit_code": code,
            "folder_name_matches": len(_earlier(run))}


def _earlier(run: _Run) -> list[str]:
    """For each file ingested as a new document although its 0.2 key (its folder's name and its
    path inside it) names a live document: the ``--as`` NAME that finds that document."""
    return [u.earlier for u in run.uploads if u.earlier is not None and u.out.outcome == "ingested"]


def _earlier_note(run: _Run) -> str | None:
    """The line saying how many files match documents an earlier version ingested under their
    folder's name (left as they were), and how ``--as`` makes them new versions of those."""
    if not (earlier := _earlier(run)):
        return None
    names = sorted(set(earlier))
    name = names[0] if len(names) == 1 else "<name>"
    if len(earlier) == 1:
        return ("note: 1 file matches a document an earlier version ingested under its folder's name (left as it "
                f"was); ingest with --as {name} to make it a new version of that document instead")
    return (f"note: {len(earlier)} files match documents an earlier version ingested under their folder's name "
            f"(left as they were); ingest with --as {name} to make them new versions of those instead")


@dataclass
class _Run:
    """One command's files as far as it got. Each file settles once (`settle`): its outcome is then
    final and, under ``--jsonl``, written (``records``). If the command stops early — interrupted,
    or the database gone (`IngestCut`) — `finish` settles every other file."""

    files: list[Found] = field(default_factory=list)
    stdin: dict[Path, str] = field(default_factory=dict)
    records: Output | None = None
    uploads: list[_Upload] = field(default_factory=list)
    pending: list[_Upload] = field(default_factory=list)
    done: dict[int, Outcome] = field(default_factory=dict)

    def settle(self, upload: _Upload, out: FileOutcome) -> None:
        upload.out, upload.settled = out, True
        if self.records is not None:
            self.records.record(out)

    def settle_reported(self) -> None:
        """As the command stops early, at once: every file whose ingest reported its outcome but
        which `settle` had not settled yet — each document that committed is written before the
        service closes — from that outcome alone (`landed`: no database read, so no chunk count)."""
        for i, outcome in sorted(self.done.items()):
            if not self.pending[i].settled:
                self.settle(self.pending[i], landed(self.pending[i], outcome))

    def finish(self, why: str) -> list[FileOutcome]:
        """Settle, without the database, every file not settled yet (`landed`: committed, refused,
        committing as it went, or not written — ``why`` — as are the files never read); every
        file's outcome, in order."""
        index = {id(u): i for i, u in enumerate(self.pending)}
        for upload in self.uploads:
            if not upload.settled:
                i = index.get(id(upload))
                self.settle(upload, landed(upload, None if i is None else self.done.get(i), why=why))
        for found in self.files[len(self.uploads):]:
            path = "-" if found.file in self.stdin else str(found.file)
            self.uploads.append(unread := _Upload(FileOutcome(path=path, outcome="refused", title=found.title)))
            self.settle(unread, landed(unread, None, why=why))
        return [u.out for u in self.uploads]

    def cut(self, error: KnowledgeError) -> IngestCut:
        return IngestCut(self.finish("the database went away first"), error)


async def _ingest_all(opts: Options, principal: Principal, run: _Run, request: dict[str, Any],
                      wait_embedded: float | None) -> tuple[list[FileOutcome], Backlog | None]:
    """Read and put every file, then ingest them together (`KnowledgeService.ingest_many`: the next
    documents prepared while the server writes a group of them), then expire the uploads. If the
    database goes away, `IngestCut` with what landed (the first such outcome stops the rest)."""
    try:
        return await _ingest_run(opts, principal, request, wait_embedded, run)
    except BaseException as exc:
        if (error := lost_database(exc)) is None:
            raise
        raise run.cut(error) from exc


async def _ingest_run(opts: Options, principal: Principal, request: dict[str, Any],
                      wait_embedded: float | None, run: _Run) -> tuple[list[FileOutcome], Backlog | None]:
    backlog = None
    # The model is loaded only to wait for the vectors: else the chunk sets are queued for the arm
    # and a long-running service (a host, `knowledge worker`) embeds them.
    async with open_service(opts, **({"embedding_tenant": principal.tenant_id, "semantic_backfill": False}
                                       if wait_embedded else {"semantic_model": False, "semantic_backfill": False})
                            ) as svc:
        progress = _progress(opts)
        with progress:
            task = progress.add_task("reading", total=len(run.files))
            for found in run.files:
                progress.update(task, description=f"reading {found.file.name[:40]}")
                run.uploads.append(upload := await upload_file(svc, principal, found, request))
                if upload.request is None:
                    run.settle(upload, upload.out)  # settled already: unchanged, or refused before ingest
                progress.advance(task)
            run.pending = pending = [u for u in run.uploads if u.request is not None]
            progress.update(task, description="ingesting", completed=len(run.uploads) - len(pending))
            try:
                await _ingest_pending(svc, principal, run, lambda: progress.advance(task))
            except BaseException:  # interrupted, or the database gone: what committed is written now
                run.settle_reported()
                raise
        await svc.sweep_artifacts()  # the uploads expired once ingested: collect their bytes now
        if "semantic" in svc.retrieval().arms and wait_embedded:  # this process embeds
            await _wait_embedded(svc, principal.tenant_id, wait_embedded, _progress(opts))
        if svc.semantic_version is not None:
            backlog = await svc.embedding_backlog(principal.tenant_id)
    return [u.out for u in run.uploads], backlog


async def _ingest_pending(svc: KnowledgeService, principal: Principal, run: _Run,
                          advance: Callable[[], None]) -> None:
    """Ingest the files read and put (``run.pending``), settling each as its outcome comes (a JSON
    Lines record at once); the first outcome that says the database went away stops the rest."""
    pending = run.pending
    lost: list[KnowledgeError] = []
    settled, to_settle = anyio.create_memory_object_stream[int](max_buffer_size=max(1, len(pending)))

    async def settle_each() -> None:
        async with to_settle:
            async for i in to_settle:  # (an outcome that says the database went away is raised)
                run.settle(pending[i], await settle(svc, pending[i], run.done[i]))

    async with anyio.create_task_group() as settling:
        settling.start_soon(settle_each)
        with settled, anyio.CancelScope() as ingesting:
            def on_done(index: int, outcome: Outcome) -> None:
                run.done[index] = outcome
                advance()
                if isinstance(outcome, BaseException) and (error := lost_database(outcome)):
                    lost.append(error)  # the rest would fail alike, each after its retries
                    ingesting.cancel()
                else:  # (settle_each gone, cancelled as the command stops: `settle_reported` settles it)
                    with contextlib.suppress(anyio.BrokenResourceError):
                        settled.send_nowait(index)

            try:
                await svc.ingest_many([u.request for u in pending if u.request is not None], on_done=on_done)
            finally:  # the uploads were only the vehicle (if this cannot run, they expire within the hour)
                # ... except a source no extractor reads yet: kept thirty days, awaiting one (docs reextract)
                with anyio.move_on_after(5, shield=True), contextlib.suppress(Exception):
                    await svc.expire_artifacts(principal.tenant_id, [
                        u.request.source.artifact_id for i, u in enumerate(pending)
                        if u.request and not awaiting(run.done.get(i))])
        if lost:
            settling.cancel_scope.cancel()
    if lost:
        raise lost[0]


def awaiting(outcome: Outcome | None) -> bool:
    """Whether an ingest's outcome kept its source for a later extractor (``unsupported_media_type``)."""
    return getattr(outcome, "reason", None) == "unsupported_media_type"


def landed(upload: _Upload, outcome: Outcome | None, *, chunks: int | None = None,
           why: str = "the database went away first") -> FileOutcome:
    """A file's outcome from its ingest's without the database (gone, or no time to ask it):
    committed (with ``chunks`` if they were read), refused, committing as it went
    (``commit_unknown``: the whole document is in, or nothing of it), or not written (``why``)."""
    from knowledge.errors import CommitUnknown, IngestRefused
    from knowledge.models import KnowledgeDocument

    out = upload.out
    if isinstance(outcome, KnowledgeDocument):
        return replace(out, outcome="new_version" if upload.existing else "ingested",
                       document_id=outcome.document_id, version=outcome.version, chunks=chunks)
    if isinstance(outcome, CommitUnknown):
        request = upload.request
        return replace(out, reason=outcome.reason,
                       document_id=(request.document_id or request.replaces) if request is not None else None,
                       message="the database went away as it committed: the whole document is in, or nothing "
                               "of it; the same command again settles it")
    if isinstance(outcome, IngestRefused):
        return replace(out, reason=outcome.reason, message=outcome.message, chunk_ordinal=outcome.chunk_ordinal,
                       heading_path=list(outcome.heading_path) if outcome.heading_path is not None else None)
    if isinstance(outcome, KnowledgeError) and lost_database(outcome) is None:
        return replace(out, reason=outcome.reason, message=outcome.message)
    return replace(out, reason="not_ingested", message=why)


def _progress(opts: Options) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=opts.out.err, disable=opts.out.json or not opts.out.err.is_terminal)


async def _wait_embedded(svc: KnowledgeService, tenant: str, seconds: float, progress: Progress) -> None:
    """Wait (bounded) for the tenant's queued chunks to get their vectors, showing them go down."""
    first = await svc.embedding_backlog(tenant)
    with progress:
        task = progress.add_task("embedding (loading the model…)", total=first.chunks)
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:
                async def show() -> None:
                    while True:
                        left = (await svc.embedding_backlog(tenant)).chunks
                        serving = await svc.semantic_ready(within=0)
                        progress.update(task, completed=first.chunks - left,
                                        description="embedding" if serving else "embedding (loading the model…)")
                        await anyio.sleep(0.5)

                tg.start_soon(show)
                await svc.wait_embedded(tenant_id=tenant)
                tg.cancel_scope.cancel()


def _report(opts: Options, results: list[FileOutcome], counts: dict[str, int], elapsed: float) -> None:
    out = opts.out
    done = [r for r in results if r.outcome in ("ingested", "new_version")]
    if done and len(done) <= 20:
        out.table("Ingested", ["path", "document", "v", "chunks", "type"],
                  [(r.path, r.document_id, r.version, r.chunks, r.media_type) for r in done], wrap=["path"])
    refused = [r for r in results if r.outcome not in OK_OUTCOMES and r.reason not in CUT_REASONS]
    in_doubt = counts.get("commit_unknown", 0)
    untried = counts.get("not_ingested", 0)
    if refused:
        out.table("Refused", ["path", "reason", "detail"], [(r.path, r.reason, _detail(r)) for r in refused],
                  wrap=["path", "detail"])
    ordered = sorted(counts.items(), key=lambda kv: (kv[0] not in OK_OUTCOMES, -kv[1], kv[0]))
    out.table("Outcomes", ["outcome", "files"], ordered)
    size = sum(r.size_bytes or 0 for r in results)
    files = f"{len(results)} file{'s' * (len(results) != 1)}"
    out.line(f"{files}, {human_bytes(size)} in {elapsed:.1f}s: {len(done)} ingested, "
             f"{counts.get('unchanged', 0)} unchanged, {len(refused)} refused"
             + (f", {untried} not ingested (the database went away)" if untried else "")
             + (f", {in_doubt} in doubt (committing as it went: whole or not at all)" if in_doubt else ""))
    if len(done) > 20:
        out.line("list them with: knowledge docs list")
