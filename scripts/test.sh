#!/usr/bin/env bash
# The whole test suite: install, lint, type-check, and run every test against a real PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check knowledge parsers supervisors tests scripts
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# Two workers, each with an embedded PostgreSQL of its own: on a 2-core machine the suite's waits (on
# the server, on child processes) overlap the other worker's work. Issue 33 measured pytest at 1,208 s
# in one process (~1,040 s once a fix to the embedding drain saved ~165 s), 785 s in two; this whole
# command, from a fresh clone: 845 s. KNOWLEDGE_TEST_WORKERS=0 runs it in this process (a debugger, -s).
exec .venv/bin/python -m pytest -n "${KNOWLEDGE_TEST_WORKERS:-2}" "$@"
