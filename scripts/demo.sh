#!/usr/bin/env bash
# The main job, offline: a cascade controller on orch/MathRoute-v0 with the simulated
# System 1 pool, 500 episodes on the test split; prints accuracy, cost, tokens, usage, turns.
set -euo pipefail
cd "$(dirname "$0")/.."
ORCHENV_EXTRAS="" scripts/setup.sh
exec .venv/bin/orchenv run orch/MathRoute-v0 --controller cascade --episodes 500 --split test "$@"
