"""Issue 37 item 2: a board ranks what the env pays for (its primary metric, the return by
default; OrchMAS's F1 score), with paired intervals between adjacent rows; accuracy, cost and
calls are columns; env / pool / split are said once per group, not on every row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.eval.harness import EvalConfig, evaluate, read_episode_log
from orchenv.eval.leaderboard import build_leaderboard
from orchenv.eval.metrics import Metric, difference, mean_interval, primary_metric

N = 60


@pytest.fixture(scope="module")
def budget_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("budget")
    out = {}
    for name, expert in (("alone", "none"), ("o3", "o3")):
        config = EvalConfig(
            "orch/BudgetRoute-v0",
            controller="budget-baseline",
            controller_kwargs={"expert": expert},
            episodes=N,
            seeds=[0],
        )
        evaluate(config, tmp / name, progress=False)
        out[name] = tmp / name
    return out


def test_budgetroute_ranks_answering_alone_above_always_o3(budget_runs, tmp_path):
    board = build_leaderboard(
        [budget_runs["o3"], budget_runs["alone"]], tmp_path / "b", plots=False
    )
    first, second = board.rows
    assert first.controller == 'budget-baseline(expert="none")' and first.rank == 1
    assert second.controller == 'budget-baseline(expert="o3")' and second.rank == 2
    assert second.accuracy > first.accuracy  # o3 is more often right ...
    assert first.primary > second.primary  # ... but the env pays for right within budget
    assert first.metric == "return" and "paired, n=60" in first.vs_next
    rows = json.loads((tmp_path / "b" / "leaderboard.json").read_text())
    assert "per_episode" not in rows[0] and rows[0]["primary"] == pytest.approx(first.primary)
    md = (tmp_path / "b" / "leaderboard.md").read_text()
    assert "ranked by return" in md and "| return [95% CI] |" in md


def test_the_primary_interval_and_the_paired_difference(budget_runs):
    metric = primary_metric("orch/BudgetRoute-v0")
    assert metric == Metric("reward", "return")
    a = {
        (0, i): (i, metric.value(r))
        for i, r in enumerate(read_episode_log(budget_runs["alone"] / "episodes.jsonl"))
    }
    b = {
        (0, i): (i, metric.value(r))
        for i, r in enumerate(read_episode_log(budget_runs["o3"] / "episodes.jsonl"))
    }
    d = difference(a, b)
    assert d is not None and d.paired and d.n == N and d.separates
    m, lo, hi = mean_interval([v for _, v in a.values()])
    assert lo < m < hi
    shifted = {(1, i): (1_000_003 + i, v) for (_, i), (_, v) in b.items()}  # other tasks
    u = difference(a, shifted)
    assert u is not None and not u.paired and (u.high - u.low) > (d.high - d.low) * 0.5


def test_orchmas_is_ranked_by_its_f1_score(tmp_path):
    assert primary_metric("orch/OrchMAS-v0").label == "F1 score"
    config = EvalConfig("orch/OrchMAS-v0", controller="env-random", episodes=6, seeds=[0])
    evaluate(config, tmp_path / "r", progress=False)
    board = build_leaderboard([tmp_path / "r"], tmp_path / "b", plots=False)
    (row,) = board.rows
    scores = [r["score"] for r in read_episode_log(tmp_path / "r" / "episodes.jsonl")]
    assert row.metric == "F1 score" and row.primary == pytest.approx(sum(scores) / len(scores))
    assert "| F1 score [95% CI] |" in (tmp_path / "b" / "leaderboard.md").read_text()


def test_a_row_links_to_its_view_page_when_there_is_one(budget_runs, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(budget_runs["alone"], run)
    (run / "view.html").write_text("<html></html>")
    out = tmp_path / "b"
    build_leaderboard([run, budget_runs["o3"]], out, plots=False)
    md = (out / "leaderboard.md").read_text()
    assert "[run](../run/view.html)" in md and "[o3](" not in md
    assert 'href="../run/view.html"' in (out / "leaderboard.html").read_text()


def test_the_plots_know_the_constraints_and_the_budgets(budget_runs, tmp_path):
    board = build_leaderboard([budget_runs["alone"]], tmp_path / "b", plots=False)
    assert board.groups[0].budgets["low"] == pytest.approx(0.001)
    evaluate(EvalConfig("orch/MathRoute-v0", episodes=4), tmp_path / "m", progress=False)
    (group,) = build_leaderboard([tmp_path / "m"], tmp_path / "mb", plots=False).groups
    assert sorted(group.constraints.values()) == [0.25, 0.5, 1.0] and not group.budgets
