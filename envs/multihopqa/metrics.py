"""Seed 004's evaluation metrics (appendix A): answer EM / F1 / precision / recall, total
tokens (eq. 10), latency (eq. 7 parallel, eq. 8 serial) and the judge's Answer Quality
Score (1-5, appendix A.4).

Answer EM and F1 follow each dataset's official evaluation script, so a number reported
with orchenv means what the dataset's papers mean by it (``ANSWER_METRICS``; the name of
the rule used is returned as ``answer_metric`` beside the numbers). Written here because
none of the three scripts is an installable library (each is a file in its repository):

- ``"hotpotqa"`` (``hotpot_evaluate_v1.py``): SQuAD's normalisation (lower case, no
  punctuation, no articles a/an/the, single spaces); EM is equality of the normalised
  strings; token F1, **except that F1, precision and recall are 0 when either normalised
  side is "yes", "no" or "noanswer" and the two differ** (so "no" against "no it is not"
  scores 0, not 0.67). A prediction that normalises to nothing scores F1 0, even against
  an empty reference. HotpotQA has one answer per question; a task with aliases (the
  synthetic generator's) takes the best score over them, each number on its own, as
  2WikiMultihopQA's script does.
- ``"2wikimultihopqa"`` (``2wikimultihop_evaluate_v1.1.py``): HotpotQA's rules, scored
  against the answer and its aliases (Wikidata aliases and demonyms), each of EM, F1,
  precision and recall maximised over them separately. For one reference this is exactly
  ``"hotpotqa"``; the two names share one function.
- ``"musique"`` (``metrics/answer.py``, SQuAD 2.0's rules): the same normalisation, **no
  yes/no rule**, and F1 is 1 when both sides normalise to nothing (0 when only one does);
  EM and F1 are maximised over the answer and ``answer_aliases``. MuSiQue's script reports
  no precision or recall; the ones given here are maximised over the references the same
  way. (Its ``compute_f1`` receives prediction and reference in swapped order; F1 and EM
  are symmetric, so nothing changes.)
- ``"partial_credit"``: orchenv's rule before issue 16 (token F1 without the yes/no rule,
  1.0 when both sides are empty, precision and recall of the reference with the best
  F1). A named departure, kept to compare with earlier numbers.

``"official"`` (the default) picks the rule of the task's dataset (``task.meta["dataset"]``
via ``official_metric``): MuSiQue's for MuSiQue, 2Wiki's for 2Wiki, HotpotQA's for HotpotQA
and for the synthetic generator, whose records are written in HotpotQA's format.

The simulated pool's judge does not read the answer the way an LLM judge would: it buckets
the answer's token F1 (``agents.py``). Its score is therefore reported under its own name,
``answer_quality_from_f1``, and ``answer_quality`` is kept for a real judge (any judge agent
not served by the simulated backend), so no table mistakes one for the other.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.envs.multihopqa.agents import BACKEND_NAME
from orchenv.error import UnknownNameError
from orchenv.grading import best_answer_prf, exact_match, normalize_text
from orchenv.pool import AgentPool, CallContext
from orchenv.tasks import Task

JUDGE_PROMPT = (
    "You are an expert judge. Your task is to evaluate how well the answer responds to the "
    "user's query.\n\nUser Query:\n{question}\n\nAnswer:\n{answer}\n\nPlease provide a JSON object "
    'with the following format: {{"score": (1 to 5), "justification": "a short explanation of the score"}}'
)

#: the episode numbers a Gymnasium view reports in ``info["metrics"]``
METRIC_NAMES = (
    "em",
    "f1",
    "precision",
    "recall",
    "answer_quality",
    "answer_quality_from_f1",
    "tokens_total",
    "latency_parallel_s",
    "latency_serial_s",
)

_SCORE_RE = re.compile(r'"score"\s*:\s*([0-9.]+)')

#: the answer metrics (module docstring); ``"official"`` picks one by the task's dataset
ANSWER_METRICS = ("official", "hotpotqa", "musique", "2wikimultihopqa", "partial_credit")
#: each dataset's own metric; the synthetic generator writes HotpotQA records
OFFICIAL_METRIC = {
    "hotpotqa": "hotpotqa",
    "musique": "musique",
    "2wikimultihopqa": "2wikimultihopqa",
    "synthetic": "hotpotqa",
}
#: answers HotpotQA's F1 gives no partial credit for (``hotpot_evaluate_v1.py``)
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})

#: (em, f1, precision, recall)
Scores = tuple[float, float, float, float]


def official_metric(dataset: str | None) -> str:
    """The official answer metric of a dataset (``task.meta["dataset"]``); HotpotQA's for an
    unknown or missing one (seed 004's RCR results are HotpotQA numbers)."""
    return OFFICIAL_METRIC.get(str(dataset), "hotpotqa")


def resolve_answer_metric(metric: str, dataset: str | None = None) -> str:
    """``metric`` with ``"official"`` replaced by the dataset's; ``UnknownNameError`` for a
    name not in ``ANSWER_METRICS``."""
    if metric not in ANSWER_METRICS:
        raise UnknownNameError("answer metric", str(metric), ANSWER_METRICS)
    return official_metric(dataset) if metric == "official" else metric


def _token_prf(pred: list[str], gold: list[str]) -> tuple[float, float, float]:
    overlap = sum((Counter(pred) & Counter(gold)).values())
    if overlap == 0:
        return 0.0, 0.0, 0.0
    precision, recall = overlap / len(pred), overlap / len(gold)
    return 2 * precision * recall / (precision + recall), precision, recall


def hotpotqa_scores(prediction: str, reference: str) -> Scores:
    """HotpotQA's answer EM, F1, precision, recall for one reference (the yes/no/noanswer
    rule included; see the module docstring)."""
    pred, gold = normalize_text(prediction), normalize_text(reference)
    em = float(pred == gold)
    if pred != gold and (pred in _CLOSED_ANSWERS or gold in _CLOSED_ANSWERS):
        return em, 0.0, 0.0, 0.0
    return (em, *_token_prf(pred.split(), gold.split()))


def musique_scores(prediction: str, reference: str) -> Scores:
    """MuSiQue's (SQuAD 2.0's) answer EM and F1 for one reference, with precision and recall."""
    pred, gold = normalize_text(prediction).split(), normalize_text(reference).split()
    em = float(pred == gold)
    if not pred or not gold:
        return em, em, em, em  # both empty: a match; one empty: 0
    return (em, *_token_prf(pred, gold))


def answer_scores(references: Sequence[str], answer: str | None, metric: str) -> Scores:
    """(EM, F1, precision, recall) of ``answer`` against ``references`` under ``metric`` (a
    resolved name, not ``"official"``). No answer is scored as the empty string (what the
    official scripts do with a missing prediction is to count 0; the empty string scores 0
    against any non-empty reference under every rule)."""
    if metric == "partial_credit":
        precision, recall, f1 = best_answer_prf(references, answer)
        return float(any(exact_match(ref, answer) for ref in references)), f1, precision, recall
    if metric in ("hotpotqa", "2wikimultihopqa"):
        rule = hotpotqa_scores
    elif metric == "musique":
        rule = musique_scores
    else:
        raise UnknownNameError("resolved answer metric", str(metric), ANSWER_METRICS[1:])
    scores = [rule(answer or "", ref) for ref in references] or [(0.0, 0.0, 0.0, 0.0)]
    return (
        max(s[0] for s in scores),
        max(s[1] for s in scores),
        max(s[2] for s in scores),
        max(s[3] for s in scores),
    )


@dataclass
class RoundUsage:
    """Tokens and latency per role in one round (eq. 7, 8, 10)."""

    tokens: dict[str, int] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def add(self, role: str, tokens: int, latency_s: float) -> None:
        self.tokens[role] = self.tokens.get(role, 0) + tokens
        self.latency[role] = self.latency.get(role, 0.0) + latency_s


def episode_metrics(
    answers: Sequence[str],
    answer: str | None,
    usage: Sequence[RoundUsage],
    *,
    metric: str = "official",
    dataset: str | None = None,
) -> dict[str, Any]:
    """EM, F1, precision, recall of ``answer`` against the references under ``metric``
    (``"official"``: the rule of ``dataset``, HotpotQA's when None), and that rule's name as
    ``answer_metric``; total tokens (eq. 10); latency with roles of a round in parallel
    (eq. 7) or in series (eq. 8); rounds played."""
    name = resolve_answer_metric(metric, dataset)
    em, f1, precision, recall = answer_scores(answers, answer, name)
    return {
        "answer_metric": name,
        "em": em,
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "tokens_total": sum(sum(u.tokens.values()) for u in usage),
        "latency_parallel_s": sum(max(u.latency.values(), default=0.0) for u in usage),
        "latency_serial_s": sum(sum(u.latency.values()) for u in usage),
        "rounds": len(usage),
    }


def parse_judge_score(text: str) -> float | None:
    """The 1-5 score from a judge reply (JSON, or a ``"score": N`` fragment); None if absent."""
    try:
        value = json.loads(text.strip().removeprefix("```json").removesuffix("```"))
        score = float(value["score"]) if isinstance(value, dict) else None
    except (ValueError, KeyError, TypeError):
        match = _SCORE_RE.search(text)
        score = float(match.group(1)) if match else None
    if score is None or not 1.0 <= score <= 5.0:
        return None
    return score


def judge_is_simulated(pool: AgentPool, judge: str) -> bool:
    """Whether ``judge`` is the simulated pool's judge (its score is derived from F1)."""
    return pool.spec(judge).backend == BACKEND_NAME


def judge_metrics(
    pool: AgentPool, judge: str | None, task: Task, answer: str | None
) -> dict[str, float | None]:
    """``answer_quality`` (a real judge's 1-5 score) and ``answer_quality_from_f1`` (the
    simulated judge's): the one that does not apply, or both without a judge, is None."""
    score = judge_answer(pool, judge, task, answer) if judge is not None else None
    simulated = judge is not None and judge_is_simulated(pool, judge)
    return {
        "answer_quality": None if simulated else score,
        "answer_quality_from_f1": score if simulated else None,
    }


def judge_answer(pool: AgentPool, judge: str, task: Task, answer: str | None) -> float | None:
    """The Answer Quality Score (1-5) of ``answer`` from the ``judge`` agent; None if unparsable.

    The call goes straight to the pool: judging is evaluation, not part of the episode.
    """
    prompt = JUDGE_PROMPT.format(question=task.prompt, answer=answer or "")
    completion = pool.call(judge, [{"role": "user", "content": prompt}], CallContext(task=task))
    return parse_judge_score(completion.text)
