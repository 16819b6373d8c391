#!/usr/bin/env bash
# verl's own venv (.venv-verl) for the verl agent-loop contract tests (tests/verl/).
# verl 0.9.1 pins transformers below the main venv's (it resolves to 5.10.x), so it cannot
# share .venv. CPU only: nothing here needs a GPU (vLLM/SGLang are not installed; the tests
# stand in a tiny-model server manager). Idempotent; about 7 minutes from scratch.
#   scripts/setup_verl_venv.sh            # build or update .venv-verl
#   .venv-verl/bin/python -m pytest tests/verl
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VERL_VENV:-.venv-verl}"
PYTHON="${PYTHON:-python3}"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# verl 0.9.1 imports cachetools, uvicorn and fastapi (agent loop -> rollout server) without
# declaring them; the rest is orchenv itself (editable, core deps) and pytest.
"$VENV/bin/pip" install -q \
  "torch==2.13.0" "verl==0.9.1" \
  "cachetools>=5" "uvicorn>=0.30" "fastapi>=0.110" \
  "pytest>=8" "pytest-timeout>=2.3"
"$VENV/bin/pip" install -q -e .
"$VENV/bin/python" -c "import verl.experimental.agent_loop, orchenv.integrations.verl" \
  || { echo "setup_verl_venv: verl's agent loop does not import in $VENV" >&2; exit 1; }
echo "setup_verl_venv: $VENV ready (verl $("$VENV/bin/python" -c 'import verl; print(verl.__version__)'))"
