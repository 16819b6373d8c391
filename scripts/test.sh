#!/usr/bin/env bash
# The test suite: installs orchenv with every extra but vllm, then runs pytest (no network, no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
ORCHENV_EXTRAS="${ORCHENV_EXTRAS:-dev,data,embed,train,retrieval,eval,alfworld,webshop,serve}" scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
