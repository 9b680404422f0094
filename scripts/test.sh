#!/usr/bin/env bash
# The whole test suite: install, lint, type-check, and run every test against a real PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check knowledge parsers supervisors tests scripts
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest "$@"
