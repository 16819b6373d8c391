"""Procedural math source: determinism, splits, difficulty coverage, and worked solutions."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest

from orchenv.envs.mathroute.mathgen import (
    FAMILIES,
    ProceduralMathSource,
    worked_solution,
    wrong_answer,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, extract_boxed, math_equal
from orchenv.tasks import Task, make_task_source

MATH_TYPES = {
    "Prealgebra",
    "Algebra",
    "Number Theory",
    "Counting & Probability",
    "Geometry",
    "Intermediate Algebra",
    "Precalculus",
}
PER_FAMILY = 200


@pytest.fixture(scope="module")
def source() -> ProceduralMathSource:
    return ProceduralMathSource(seed=0)


def _step_lines(text: str) -> list[str]:
    return text.splitlines()[:-1]


def test_same_seed_same_tasks_different_seed_different_tasks() -> None:
    a, b, c = (ProceduralMathSource(seed=s) for s in (7, 7, 8))
    for split in ("train", "test"):
        for i in range(200):
            ta, tb = a.get(split, i), b.get(split, i)
            assert (ta.id, ta.prompt, ta.answers, ta.meta) == (
                tb.id,
                tb.prompt,
                tb.answers,
                tb.meta,
            )
    differ = sum(a.get("test", i).prompt != c.get("test", i).prompt for i in range(200))
    assert differ > 190


def test_train_and_test_share_no_problem(source: ProceduralMathSource) -> None:
    train = {source.get("train", i).prompt for i in range(2000)}
    test = {source.get("test", i).prompt for i in range(2000)}
    assert not train & test
    assert len(test) > 1800  # few repeats inside a split


def test_ids_unique_and_by_id_round_trip(source: ProceduralMathSource) -> None:
    ids = set()
    for split in source.splits:
        for i in range(0, source.size(split), 37):
            task = source.get(split, i)
            assert task.id == f"procmath-0/{split}/{i}"
            assert source.by_id(task.id) is task
            ids.add(task.id)
    assert len(ids) == sum(len(range(0, source.size(s), 37)) for s in source.splits)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        "procmath-1/test/0",
        "procmath-0/dev/0",
        "procmath-0/test/5000",
        "procmath-0/test/x",
    ],
)
def test_by_id_rejects_unknown_ids(source: ProceduralMathSource, bad: str) -> None:
    with pytest.raises(UnknownNameError):
        source.by_id(bad)


def test_sizes_splits_and_bounds(source: ProceduralMathSource) -> None:
    assert source.name == "procedural-math"
    assert source.splits == ("train", "test")
    assert (source.size("train"), source.size("test")) == (7500, 5000)
    with pytest.raises(IndexError):
        source.get("test", 5000)
    with pytest.raises(IndexError):
        source.get("test", -1)
    with pytest.raises(UnknownNameError):
        source.get("validation", 0)
    small = ProceduralMathSource(seed=3, train_size=5, test_size=3)
    assert [t.id for t in small.iter("test")] == [f"procmath-3/test/{i}" for i in range(3)]


def test_difficulty_prefix_is_nearly_uniform(source: ProceduralMathSource) -> None:
    tasks = [source.get("test", i) for i in range(2000)]
    z = np.array([t.meta["difficulty"] for t in tasks])
    assert ((z >= 0) & (z < 1)).all()
    share = np.histogram(z, bins=10, range=(0.0, 1.0))[0] / len(z)
    assert np.abs(share - 0.1).max() <= 0.015
    for t in tasks:
        assert t.meta["level"] == 1 + math.floor(5 * t.meta["difficulty"])
        assert t.level == t.meta["level"]
    assert {t.meta["level"] for t in tasks} == {1, 2, 3, 4, 5}
    # short prefixes are balanced too (low-discrepancy sequence, not i.i.d. draws)
    share = np.histogram(z[:200], bins=5, range=(0.0, 1.0))[0] / 200
    assert np.abs(share - 0.2).max() <= 0.02


def test_higher_levels_need_more_steps(source: ProceduralMathSource) -> None:
    steps: dict[int, list[int]] = defaultdict(list)
    for i in range(2000):
        task = source.get("test", i)
        n_steps = len(_step_lines(task.meta["solution"]))
        steps[task.meta["level"]].append(n_steps)
    means = [float(np.mean(steps[level])) for level in range(1, 6)]
    assert all(lo < hi for lo, hi in zip(means, means[1:], strict=False)), means
    assert means[-1] - means[0] > 1.5


def test_meta_is_complete_and_json_serialisable(source: ProceduralMathSource) -> None:
    families = set()
    for i in range(500):
        task = source.get("train", i)
        meta = task.meta
        assert {"level", "difficulty", "family", "type", "params", "solution"} <= set(meta)
        assert meta["type"] in MATH_TYPES
        json.dumps(meta["params"])
        assert task.answers and task.answer
        assert task.prompt.strip()
        assert math_equal(task.answer, extract_boxed(meta["solution"]))
        families.add(meta["family"])
    assert families == set(FAMILIES)
    assert len(FAMILIES) >= 8


def test_solution_regenerates_from_params(source: ProceduralMathSource) -> None:
    task = source.get("test", 11)
    clone = Task("elsewhere/1", task.prompt, task.answers, dict(task.meta))
    rng = np.random.default_rng(0)
    assert worked_solution(clone, correct=True, rng=rng, style=0) == task.meta["solution"]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_correct_and_wrong_solutions(family: str) -> None:
    src = ProceduralMathSource(seed=11, families=[family])
    rng = np.random.default_rng(123)
    levels = set()
    for i in range(PER_FAMILY):
        task = src.get("test", i)
        assert task.meta["family"] == family
        levels.add(task.meta["level"])
        style = i % 3
        right = worked_solution(task, correct=True, rng=rng, style=style)
        assert right.rstrip().endswith("$")
        assert "The final answer is $\\boxed{" in right.splitlines()[-1]
        assert math_equal(task.answer, extract_boxed(right)), (task.prompt, right)
        assert check_math_solution(right, task.answers)
        wrong = worked_solution(task, correct=False, rng=rng, style=style)
        boxed = extract_boxed(wrong)
        assert boxed is not None
        assert not math_equal(task.answer, boxed), (task.prompt, wrong)
        # the mistake sits in a step, not only in the final line
        right_steps, wrong_steps = _step_lines(right), _step_lines(wrong)
        assert wrong_steps and wrong_steps != right_steps, (right, wrong)
        assert len(wrong_steps) >= 1
    assert levels == {1, 2, 3, 4, 5}


def test_errors_land_in_early_and_late_steps() -> None:
    src = ProceduralMathSource(seed=2)
    rng = np.random.default_rng(0)
    early = late = 0
    for i in range(300):
        task = src.get("train", i)
        right = _step_lines(task.meta["solution"])
        wrong = _step_lines(worked_solution(task, correct=False, rng=rng, style=0))
        first = next(j for j, (a, b) in enumerate(zip(right, wrong, strict=False)) if a != b)
        if first < len(right) - 1:
            early += 1  # the mistake propagates through later steps
        else:
            late += 1
    assert early > 60 and late > 30, (early, late)


def test_worked_solution_is_deterministic_given_rng(source: ProceduralMathSource) -> None:
    for i in range(50):
        task = source.get("test", i)
        for correct in (True, False):
            a = worked_solution(task, correct=correct, rng=np.random.default_rng(i))
            b = worked_solution(task, correct=correct, rng=np.random.default_rng(i))
            assert a == b
    texts = {
        worked_solution(source.get("test", 3), correct=True, rng=np.random.default_rng(s))
        for s in range(30)
    }
    assert len(texts) > 1  # phrasing varies with the rng


def test_fallback_with_boxed_solution() -> None:
    solution = "We get $a = 1$ and $b = 2$, so $\\frac{a}{b} = \\boxed{\\frac{1}{2}}$."
    task = Task("math/test/0", "Find a/b.", ("\\frac{1}{2}",), {"solution": solution, "level": 2})
    rng = np.random.default_rng(0)
    assert worked_solution(task, correct=True, rng=rng) == solution
    for _ in range(30):
        wrong = worked_solution(task, correct=False, rng=rng)
        assert wrong != solution
        boxed = extract_boxed(wrong)
        assert boxed is not None and not math_equal("\\frac{1}{2}", boxed)
        assert "\\boxed{\\frac{1}{2}}" not in wrong


def test_fallback_with_unboxed_solution_and_prose_answer() -> None:
    solution = "Count strings by their last digit.\nThe recursion gives x_6 = 239."
    task = Task("champ/P_1", "How many strings?", ("239",), {"solution": solution})
    rng = np.random.default_rng(1)
    right = worked_solution(task, correct=True, rng=rng)
    assert right.startswith(solution) and extract_boxed(right) == "239"
    wrong = worked_solution(task, correct=False, rng=rng)
    assert wrong.splitlines()[0] == solution.splitlines()[0]
    assert wrong.splitlines()[1] != solution.splitlines()[1]  # the final step carries the mistake
    assert not math_equal("239", extract_boxed(wrong))
    prose = Task("champ/P_2", "Q", ("C(10, 5), or equivalently 252",), {"solution": solution})
    boxed = extract_boxed(worked_solution(prose, correct=False, rng=rng))
    assert boxed and boxed != prose.answer


def test_fallback_without_solution() -> None:
    task = Task("x/0", "What is 6 times 7?", ("42",), {})
    rng = np.random.default_rng(2)
    right = worked_solution(task, correct=True, rng=rng)
    wrong = worked_solution(task, correct=False, rng=rng)
    assert extract_boxed(right) == "42"
    assert extract_boxed(wrong) not in (None, "42")
    assert not math_equal("42", extract_boxed(wrong))
    assert len(right.splitlines()) >= 3


def test_fallback_checks_every_reference_answer() -> None:
    task = Task("x/1", "Q", ("7", "8", "6", "-7", "9", "5", "4", "10"), {})
    rng = np.random.default_rng(3)
    for _ in range(20):
        boxed = extract_boxed(worked_solution(task, correct=False, rng=rng))
        assert not any(math_equal(a, boxed) for a in task.answers)


@pytest.mark.parametrize(
    "answer",
    [
        "7",
        "0",
        "-12",
        "1,000",
        "0.25",
        "-3.5",
        "\\frac{3}{4}",
        "-\\frac{1}{2}",
        "\\dfrac{7}{3}",
        "3/8",
        "2\\sqrt{3}",
        "x^2+7x+10",
        "\\text{(C)}",
        "\\infty",
        "(-\\infty, 3]",
        "\\frac{\\sqrt{3}}{2}",
    ],
)
def test_wrong_answer_is_a_near_miss(answer: str) -> None:
    rng = np.random.default_rng(4)
    for _ in range(10):
        wrong = wrong_answer(answer, rng)
        assert wrong and wrong != answer
        assert not math_equal(answer, wrong)


def test_family_selection_and_config_errors() -> None:
    src = ProceduralMathSource(families=["fractions", "modular"], test_size=100)
    assert src.families == ("fractions", "modular")
    assert {t.meta["family"] for t in src.iter("test")} == {"fractions", "modular"}
    with pytest.raises(UnknownNameError, match="fractoins"):
        ProceduralMathSource(families=["fractoins"])
    with pytest.raises(ConfigError):
        ProceduralMathSource(families=[])
    with pytest.raises(ConfigError):
        ProceduralMathSource(families="fractions")
    with pytest.raises(ConfigError):
        ProceduralMathSource(test_size=-1)


def test_registered_under_its_name() -> None:
    src = make_task_source("procedural-math", seed=5, train_size=10, test_size=10)
    assert isinstance(src, ProceduralMathSource)
    assert src.get("test", 0).id == "procmath-5/test/0"
