"""Rule-based baseline controllers for orch/MathRoute-v0 (seed 000, Table 1 baselines).

Each reads ``info["phase"]`` ("route" or "verify") and ``info["valid_agents"]``
(weakest first) and writes the canonical action text. On an env without that
protocol they raise a ``ConfigError`` saying so (``require_phase``). Learned
routers live in ``routers.py``, LLM controllers in ``llm.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from orchenv.controllers import env_label
from orchenv.envs.mathroute.protocol import SOLVER_SYSTEM, route_text, verdict_text
from orchenv.error import ConfigError
from orchenv.grading import check_math_solution, math_answer, math_equal
from orchenv.parsing import extract_tag, parse_bool
from orchenv.pool import CallContext, Message, cost_order, resolve_agent
from orchenv.protocol import require_phase

logger = logging.getLogger(__name__)


def solver_messages(problem: str, note: str = "") -> list[Message]:
    """The first-turn solver request MathRouteEnv sends (``note`` appended to vary it)."""

    user = f"Problem:\n{problem}"
    if note:
        user += f"\n\n{note}"
    return [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": user}]


def _require_attrs(env: Any, controller: str, attrs: Sequence[str]) -> None:
    missing = [a for a in attrs if not hasattr(env, a)]
    if missing:
        raise ConfigError(
            f"controller {controller!r} does not apply to {env_label(env)}: it needs the env "
            f"to provide {', '.join(missing)} (as orch/MathRoute-v0 does)"
        )


class RandomRouter:
    """Routes to a uniformly random agent; at later turns accepts with ``p_accept``.

    Table 1 row "Random Router" (with ``p_accept=1.0``, the default: one-shot).
    Not privileged.
    """

    privileged = False

    def __init__(self, *, seed: int = 0, p_accept: float = 1.0) -> None:
        if not 0.0 <= p_accept <= 1.0:
            raise ConfigError(f"p_accept must be in [0, 1], got {p_accept}")
        self.p_accept = p_accept
        self.rng = np.random.default_rng(seed)
        self._env: Any = None

    def reseed(self, seed: int) -> None:
        """Restart the random stream from ``seed`` (the evaluation harness seeds each episode)."""
        self.rng = np.random.default_rng(seed)

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        self._env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        phase = require_phase(info, "random", self._env)
        agents = list(info["valid_agents"])
        if phase == "verify":
            if not agents or self.rng.random() < self.p_accept:
                return verdict_text(True)
            return verdict_text(False, agents[int(self.rng.integers(len(agents)))])
        if not agents:
            raise ConfigError("RandomRouter got no valid_agents in info at a routing turn")
        return route_text(agents[int(self.rng.integers(len(agents)))], "random choice")


class StrategyController:
    """One of the env's ``audit_strategies()`` as a controller: a text-level shortcut that
    reads only what a learner sees (the turn, the draft, its author), e.g. ``"always-reject"``
    (weakest first, then reject every draft unread). Not a Table 1 row: seed 000's
    reproduction shows it beside the trained controller under the same usage protocol.
    Not privileged."""

    privileged = False

    def __init__(self, *, strategy: str = "always-reject") -> None:
        self.strategy = str(strategy)
        self._env: Any = None
        self._policy: Any = None

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)
        strategies: dict[str, Any] = getattr(env, "audit_strategies", lambda: {})()
        if self.strategy not in strategies:
            raise ConfigError(
                f"strategy {self.strategy!r} does not apply to {env_label(env)}: its "
                f"audit_strategies() are {', '.join(sorted(strategies)) or 'none'}"
            )
        self._env, self._policy = env, strategies[self.strategy]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._policy is None:
            raise ConfigError("StrategyController needs the env: call bind(env) after reset")
        return str(self._policy(self._env))


class SingleAgent:
    """Always routes to one agent (by name, or by strength rank: 0 = strongest) and accepts.

    Table 1 rows "Agent 1/2/3" (``agent=0/1/2``). Not privileged.
    """

    privileged = False

    def __init__(self, *, agent: str | int = 0) -> None:
        self.agent = agent
        self._env: Any = None

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        self._env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if require_phase(info, "single", self._env) == "verify":
            return verdict_text(True)
        agents = list(info["valid_agents"])
        if isinstance(self.agent, int):
            if not -len(agents) <= self.agent < len(agents):
                raise ConfigError(f"agent rank {self.agent} out of range for {agents}")
            return route_text(agents[len(agents) - 1 - self.agent])
        return route_text(self.agent)


class OracleRouter:
    """The cheapest agent that answers correctly, then accept: a one-shot routing upper bound.

    Not a Table 1 row: the oracle line routing papers use to bound what any one-shot
    router (Random, RoBERTa Router, RouterDC, Router-R1) could reach. **Privileged**:
    at the routing turn it peeks, calling agents cheapest first (``cost_order``:
    ``price_completion``, ties to the weaker agent) through ``env.pool.call`` with
    the same first-turn solver messages the env sends, grades each answer against
    ``env.task.answers``, and routes to the first correct one; if none is correct,
    to the strongest valid agent. The peeks are its privilege and are not charged
    to the episode (their cost is kept in ``peek_cost_usd`` for reference).

    With deterministic backends (simulated, replay, greedy decoding) the env's own
    call returns the same answer the oracle saw, so its accuracy is exact. With
    sampling backends the env's call is a fresh draw, and the figure is an
    estimate of the upper bound.
    """

    privileged = True

    def __init__(self) -> None:
        self._env: Any = None
        self.peek_calls = 0
        self.peek_cost_usd = 0.0

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        _require_attrs(env, "oracle", ("pool", "task", "turn"))
        self._env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        phase = require_phase(info, "oracle", self._env)
        if phase == "verify":
            return verdict_text(True, note="oracle routed to a correct agent (or the strongest)")
        env = self._env
        if env is None:
            raise ConfigError(
                "the oracle needs the env: call controller.bind(env.unwrapped) after reset "
                "(orchenv.runner.run_episodes does)"
            )
        task = env.task
        answers = getattr(task, "answers", None)
        if task is None or not answers:
            raise ConfigError(
                f"the oracle needs env.task with reference answers; {env_label(env)} has "
                f"task={task!r}"
            )
        agents = list(info["valid_agents"])
        if not agents:
            raise ConfigError("the oracle got no valid_agents at a routing turn")
        messages = solver_messages(task.prompt)
        context = CallContext(task=task, turn=env.turn + 1)  # the turn the env's call will have
        for name in cost_order(env.pool, agents):
            completion = env.pool.call(name, messages, context)
            self.peek_calls += 1
            self.peek_cost_usd += completion.cost_usd
            if check_math_solution(completion.text, answers):
                return route_text(name, "oracle: cheapest correct agent")
        return route_text(agents[-1], "oracle: nobody is correct; strongest")


#: verifier prompt for ``CascadeController(verifier="agent:NAME")``
VERIFY_SYSTEM = """\
You are a strict grader of math solutions. Check the proposed solution step by step: \
every computation, every algebraic step and the final answer.

