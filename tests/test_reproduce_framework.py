"""The reproduction pages' building blocks: intervals, computed verdicts, claim checks, resume."""

from __future__ import annotations

import json

import pytest

import orchenv.reproduce as kit
from orchenv.cli import main
from orchenv.error import ConfigError
from orchenv.reproduce import Estimate, Reproduction, Row, Section, Source


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
    assert kit.check_order("a > b > c", {"a": a, "b": b, "c": c}, ["a", "b", "c"]).reproduced
    close = Estimate(0.79, 0.77, 0.81, 100)
    noisy = kit.check_order("a > close", {"a": a, "close": close}, ["a", "close"])
    assert (
        not noisy.reproduced and "within noise, the intervals overlap: a ~ close" in noisy.observed
    )
    reversed_ = kit.check_order("close > a", {"a": a, "close": close}, ["close", "a"])
    assert not reversed_.reproduced and "a > close, within noise" in reversed_.observed
    # "no worse than": overlapping intervals are ties that break no order
    assert kit.check_order(
        "close >= a", {"a": a, "close": close}, ["close", "a"], strict=False
    ).reproduced
    same = kit.check_order("x > y", {"x": 0.0, "y": 0.0}, ["x", "y"])
    assert not same.reproduced and "identical: x = y" in same.observed
    broken = kit.check_order("c > a", {"a": a, "c": c}, ["c", "a"], strict=False)
    assert not broken.reproduced and "order broken: a > c" in broken.observed
    assert broken.render().startswith("- **not reproduced**")


def test_direction_check_needs_separated_intervals():
    before, after = Estimate(0.5, 0.45, 0.55, 9), Estimate(0.7, 0.65, 0.75, 9)
    assert kit.check_direction("reward goes up", before, after, up=True).reproduced
    assert not kit.check_direction("tokens go down", before, after, up=False).reproduced
    close = Estimate(0.52, 0.47, 0.57, 9)
    finding = kit.check_direction("reward goes up", before, close, up=True)
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
    assert (
        kit.resolve_seed("0")
        == kit.resolve_seed("seed000")
        == kit.resolve_seed("000_492bf7717164acb2")
    )
    assert kit.resolve_seed("4") == "004"
    with pytest.raises(ConfigError, match="choose one of 000, 001"):
        kit.resolve_seed("7")
    assert main(["reproduce", "9", "--quick", "--no-progress"]) == 2
    assert "unknown seed '9'" in capsys.readouterr().err


def test_a_match_counts_as_a_reproduction_only_by_mechanism():
    est = Estimate(0.95, 0.94, 0.96, 600)
    plain = Row("m", {"acc": est}, {"acc": 0.955}, compare="acc")
    assert plain.provenance == "mechanism" and plain.status == "reproduced"
    for kind in ("calibrated", "assumed", "chosen"):
        make = getattr(kit, kind)
        row = Row("r", {"acc": est}, {"acc": 0.955}, compare="acc", sources=(make("o3 pass@1"),))
        assert row.provenance == kind and row.status == kind
        assert f"Not a reproduction: {kind}: o3 pass@1" in row.verdict()
    # the strongest kind wins; a calibrated row that misses is simply not reproduced
    both = Row(
        "b",
        {"acc": est},
        {"acc": 0.955},
        compare="acc",
        sources=(kit.chosen("budget"), kit.calibrated("pass@1")),
    )
    assert both.provenance == "calibrated"
    miss = Row("x", {"acc": est}, {"acc": 0.80}, compare="acc", sources=(kit.calibrated("p"),))
    assert miss.status == "not reproduced"
    with pytest.raises(ValueError, match="kind"):
        Source("typed", "x")


def test_too_wide_intervals_are_undecided_with_the_sample_size_that_would_decide():
    wide = Row("w", {"d": Estimate(0.885, 0.811, 0.959, 100)}, {"d": 0.94}, compare="d")
    assert wide.status == "undecided"
    assert "undecided: the interval (± 0.074) is wider than the tolerance 0.020" in wide.verdict()
    assert "about 1,369 episodes" in wide.verdict()
    # decided against even though wide: the paper's number is outside
    assert Row("o", {"d": Estimate(0.5, 0.4, 0.6, 9)}, {"d": 0.9}, compare="d").status == (
        "not reproduced"
    )


def test_a_difference_of_the_opposite_sign_never_matches():
    flipped = Row("env", {"drop": Estimate(-0.02, -0.03, -0.01, 600)}, {"drop": 0.005},
                  compare="drop", tolerance=0.05, signed=True)  # fmt: skip
    assert flipped.status == "not reproduced" and "the sign differs" in flipped.verdict()
    straddles = Row("env", {"drop": Estimate(-0.013, -0.03, 0.004, 600)}, {"drop": 0.005},
                    compare="drop", tolerance=0.05, signed=True)  # fmt: skip
    assert straddles.status == "undecided" and "sign is not decided" in straddles.verdict()
    unsigned = Row("env", {"drop": Estimate(-0.013, -0.03, 0.004, 600)}, {"drop": 0.005},
                   compare="drop", tolerance=0.05)  # fmt: skip
    assert unsigned.status == "reproduced"


