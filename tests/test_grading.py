"""Math answer equivalence through math-verify, boxed extraction, text metrics."""

from __future__ import annotations

import threading

import pytest

from orchenv.grading import (
    cache_info,
    check_math_solution,
    exact_match,
    extract_boxed,
    f1_score,
    math_equal,
)


@pytest.mark.parametrize(
    "reference, candidate",
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{3}{4}", "3/4"),
        ("-\\dfrac{6}{8}", "-\\frac{3}{4}"),
        ("12", "12.0"),
        ("2\\sqrt{3}", "\\sqrt{12}"),
        ("x + 1", "1 + x"),
        ("\\pi", "\\pi"),
        ("(1, 2)", "(1,2)"),
    ],
)
def test_equivalent_answers(reference, candidate):
    assert math_equal(reference, candidate)


@pytest.mark.parametrize(
    "reference, candidate",
    [
        ("\\frac{1}{2}", "0.6"),
        ("12", "13"),
        ("2\\sqrt{3}", "3\\sqrt{2}"),
        ("x+1", "x-1"),
        ("5", ""),
    ],
)
def test_different_answers(reference, candidate):
    assert not math_equal(reference, candidate)


def test_odd_inputs_never_raise():
    for junk in (None, "", "\\frac{", "}}}{{{", "x" * 100_000, "\\boxed{\\boxed{", "9" * 50_000):
        assert math_equal("5", junk) is False
    assert math_equal(None, "5") is False  # type: ignore[arg-type]


def test_extract_last_balanced_boxed():
    text = "first \\boxed{1} then \\boxed{\\frac{a}{b^{2}}} end"
    assert extract_boxed(text) == "\\frac{a}{b^{2}}"
    assert extract_boxed("\\fbox{7}") == "7"
    assert extract_boxed("unfinished \\boxed{\\frac{1}{2}") is None
    assert extract_boxed("no box here") is None


def test_solution_checks_its_boxed_answer():
    assert check_math_solution("... so $\\boxed{\\frac{6}{8}}$.", ["3/4"])
    assert not check_math_solution("... so $\\boxed{7}$.", ["3/4", "0.75"])
    assert not check_math_solution("the answer is 3/4", ["3/4"]), "an unboxed answer does not count"


def test_repeated_checks_hit_the_cache():
    math_equal("\\sqrt{8}", "2\\sqrt{2}")
    before = cache_info().hits
    for _ in range(5):
        assert math_equal("\\sqrt{8}", "2\\sqrt{2}")
    assert cache_info().hits == before + 5


def test_works_in_worker_threads():
    results = []
    thread = threading.Thread(target=lambda: results.append(math_equal("x^2", "x\\cdot x")))
    thread.start()
    thread.join()
    assert results == [True]


def test_text_metrics():
    assert exact_match("The Eiffel Tower", "eiffel tower!")
    assert f1_score("Barack Obama", "Obama") == pytest.approx(2 / 3)
    assert f1_score("a", None) == 0.0
