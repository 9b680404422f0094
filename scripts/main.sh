#!/usr/bin/env bash
# The main job: install everything, start the embedded database, migrate, and run the demo.
#   bash scripts/main.sh [FOLDER] [--question TEXT]   (FOLDER: ../shared/corpus/docs-etcd, else examples/docs)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
    if [ -d ../shared/corpus/docs-etcd ]; then set -- ../shared/corpus/docs-etcd "$@"; else set -- examples/docs "$@"; fi
fi
exec .venv/bin/knowledge-demo "$@"
