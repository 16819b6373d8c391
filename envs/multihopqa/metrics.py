"""Seed 004's evaluation metrics (appendix A): answer EM / F1 / precision / recall, total
tokens (eq. 10), latency (eq. 7 parallel, eq. 8 serial) and the judge's Answer Quality
Score (1-5, appendix A.4).

The simulated pool's judge does not read the answer the way an LLM judge would: it buckets
the answer's token F1 (``agents.py``). Its score is therefore reported under its own name,
``answer_quality_from_f1``, and ``answer_quality`` is kept for a real judge (any judge agent
not served by the simulated backend), so no table mistakes one for the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchenv.envs.multihopqa.agents import BACKEND_NAME
from orchenv.grading import best_answer_prf, exact_match
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


@dataclass
class RoundUsage:
    """Tokens and latency per role in one round (eq. 7, 8, 10)."""

    tokens: dict[str, int] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def add(self, role: str, tokens: int, latency_s: float) -> None:
        self.tokens[role] = self.tokens.get(role, 0) + tokens
        self.latency[role] = self.latency.get(role, 0.0) + latency_s


def episode_metrics(
    answers: Sequence[str], answer: str | None, usage: Sequence[RoundUsage]
) -> dict[str, float]:
    """EM, F1, precision, recall of ``answer`` against the references; total tokens (eq. 10);
    latency with roles of a round in parallel (eq. 7) or in series (eq. 8); rounds played."""
    precision, recall, f1 = best_answer_prf(answers, answer)
    em = any(exact_match(ref, answer) for ref in answers)
    return {
        "em": float(em),
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
