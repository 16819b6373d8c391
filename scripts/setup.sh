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
# Build backends that shell out to a bare `python` (fast-downward-textworld's build.py) must get
# the venv's interpreter: with pip >= 26.2 a different one (a pyenv shim) inherits pip's
# build-isolation sitecustomize and loses its standard library.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip install -q "${pins[@]}" -e "$spec"
