"""``orchenv audit`` on a toy env whose best response and shortcuts are known by hand
(tests/toy_bits.py): every search finds the exact best response, strategies get their exact
returns, costs and calls, flags follow the tolerance, the search steps only forks (never the
task's start state), tasks do not influence each other, and the report survives JSON and the
CLI. Then a small sample of every registered id with a discrete action set gives a
well-formed report."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from toy_bits import ENV_ID, BitsEnv, register

from orchenv.audit import (
    AuditReport,
    audit,
    play,
    search_beam,
    search_exact,
    search_mcts,
    tree_size,
)
from orchenv.cli import main
from orchenv.core import OrchestrationEnv
from orchenv.discrete import make_discrete_env
from orchenv.error import ConfigError
from orchenv.registry import ENV_SUMMARIES

register()
ALL_TASKS = 8
#: per task: 3 first guesses (stop is masked), 11 second moves (stop still masked after an
#: ask), 35 third moves (see toy_bits)
EXACT_STEPS = 49


def run(**kwargs: Any) -> AuditReport:
    return audit(ENV_ID, tasks=ALL_TASKS, progress=False, **kwargs)


def test_exact_best_response_and_strategy_returns():
    report = run()
    assert (report.method, report.exact, report.split) == ("exact", True, "test")
    assert report.searches == {"exact": ALL_TASKS}
    assert sorted(report.task_ids) == [f"bits-{i:03b}" for i in range(8)]
    assert report.search_steps == EXACT_STEPS * ALL_TASKS
    best = report.best
    assert best.name == "best-response" and best.returns == [3.0] * ALL_TASKS
    assert (best.accuracy, best.calls, best.invalid_actions, best.turns) == (1.0, 0.0, 0.0, 3.0)
    assert best.actions[0] == {"<bit>0</bit>": 0.5, "<bit>1</bit>": 0.5}
    assert best.metrics == {"asks": 0.0, "mistakes": 0.0}
    stop = report.row("stop-early")
    assert (stop.kind, stop.return_mean, stop.gap) == ("env", 1.0, 2.0)
    assert stop.description == "Guess 0, then stop."
    assert stop.return_se == pytest.approx(np.std([1.5] * 4 + [0.5] * 4, ddof=1) / np.sqrt(8))
    assert report.row("always-choice-0").return_mean == 7 / 8  # leading zeros
    ask = report.row("always-choice-2")
    assert (ask.return_mean, ask.calls, ask.agent_calls) == (-0.75, 3.0, {"helper": 3.0})
    # a call: 4 prompt words at $1/M, 6 completion words at $2/M (tests/toy_bits.py)
    assert ask.tokens == 30.0 and ask.cost_usd == pytest.approx(3 * (4 * 1 + 6 * 2) / 1e6)
    # "always stop" cannot stop before a guess: it guesses the first choice, then stops
    assert report.row("always-choice-3").returns == stop.returns
    assert report.row("first-available").returns == report.row("always-choice-0").returns
    assert not report.flagged


@pytest.mark.parametrize("method", ["exact", "mcts", "beam"])
def test_every_search_finds_a_history_dependent_optimum(method: str):
    """With stop paying 2.5 the best response guesses two bits right, then stops (4.5):
    returns depend on the whole history, so forks mixed up would miss it."""
    report = run(method=method, env_kwargs={"stop_reward": 2.5})
    assert report.best.returns == [4.5] * ALL_TASKS
    assert report.best.actions[2] == {"<stop/>": 1.0}
    assert report.exact  # MCTS marks the small tree solved; beam never had to prune
    assert not any("scored above the search" in note for note in report.notes)


def test_auto_enumerates_when_the_real_tree_fits_else_falls_back_to_mcts():
    assert tree_size(4, 3) == 84  # the largest tree of 4 choices over 3 turns; masks make it 49
    report = run(budget=50)
    assert (report.method, report.searches) == ("exact", {"exact": ALL_TASKS})
    assert report.search_steps == EXACT_STEPS * ALL_TASKS
    report = run(budget=48)  # the capped enumeration stops at step 49, then MCTS searches
    assert (report.method, report.searches) == ("mcts", {"mcts": ALL_TASKS})
    assert report.best.returns == [3.0] * ALL_TASKS  # found, though not proven (not exact)
    assert report.search_steps > EXACT_STEPS * ALL_TASKS
    assert "MCTS" in report.to_markdown()


def test_a_budget_too_small_is_a_lower_bound_and_says_so():
    report = run(method="mcts", budget=2)
    assert not report.exact
    assert "lower bound" in report.to_markdown()
    for row in report.rows[1:]:  # the best response is at least every strategy, per task
        assert all(b >= r for b, r in zip(report.best.returns, row.returns, strict=True))


@pytest.mark.parametrize(("tolerance", "flagged"), [(2.01, True), (1.99, False)])
def test_flags_follow_the_tolerance(tolerance: float, flagged: bool):
    report = run(tolerance=tolerance)
    names = {row.name for row in report.flagged}
    assert ("stop-early" in names) is flagged
    assert ("always-choice-3" in names) is flagged  # the same episodes, gap 2.0
    assert "always-choice-0" not in names  # gap 2.125
    assert "best-response" not in names
    assert ("| FLAG |" in report.to_markdown()) is flagged


class _Watched(BitsEnv):
    """Records which env objects are stepped."""

    stepped: list[int] = []  # noqa: RUF012  (class-level on purpose: forks share it)

    def step(self, action: Any) -> Any:
        self.stepped.append(id(self))
        return super().step(action)


@pytest.mark.parametrize(
    "search",
    [
        lambda root: search_exact(root, 4),
        lambda root: search_mcts(root, 4, 500, np.random.default_rng(0)),
        lambda root: search_beam(root, 4, 500),
        lambda root: play(root, lambda env: "<ask/>"),
    ],
    ids=["exact", "mcts", "beam", "play"],
)
def test_searches_step_forks_only(search):
    root = _Watched()
    root.reset(seed=0, options={"task_index": 5})
    _Watched.stepped.clear()
    search(root)
    assert _Watched.stepped and id(root) not in _Watched.stepped
    assert (root.turn, root.bits, root.meter.total_calls) == (0, [], 0)


def test_tasks_do_not_influence_each_other():
    """Two seeds visit the eight tasks in different orders; per task, the results agree."""
    a, b = run(seed=0), run(seed=1)
    assert a.task_ids != b.task_ids and sorted(a.task_ids) == sorted(b.task_ids)
    for name in ("best-response", "stop-early", "always-choice-2"):
        by_task_a = dict(zip(a.task_ids, a.row(name).returns, strict=True))
        by_task_b = dict(zip(b.task_ids, b.row(name).returns, strict=True))
        assert by_task_a == by_task_b


def test_the_same_seed_gives_the_same_report():
    a, b = run(method="mcts", budget=20), run(method="mcts", budget=20)
    a.elapsed_s = b.elapsed_s = 0.0
    assert a == b


def test_json_round_trip():
    report = run(tolerance=2.01)
    again = AuditReport.from_json(report.to_json())
    assert again == report
    assert json.loads(report.to_json())["rows"][0]["name"] == "best-response"


def test_time_limit_and_task_count():
    report = audit(ENV_ID, tasks=4, progress=False, time_limit_s=1e-9)
    assert len(report.task_ids) == 1 and "stopped after 1 of 4 tasks" in report.notes[0]
    report = audit(ENV_ID, tasks=50, progress=False)
    assert len(report.task_ids) == ALL_TASKS and "has 8 tasks" in report.notes[0]


class _NoChoices(BitsEnv):
    action_choices = OrchestrationEnv.action_choices


def test_errors():
    gym.register(id="toy/NoChoices-v0", entry_point=_NoChoices)
    try:
        with pytest.raises(ConfigError, match="no discrete action set"):
            audit("toy/NoChoices-v0", tasks=1, progress=False)
    finally:
        gym.registry.pop("toy/NoChoices-v0")
    with pytest.raises(ConfigError, match="method must be one of"):
        audit(ENV_ID, method="dfs")
    with pytest.raises(ConfigError, match="cannot make"):
        audit("toy/Nothing-v0")


def test_cli(tmp_path, capsys):
    out = tmp_path / "audit.json"
    args = ["audit", ENV_ID, "--tasks", "8", "--no-progress", "-e", "stop_reward=2.5"]
    assert main([*args, "--json", "--out", str(out)]) == 0
    printed = AuditReport.from_json(capsys.readouterr().out)
    assert printed == AuditReport.from_json(out.read_text())
    assert printed.env_kwargs == {"stop_reward": 2.5} and printed.best.return_mean == 4.5
    assert main([*args, "--tolerance", "1.6"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"### `{ENV_ID}`") and "| **best-response** | 4.500" in text
    assert "| stop-early | 3.000" in text and "| FLAG |" in text
    assert main(["audit", "toy/Nothing-v0", "--no-progress"]) == 2


# -- every registered id, small samples ------------------------------------------------------------
def has_choices(env_id: str) -> bool:
    base = gym.make(env_id).unwrapped
    return type(base).action_choices is not OrchestrationEnv.action_choices


@pytest.mark.parametrize("env_id", sorted(ENV_SUMMARIES))
def test_small_audit_of_every_env(env_id: str):
    if not has_choices(env_id):
        pytest.skip("no action_choices yet")
    report = audit(env_id, tasks=2, budget=60, progress=False)
    assert len(report.task_ids) == 2 and report.n_choices >= 1
    assert report.rows[0].name == "best-response" and len(report.rows) >= 3
    assert {"first-available", "random-available"} <= {r.name for r in report.rows}
    for row in report.rows:
        assert len(row.returns) == 2 and np.isfinite(row.return_mean)
        assert row.gap >= -1e-9  # the best response is at least every strategy, per task
        assert row.flagged == (row.kind != "best-response" and row.gap <= report.tolerance)
        assert row.actions and all(abs(sum(t.values()) - 1) < 1e-9 for t in row.actions[:1])
    assert AuditReport.from_json(report.to_json()) == report
    assert "| **best-response** |" in report.to_markdown()


# -- docs/adding-an-env.md's discrete example ------------------------------------------------------
def test_the_documented_discrete_example_audits_as_described():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "adding-an-env.md").read_text("utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    module = types.ModuleType("echo_doc")
    for marker in ("class EchoEnv(OrchestrationEnv)", "class EchoChoicesEnv(EchoEnv)"):
        (block,) = [b for b in blocks if marker in b]
        exec(block, module.__dict__)
    gym.register(id="doc/EchoChoices-v0", entry_point=module.EchoChoicesEnv)
    try:
        assert make_discrete_env("doc/EchoChoices-v0").action_space == gym.spaces.Discrete(9)
        report = audit("doc/EchoChoices-v0", tasks=8, progress=False)
    finally:
        gym.registry.pop("doc/EchoChoices-v0")
    assert report.exact and report.best.returns == [1.0] * 8
    assert report.row("always-think").return_mean == 0.0
    assert report.row("always-think").description == "Think every turn; never answer."
    for k in range(8):
        assert report.row(f"always-choice-{k}").return_mean == 1 / 8
