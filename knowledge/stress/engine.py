"""The service under load, faults and hostile input: the engine of `scripts/stress_service.py`.

One `KnowledgeService` (embedded PostgreSQL unless a DSN is given) is driven for a set duration by
concurrent actors, all owned by one task group: ingesters (Markdown and PDFs of the shared corpus,
with secret-bearing, unsupported, empty and untrusted inputs mixed in), searchers across tenants,
principals, projects, visibilities and sensitivities, versioners, deleters, attachment senders,
and the service's own maintenance workers. With ``faults``, an injector cancels operations in
flight, terminates database backends mid-transaction, restarts the embedded server and SIGKILLs
parser children (and, with the semantic arm on, the embedder child). Every action updates the
`knowledge.maintenance.audit.AccessModel`; afterwards (and every ``audit_every`` seconds) the invariant audit
runs. `kill_host` runs the other fault mode: a host process SIGKILLed mid-ingest and restarted,
with nothing acknowledged lost and nothing partial.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

from knowledge.config import Settings
from knowledge.errors import KnowledgeError
from knowledge.ingest.attachments import SurfaceActor, attachment_document_id
from knowledge.maintenance.audit import (
    AccessModel,
    DocumentFacts,
    audit_attachments,
    audit_storage,
    leftover_connections,
    leftover_processes,
    leftover_tasks,
    running_tasks,
)
from knowledge.models import (
    ArtifactOrigin,
    ArtifactRef,
    KnowledgeQuery,
    Principal,
    Sensitivity,
    TrustLevel,
    Visibility,
)
from knowledge.service import KnowledgeService
from knowledge.store.catalog import live_document_ids, version_chunk_ids
from knowledge.store.db import Database, connect_once, open_bridge, open_pool
from knowledge.store.deletion import drop_tenant_documents
from knowledge.store.retry import retry_transient
from knowledge.store.server import terminate_half_of
from knowledge.supervisors.embedded_pg import restart_embedded, stop_embedded

PRINCIPALS = ("alice", "bob", "carol")
PROJECTS = ("apollo", "gemini")
WRITE = frozenset({"knowledge.write"})


#: A run that has not done its minimum work (`StressOptions.min_checked` …) stops at this many times its duration.
PROGRESS_BOUND = 6


@dataclass
class StressOptions:
    duration: float = 60.0
    faults: bool = False
    seed: int = 0
    dsn: str | None = None
    data_dir: Path | None = None  # the embedded server's; a temporary one when None
    tenants: int = 3
    ingesters: int = 2
    searchers: int = 3
    versioners: int = 1
    deleters: int = 1
    senders: int = 1
    #: Seconds between one sender's attachments (uniform). The default keeps two workers busy.
    send_every: tuple[float, float] = (0.05, 0.3)
    workers: int = 2
    pdf_share: float = 0.05  # of ingests and attachments
    audit_every: float | None = None
    fault_every: tuple[float, float] = (1.0, 4.0)
    #: The shared corpus's folder (``docs-*`` Markdown, ``pdf/``, ``secrets/``): the caller names it.
    corpus: Path | None = None
    #: The semantic arm on or off; None: as configured ($KNOWLEDGE_SEMANTIC_ARM).
    semantic: bool | None = None
    #: Work the run must have done before it stops, past ``duration`` if need be (a busy machine does
    #: less in the same seconds): search results recorded (each checked by the access model's audit), ingests accepted,
    #: attachments marked. Bounded by ``duration`` × `PROGRESS_BOUND`, after which it stops anyway
    #: and the caller sees how far it got.
    min_checked: int = 0
    min_accepted: int = 0
    min_marked: int = 0


@dataclass
class Corpus:
    """The files a stress run loads, read once, before the load starts (`load` runs in a worker
    thread): the actors never touch the disk inside the event loop."""

    markdown: list[Path]
    pdfs: list[Path]
    secrets: list[str]
    questions: list[str]
    contents: dict[Path, bytes] = field(default_factory=dict)

    def read(self, path: Path) -> bytes:
        return self.contents[path]

    @classmethod
    def load(cls, root: Path) -> Corpus:
        markdown = sorted(root.glob("docs-*/**/*.md"))
        if not markdown:
            raise SystemExit(f"no Markdown under {root}: the stress run needs the shared corpus")
        pdfs: list[Path] = []
        manifest = root / "pdf" / "MANIFEST.tsv"
        if manifest.exists():
            for line in manifest.read_text(encoding="utf-8").splitlines()[1:]:
                name, _, category, *_ = line.split("\t")
                path = root / "pdf" / name
                if category == "text" and path.stat().st_size < 400_000:
                    pdfs.append(path)
        secrets: list[str] = []
        with contextlib.suppress(FileNotFoundError), gzip.open(root / "secrets" / "dev.jsonl.gz", "rt") as fh:
            secrets = [r["text"] for r in map(json.loads, fh) if r["label"] == "secret"]
        questions = ["rollback", "snapshot restore", "TLS certificates"]
        with contextlib.suppress(FileNotFoundError):
            questions = [json.loads(line)["question"] for line in
                         (root / "qa" / "docs-dev.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        return cls(markdown, pdfs, secrets, questions, {p: p.read_bytes() for p in (*markdown, *pdfs)})


@dataclass
class Tally:
    """Latencies and outcomes per operation."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    untyped: list[str] = field(default_factory=list)  # exceptions that were not KnowledgeErrors
    faults: Counter[str] = field(default_factory=Counter)
    #: Operations whose caller was cancelled but which had already taken effect (and said so).
    cancelled_late: Counter[str] = field(default_factory=Counter)
    began: float = field(default_factory=time.monotonic)
    #: minute of the run -> search latencies, and RSS samples (bytes): is the service steady?
    search_by_minute: dict[int, list[float]] = field(default_factory=dict)
    rss_by_minute: dict[int, list[int]] = field(default_factory=dict)

    def minute(self) -> int:
        return int((time.monotonic() - self.began) // 60)

    def record(self, op: str, outcome: str, seconds: float) -> None:
        self.latencies.setdefault(op, []).append(seconds)
        self.outcomes[(op, outcome)] += 1
        if op == "search":
            self.search_by_minute.setdefault(self.minute(), []).append(seconds)


@dataclass
class StressReport:
    seconds: float
    tally: Tally
    rss_mb: tuple[float, float, float]  # start, peak, end
    leaks: list[str]
    checked_results: int
    storage: list[str]
    live_documents: int
    partial: int
    orphans: int
    statistics: int
    model: int
    attachments: list[str]
    marked: int
    processes: list[str]
    connections: int
    tasks: int
    #: With the semantic arm: what the drain did and how long the queue took to drain after the load.
    embedding: str | None = None

    @property
    def ok(self) -> bool:
        return not (self.leaks or self.storage or self.attachments or self.processes or self.connections
                    or self.tasks or self.tally.untyped)

    def lines(self) -> list[str]:
        out = [f"{'operation':<12} {'count':>7} {'ops/s':>7} {'p50 ms':>8} {'p99 ms':>8}"]
        for op, values in sorted(self.tally.latencies.items()):
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            out.append(f"{op:<12} {len(values):>7} {len(values) / self.seconds:>7.1f} "
                       f"{statistics.median(ordered) * 1000:>8.1f} {p99 * 1000:>8.1f}")
        out.append("outcomes:")
        for (op, outcome), n in sorted(self.tally.outcomes.items()):
            out.append(f"  {op:<12} {outcome:<28} {n:>6}")
        if self.tally.cancelled_late:
            out.append("cancelled but already committed (acknowledged): " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.tally.cancelled_late.items())))
        if self.tally.faults:
            out.append("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(self.tally.faults.items())))
        start, peak, end = self.rss_mb
        out.append(f"RSS: start {start:.0f} MB, peak {peak:.0f} MB, end {end:.0f} MB")
        if len(self.tally.search_by_minute) > 1:
            out.append("by minute: search p50 ms " + " ".join(
                f"{statistics.median(v) * 1000:.0f}" for _, v in sorted(self.tally.search_by_minute.items())))
            out.append("by minute: RSS MB       " + " ".join(
                f"{max(v) / 2**20:.0f}" for _, v in sorted(self.tally.rss_by_minute.items())))
        out.append(f"audit: {len(self.leaks)} leaks ({self.checked_results} search results checked)")
        out.append(f"audit: {self.partial} partial documents ({self.live_documents} live), {self.orphans} orphans, "
                   f"{self.statistics} statistics mismatches, {self.model} model mismatches")
        out.append(f"audit: {len(self.attachments)} attachment faults ({self.marked} marked: none twice, none lost, "
                   "none left unsettled)" if not self.attachments else
                   f"audit: {len(self.attachments)} attachment faults of {self.marked} marked")
        if self.embedding:
            out.append(self.embedding)
        out.append(f"audit: {len(self.processes)} leaked processes, {self.connections} leaked connections, "
                   f"{self.tasks} leaked tasks")
        out.append(f"audit: {len(self.tally.untyped)} untyped errors")
        for problem in [*self.leaks, *self.storage, *self.attachments, *self.processes, *self.tally.untyped][:40]:
            out.append(f"  ! {problem}")
        return out


class Driver:
    """The actors and what they know (see the module docstring)."""

    def __init__(self, svc: KnowledgeService, audit: Database, options: StressOptions, corpus: Corpus) -> None:
        self.svc = svc
        #: The auditor's own pool on the service's database: what it reads behind the service (the
        #: access model's chunk ids, the audits) and the connection a termination fault comes from.
        self.audit = audit
        self.options = options
        self.corpus = corpus
        self.random = random.Random(options.seed)
        self.tenants = [f"stress{options.seed}-{i}" for i in range(options.tenants)]
        self.model = AccessModel()
        self.tally = Tally()
        self.marked: dict[uuid.UUID, str] = {}
        self.sent: dict[str, list[bytes]] = {t: [] for t in self.tenants}
        self.clock = time.monotonic
        self.deadline = self.clock() + options.duration
        self.rss_start = psutil.Process().memory_info().rss
        self.rss_peak = self.rss_start
        self.audit_problems: list[str] = []

    # --- helpers ---

    def principal(self, tenant: str, name: str | None = None) -> Principal:
        return Principal(tenant_id=tenant, principal_id=name or self.random.choice(PRINCIPALS), scopes=WRITE)

    async def timed(self, op: str, call: Callable[[], Awaitable[Any]],
                    classify: Callable[[Any], str] = lambda _: "ok") -> tuple[str, Any]:
        """Run one operation, maybe cancelled by the fault injector's odds; record its outcome."""
        began = self.clock()
        outcome, result = "ok", None
        cancel_after = self.random.uniform(0.005, 0.4) if self.options.faults and self.random.random() < 0.05 \
            else None
        try:
            with anyio.CancelScope() as scope:
                if cancel_after is not None:
                    scope.deadline = anyio.current_time() + cancel_after
                result = await call()
                outcome = classify(result)
            if scope.cancelled_caught:
                outcome = "cancelled"  # the rule (`call_in_group`): it took no effect
            elif scope.cancel_called:  # cancelled while its COMMIT was in flight: acknowledged, counted apart
                self.tally.cancelled_late[op] += 1
        except KnowledgeError as exc:
            outcome, result = f"{type(exc).__name__}:{exc.reason}", exc
        except Exception as exc:  # an untyped error is an invariant failure of its own
            outcome, result = f"untyped:{type(exc).__name__}", exc
            self.tally.untyped.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
        self.tally.record(op, outcome, self.clock() - began)
        return outcome, result

    def until_deadline(self) -> bool:
        """Whether the load goes on: until its duration has passed and its minimum work is done
        (bounded by `PROGRESS_BOUND` times the duration)."""
        now = self.clock()
        if now < self.deadline:
            return True
        return not self.enough() and now < self.deadline + (PROGRESS_BOUND - 1) * self.options.duration

    def enough(self) -> bool:
        options, outcomes = self.options, self.tally.outcomes
        accepted = outcomes.get(("ingest:markdown", "ok"), 0)
        return (self.model.recorded >= options.min_checked and accepted >= options.min_accepted
                and len(self.marked) >= options.min_marked)

    async def chunk_ids(self, tenant: str, document_id: uuid.UUID, version: int) -> set[str]:
        with contextlib.suppress(Exception):
            return await version_chunk_ids(self.audit, tenant_id=tenant, document_id=document_id, version=version)
        return set()

    def source(self) -> tuple[bytes, str, str]:
        """(bytes, media type, kind) of a random ingest input."""
        r = self.random.random()
        if r < self.options.pdf_share and self.corpus.pdfs:
            return self.corpus.read(self.random.choice(self.corpus.pdfs)), "application/pdf", "pdf"
        r -= self.options.pdf_share
        if r < 0.06 and self.corpus.secrets:
            secret = self.random.choice(self.corpus.secrets)
            return f"# Deploy notes\n\n## Credentials\n\n{secret}\n".encode(), "text/markdown", "secret"
        if r < 0.09:
            return b"\x89PNG\r\n\x1a\n" + os.urandom(64), "image/png", "unsupported"
        if r < 0.11:
            return b"   \n\n\t\n", "text/plain", "empty"
        path = self.random.choice(self.corpus.markdown)
        return self.corpus.read(path), "text/markdown", "markdown"

    def live_documents(self) -> list[tuple[uuid.UUID, DocumentFacts]]:
        return [(d, f) for d, f in self.model.documents.items()
                if f.acked_at and f.deleted_at is None and not f.uncertain and not f.refused]

    # --- actors ---

    async def ingester(self) -> None:
        while self.until_deadline():
            tenant = self.random.choice(self.tenants)
            owner = self.principal(tenant)
            visibility = self.random.choice(list(Visibility))
            project = self.random.choice(PROJECTS) if visibility is Visibility.PROJECT else None
            sensitivity = self.random.choice(list(Sensitivity))
            trust = TrustLevel.TOOL_OUTPUT if self.random.random() < 0.03 else TrustLevel.USER
            data, media_type, kind = self.source()
            _, ref = await self.timed("put", lambda: self.svc.put_artifact(
                tenant, data, media_type=media_type, origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER,
                file_name=f"{kind}.bin"))
            if not isinstance(ref, ArtifactRef):
                continue
            document_id = uuid.uuid4()
            facts = self.model.document(document_id, DocumentFacts(tenant, owner.principal_id, visibility, project,
                                                                   sensitivity))
            outcome, _ = await self.timed(f"ingest:{kind}", lambda: self.svc.ingest(
                ref, f"{kind} {document_id.hex[:6]}", visibility, owner, origin_trust=trust, project_scope=project,
                sensitivity=sensitivity, document_id=document_id))
            if outcome == "ok":
                facts.acked_at[1] = self.clock()
                facts.chunks[1] = await self.chunk_ids(tenant, document_id, 1)
            elif outcome.startswith("IngestRefused:") or outcome == "cancelled":  # neither may leave a trace
                facts.refused = True
            else:
                facts.uncertain = True

    async def versioner(self) -> None:
        while self.until_deadline():
            await anyio.sleep(self.random.uniform(0.05, 0.3))
            candidates = self.live_documents()
            if not candidates:
                continue
            document_id, facts = self.random.choice(candidates)
            path = self.random.choice(self.corpus.markdown)
            _, ref = await self.timed("put", lambda: self.svc.put_artifact(
                facts.tenant_id, self.corpus.read(path), media_type="text/markdown", trust=TrustLevel.USER))
            if not isinstance(ref, ArtifactRef):
                continue
            outcome, doc = await self.timed("version", lambda: self.svc.ingest(
                ref, "a new version", facts.visibility, self.principal(facts.tenant_id, facts.owner),
                origin_trust=TrustLevel.USER, project_scope=facts.project_scope, sensitivity=facts.sensitivity,
                replaces=document_id))
            if outcome == "ok":
                facts.acked_at[doc.version] = self.clock()
                facts.chunks[doc.version] = await self.chunk_ids(facts.tenant_id, document_id, doc.version)
            elif not outcome.startswith("IngestRefused:"):
                facts.uncertain = True

    async def deleter(self) -> None:
        while self.until_deadline():
            await anyio.sleep(self.random.uniform(0.2, 0.8))
            candidates = self.live_documents()
            if len(candidates) < 10:
                continue
            document_id, facts = self.random.choice(candidates)
            outcome, _ = await self.timed("delete", lambda: self.svc.delete(
                document_id, self.principal(facts.tenant_id, facts.owner)))
            if outcome == "ok":
                facts.deleted_at = self.clock()
            elif not outcome.startswith("DeleteRefused:"):
                facts.uncertain = True

    async def searcher(self) -> None:
        while self.until_deadline():
            tenant = self.random.choice(self.tenants)
            query = KnowledgeQuery(
                tenant_id=tenant, principal_id=self.random.choice(PRINCIPALS),
                current_scope=self.random.choice((None, *PROJECTS)), text=self.random.choice(self.corpus.questions),
                sensitivity_ceiling=self.random.choice(list(Sensitivity)))
            began = self.clock()
            _, passages = await self.timed("search", lambda: self.svc.search(query),
                                                 lambda found: "ok" if found else "empty")
            if isinstance(passages, list):
                self.model.record_search(query, began, self.clock(), passages)

    async def sender(self) -> None:
        while self.until_deadline():
            await anyio.sleep(self.random.uniform(*self.options.send_every))
            tenant = self.random.choice(self.tenants)
            owner = self.principal(tenant)
            if self.sent[tenant] and self.random.random() < 0.1:
                data, media_type, kind = self.random.choice(self.sent[tenant]), "text/markdown", "resent"
            else:
                data, media_type, kind = self.source()
                if media_type == "text/markdown":  # a few to send again, not every one (RSS stays the service's)
                    self.sent[tenant] = [*self.sent[tenant][-19:], data]
            _, ref = await self.timed("upload", lambda: self.svc.upload_attachment(
                tenant, data, media_type=media_type, file_name=f"{kind}.{media_type.rsplit('/', 1)[-1]}"))
            if not isinstance(ref, ArtifactRef):
                continue
            actor: Any = SurfaceActor(tenant_id=tenant, surface_id="bridge") if self.random.random() < 0.1 else owner
            if actor is owner:  # what the document would be, known before the mark can take effect
                facts = self.model.document(
                    attachment_document_id(tenant, owner.principal_id, ref.sha256),
                    DocumentFacts(tenant, owner.principal_id, Visibility.PRINCIPAL, None, Sensitivity.INTERNAL))
                facts.uncertain = True  # settled by the workers; checked for leaks, not for presence
            conversation = f"conv-{self.random.randrange(20)}"
            outcome, marks = await self.timed("mark", lambda: self.svc.mark_attachments(
                actor, [ref.artifact_id], conversation_id=conversation))
            if not isinstance(marks, list):
                if outcome == "cancelled" or outcome.startswith("DatabaseUnavailable"):
                    self.marked[ref.artifact_id] = tenant  # perhaps marked: it must settle like the others
                continue
            for mark in marks:
                if mark.state is not None and mark.state.value == "pending":
                    if isinstance(actor, SurfaceActor):
                        self.tally.untyped.append(f"a surface message marked {mark.artifact_id} pending")
                    self.marked[mark.artifact_id] = tenant

    async def injector(self) -> None:
        low, high = self.options.fault_every
        last_restart = 0.0
        kinds = ["terminate", "restart", "kill_parsers",
                 *(["kill_embedder"] if "semantic" in self.svc.retrieval().arms else [])]
        first = list(kinds)  # each kind at least once, then at random (terminations twice as often)
        while self.until_deadline():
            await anyio.sleep(self.random.uniform(low, high))
            choice = first.pop(0) if first else self.random.choice(("terminate", *kinds))
            if choice == "restart" and (self.svc.settings.dsn is not None or self.clock() - last_restart < 8):
                choice = "terminate"
            with contextlib.suppress(Exception):
                if choice == "terminate":
                    async with self.audit.dedicated() as conn:
                        await terminate_half_of(conn, application_name=self.svc.settings.application_name)
                elif choice == "kill_parsers":
                    for child in psutil.Process().children(recursive=True):
                        with contextlib.suppress(psutil.Error):
                            if "knowledge.parsers.child" in " ".join(child.cmdline()):
                                child.send_signal(signal.SIGKILL)
                elif choice == "kill_embedder":
                    semantic = (await self.svc.health()).semantic
                    if semantic is not None and semantic.child_pid is not None:
                        os.killpg(semantic.child_pid, signal.SIGKILL)
                else:
                    data_dir = self.svc.settings.data_dir
                    await anyio.to_thread.run_sync(restart_embedded, data_dir)
                    last_restart = self.clock()
                self.tally.faults[choice] += 1

    async def sampler(self) -> None:
        while self.until_deadline():
            rss = psutil.Process().memory_info().rss
            self.rss_peak = max(self.rss_peak, rss)
            self.tally.rss_by_minute.setdefault(self.tally.minute(), []).append(rss)
            await anyio.sleep(0.5)

    async def auditor(self, every: float) -> None:
        while self.until_deadline():
            await anyio.sleep(every)
            await self.audit_now()

    async def audit_now(self) -> None:
        leaks = self.model.leaks()
        self.audit_problems += [f"leak: {leak.why} ({leak.chunk_id} to {leak.principal_id})" for leak in leaks]
        with contextlib.suppress(KnowledgeError):  # the database may be mid-restart: audit next time
            storage = await retry_transient("periodic audit", functools.partial(
                audit_storage, self.audit, None, self.tenants))
            self.audit_problems += storage.partial + storage.orphans + storage.statistics

    async def run(self) -> None:
        o = self.options
        async with anyio.create_task_group() as tg:
            for make, n in ((self.ingester, o.ingesters), (self.searcher, o.searchers), (self.versioner, o.versioners),
                            (self.deleter, o.deleters), (self.sender, o.senders)):
                for _ in range(n):
                    tg.start_soon(make)
            tg.start_soon(self.sampler)
            if o.faults:
                tg.start_soon(self.injector)
            if o.audit_every:
                tg.start_soon(self.auditor, o.audit_every)

    async def drain(self, seconds: float = 120.0) -> None:
        """Wait until no attachment is pending or ingesting (bounded; the audit reports what is left)."""
        with anyio.move_on_after(seconds):
            while True:
                open_work = 0
                for tenant in self.tenants:
                    with contextlib.suppress(KnowledgeError):
                        overview = await self.svc.attachment_overview(tenant)
                        open_work += overview.by_state.get("pending", 0) + overview.by_state.get("ingesting", 0)
                if not open_work:
                    return
                await anyio.sleep(0.2)

    async def drain_embeddings(self, seconds: float = 900.0) -> list[str]:
        """With the semantic arm on, wait until the embedding queue is empty (the load has stopped);
        what is still queued after ``seconds`` is a problem of its own."""
        if "semantic" not in self.svc.retrieval().arms:
            return []
        with anyio.move_on_after(seconds):
            while (backlog := await self.svc.embedding_backlog()).chunk_sets:
                for tenant in self.tenants:  # each as long as the drain makes progress
                    await self.svc.wait_embedded(tenant_id=tenant)
            return []
        return [f"the embedding queue did not drain in {seconds:.0f} s after the load: {backlog.chunks} chunks "
                f"of {backlog.chunk_sets} chunk sets left ({backlog.stuck_sets} stuck)"]


@contextlib.asynccontextmanager
async def _auditor(svc: KnowledgeService, application_name: str) -> AsyncIterator[Database]:
    """A pool of the auditor's own on the database ``svc`` uses (closed before the service)."""
    async with open_pool(svc.dsn, min_size=1, max_size=2, application_name=application_name) as db:
        yield db


def _settings(options: StressOptions, data_dir: Path, application_name: str) -> Settings:
    settings = Settings(dsn=options.dsn, data_dir=data_dir, pool_max_size=12, sweep_interval_seconds=2.0,
                    attachment_workers=options.workers, attachment_lease_seconds=5.0, attachment_poll_seconds=0.2,
                    attachment_retry_base_seconds=0.2, attachment_retry_max_seconds=1.0,
                    worker_restart_base_seconds=0.1, worker_restart_max_seconds=1.0,
                    # the faults kill the embedder child while it loads too: a backoff grown to 30 s
                    # would leave the drain idle for most of the run (its doubling has tests of its own)
                    embedder_restart_base_seconds=0.1, embedder_restart_max_seconds=1.0,
                    application_name=application_name)
    return settings if options.semantic is None else settings.model_copy(update={"semantic_arm": options.semantic})


async def _temporary_folder(prefix: str) -> Path:
    """A new temporary folder for an embedded server (made in a worker thread: not on the loop);
    `_discard_embedded` removes it."""
    return Path(await anyio.to_thread.run_sync(functools.partial(tempfile.mkdtemp, prefix=prefix)))


async def _discard_embedded(folder: Path) -> None:
    """Stop the temporary embedded server of ``folder`` and remove the folder."""
    await anyio.to_thread.run_sync(stop_embedded, folder)
    await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, folder, ignore_errors=True))


