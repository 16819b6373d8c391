#!/usr/bin/env bash
# Create .venv (if needed) and install orchenv with the extras named in $ORCHENV_EXTRAS.
# Idempotent: re-running only installs what changed. torch is pinned to the CPU build
# served on CI machines; an unpinned torch would pull gigabytes of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${ORCHENV_EXTRAS:-}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
pins=()
case ",$extras," in *,train,*|*,embed,*) pins+=("torch==2.13.0");; esac
.venv/bin/python -m pip install -q "${pins[@]}" -e "$spec"
