"""Test fixtures: one real PostgreSQL for the session, a fresh database per purpose.

With ``$KNOWLEDGE_DSN`` set, tests use that server (creating their own databases on it);
otherwise the session starts the embedded server in a temporary data directory.
Library tests run under both anyio backends via the ``anyio_backend`` fixture below (asyncio on a
plain loop, in debug mode).

Two of the design's rules are enforced here, as anyio's and trio's own suites do (two more are in
pyproject.toml's ``[tool.pytest.ini_options]``: every warning is an error, and a hang dumps every
thread's stack after ``faulthandler_timeout``):

- asyncio runs in **debug mode** (``anyio_backend``): a coroutine never awaited is reported with
  where it was made, a non-threadsafe call from another thread raises, and callbacks slower than
  ``slow_callback_duration`` are logged (logged only: on a 2-core machine shared with other runs, a
  callback's wall time measures the machine's load as much as the code, so failing on it would be
  a flaky test, not a rule).
- **no blocking call inside the event loop** (``blockbuster``, autouse): a blocking file, socket,
  ``time.sleep`` or lock call made in a running loop raises ``BlockingError`` — in the test's loop
  and in any other the test runs in process (the CLI's, ``anyio.run`` in a sync test). Under trio
  it sees what runs in a task of a trio-asyncio loop (``open_bridge``: every database-using path),
  since blockbuster asks ``asyncio.get_running_loop()``, which trio-asyncio answers per trio task;
  pure trio code outside the bridge is not checked. The allow-list (`_in_procfs`, `_MAY_BLOCK_IN`)
  names what may block and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import psutil
import pytest
from blockbuster import BlockBuster

# The suite tests lexical behaviour exactly; the semantic arm's tests (tests/semantic/test_semantic.py) turn
# it on explicitly. An explicit KNOWLEDGE_SEMANTIC_ARM in the environment still wins.
os.environ.setdefault("KNOWLEDGE_SEMANTIC_ARM", "off")
# The CLI's tests read its output as a pipe reads it: no terminal, and no $COLUMNS unless a test sets one
# (pytest-xdist's workers inherit the controller's terminal width in $COLUMNS).
os.environ.pop("COLUMNS", None)

from knowledge.config import Settings
from knowledge.service import KnowledgeService
from knowledge.store.db import Database, dsn_with_database, ensure_database, open_bridge, open_pool
from knowledge.store.migrate import migrate
from knowledge.supervisors.embedded_pg import start_embedded, stop_embedded
from tests.helpers.kit import Kit


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Both backends; asyncio on a plain selector loop, as a host's ``asyncio.run`` makes it. (Once a
    trio test has imported trio-asyncio, ``asyncio.new_event_loop`` makes trio-asyncio's loops for
    the rest of the process; a host that never runs trio never imports it.) asyncio runs in debug
    mode (see the module docstring). Tests read the backend's name from ``anyio_backend_name``."""
    if request.param == "asyncio":
        return "asyncio", {"loop_factory": asyncio.SelectorEventLoop, "debug": True}
    return str(request.param), {}


def _in_procfs(target: object, *_: object, **__: object) -> bool:
    """A read of ``/proc`` (psutil's process checks): the kernel answers from memory, never a disk."""
    name = getattr(target, "name", target)
    if not isinstance(name, str | bytes | os.PathLike):
        return False
    path = os.fsdecode(name)
    return path == "/proc" or path.startswith("/proc/")


#: Calls that may block by what they touch, not where they are called from (see `_in_procfs`).
_PROCFS_CALLS = ("io.BufferedReader.read", "io.TextIOWrapper.read", "os.listdir", "os.stat", "os.readlink")

#: Third-party call sites allowed to block inside the loop (any of the checked calls), each because
#: the library does it by design and it touches only a small local file:
_MAY_BLOCK_IN: tuple[tuple[str, str], ...] = (
    # An import inside the loop (the CLI's and the tests' lazy imports): the module body's own path
    # and file work, once per process — the reads of the import itself blockbuster already allows.
    ("<frozen importlib._bootstrap>", "_find_and_load"),
    # asyncpg reads the DSN on each new connection, in the loop, looking for its client files there
    # (no option turns it off): ~/.pgpass (a stat, and a read if present) when the DSN has no
    # password, and over TCP ~/.postgresql/ (resolved and stat'ed: SSL certificate, key, CRL).
    ("asyncpg/connect_utils.py", "_parse_connect_dsn_and_args"),
)