@contextlib.asynccontextmanager
async def _data_dir(options: StressOptions) -> AsyncIterator[Path]:
    if options.data_dir is not None or options.dsn is not None:
        yield options.data_dir or Path(".")
        return
    folder = await _temporary_folder("knowledge-stress-")
    try:
        yield folder
    finally:
        await _discard_embedded(folder)


async def run_stress(options: StressOptions) -> StressReport:
    """Run the stress (see the module docstring) and audit. Cancellation: the actors and the service
    are cancelled and closed; nothing is reported."""
    if options.corpus is None:
        raise ValueError("StressOptions.corpus: name the shared corpus's folder")
    corpus = await anyio.to_thread.run_sync(Corpus.load, options.corpus)  # file reads: not on the loop
    application_name = f"knowledge-stress-{uuid.uuid4().hex[:8]}"
    tasks_before = running_tasks()
    async with _data_dir(options) as data_dir:
        began = time.monotonic()
        async with KnowledgeService.open(_settings(options, data_dir, application_name)) as svc, \
                _auditor(svc, f"{application_name}-audit") as audit:
            driver = Driver(svc, audit, options, corpus)
            await driver.run()
            seconds = time.monotonic() - began
            await driver.drain()
            drain_began = time.monotonic()
            undrained = await driver.drain_embeddings()
            retrieval = svc.retrieval()
            embedding = None if "semantic" not in retrieval.arms else (
                f"semantic arm: {retrieval.embedded_chunks} chunks embedded by the drain; the queue "
                f"{'drained' if not undrained else 'did NOT drain'} {time.monotonic() - drain_began:.1f} s after "
                f"the load; searches without the arm: {retrieval.searches_without_arm.get('semantic', 0)}")
            leaks = driver.audit_problems + undrained + [
                f"leak: {leak.why} ({leak.chunk_id}, document {leak.document_id}, to {leak.principal_id})"
                for leak in driver.model.leaks()]
            storage = await audit_storage(audit, driver.model, driver.tenants, semantic_version=svc.semantic_version,
                                          drained=not undrained)
            attachments = await audit_attachments(audit, driver.marked)
            dsn = svc.dsn
        rss_end = psutil.Process().memory_info().rss
        processes = leftover_processes()
        tasks = leftover_tasks(tasks_before)
        async with open_bridge() as bridge, connect_once(dsn, bridge) as conn:
            connections = await leftover_connections(conn, application_name)
    mb = 1024 * 1024
    return StressReport(
        seconds=seconds, tally=driver.tally,
        rss_mb=(driver.rss_start / mb, max(driver.rss_peak, rss_end) / mb, rss_end / mb),
        leaks=[p for p in leaks if p.startswith("leak")],
        checked_results=driver.model.checked,
        storage=[p for p in leaks if not p.startswith("leak")] + storage.partial + storage.orphans
        + storage.statistics + storage.model,
        live_documents=storage.live_documents, partial=len(storage.partial), orphans=len(storage.orphans),
        statistics=len(storage.statistics), model=len(storage.model),
        attachments=attachments.unsettled + attachments.twice + attachments.lost, marked=attachments.marked,
        processes=processes, connections=connections, tasks=tasks, embedding=embedding,
    )


