"""``orch/OrchMAS-v0``: dynamic role and prompt generation for one executor LLM.

Seed 002 (OrchMAS, sections 3.1-3.2, Table 2, section 4.1) as a Gymnasium
environment. The prompts and parsers are in ``protocol.py``, the simulated
executor and the default pool in ``executor.py``, the short-answer QA source in
``qa.py``. The action protocol, the 5-turn limit and the format-gated F1 reward
follow the paper. The paper's reward formulas were lost in text extraction; the
reconstruction is documented in ``OrchMASEnv`` (## Rewards).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, arguments_for
from orchenv.envs.orchmas.choices import CHOICE_ROLES, canonical_choices, shortcuts
from orchenv.envs.orchmas.executor import orchmas_pool, task_domain
from orchenv.envs.orchmas.protocol import (
    CONTROLLER_SYSTEM,
    EXECUTOR_SYSTEM,
    answer_format,
    call_action,
    parse_call,
)
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import exact_match, extract_boxed, f1_score, match_any
from orchenv.parsing import extract_tag
from orchenv.pool import AgentPool, CallContext, Message
from orchenv.tasks import TaskSource

__all__ = ["DEMO_ROLES", "OrchMASEnv"]

#: roles demo_action picks from (generic, domain-fitting, mismatched, empty)
DEMO_ROLES = (
    "assistant",
    "math solver",
    "careful mathematician",
    "geography researcher",
    "economics expert",
    "linguist",
    "verifier",
    "",
)


class OrchMASEnv(OrchestrationEnv):
    """Give an executor LLM a free-form role and request each turn, then answer.

    ## Description
    OrchMAS (seed 002): an orchestrator coordinates an external executor LLM
    by generating, at every turn, a role for it (free text, learned: "math
    solver", "verifier", "researcher", ...) and a request. The executor sees a
    system prompt built from the role (Table 2(b), reworded), the earlier
    request/reply pairs as chat history, and the new request; its reply is
    appended to the orchestrator's history inside
    ``<interaction_response>...</interaction_response>``. The orchestrator
    stops by writing the final answer. Tasks: the embedded procedural math
    source (default) or ``task_source="orchmas-qa"`` (short-answer questions
    over a synthetic knowledge base, scored by token F1).

    ## Action format
    Table 2(a). A call:
    ``<think>...</think><interaction_prompt>{"name": "prompt_dynamic",
    "arguments": {"prompt": "...", "agent_role": "..."}}</interaction_prompt>``;
    the final answer: ``<think>...</think><answer>...</answer>``. Any text with
    an ``<answer>...</answer>`` ends the episode (its format is scored). Without
    one, invalid JSON, a wrong ``name``, a missing or empty ``prompt`` or a
    non-string ``agent_role`` make the action invalid: nobody is called, the
    turn is used, ``format_penalty`` is added to the step's reward,
    ``info["parse_error"]`` says what was expected and the next observation
    repeats it. An empty role is allowed (the executor is called with a blank
    role) but earns no format credit.

    ## Observation
    The orchestrator prompt as one string: instructions, the question, and the
    history of earlier turns (think, request with its role, executor reply);
    ``info["messages"]`` holds the same as chat messages. ``info["phase"]`` is
    always ``"act"``; ``info["valid_agents"]`` is ``[executor]``.

    ## Rewards
    Eq. (10)-(13), reconstructed. Format reward
    ``R_fmt = min(kappa, alpha * sum_t Lambda_t + beta * B_m + gamma * B_v + delta * I_c)``
    with Lambda_t = 1 for an interaction turn with non-empty ``<think>``, valid
    call JSON and a non-empty role; B_m = the final turn has exactly one
    balanced ``<think>`` and one ``<answer>`` block (no interaction tag); B_v =
    the answer is non-empty; I_c = non-empty think and no text outside the tags.
    Precision ``R_prec = max_ref F1(Std(answer), Std(ref))`` (token F1 after
    ``normalize_text``; for math tasks 1/0 by ``math_equal``; an answer too large to
    check, or whose check runs out of time, is wrong and ``info["grading"]`` says
    ``"too-large"`` or ``"timeout"``). Gated aggregate
    ``R = -kappa + R_fmt + [R_fmt == kappa] * R_prec``. Defaults (assumptions;
    the paper gives no values): kappa = 0.4, alpha = beta = gamma = delta = 0.1,
    so full format credit needs at least one well-formed executor call and a
    clean final turn. The return is paid out per step so that it sums to R:
    each turn pays ``-kappa / max_turns`` plus the increase of the capped
    format reward; the answering step adds the unpaid rest of ``-kappa`` and the
    gated precision. A malformed turn therefore gets ``-kappa / max_turns``
    (plus ``format_penalty``, default 0). ``info["reward_components"]`` splits
    each step's reward into ``base``, ``format`` and ``precision``.

    ## Episode end
    ``terminated`` by an answer; ``truncated`` after ``max_turns`` turns
    (default 5, section 4.1) without one (score 0). ``info`` then holds
    ``final_answer``, ``correct`` (EM for QA, math equivalence for math),
    ``em``, ``f1``, ``score`` (= f1), ``format_reward``, ``gate``, ``turns``,
    the usage figures and ``metrics``: ``f1``, ``em``, ``format_reward``,
    ``gate`` (1 when the format gate opened) and ``executor_calls``.

    ## Arguments
    - ``pool``: ``"orchmas"`` (default) builds the one-executor pool in code
      (``executor.orchmas_pool``: Qwen2.5-7B-Instruct, calibration accuracy
      ``executor_accuracy``, ``RoleAwareExecutorBackend`` whose accuracy rises
      with a domain-fitting role and a verification request, falls with an
      empty role); another preset name, a pool file or an ``AgentPool`` is
      accepted.
    - ``executor``: the pool agent to call (default: the pool's strongest).
    - ``task_source``, ``task_source_kwargs``, ``split``: where questions come
      from (default: procedural math, ``"train"``; or ``"orchmas-qa"``).
    - ``max_turns``: orchestrator turns per episode (default 5, section 4.1).
    - ``kappa``: the format-reward cap and the per-episode base cost (default 0.4).
    - ``alpha``, ``beta``, ``gamma``, ``delta``: the weights of Lambda_t, B_m,
      B_v and I_c in the format reward (default 0.1 each).
    - ``executor_accuracy``: the default pool's calibration accuracy, in (0, 1)
      (default 0.6).
    - ``format_penalty``: added to a step whose action cannot be used (default 0).
    - ``backend``: override the backends of a preset or pool file (not
      available with ``pool="orchmas"``, whose backend is built in code).
    - ``backend_kwargs``: arguments for the pool's backends (with
      ``pool="orchmas"``: ``seed`` and the ``RoleAwareExecutorBackend`` logits).
    - ``max_reply_chars``: how much of each executor reply the orchestrator
      sees (default 4000).
    - ``max_obs_chars``, ``render_mode``: as for every orchenv env.

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``; ``choices.py``),
    built from the question and the executor's replies, never from the reference: 0 answer
    with the executor's last boxed answer (``"unknown"`` before any); then a call with each
    role of ``CHOICE_ROLES`` (generic, math, geography, economics, linguistics) asking it to
    solve the question; then the same roles asking it to verify its previous answer (masked
    until it has replied). Calls are masked on the last turn. ``audit_strategies()`` names
    the shortcuts the audit must find clearly worse than the best response;
    ``observation_features()`` adds the calls so far and whether the last reply holds an
    answer.

    ## Version history
    - v0: initial version. Since the one-shape refactor, reaching ``max_turns``
      without an answer is ``truncated`` (it was ``terminated``); the
      ``format_penalty`` and ``backend`` arguments and ``info["metrics"]`` are
      new; ``reward_components`` always has a ``precision`` entry; the notice
      after an unusable action ends with "Reply again in the required format."
    """

    def __init__(
        self,
        *,
        pool: str | AgentPool = "orchmas",
        executor: str | None = None,
        task_source: str | TaskSource = "procedural-math",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "train",
        max_turns: int = 5,
        kappa: float = 0.4,
        alpha: float = 0.1,
        beta: float = 0.1,
        gamma: float = 0.1,
        delta: float = 0.1,
        executor_accuracy: float = 0.6,
        format_penalty: float = 0.0,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_reply_chars: int = 4000,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        if kappa <= 0:
            raise ConfigError(f"kappa must be > 0, got {kappa}")
        if min(alpha, beta, gamma, delta) < 0:
            raise ConfigError("alpha, beta, gamma and delta must be >= 0")
        if not 0.0 < executor_accuracy < 1.0:
            raise ConfigError(f"executor_accuracy must lie in (0, 1), got {executor_accuracy}")
        if pool == "orchmas" and backend is not None:
            raise ConfigError(
                'backend overrides a preset\'s backends; pool="orchmas" is built in code '
                "with the simulated executor (pass a preset, a pool file or an AgentPool)"
            )
        self._executor_arg = executor
        self.kappa, self.alpha, self.beta, self.gamma, self.delta = kappa, alpha, beta, gamma, delta
        self.executor_accuracy = executor_accuracy
        self.max_reply_chars = max_reply_chars
        # episode state
        self.history: list[dict[str, Any]] = []  # one entry per turn
        self.format_sum = 0.0  # uncapped alpha * sum Lambda_t (+ final-turn terms)
        self.answer: str | None = None  # the final answer, once given
        self.grade: tuple[bool, float] = (False, 0.0)  # its (exact match, F1)

    def _build_pool(self) -> AgentPool:
        if self._pool_arg == "orchmas":
            pool = orchmas_pool(accuracy=self.executor_accuracy, **self._backend_kwargs)
        else:
            pool = super()._build_pool()
        if self._executor_arg is not None and self._executor_arg not in pool.names:
            raise UnknownNameError("executor agent", self._executor_arg, pool.names)
        return pool

    @property
    def executor(self) -> str:
        """The pool agent the orchestrator's calls go to."""
        return self._executor_arg or self.pool.strongest()

    def valid_agents(self) -> list[str]:
        return [self.executor]

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def executor_calls(self) -> int:
        """Calls of the executor so far this episode."""
        return sum(h["kind"] == "call" for h in self.history)

    def last_executor_answer(self) -> str | None:
        """The boxed answer of the executor's latest reply (None before one shows it)."""
        last = self._last_reply()
        return extract_boxed(last) if last else None

    def action_choices(self) -> list[str | None]:
        """Answer, then solve as each role, then verify as each role (see "Discrete
        actions" above)."""
        if self.task is None:
            return [None] * (1 + 2 * len(CHOICE_ROLES))
        return canonical_choices(
            self.task.prompt,
            self.last_executor_answer(),
            has_reply=self._last_reply() is not None,
            can_call=not self.is_last_turn,
        )

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return shortcuts(self.max_turns)

    def observation_features(self) -> np.ndarray:
        """Executor calls so far (as a share of ``max_turns``) and whether the last reply
        holds an answer."""
        calls = self.executor_calls() / max(self.max_turns, 1)
        has_answer = float(self.last_executor_answer() is not None)
        return np.array([calls, has_answer], dtype=np.float32)

    def demo_action(self, rng: np.random.Generator) -> str:
        """A valid action for the current state: a call with a random role, or an answer.

        Answers with the last executor reply's boxed answer when there is one
        (otherwise a guess); calls the executor with probability 0.6 while turns
        remain after this one.
        """
        assert self.task is not None
        last = self._last_reply()
        if not self.is_last_turn and (last is None or rng.random() < 0.6):
            role = DEMO_ROLES[int(rng.integers(len(DEMO_ROLES)))]
            request = (
                self.task.prompt if last is None else "Check the previous answer and verify it."
            )
            return call_action(role, request)
        guess = (extract_boxed(last) if last else None) or "unknown"
        return f"<think>Use the executor's answer.</think><answer>{guess}</answer>"

    # -- prompts ----------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        assert self.task is not None
        parts = [f"Question:\n{self.task.prompt}"]
        for i, entry in enumerate(self.history, 1):
            if entry["kind"] == "call":
                parts.append(
                    f"Turn {i}:\n<think>{entry['think'] or ''}</think>\n"
                    f"Request to the executor (role: {entry['role'] or '(none)'}):\n"
                    f"{entry['prompt']}\n"
                    f"<interaction_response>{entry['reply'][: self.max_reply_chars]}"
                    "</interaction_response>"
                )
            elif entry["kind"] == "invalid":
                parts.append(f"Turn {i}: your reply could not be used ({entry['error']})")
            else:
                parts.append(f"Turn {i}: final answer given: {entry['answer']}")
        parts.append(self.turn_line())
        return [
            {"role": "system", "content": CONTROLLER_SYSTEM.format(max_turns=self.max_turns)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _executor_messages(self, role: str, prompt: str) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": EXECUTOR_SYSTEM.format(role=role)}]
        for entry in self.history:
            if entry["kind"] == "call":
                messages.append({"role": "user", "content": entry["prompt"]})
                messages.append({"role": "assistant", "content": entry["reply"]})
        messages.append({"role": "user", "content": prompt})
        return messages

    def _observation_info(self) -> dict[str, Any]:
        return {"phase": "act"}

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.history = []
        self.format_sum = 0.0
        self.answer, self.grade = None, (False, 0.0)
        return {"privileged": {"domain": task_domain(self.task)}}

    def _capped(self) -> float:
        return min(self.kappa, self.format_sum)

    def _gate(self) -> bool:
        """Whether the format reward reached its cap (the precision counts only then)."""
        return self._capped() >= self.kappa - 1e-12

    def _last_reply(self) -> str | None:
        return next((h["reply"] for h in reversed(self.history) if h["kind"] == "call"), None)

    def _apply(self, action: str) -> Outcome:
        assert self.task is not None
        before = self._capped()
        answer = extract_tag(action, "answer")
        info: dict[str, Any] = {}
        privileged: dict[str, Any] = {"domain": task_domain(self.task)}
        error = None
        if answer is not None:
            b_m, b_v, i_c = answer_format(action)
            self.format_sum += self.beta * b_m + self.gamma * b_v + self.delta * i_c
            info["format_checks"] = {"B_m": b_m, "B_v": b_v, "I_c": i_c}
            self.history.append({"kind": "answer", "answer": answer})
            em, f1, grading = self._grade(answer)
            self.answer, self.grade = answer, (em, f1)
            if grading != "ok":  # refused or timed out: counted wrong, and said so
                info["grading"] = grading
        else:
            call, error = parse_call(action)
            if call is None:
                self.history.append({"kind": "invalid", "error": error})
            else:
                info.update(self._call_executor(call, extract_tag(action, "think"), privileged))
        base = -self.kappa / self.max_turns
        reward = base + (self._capped() - before)
        components = {"format": self._capped() - before, "base": base, "precision": 0.0}
        if answer is not None:
            rest = -self.kappa * (self.max_turns - self.turn) / self.max_turns
            precision = self.grade[1] if self._gate() else 0.0
            reward += rest + precision
            components.update(base=base + rest, precision=precision)
        info["reward_components"] = components
        info["privileged"] = privileged
        return Outcome(reward=reward, done=answer is not None, error=error, info=info)

    def _call_executor(
        self, call: dict[str, str], think: str | None, privileged: dict[str, Any]
    ) -> dict[str, Any]:
        """Send one well-formed request to the executor; return the step's info."""
        assert self.task is not None
        well_formed = bool(think) and bool(call["agent_role"])
        self.format_sum += self.alpha * well_formed
        messages = self._executor_messages(call["agent_role"], call["prompt"])
        context = CallContext(task=self.task, turn=self.turn, draft=self._last_reply())
        completion = self.call_agent(self.executor, messages, context)
        self.history.append(
            {
                "kind": "call",
                "think": think,
                "role": call["agent_role"],
                "prompt": call["prompt"],
                "reply": completion.text,
            }
        )
        privileged["executor_correct"] = self._grade(extract_boxed(completion.text))[0]
        return {
            "format_checks": {"Lambda": well_formed},
            "called_agent": self.executor,
            "agent_role": call["agent_role"],
            "latency_s": completion.latency_s,
        }

    def _grade(self, answer: str | None) -> tuple[bool, float, str]:
        """(exact match, precision F1, grading status) of an answer against the task's
        references; the status is ``orchenv.grading.Verdict.status`` ("ok" for text)."""
        assert self.task is not None
        if answer is None:
            return False, 0.0, "ok"
        if task_domain(self.task) == "math":
            verdict = match_any(self.task.answers, extract_boxed(answer) or answer)
            return verdict.equal, float(verdict.equal), verdict.status
        em = any(exact_match(ref, answer) for ref in self.task.answers)
        f1 = max((f1_score(ref, answer) for ref in self.task.answers), default=0.0)
        return em, f1, "ok"

    def _summary(self) -> dict[str, Any]:
        em, f1 = self.grade
        capped, gate = self._capped(), self._gate()
        return {
            "final_answer": self.answer,
            "correct": bool(em),
            "em": float(em),
            "f1": float(f1),
            "score": float(f1),
            "format_reward": capped,
            "gate": gate,
            "metrics": {
                "f1": float(f1),
                "em": float(em),
                "format_reward": capped,
                "gate": float(gate),
                "executor_calls": float(sum(h["kind"] == "call" for h in self.history)),
            },
        }
