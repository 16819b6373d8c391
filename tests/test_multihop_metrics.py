"""The official answer metrics of HotpotQA, MuSiQue and 2WikiMultihopQA (``metrics.py``).

Each rule is checked on the cases that separate it from the others (HotpotQA's yes/no rule,
MuSiQue's empty-answer rule, 2Wiki's per-number maximum over aliases), and against a
transcription of the scripts' steps written out below (normalise; yes/no test; token
overlap) on generated pairs that are rich in those cases.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np
import pytest

from orchenv.envs.multihopqa.metrics import (
    ANSWER_METRICS,
    RoundUsage,
    answer_scores,
    episode_metrics,
    official_metric,
)
from orchenv.error import UnknownNameError


def _norm(text: str) -> str:
    """The scripts' normalize_answer, step by step: lower, drop punctuation, articles, spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _overlap_f1(pred: list[str], gold: list[str]) -> tuple[float, float, float]:
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r), p, r


def hotpot_spec(pred: str, gold: str) -> tuple[float, float, float, float]:
    """hotpot_evaluate_v1.py / 2wikimultihop_evaluate_v1.1.py: (em, f1, prec, recall)."""
    p, g = _norm(pred), _norm(gold)
    em = float(p == g)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return em, 0.0, 0.0, 0.0
    return (em, *_overlap_f1(p.split(), g.split()))


def musique_spec(pred: str, gold: str) -> tuple[float, float]:
    """MuSiQue's metrics/answer.py (SQuAD 2.0): (em, f1)."""
    p, g = _norm(pred).split(), _norm(gold).split()
    if not p or not g:
        return float(p == g), float(p == g)
    return float(p == g), _overlap_f1(p, g)[0]


WORDS = ["yes", "no", "noanswer", "the", "a", "Paris", "paris,", "tower", "no.", "It", "is", ""]


def _phrase(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(0, 4))))


def test_hotpotqa_yes_no_rule_and_partial_credit_option():
    assert answer_scores(["no"], "no it is not", "hotpotqa") == (0.0, 0.0, 0.0, 0.0)
    assert answer_scores(["yes it is"], "yes", "hotpotqa") == (0.0, 0.0, 0.0, 0.0)
    assert answer_scores(["no answer"], "noanswer", "hotpotqa")[1] == 0.0
    assert answer_scores(["Yes"], "yes.", "hotpotqa") == (1.0, 1.0, 1.0, 1.0)
    em, f1, p, r = answer_scores(["no"], "no it is not", "partial_credit")  # orchenv before
    assert (em, round(f1, 3), p, r) == (0.0, 0.4, 0.25, 1.0)
    em, f1, p, r = answer_scores(["the Eiffel Tower"], "Eiffel Tower in Paris", "hotpotqa")
    assert (em, round(f1, 4), p, r) == (0.0, 0.6667, 0.5, 1.0)
    # an answer that normalises to nothing: EM with an empty reference, but F1 0 (HotpotQA)
    assert answer_scores(["the"], "a", "hotpotqa") == (1.0, 0.0, 0.0, 0.0)
    assert answer_scores(["Paris"], None, "hotpotqa") == (0.0, 0.0, 0.0, 0.0)


def test_musique_has_no_yes_no_rule_and_matches_empty_answers():
    em, f1, _, _ = answer_scores(["no"], "no it is not", "musique")
    assert (em, round(f1, 3)) == (0.0, 0.4)
    assert answer_scores(["the"], "a", "musique")[:2] == (1.0, 1.0)
    assert answer_scores(["Paris", "City of Light"], "light city", "musique")[1] == pytest.approx(
        2 * (2 / 2) * (2 / 3) / (1 + 2 / 3)
    )


def test_2wiki_maximises_each_number_over_the_aliases_separately():
    refs = ["x", "y z w v u t"]
    pred = "x y z"  # vs "x": P 1/3, R 1 (F1 0.5); vs "y z w v u t": P 2/3, R 1/3 (F1 0.44)
    em, f1, p, r = answer_scores(refs, pred, "2wikimultihopqa")
    assert (em, f1, p, r) == (0.0, 0.5, pytest.approx(2 / 3), 1.0)
    # orchenv's former rule reports the precision and recall of the best-F1 reference
    assert answer_scores(refs, pred, "partial_credit")[2:] == (pytest.approx(1 / 3), 1.0)
    # with one reference 2Wiki's rule is HotpotQA's
    assert answer_scores(["no"], "no way", "2wikimultihopqa") == (0.0, 0.0, 0.0, 0.0)


def test_rules_agree_with_the_scripts_on_generated_pairs():
    rng = np.random.default_rng(0)
    for _ in range(400):
        golds = [_phrase(rng) for _ in range(int(rng.integers(1, 3)))]
        pred = _phrase(rng)
        hot = [hotpot_spec(pred, g) for g in golds]
        want = tuple(max(s[i] for s in hot) for i in range(4))
        assert answer_scores(golds, pred, "2wikimultihopqa") == pytest.approx(want), (golds, pred)
        assert answer_scores(golds[:1], pred, "hotpotqa") == pytest.approx(hot[0]), (golds, pred)
        mus = [musique_spec(pred, g) for g in golds]
        got = answer_scores(golds, pred, "musique")
        assert got[:2] == pytest.approx((max(m[0] for m in mus), max(m[1] for m in mus)))


def test_official_picks_the_datasets_rule_and_names_it():
    assert official_metric("musique") == "musique"
    assert official_metric("2wikimultihopqa") == "2wikimultihopqa"
    assert official_metric("hotpotqa") == official_metric("synthetic") == "hotpotqa"
    usage = [RoundUsage({"planner": 10}, {"planner": 0.5})]
    out = episode_metrics(["no"], "no it is not", usage, dataset="musique")
    assert out["answer_metric"] == "musique" and out["f1"] == pytest.approx(0.4)
    out = episode_metrics(["no"], "no it is not", usage)  # no dataset: HotpotQA's rule
    assert out["answer_metric"] == "hotpotqa" and out["f1"] == 0.0
    assert out["tokens_total"] == 10 and out["rounds"] == 1
    out = episode_metrics(["no"], "no it is not", usage, metric="partial_credit")
    assert out["answer_metric"] == "partial_credit" and out["f1"] == pytest.approx(0.4)
    assert "partial_credit" in ANSWER_METRICS
    with pytest.raises(UnknownNameError, match="answer metric"):
        episode_metrics(["no"], "no", usage, metric="squad")