# --- The other fault mode: the whole host SIGKILLed mid-ingest, and restarted ---------------------------------


@dataclass
class KillReport:
    rounds: int
    acknowledged: int
    lost: list[str]
    storage: list[str]
    live_documents: int
    signal_name: str = "SIGKILL"
    #: SIGINT / SIGTERM: how each host ended (exit codes), what it left running, its seconds to exit.
    exits: Counter[int] = field(default_factory=Counter)
    leftovers: list[str] = field(default_factory=list)
    exit_seconds: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.storage or self.leftovers)

    def lines(self) -> list[str]:
        lines = [f"kill-host: {self.rounds} hosts sent {self.signal_name} mid-ingest; {self.acknowledged} ingests "
                 f"acknowledged before the signals, {len(self.lost)} lost; after restart {self.live_documents} live "
                 f"documents, {len(self.storage)} partial or orphaned"]
        if self.exit_seconds:
            lines.append(f"  exits {dict(sorted(self.exits.items()))}; seconds from the signal to the exit: max "
                         f"{max(self.exit_seconds):.2f}, median {statistics.median(self.exit_seconds):.2f}; "
                         f"{len(self.leftovers)} processes left running")
        return lines + [f"  ! {p}" for p in (self.lost + self.storage + self.leftovers)[:40]]


