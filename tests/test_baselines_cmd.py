"""``orchenv baselines ID`` (issue 40): random valid, the best fixed plan, skill at the
realistic level and the upper bound on the same tasks, with 95% intervals, from the audit's
rows; and the runner's ``yardsticks`` with a learner played on the same tasks."""

from __future__ import annotations

import json

import pytest
from toy_bits import ENV_ID, register

from orchenv.cli import main
from orchenv.runner import format_yardsticks, yardsticks

register()


def test_baselines_prints_the_four_yardsticks(capsys):
    assert main(["baselines", ENV_ID, "--tasks", "8", "--no-progress", "--json"]) == 0
    rows = {r["label"]: r for r in json.loads(capsys.readouterr().out)}
    assert list(rows) == [
        "random valid",
        "best fixed plan",
        "skill @ realistic 0.5",
        "upper bound",
    ]
    assert rows["upper bound"]["mean"] == pytest.approx(3.0)  # guess all three bits
    # the toy's best blind sequence is "guess 0, then stop" (1.0 on average; toy_bits.py),
    # scored on the half of the tasks it was not picked on
    assert 0.5 <= rows["best fixed plan"]["mean"] <= 1.5
    for row in rows.values():
        assert row["n"] == 8 and row["ci"] >= 0.0
    assert rows["random valid"]["mean"] < rows["upper bound"]["mean"]


def test_the_table_says_what_each_row_is(capsys):
    assert main(["baselines", ENV_ID, "--tasks", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "95% interval" in out and "best task-blind sequence" in out
    assert "realistic skill 0.5: toy: a learner that knows half the bits" in out


def test_a_learner_is_played_on_the_same_tasks():
    def always_one(env):
        return "<bit>1</bit>"

    rows, report = yardsticks(ENV_ID, tasks=8, trained={"my learner": always_one}, progress=False)
    assert rows[0].label == "my learner" and rows[0].n == 8
    # "always guess 1" scores the number of leading ones: mean 7/8 over the eight tasks
    assert rows[0].mean == pytest.approx(7 / 8)
    assert "my learner" in format_yardsticks(rows, report)
