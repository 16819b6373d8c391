"""The reproduction pages' building blocks: intervals, computed verdicts, claim checks, resume."""

from __future__ import annotations

import json

import pytest

from orchenv.cli import main
from orchenv.error import ConfigError
from orchenv.reproduce import (
    Estimate,
    Reproduction,
    Row,
    Section,
    check_direction,
    check_order,
    resolve_seed,
)


def test_intervals_over_seeds_use_student_t_and_over_episodes_the_normal():
    values = [0.70, 0.80, 0.75]
    seeds = Estimate.of_values(values, over="seeds")
    episodes = Estimate.of_values(values)
    assert seeds.mean == pytest.approx(0.75) and episodes.mean == pytest.approx(0.75)
    # t(0.975, df=2) = 4.303 vs z = 1.960: three seeds cannot claim a normal interval
    assert seeds.half / episodes.half == pytest.approx(4.302653 / 1.959964, rel=1e-4)
    assert Estimate.of_values([0.5]).n == 1 and Estimate.of_values([0.5]).half == 0.0


def test_proportion_interval_is_wilson_and_shown_asymmetric_near_the_bounds():
    est = Estimate.of_proportion(20, 20)
    assert est.mean == 1.0 and est.hi == 1.0 and 0.8 < est.lo < 0.9
    assert est.fmt() == f"1.000 [{est.lo:.3f}, 1.000]"
    mid = Estimate.of_proportion(500, 1000)
    assert mid.fmt() == f"0.500 ± {mid.half:.3f}"


def test_paired_differences_need_equal_lengths():
    diff = Estimate.of_differences([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert diff.mean == pytest.approx(0.5) and diff.half == pytest.approx(0.0)
    with pytest.raises(ValueError, match="equal lengths"):
        Estimate.of_differences([1.0], [1.0, 2.0])


def test_row_verdict_is_computed_from_the_numbers():
    inside = Row("a", {"acc": Estimate(0.95, 0.93, 0.97, 500)}, {"acc": 0.956}, compare="acc")
    assert inside.verdict().startswith("matches")
    near = Row(
        "b", {"acc": Estimate(0.90, 0.89, 0.91, 500)}, {"acc": 0.925}, compare="acc", tolerance=0.0
    )
    assert near.verdict().startswith("does not match: 0.025 below")
    widened = Row(
        "c", {"acc": Estimate(0.90, 0.89, 0.91, 500)}, {"acc": 0.925}, compare="acc", tolerance=0.02
    )
    assert widened.verdict().startswith("matches")
    missing = Row("d", {"acc": "not run offline"}, {"acc": 0.776}, compare="acc")
    assert missing.verdict() == "not reproduced: no orchenv number."
    extra = Row("e", {"acc": 0.9}, {}, compare="acc", why="Not a row of the paper.")
    assert extra.sentence() == "not in the paper. Not a row of the paper."


def test_order_check_needs_separated_intervals_unless_ties_are_allowed():
    a, b, c = (Estimate(m, m - 0.02, m + 0.02, 100) for m in (0.80, 0.70, 0.60))
    assert check_order("a > b > c", {"a": a, "b": b, "c": c}, ["a", "b", "c"]).reproduced
    close = Estimate(0.79, 0.77, 0.81, 100)
    noisy = check_order("a > close", {"a": a, "close": close}, ["a", "close"])
    assert (
        not noisy.reproduced and "within noise, the intervals overlap: a ~ close" in noisy.observed
    )
    reversed_ = check_order("close > a", {"a": a, "close": close}, ["close", "a"])
    assert not reversed_.reproduced and "a > close, within noise" in reversed_.observed
    # "no worse than": overlapping intervals are ties that break no order
    assert check_order(
        "close >= a", {"a": a, "close": close}, ["close", "a"], strict=False
    ).reproduced
    same = check_order("x > y", {"x": 0.0, "y": 0.0}, ["x", "y"])
    assert not same.reproduced and "identical: x = y" in same.observed
    broken = check_order("c > a", {"a": a, "c": c}, ["c", "a"], strict=False)
    assert not broken.reproduced and "order broken: a > c" in broken.observed
    assert broken.render().startswith("- **not reproduced**")


def test_direction_check_needs_separated_intervals():
    before, after = Estimate(0.5, 0.45, 0.55, 9), Estimate(0.7, 0.65, 0.75, 9)
    assert check_direction("reward goes up", before, after, up=True).reproduced
    assert not check_direction("tokens go down", before, after, up=False).reproduced
    close = Estimate(0.52, 0.47, 0.57, 9)
    finding = check_direction("reward goes up", before, close, up=True)
    assert not finding.reproduced and "within noise" in finding.observed


def test_section_markdown_escapes_cells_and_lists_commands():
    row = Row("x | y", {"acc": 0.5}, {"acc": 0.5}, command="orchenv eval ...", compare="acc")
    text = Section("T", "Table 1", ["acc"], [row]).to_markdown()
    assert "| x \\| y | 0.500 | 0.500 | matches" in text
    assert "- x | y: `orchenv eval ...`" in text


def test_cached_results_are_reused_until_the_config_changes(tmp_path):
    rep = Reproduction(
        "000", quick=True, runs_dir=tmp_path, figures_dir=tmp_path, figures_link=".", progress=False
    )
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    assert rep.cached("train seed 0", {"steps": 10}, compute) == {"value": 1}
    assert rep.cached("train seed 0", {"steps": 10}, compute) == {"value": 1}
    assert len(calls) == 1
    assert rep.cached("train seed 0", {"steps": 20}, compute) == {"value": 2}
    stored = json.loads((tmp_path / "train_seed_0.json").read_text())
    assert stored["config"] == {"steps": 20} and stored["result"] == {"value": 2}


def test_seed_names_resolve_and_unknown_ones_fail_clearly(capsys):
    assert resolve_seed("0") == resolve_seed("seed000") == resolve_seed("000_492bf7717164acb2")
    assert resolve_seed("4") == "004"
    with pytest.raises(ConfigError, match="choose one of 000, 001"):
        resolve_seed("7")
    assert main(["reproduce", "9", "--quick", "--no-progress"]) == 2
    assert "unknown seed '9'" in capsys.readouterr().err