async def victim(data_dir: Path, dsn: str | None, seed: int, corpus_dir: Path) -> None:
    """The host to be killed: ingest forever (Markdown of ``corpus_dir``), printing each acknowledged
    document as a JSON line."""
    corpus = await anyio.to_thread.run_sync(Corpus.load, corpus_dir)  # file reads: not on the loop
    rng = random.Random(seed)
    settings = Settings(dsn=dsn, data_dir=data_dir, sweep_interval_seconds=None, application_name="knowledge-victim")
    async with KnowledgeService.open(settings) as svc:
        alice = Principal(tenant_id="victim", principal_id="alice", scopes=WRITE)
        print(json.dumps({"ready": True}), flush=True)

        async def ingest_forever() -> None:
            while True:
                path = rng.choice(corpus.markdown)
                ref = await svc.put_artifact("victim", corpus.read(path), media_type="text/markdown",
                                             trust=TrustLevel.USER)
                try:
                    doc = await svc.ingest(ref, path.stem, "tenant", alice, origin_trust=TrustLevel.USER)
                except KnowledgeError as exc:  # a refusal (a file holding a secret): the next one
                    if exc.reason in ("database_unavailable", "service_closed"):
                        raise
                    continue
                print(json.dumps({"acked": str(doc.document_id), "version": doc.version}), flush=True)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(ingest_forever)


