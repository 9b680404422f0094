"""The README's embedding examples run as written: the trio one (also under asyncio through anyio)
and the plain-asyncio one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[str]:
    section = README.read_text(encoding="utf-8").split("## Embedding", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    runnable = [code for code in found if "anyio.run(" in code or "asyncio.run(" in code]
    assert len(runnable) == 2, "the README lost an embedding example"
    return runnable


def _run(code: str, dsn: str) -> str:
    env = {**os.environ, "KNOWLEDGE_DSN": dsn}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _check(out: str) -> None:
    assert out.startswith("<knowledge as_of=") and "Revert the release tag." in out
    assert 'doc="Runbook"' in out and "</knowledge>" in out
    chunk = re.search(r'chunk="(kc_[a-z2-7]+)"', out)
    assert chunk is not None
    trace = out.split("</knowledge>", 1)[1]
    assert chunk.group(1) in trace  # the trace lists the rendered passage


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_readme_anyio_example_runs(database_dsn: str, backend: str) -> None:
    code = _examples()[0].replace('backend="trio"', f'backend="{backend}"')
    assert f'backend="{backend}"' in code
    _check(_run(code, database_dsn))


def test_readme_asyncio_example_runs(database_dsn: str) -> None:
    code = _examples()[1]
    assert "asyncio.run(main())" in code and "anyio" not in code
    _check(_run(code, database_dsn))