Reply with your check inside <checking>...</checking>, then <verdict>True</verdict> if the \
solution and its final answer are entirely correct, otherwise <verdict>False</verdict>."""

_MODES = ("self-consistency", "noisy-oracle", "agent:NAME")


class CascadeController:
    """Weakest agent first; escalate one step up whenever the verifier rejects the draft.

    The classic generate-verify-escalate cascade (seed 000's related-work
    "cascaded specialization"; not a Table 1 row). The verifier (``verifier``):

    * ``"self-consistency"`` (default): consult the draft's author ``samples``
      more times (each prompt carries its sample index, so the texts differ) and
      accept when the majority boxed answer equals the draft's. Cheap: it uses the
      author, never a stronger agent. Acceptance needs a strict majority
      (more than ``samples / 2`` resamples on the draft's answer). With deterministic backends a sample is a
      function of its prompt, so an agent's resamples agree on correctness (the
      simulated backend keys outcomes on task and agent, not wording); what they
      vary in is the wrong answers, which rarely coincide with a wrong draft's.
      Real models' errors correlate more, so expect it to be weaker live than in
      simulation.
    * ``"agent:NAME"``: pool agent NAME (or ``strongest`` / ``weakest``) reviews
      the problem and draft. Its ``<verdict>`` decides; a reply without one that is
      a worked solution (the simulated backend's agents always write solutions)
      accepts when its boxed answer equals the draft's; a reply with neither
      rejects.
    * ``"noisy-oracle"``: reads the draft's true correctness from
      ``info["privileged"]`` and flips it with probability
      ``1 - verifier_accuracy`` (default 0.88, seed 000 Table 6's verification
      accuracy): a verifier of known quality. Giving ``verifier_accuracy`` without
      ``verifier`` selects this mode (the older interface).

    Consulted calls go through ``env.consult`` and are charged to the episode.
    A draft with no boxed answer is rejected without consulting; when nobody
    stronger is left the draft is accepted without consulting. Privileged only
    with ``verifier="noisy-oracle"`` (``privileged`` is set per instance).
    """

    def __init__(
        self,
        *,
        verifier: str | None = None,
        samples: int = 3,
        verifier_accuracy: float | None = None,
        seed: int = 0,
    ) -> None:
        if verifier is None:
            verifier = "noisy-oracle" if verifier_accuracy is not None else "self-consistency"
        verifier = verifier.strip()
        self.verifier_agent: str | None = None
        if verifier.lower().startswith("agent:"):
            self.mode = "agent"
            self.verifier_agent = verifier.split(":", 1)[1].strip()
            if not self.verifier_agent:
                raise ConfigError("verifier 'agent:NAME' needs an agent name after 'agent:'")
        elif verifier.lower() in ("self-consistency", "noisy-oracle"):
            self.mode = verifier.lower()
        else:
            raise ConfigError(
                f"unknown cascade verifier {verifier!r}; expected one of {', '.join(_MODES)}"
            )
        if self.mode != "noisy-oracle" and verifier_accuracy is not None:
            raise ConfigError(
                "verifier_accuracy applies only to verifier='noisy-oracle'; "
                f"got verifier={verifier!r}"
            )
        accuracy = 0.88 if verifier_accuracy is None else float(verifier_accuracy)
        if not 0.0 <= accuracy <= 1.0:
            raise ConfigError(f"verifier_accuracy must be in [0, 1], got {accuracy}")
        if not (isinstance(samples, int) and samples >= 1):
            raise ConfigError(f"samples must be an integer >= 1, got {samples!r}")
        self.verifier = verifier
        self.verifier_accuracy = accuracy
        self.samples = samples
        self.privileged = self.mode == "noisy-oracle"
        self.rng = np.random.default_rng(seed)
        self._env: Any = None
        self._judge_name: str | None = None

    def reseed(self, seed: int) -> None:
        """Restart the random stream from ``seed`` (the evaluation harness seeds each episode)."""
        self.rng = np.random.default_rng(seed)

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)  # gym.make's wrappers do not forward attributes
        if self.mode != "noisy-oracle":
            _require_attrs(env, "cascade", ("consult", "task", "draft", "draft_agent", "pool"))
        if self.mode == "agent":
            assert self.verifier_agent is not None
            self._judge_name = resolve_agent(self.verifier_agent, env.pool)
        self._env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        phase = require_phase(info, "cascade", self._env)
        agents = list(info["valid_agents"])
        if phase == "route":
            return route_text(agents[0], "start with the weakest agent")
        if not agents:
            return verdict_text(True, note="nobody stronger is left")
        accept, note = self._judge(info)
        if accept:
            return verdict_text(True, note=note)
        return verdict_text(False, agents[0], note=f"{note}; escalate one step")

    # -- verifiers ------------------------------------------------------------------
    def _judge(self, info: dict[str, Any]) -> tuple[bool, str]:
        if self.mode == "noisy-oracle":
            if "privileged" not in info:
                raise ConfigError(
                    f"the noisy-oracle verifier needs info['privileged']['draft_correct'], "
                    f"which {env_label(self._env)} does not provide"
                )
            truth = bool((info.get("privileged") or {}).get("draft_correct"))
            correct = self.rng.random() < self.verifier_accuracy
            verdict = truth if correct else not truth
            return verdict, "noisy-oracle verifier " + ("accepts" if verdict else "rejects")
        env = self._env
        if env is None:
            raise ConfigError(
                f"cascade with verifier={self.verifier!r} consults pool agents: call "
                "controller.bind(env.unwrapped) after reset (orchenv.runner.run_episodes does)"
            )
        draft_answer = math_answer(env.draft or "")
        if draft_answer is None:
            return False, "the draft has no boxed final answer"
        problem = env.task.prompt
        if self.mode == "agent":
            return self._agent_verdict(env, problem, env.draft, draft_answer)
        return self._self_consistency(env, problem, env.draft_agent, draft_answer)

    def _agent_verdict(
        self, env: Any, problem: str, draft: str, draft_answer: str
    ) -> tuple[bool, str]:
        assert self._judge_name is not None
        messages: list[Message] = [
            {"role": "system", "content": VERIFY_SYSTEM},
            {"role": "user", "content": f"Problem:\n{problem}\n\nProposed solution:\n{draft}"},
        ]
        reply = env.consult(self._judge_name, messages).text
        verdict = parse_bool(extract_tag(reply, "verdict"))
        if verdict is not None:
            return verdict, f"{self._judge_name} says {verdict}"
        own = math_answer(reply)
        if own is None:
            return False, f"{self._judge_name} gave neither a verdict nor an answer"
        agree = math_equal(own, draft_answer)
        return agree, f"{self._judge_name}'s own answer {'matches' if agree else 'differs'}"

    def _self_consistency(
        self, env: Any, problem: str, author: str, draft_answer: str
    ) -> tuple[bool, str]:
        answers: list[str | None] = []
        for k in range(self.samples):
            note = f"(Independent attempt {k + 1} of {self.samples}: solve it from scratch.)"
            answers.append(math_answer(env.consult(author, solver_messages(problem, note)).text))
        majority, votes = _majority(answers)
        # a strict majority: a plurality of one among scattered answers confirms nothing
        agree = (
            majority is not None and 2 * votes > self.samples and math_equal(majority, draft_answer)
        )
        return agree, f"{votes}/{self.samples} resamples agree on {majority!r}"


def _majority(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The most common answer under ``math_equal`` (first seen wins ties) and its votes."""
    clusters: list[tuple[str, int]] = []
    for answer in answers:
        if answer is None:
            continue
        for i, (rep, n) in enumerate(clusters):
            if math_equal(rep, answer):
                clusters[i] = (rep, n + 1)
                break
        else:
            clusters.append((answer, 1))
    if not clusters:
        return None, 0
    best = max(range(len(clusters)), key=lambda i: (clusters[i][1], -i))
    return clusters[best]
