"""The README's embedding example runs as written, under trio and under asyncio."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    section = README.read_text(encoding="utf-8").split("## Embedding", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README lost its embedding example"
    return match.group(1)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_readme_embedding_example_runs(database_dsn: str, backend: str) -> None:
    code = _example().replace('backend="trio"', f'backend="{backend}"')
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout
    assert out.startswith("<knowledge as_of=") and "Revert the release tag." in out
    assert 'doc="Runbook"' in out and "</knowledge>" in out
