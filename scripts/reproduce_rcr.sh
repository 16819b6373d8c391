#!/usr/bin/env bash
# Seed 004 (RCR-Router) in simulation, one command from a clean checkout: sets up .venv (the
# embed extra gives the shared memory its real MiniLM tokenizer), then runs
# scripts/reproduce_rcr.py with the settings that produced docs/rcr/ (override with arguments,
# e.g. `scripts/reproduce_rcr.sh --episodes 50 --out /tmp/rcr`).
set -euo pipefail
cd "$(dirname "$0")/.."
ORCHENV_EXTRAS="${ORCHENV_EXTRAS:-embed}" scripts/setup.sh
if [ "$#" -eq 0 ]; then
  set -- --episodes 300 --seeds 0 1 2 --out docs/rcr
fi
exec .venv/bin/python scripts/reproduce_rcr.py "$@"
