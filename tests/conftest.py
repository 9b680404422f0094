"""Test fixtures: one real PostgreSQL for the session, a fresh database per purpose.

With ``$KNOWLEDGE_DSN`` set, tests use that server (creating their own databases on it);
otherwise the session starts the embedded server in a temporary data directory.
Library tests run under both anyio backends via the ``anyio_backend`` fixture below (asyncio on a
plain loop).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import psutil
import pytest

# The suite tests lexical behaviour exactly; the semantic arm's tests (tests/semantic/test_semantic.py) turn
# it on explicitly. An explicit KNOWLEDGE_SEMANTIC_ARM in the environment still wins.
os.environ.setdefault("KNOWLEDGE_SEMANTIC_ARM", "off")

from knowledge.config import Settings
from knowledge.service import KnowledgeService
from knowledge.store.db import Database, dsn_with_database, ensure_database, open_bridge
from knowledge.store.migrate import migrate
from knowledge.supervisors.embedded_pg import start_embedded, stop_embedded


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Both backends; asyncio on a plain selector loop, as a host's ``asyncio.run`` makes it. (Once a
    trio test has imported trio-asyncio, ``asyncio.new_event_loop`` makes trio-asyncio's loops for
    the rest of the process; a host that never runs trio never imports it.) Tests read the
    backend's name from ``anyio_backend_name``."""
    if request.param == "asyncio":
        return "asyncio", {"loop_factory": asyncio.SelectorEventLoop}
    return str(request.param), {}


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
