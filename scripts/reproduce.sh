#!/usr/bin/env bash
# Reproduction check (docs/reproduction.md): every offline baseline on orch/MathRoute-v0 with the
# System 1 and System 2 presets, test split, then the leaderboard (md, html, png) in
# docs/leaderboard/. Resumable: rerunning skips finished episodes. One command from a clean checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
ORCHENV_EXTRAS="${ORCHENV_EXTRAS:-eval,embed}" scripts/setup.sh  # embed: scikit-learn for the kNN / classifier routers
episodes="${EPISODES:-1000}"
runs="${RUNS_DIR:-runs/reproduction}"
board="${BOARD_DIR:-docs/leaderboard}"
orchenv=.venv/bin/orchenv

declare -a baselines=(
  "single-strongest|single|agent=0"
  "single-middle|single|agent=1"
  "single-weakest|single|agent=2"
  "random|random|"
  "knn-tfidf|knn|embedder=\"tfidf\""
  "classifier-tfidf|classifier|embedder=\"tfidf\""
  "cascade-self-consistency|cascade|"
  "cascade-agent-middle|cascade|verifier=\"agent:middle\""
  "oracle|oracle|"
)

dirs=()
for env in orch/MathRoute-v0 orch/MathRouteSystem2-v0; do
  tag="${env#orch/}"
  for entry in "${baselines[@]}"; do
    IFS="|" read -r name controller kwarg <<<"$entry"
    out="$runs/$tag/$name"
    args=(eval "$env" --controller "$controller" --split test --episodes "$episodes" --seeds 0 --out "$out" --no-progress)
    [ -n "$kwarg" ] && args+=(-c "$kwarg")
    echo "== $tag / $name"
    "$orchenv" "${args[@]}" >/dev/null
    dirs+=("$out")
  done
done
"$orchenv" leaderboard "${dirs[@]}" --out "$board"
echo "leaderboard: $board/leaderboard.md, $board/leaderboard.html"