async def kill_host(rounds: int, data_dir: Path | None, dsn: str | None, corpus: Path, seed: int = 0,
                    signum: int = signal.SIGKILL) -> KillReport:
    """Send ``signum`` to a host process mid-ingest ``rounds`` times, restarting on the same database
    each time; then check that every acknowledged ingest is there and nothing is partial or orphaned.
    SIGINT and SIGTERM go to a host that handles them as the CLI does (`knowledge.cli.interrupt`: the
    signal cancels its work): it must exit on its own within `HOST_EXIT_SECONDS`, leaving nothing of
    its session running (the embedder child, parser children)."""
    rng = random.Random(seed)
    report = KillReport(rounds, 0, [], [], 0, signal.Signals(signum).name)
    acknowledged: set[uuid.UUID] = set()
    folder = data_dir or await _temporary_folder("knowledge-kill-")
    try:
        for n in range(rounds):
            command = [sys.executable, "-m", "knowledge.stress.engine", "--victim", "--data-dir", str(folder),
                       "--seed", str(seed + n), "--corpus", str(corpus)] + (["--dsn", dsn] if dsn else []) + (
                       ["--handle-signals"] if signum != signal.SIGKILL else [])
            process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                               start_new_session=True)
            try:
                assert process.stdout is not None
                buffer = b""
                ready = False
                kill_at: float | None = None
                with anyio.fail_after(120):
                    async for part in process.stdout:
                        buffer += part
                        *lines, buffer = buffer.split(b"\n")
                        for line in lines:
                            fact = json.loads(line)
                            if fact.get("ready"):
                                ready = True
                                kill_at = time.monotonic() + rng.uniform(1.0, 4.0)
                            elif "acked" in fact:
                                acknowledged.add(uuid.UUID(fact["acked"]))
                        if ready and kill_at is not None and time.monotonic() >= kill_at:
                            break
            finally:
                with anyio.CancelScope(shield=True):
                    await _end_host(process, signum, report)
        settings = Settings(dsn=dsn, data_dir=folder, sweep_interval_seconds=None)
        async with KnowledgeService.open(settings) as svc, _auditor(svc, "knowledge-victim-audit") as audit:
            present = await live_document_ids(audit, tenant_id="victim")
            storage = await audit_storage(audit, None, ["victim"])
            if dsn is not None:
                await drop_tenant_documents(audit, tenant_id="victim")
        report.lost = [f"acknowledged document {d} is gone" for d in sorted(acknowledged - present, key=str)]
        report.acknowledged, report.live_documents = len(acknowledged), storage.live_documents
        report.storage = storage.partial + storage.orphans + storage.statistics
        return report
    finally:
        if data_dir is None:
            await _discard_embedded(folder)


