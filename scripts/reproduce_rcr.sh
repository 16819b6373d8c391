#!/usr/bin/env bash
# Seed 004 (RCR-Router) in simulation, one command from a clean checkout: sets up .venv (the
# embed extra gives the shared memory its real MiniLM tokenizer), then runs
# `orchenv reproduce 004 --update-docs`, which writes docs/reproduction/004.md (arguments are passed on,
# e.g. `scripts/reproduce_rcr.sh --quick`).
set -euo pipefail
cd "$(dirname "$0")/.."
ORCHENV_EXTRAS="${ORCHENV_EXTRAS:-embed}" scripts/setup.sh
exec .venv/bin/orchenv reproduce 004 --update-docs "$@"
