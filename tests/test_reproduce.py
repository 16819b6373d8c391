"""The reproduction check's one command builds a leaderboard from scratch (short run)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_reproduce_script_builds_the_leaderboard(tmp_path):
    env = {
        **os.environ,
        "EPISODES": "20",
        "RUNS_DIR": str(tmp_path / "runs"),
        "BOARD_DIR": str(tmp_path / "board"),
        "ORCHENV_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = subprocess.run(
        [str(ROOT / "scripts" / "reproduce.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    board = tmp_path / "board"
    for name in ("leaderboard.md", "leaderboard.html", "leaderboard.json"):
        assert (board / name).is_file()
    assert len(list(board.glob("*.png"))) == 4
    text = (board / "leaderboard.md").read_text()
    for row in ("single(agent=0)", "random", 'knn(embedder="tfidf")', "cascade", "oracle †"):
        assert row in text
    runs = sorted((tmp_path / "runs").glob("*/*/summary.json"))
    assert len(runs) == 18
    assert all(json.loads(p.read_text())["pooled"]["episodes"] == 20 for p in runs)