#: How long a host sent SIGINT or SIGTERM may take to exit on its own before it counts as hung.
HOST_EXIT_SECONDS = 60.0


async def _end_host(process: anyio.abc.Process, signum: int, report: KillReport) -> None:
    """Send the signal; for SIGINT / SIGTERM, wait for the host to exit on its own and record how
    (and anything of its session left running); reap it."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.Signals(signum))
    if signum != signal.SIGKILL:
        sent = time.monotonic()
        with anyio.move_on_after(HOST_EXIT_SECONDS):
            await process.wait()
        report.exit_seconds.append(time.monotonic() - sent)
        if process.returncode is None:
            report.leftovers.append(f"host {process.pid} still running {HOST_EXIT_SECONDS:.0f} s after the signal")
        else:
            report.exits[process.returncode] += 1
        await anyio.sleep(0.5)  # children notice their parent's end
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if p.pid != process.pid and os.getsid(p.pid) == process.pid:
                    report.leftovers.append(f"left running by host {process.pid}: {' '.join(p.cmdline()[:4])}")
                    p.kill()
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL)
    await process.wait()
    await process.aclose()


def _victim_main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--victim", action="store_true", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--handle-signals", action="store_true", help="SIGINT / SIGTERM cancel the work")
    args = parser.parse_args()
    if not args.handle_signals:
        anyio.run(victim, args.data_dir, args.dsn, args.seed, args.corpus, backend="trio")
        return
    from knowledge.cli.interrupt import run
    from knowledge.cli.signals import Interrupted, install

    install()
    try:
        run(functools.partial(victim, args.data_dir, args.dsn, args.seed, args.corpus), "trio")
    except Interrupted as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    _victim_main()
