"""Small builders shared by several test modules (imported as ``helpers``; ``tests`` is on
the test path): one agent, one-agent pools, episode records and logs, and a HotpotQA record.

Each was written in two or more test modules before (issue 27).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchenv.calltypes import Backend
from orchenv.eval.rundir import EpisodeLog, episode_row
from orchenv.pool import AgentPool, AgentSpec
from orchenv.runner import EpisodeRecord


def agent_spec(name: str = "a", **overrides: Any) -> AgentSpec:
    """An agent at $1 / $2 per million prompt / completion tokens (model ``m``, tier 0,
    the ``scripted`` backend unless ``overrides`` say otherwise)."""
    fields: dict[str, Any] = {
        "name": name,
        "model": "m",
        "tier": 0,
        "price_prompt": 1.0,
        "price_completion": 2.0,
        "backend": "scripted",
    }
    return AgentSpec(**{**fields, **overrides})


def one_agent_pool(url: str, backend: Backend, **backend_kwargs: Any) -> AgentPool:
    """A pool of one ``openai`` agent, ``a``, served at ``url`` through ``backend``;
    ``backend_kwargs`` go to the agent (``model=``, ``api_key=``, ``base_url=``...)."""
    spec = agent_spec(backend="openai", backend_kwargs={"base_url": url, **backend_kwargs})
    return AgentPool([spec], {"openai": backend})


def episode_record(**overrides: Any) -> EpisodeRecord:
    """A one-turn episode on task ``t`` with one call to ``a`` (right unless overridden)."""
    fields: dict[str, Any] = {
        "task_id": "t",
        "correct": True,
        "score": 1.0,
        "reward": 1.0,
        "turns": 1,
        "cost_usd": 0.001,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "agent_calls": {"a": 1},
        "invalid_actions": 0,
        "actions": ["a"],
    }
    return EpisodeRecord(**{**fields, **overrides})


def logged_rows(
    path: Path, n: int, *, header: dict[str, Any] | None = None, **record: Any
) -> bytes:
    """``n`` rows of ``episode_record(**record)`` written by ``EpisodeLog`` to ``path`` (its
    bytes)."""
    log = EpisodeLog(path, header=header, fsync_interval_s=None)
    row = episode_record(**record)
    for i in range(n):
        log.append(episode_row(0, i, row, 0.1, None))
    log.close()
    return path.read_bytes()


def rows_without_timing(result: Any) -> list[dict[str, Any]]:
    """An ``EvalResult``'s episode rows in (seed, episode) order without ``latency_s``: what
    must not depend on timing, concurrency or interruptions."""
    rows = []
    for pair in sorted(result.records):
        row = result.records[pair].to_dict()
        row.pop("latency_s", None)
        rows.append(row)
    return rows


#: HotpotQA's first dev-set record (a comparison question), its paragraphs cut short
HOTPOT_RECORD: dict[str, Any] = {
    "_id": "5a8b57f25542995d1e6f1371",
    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "answer": "yes",
    "type": "comparison",
    "level": "hard",
    "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
    "context": [
        ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker.", "He was born in 1924."]],
        ["Scott Derrickson", ["Scott Derrickson is an American director.", "He lives in LA."]],
        ["Doctor Strange", ["Doctor Strange is a 2016 film."]],
    ],
}


class InFlight:
    """How many calls of a slow scripted agent run at once (``now``) and at most (``peak``):
    ``slow(delay_s, answer)`` is a scripted reply that sleeps ``delay_s`` while counted;
    ``answer`` is the reply text or ``(spec, messages) -> text``."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def slow(self, delay_s: float, answer: str | Callable[..., str]) -> Callable[..., str]:
        def reply(spec: AgentSpec, messages: Any, context: Any) -> str:
            with self._lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            time.sleep(delay_s)
            with self._lock:
                self.now -= 1
            return answer(spec, messages) if callable(answer) else answer

        return reply
