"""orch/MathRoute-v0 on other task sources: a MATH-style file, CHAMP, reasoning-gym."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import orchenv  # noqa: F401
from orchenv.controllers import make_controller
from orchenv.envs.mathroute.loaders import load_math_records
from orchenv.grading import check_math_solution
from orchenv.runner import run_episodes

RECORDS = [
    {
        "problem": "Compute $\\frac{1}{2} + \\frac{1}{3}$.",
        "solution": "Common denominator 6: $\\frac{3}{6}+\\frac{2}{6}=\\boxed{\\frac{5}{6}}$.",
        "level": "Level 2",
        "type": "Prealgebra",
    },
    {
        "problem": "What is $7 \\cdot 8$?",
        "solution": "$7 \\cdot 8 = \\boxed{56}$.",
        "level": "Level 1",
        "type": "Prealgebra",
    },
    {
        "problem": "Solve $2x + 3 = 11$.",
        "solution": "$2x = 8$, so $x = \\boxed{4}$.",
        "level": "Level 5",
        "type": "Algebra",
    },
]


def test_math_records_file(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS))
    source = load_math_records(path, name="mini", split="test")
    env = gym.make("orch/MathRoute-v0", task_source=source, split="test")
    ids = set()
    for i in range(len(RECORDS)):
        obs, info = env.reset(seed=0, options={"task_index": i})
        assert RECORDS[i]["problem"] in obs
        ids.add(info["task_id"])
        _, _, _, _, info = env.step(f"<model>{info['valid_agents'][-1]}</model>")
        _, _, term, _, info = env.step("<verdict>True</verdict>")
        assert term
        task = source.by_id(info["task_id"])
        assert info["correct"] == check_math_solution(info["final_response"], task.answers)
    assert len(ids) == len(RECORDS)
    assert source.by_id(next(iter(ids))).meta["level"] in {1, 2, 5}


def test_task_id_option_selects_the_task():
    env = gym.make("orch/MathRoute-v0", split="test")
    _, info = env.reset(seed=0)
    wanted = info["task_id"]
    env.reset(seed=123)
    obs, info = env.reset(options={"task_id": wanted})
    assert info["task_id"] == wanted


@pytest.mark.parametrize("source", ["champ", "reasoning-gym"])
def test_packaged_sources_run(source):
    env = gym.make("orch/MathRoute-v0", task_source=source, split="test")
    summary, records = run_episodes(
        env, make_controller("random", seed=0), 25, seed=0, progress=False
    )
    assert summary.episodes == 25 and summary.invalid_action_rate == 0.0
    assert 0.0 < summary.accuracy <= 1.0
    assert all(r.task_id for r in records)
