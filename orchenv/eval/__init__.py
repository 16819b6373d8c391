"""Evaluation: resumable runs (``harness``) and leaderboards with plots (``leaderboard``).

``evaluate`` writes a run directory (``run.json``, ``episodes.jsonl``, ``summary.json``);
``build_leaderboard`` turns several run directories into ``leaderboard.md``,
``leaderboard.html`` and PNG plots. The command line is ``orchenv eval`` / ``orchenv
leaderboard``. The leaderboard module (and matplotlib) is imported only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchenv.eval.harness import (
    EvalConfig,
    EvalResult,
    controller_label,
    episode_seed,
    evaluate,
    load_summary,
    read_episode_log,
)

if TYPE_CHECKING:
    from orchenv.eval.leaderboard import Leaderboard, build_leaderboard, rank_rows


def __getattr__(name: str) -> Any:
    if name in ("Leaderboard", "build_leaderboard", "rank_rows"):
        from orchenv.eval import leaderboard

        return getattr(leaderboard, name)
    raise AttributeError(f"module 'orchenv.eval' has no attribute {name!r}")


__all__ = [
    "EvalConfig",
    "EvalResult",
    "Leaderboard",
    "build_leaderboard",
    "controller_label",
    "episode_seed",
    "evaluate",
    "load_summary",
    "rank_rows",
    "read_episode_log",
]
