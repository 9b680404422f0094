"""Many hosts, one database (issue 36): ``scripts/stress_service.py --hosts 2`` runs two host processes —
one under trio, one under asyncio, each with its own tenants, and each process's attachment workers
serving every tenant — on one fresh database, with faults; every host's audit must find nothing and
each must exit 0. (`scripts/stress_service.py --hosts 4 --faults --duration 60` is the full run; its
numbers are in DESIGN.md's capacity note.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_CORPUS as CORPUS
from tests.conftest import corpus_missing, new_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(corpus_missing(CORPUS / "docs-etcd"), reason="no shared corpus")]


def test_two_host_processes_on_one_database_keep_every_invariant(admin_dsn: str) -> None:
    dsn = new_database(admin_dsn)
    env = {**os.environ, "KNOWLEDGE_SEMANTIC_ARM": "off"}
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "stress_service.py"), "--hosts", "2", "--faults",
                          "--duration", "8", "--tenants", "2", "--ingesters", "1", "--searchers", "2", "--workers", "1",
                          "--dsn", dsn, "--corpus", str(CORPUS)],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 0 |") or line.startswith("| 1 |")]
    assert run.returncode == 0 and len(rows) == 2, run.stdout[-4000:] + run.stderr[-2000:]
    for row in rows:  # each host did work (searches checked, attachments marked) and its audit found nothing
        checked = re.search(r" 0 leaks \((\d+) search results checked\)", row)
        marked = re.search(r"\((\d+) marked: none twice", row)
        assert checked and int(checked.group(1)) > 0 and marked and int(marked.group(1)) > 0, row
        assert " 0 leaks (" in row and "0 partial documents" in row and "0 orphans" in row, row
        assert "none twice, none lost, none left unsettled" in row and "0 leaked processes" in row, row
        assert "0 untyped errors" in row, row
    assert "| 0 | trio |" in rows[0] and "| 1 | asyncio |" in rows[1]