def test_ties_and_overlaps_are_undecided_not_reproduced():
    a, close = Estimate(0.80, 0.78, 0.82, 100), Estimate(0.79, 0.77, 0.81, 100)
    tie = kit.check_order("a > close", {"a": a, "close": close}, ["a", "close"])
    assert tie.status == "undecided" and not tie.decided
    same = kit.check_order("x > y", {"x": 0.5, "y": 0.5}, ["x", "y"])
    assert same.status == "undecided"
    far = Estimate(0.5, 0.48, 0.52, 100)
    assert kit.check_order("far > a", {"a": a, "far": far}, ["far", "a"]).status == "not reproduced"
    up = kit.check_direction(
        "up", Estimate(0.5, 0.45, 0.55, 9), Estimate(0.52, 0.47, 0.57, 9), up=True
    )
    assert up.status == "undecided"


def test_saturation_is_an_equivalence_test_against_a_margin_not_overlap():
    # +8.8 points with overlapping intervals: not "saturates"
    before, after = Estimate(0.832, 0.76, 0.90, 50), Estimate(0.920, 0.87, 0.97, 50)
    assert before.hi > after.lo  # they overlap
    sat = kit.check_equivalence("gain saturates", before, after, margin=0.02)
    assert sat.status == "not reproduced" or sat.status == "undecided"
    assert not sat.reproduced
    flat = kit.check_equivalence(
        "flat", Estimate(0.90, 0.895, 0.905, 5000), Estimate(0.901, 0.896, 0.906, 5000), margin=0.02
    )
    assert flat.status == "reproduced"
    paired = kit.check_equivalence(
        "paired", 0.9, 0.95, margin=0.02, difference=Estimate(0.05, 0.04, 0.06, 600)
    )
    assert paired.status == "not reproduced"


def test_own_claims_are_shown_and_counted_apart(tmp_path):
    mine = kit.check_direction("orchenv: cost goes down", 1.0, 0.5, up=False).with_(paper=False)
    theirs = kit.check_direction("paper: accuracy goes up", 0.5, 0.9, up=True)
    row = Row("a", {"acc": 0.955}, {"acc": 0.955}, compare="acc", sources=(kit.calibrated("p"),))
    section = Section("T", "Table 1", ["acc"], [row], findings=[theirs, mine])
    text = section.to_markdown()
    assert (
        text.index("paper: accuracy")
        < text.index("orchenv's own claims")
        < text.index("orchenv: cost")
    )
    counts = kit.count_statuses([section])
    assert counts["rows"]["calibrated"] == 1 and counts["findings"]["reproduced"] == 1
    assert counts["own"]["reproduced"] == 1 and sum(counts["findings"].values()) == 1
    page = {"counts": counts, "sections": [section.to_dict()]}
    (tmp_path / "007.json").write_text(json.dumps(page))
    table = kit.index_table(tmp_path)
    assert "| 007 | table rows | 0 | 1 | 0 | 0 | 0 | 0 |" in table
    assert "| 007 | paper's claims | 1 | 0 | 0 | 0 | 0 | 0 |" in table


def test_the_count_tables_in_the_readmes_come_from_the_pages_json():
    """README.md and docs/reproduction/README.md hold ``orchenv reproduce index``'s table."""
    from pathlib import Path

    from orchenv.reproduce import INDEX_END, INDEX_FILES, INDEX_START

    root = Path(__file__).resolve().parent.parent
    table = kit.index_table(root / "docs" / "reproduction")
    for name in INDEX_FILES:
        text = (root / name).read_text(encoding="utf-8")
        block = text.split(INDEX_START, 1)[1].split(INDEX_END, 1)[0].strip()
        assert block == table, f"{name}: run `orchenv reproduce index`"


@pytest.mark.parametrize("seed", ["000", "001", "002", "003", "004"])
def test_a_printed_row_command_runs_from_a_clean_checkout(seed, tmp_path, monkeypatch):
    """One row command per page, as printed, on a small size (issue 26: runnable rows)."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    data = json.loads((root / "docs" / "reproduction" / f"{seed}.json").read_text("utf-8"))
    commands = [r["command"] for s in data["sections"] for r in s["rows"] if r.get("command")]
    # trained rows replay policies that `orchenv reproduce` saves under runs/: take another
    runnable = [c for c in commands if "runs/reproduce" not in c]
    assert runnable, f"page {seed} prints no row command"
    argv = shlex.split(runnable[0])

    def swap(flag: str, values: list[str]) -> None:
        i = argv.index(flag)
        j = i + 1
        while j < len(argv) and not argv[j].startswith("-"):
            j += 1
        argv[i + 1 : j] = values

    swap("--episodes", ["2"])
    swap("--seeds", ["0"])
    swap("--out", [str(tmp_path / "out")])
    monkeypatch.chdir(tmp_path)
    if argv[0] == "orchenv":
        assert main(argv[1:]) == 0
    else:
        assert argv[:3] == ["python", "-m", "orchenv.envs.multihopqa.reproduce"]
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out").exists()
