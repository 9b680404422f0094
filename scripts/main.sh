#!/usr/bin/env bash
# The main job: install everything, start the embedded database, migrate, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python -m knowledge.demo "$@"
