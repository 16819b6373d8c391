#!/usr/bin/env bash
# mypy over a non-editable install of the package: envs/ and agents/ are mapped into orchenv
# by setup.py's package_dir, which mypy cannot follow in an editable install. The install is
# built from a copy of the working tree's files (tracked and untracked, not ignored), so a
# stale build/ folder can never ship a module that was deleted or moved.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/site"
cd "$root"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  if [ -e "$f" ]; then printf '%s\0' "$f"; fi
done | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
"$root/.venv/bin/python" -m pip install -q --no-deps --target "$tmp/site" "$tmp/src"
cd "$tmp/site"
MYPYPATH="$tmp/site" "$root/.venv/bin/python" -m mypy --config-file "$root/pyproject.toml" \
  --python-executable "$root/.venv/bin/python" -p orchenv