def new_blockbuster() -> BlockBuster:
    """A `BlockBuster` (not yet activated) with this suite's allowances."""
    bb = BlockBuster()
    for name in _PROCFS_CALLS:
        function = bb.functions[name]
        default = function.can_block_predicate
        function.can_block_predicate = lambda *a, _default=default, **k: _in_procfs(*a, **k) or _default(*a, **k)
    for function in bb.functions.values():
        for filename, name in _MAY_BLOCK_IN:
            function.can_block_in(filename, name)
    return bb


@pytest.fixture(autouse=True)
def blockbuster() -> Iterator[BlockBuster]:
    """Fail a test that makes a blocking call inside a running event loop (see the module docstring).
    Outside a loop (sync tests, session fixtures) nothing is checked."""
    bb = new_blockbuster()
    bb.activate()
    try:
        yield bb
    finally:
        bb.deactivate()


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    """DSN of a database on the test server from which new databases can be created."""
    external = os.environ.get("KNOWLEDGE_DSN")
    if external:
        yield external
        return
    data_dir = Path(tempfile.mkdtemp(prefix="knowledge-test-"))
    server = start_embedded(data_dir, cleanup_mode="delete")
    try:
        yield server.dsn("postgres")
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


async def _create(admin: str, name: str, migrated: bool) -> None:
    async with open_bridge() as bridge:
        await ensure_database(admin, name, bridge)
        if migrated:
            async with Database.open(dsn_with_database(admin, name), bridge=bridge, min_size=1, max_size=1) as db:
                await migrate(db)


async def create_database(admin: str, migrated: bool = True) -> str:
    """Create a fresh database (migrated unless told otherwise) and return its DSN."""
    name = f"knowledge_test_{uuid.uuid4().hex[:12]}"
    await _create(admin, name, migrated)
    return dsn_with_database(admin, name)


def new_database(admin: str, migrated: bool = True) -> str:
    """`create_database` for synchronous callers (fixtures, process tests)."""
    return anyio.run(create_database, admin, migrated)


@pytest.fixture(scope="session")
def database_dsn(admin_dsn: str) -> str:
    """One migrated database shared by the session; tests isolate themselves by tenant id."""
    return new_database(admin_dsn)


@contextlib.asynccontextmanager
async def open_sql(dsn: str) -> AsyncIterator[Database]:
    """A pool of the test's own on ``dsn`` (the service's database: `KnowledgeService.dsn`): what a
    test reads or writes behind the service's back — rows, counts, a terminated backend. The service's
    own pool is private (a closed facade); its application name is not this one."""
    async with open_pool(dsn, min_size=1, max_size=2, application_name="knowledge-test-sql") as db:
        yield db


@pytest.fixture
async def sql(database_dsn: str) -> AsyncIterator[Database]:
    """`open_sql` on the session's database (where the ``service`` fixture's service runs)."""
    async with open_sql(database_dsn) as db:
        yield db


@pytest.fixture
def kit(sql: Database) -> Kit:
    """The service's parts over the test's own pool (`tests.helpers.kit.Kit`), for tests of one part."""
    return Kit(sql)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(database_dsn: str) -> Settings:
    return Settings(dsn=database_dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None,
                    application_name=f"kt-{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[KnowledgeService]:
    async with KnowledgeService.open(settings) as svc:
        yield svc


def child_processes() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def corpus_missing(path: Path) -> bool:
    """Skip a test that needs ``../shared/corpus`` where it is absent — except under CI, where the
    test runs and fails: a missing corpus there is a broken checkout, not a reason to skip."""
    return not path.exists() and not os.environ.get("CI")


#: The shared corpus beside the clone (``../shared/corpus``): real documents for the corpus tests.
SHARED_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def pytest_report_header(config: pytest.Config) -> str:
    """Say once, at the top of the run, whether the corpus tests can run (each skip repeats it)."""
    if SHARED_CORPUS.exists():
        return f"corpus: {SHARED_CORPUS}"
    if os.environ.get("CI"):
        return f"corpus: {SHARED_CORPUS} is MISSING — under CI the tests that need it fail"
    return f"corpus: {SHARED_CORPUS} is missing — the tests that need it are skipped (clone ../shared beside this)"
