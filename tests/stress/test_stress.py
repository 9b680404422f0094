"""A bounded stress run with faults, and the host SIGKILLed mid-ingest: the invariant audit holds.

The long runs (10 minutes, a soak) are `scripts/stress_service.py`; this is the same engine
(`knowledge.stress.engine`) for ~25 s per event loop, with every fault the injector has: operations
cancelled in flight, database backends terminated mid-transaction, the embedded server restarted,
parser children SIGKILLed."""

from __future__ import annotations

import signal

import pytest

from knowledge.semantic.encoder import available as semantic_available
from knowledge.stress.engine import StressOptions, kill_host, run_stress
from tests.conftest import SHARED_CORPUS as CORPUS
from tests.conftest import corpus_missing

pytestmark = [pytest.mark.anyio, pytest.mark.slow,
              pytest.mark.skipif(corpus_missing(CORPUS / "docs-etcd"), reason="shared corpus not present")]


async def test_stress_with_faults_keeps_every_invariant(anyio_backend_name: str) -> None:
    seed = 11 if anyio_backend_name == "trio" else 12
    # Bounded by work done, not by what a busy machine manages in 25 s (it runs on until it has).
    report = await run_stress(StressOptions(duration=25, faults=True, seed=seed, audit_every=8,
                                            fault_every=(0.5, 2.0), corpus=CORPUS, min_checked=501,
                                            min_accepted=51, min_marked=11))
    text = "\n".join(report.lines())
    assert report.ok, text
    assert not report.leaks and report.checked_results > 500, text
    assert (report.partial, report.orphans, report.statistics, report.model) == (0, 0, 0, 0), text
    assert not report.attachments and report.marked > 10, text
    assert (report.processes, report.connections, report.tasks) == ([], 0, 0), text
    assert not report.tally.untyped, text
    # The faults really happened, and the run did real work through them.
    assert report.tally.faults["terminate"] >= 1 and report.tally.faults["restart"] >= 1, text
    accepted = sum(n for (op, outcome), n in report.tally.outcomes.items() if op == "ingest:markdown"
                   and outcome == "ok")
    assert accepted > 50 and report.live_documents > 20, text


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda n: n.name)
async def test_a_host_killed_mid_ingest_loses_nothing_acknowledged(anyio_backend_name: str, signum: int) -> None:
    """SIGKILL: nothing acknowledged lost, nothing partial. SIGINT / SIGTERM to a host that handles
    them (its work cancelled): the same, and it exits on its own with 128 + n, leaving nothing of
    its session running."""
    if anyio_backend_name != "trio":
        pytest.skip("the victim host runs under trio; one run is enough")
    killed = await kill_host(2, None, None, CORPUS, seed=5, signum=signum)
    assert killed.ok, "\n".join(killed.lines())
    assert killed.acknowledged > 20 and killed.live_documents >= killed.acknowledged
    if signum != signal.SIGKILL:
        assert killed.exits == {128 + signum: 2}, "\n".join(killed.lines())


@pytest.mark.skipif(not semantic_available(), reason="the semantic extra is not installed")
async def test_stress_with_the_semantic_arm_and_its_queue(anyio_backend_name: str) -> None:
    """The arm on, its embedder child among the faults: no vector of a deleted or superseded chunk is
    returned (the leak audit checks the fused results), no chunk is left unembedded once the load
    stops and the queue drains, and a child killed mid-backlog loses nothing."""
    seed = 21 if anyio_backend_name == "trio" else 22
    report = await run_stress(StressOptions(duration=10, faults=True, seed=seed, semantic=True, tenants=2,
                                            ingesters=1, versioners=1, deleters=1, senders=1, send_every=(1.0, 2.0),
                                            fault_every=(1.0, 2.0), corpus=CORPUS, min_checked=51))
    text = "\n".join(report.lines())
    assert report.ok, text
    assert not report.leaks and report.checked_results > 50, text
    assert (report.partial, report.orphans, report.statistics, report.model) == (0, 0, 0, 0), text
    assert (report.processes, report.connections, report.tasks) == ([], 0, 0), text
    assert not report.tally.untyped, text
    assert report.tally.faults["kill_embedder"] >= 1, text
    print(text)
