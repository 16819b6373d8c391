#!/usr/bin/env bash
# mypy over a non-editable copy of the package: the envs/ and agents/ folders are mapped
# into orchenv by setuptools' package-dir, which mypy cannot follow in an editable install.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="$(mktemp -d)"
trap 'rm -rf "$target"' EXIT
"$root/.venv/bin/python" -m pip install -q --no-deps --target "$target" "$root"
cd "$target"
MYPYPATH="$target" "$root/.venv/bin/python" -m mypy --config-file "$root/pyproject.toml" \
  --python-executable "$root/.venv/bin/python" -p orchenv
