"""One episode of every env that takes a pool, with one served model as the pool AND as the
``llm`` controller (docs/live.md): SmolLM2-135M and Qwen2.5-Coder-1.5B (``ORCHENV_LIVE_MODELS``).

Each episode is greedy (temperature 0, seed 0), so a rerun on the same build is comparable.
Every call, the controller's and the agents', goes to the llama.cpp server; the test counts
what users need to judge a served model on an env: the controller's valid-action rate, the
episode's accuracy and score, the share of calls cut at ``max_tokens`` (``finish_reason``
``"length"``), seconds per episode and the server-metered tokens. It asserts the mechanics
(the episode ends, every call is metered by the server, the controller's calls are
counted, the counts add up); the rates are measured and reported, not asserted.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import orchenv  # noqa: F401 - registers the env ids
from orchenv.agents.llm import LLMController
from orchenv.backends.openai_compat import OpenAICompatBackend
from orchenv.runner import run_episode

pytestmark = [pytest.mark.live, pytest.mark.timeout(3600)]

#: the controller's and the agents' reply budget: a routing action fits in a few dozen tokens;
#: a worked answer of a 1.5B model often needs more (those cuts are what the table reports)
CONTROLLER_MAX_TOKENS = 160
AGENT_MAX_TOKENS = 192
POOL = ("small", "medium", "large")  # weakest first

#: env id -> the pool's agent names, all served by the model (MultihopQA's roles by name: its
#: default pool ``"multihop"`` is simulated and ignores ``backend=``, so the pool file names
#: a Searcher, a Recommender and the Judge that scores answers 1-5)
ENVS: dict[str, tuple[str, ...]] = {
    "orch/MathRoute-v0": POOL,
    "orch/BudgetRoute-v0": POOL,
    "orch/Puppeteer-v0": POOL,
    "orch/OrchMAS-v0": ("executor",),
    "orch/MultihopQA-v0": ("searcher", "recommender", "judge"),
}


@pytest.fixture
def call_log(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every completion the ``openai`` backend builds: who asked, how it ended, its tokens."""
    calls: list[dict[str, Any]] = []
    original = OpenAICompatBackend._completion

    def logged(self: OpenAICompatBackend, spec: Any, *args: Any, **kwargs: Any) -> Any:
        completion = original(self, spec, *args, **kwargs)
        calls.append(
            {
                "who": "controller" if spec.name == "controller" else "agent",
                "finish_reason": completion.meta.get("finish_reason"),
                "source": completion.token_source,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
            }
        )
        return completion

    monkeypatch.setattr(OpenAICompatBackend, "_completion", logged)
    return calls


@pytest.mark.parametrize("env_id", list(ENVS))
def test_one_episode_with_the_model_as_pool_and_controller(
    live_servers: Any,
    live_report: Any,
    call_log: list[dict[str, Any]],
    env_id: str,
    live_model: str,
    tmp_path: Path,
) -> None:
    model = live_model  # parametrized by conftest.py: ORCHENV_LIVE_MODELS
    server = live_servers.get(model)
    names = ENVS[env_id]
    pool = server.pool_file(tmp_path / "pool.json", names=names, max_tokens=AGENT_MAX_TOKENS)
    controller = LLMController(
        model=model, base_url=server.url, timeout_s=900,
        max_tokens=CONTROLLER_MAX_TOKENS, temperature=0.0,
    )  # fmt: skip
    env = gym.make(env_id, pool=str(pool))
    start = time.perf_counter()
    try:
        record = run_episode(env, controller, seed=0)
    finally:
        env.close()
        controller.close()
    seconds = time.perf_counter() - start

    actions = len(record.actions)
    assert actions >= 1 and 0 <= record.invalid_actions <= actions
    usage = controller.usage()
    mine = [c for c in call_log if c["who"] == "controller"]
    theirs = [c for c in call_log if c["who"] == "agent"]
    # the controller wrote every action; each of its calls and each agent call hit the server
    assert usage["controller_calls"] == len(mine) == actions
    assert all(c["source"] == "server" for c in call_log), Counter(c["source"] for c in call_log)
    assert record.estimated_calls == 0
    assert usage["controller_prompt_tokens"] == sum(c["prompt_tokens"] for c in mine) > 0
    # every agent call went to the server (MultihopQA's judge scores the answer on top)
    assert len(theirs) >= sum(record.agent_calls.values())
    if env_id != "orch/MultihopQA-v0":
        assert len(theirs) == sum(record.agent_calls.values())
        assert record.prompt_tokens == sum(c["prompt_tokens"] for c in theirs)
    cut = Counter(c["who"] for c in call_log if c["finish_reason"] == "length")
    live_report(
        f"{env_id} / {model}: pool and llm controller",
        env=env_id,
        model=model,
        model_title=server.title,
        task_id=record.task_id,
        actions=actions,
        valid_actions=actions - record.invalid_actions,
        valid_action_rate=(actions - record.invalid_actions) / actions,
        correct=record.correct,
        score=record.score,
        reward=record.reward,
        turns=record.turns,
        controller_calls=len(mine),
        controller_cut=cut["controller"],
        agent_calls=len(theirs),
        agent_cut=cut["agent"],
        truncation_rate=(cut["controller"] + cut["agent"]) / len(call_log),
        server_prompt_tokens=sum(c["prompt_tokens"] for c in call_log),
        server_completion_tokens=sum(c["completion_tokens"] for c in call_log),
        s_per_episode=seconds,
        controller_max_tokens=CONTROLLER_MAX_TOKENS,
        agent_max_tokens=AGENT_MAX_TOKENS,
        actions_text=[a[:300] for a in record.actions],
    )
