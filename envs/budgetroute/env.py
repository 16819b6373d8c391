"""``orch/BudgetRoute-v0``: a budget-controllable controller that consults paid experts.

Seed 001 (CoRL; sections 3.1-3.3, Table 2, appendix A) as a Gymnasium
environment. The paper's appendix B prompts did not survive text extraction,
so the prompts are written for orchenv; the action tags follow the Search-R1 /
Router-R1 convention the paper builds on (``<search>`` / ``<answer>``), and the
rewards, budgets and defaults follow the paper.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.error import ConfigError, UnknownNameError
from orchenv.grading import check_math_solution, extract_boxed, math_answer, math_equal
from orchenv.parsing import extract_tag, match_agent, strip_reasoning, suggest_agent
from orchenv.pool import AgentPool, CallContext, Message, make_pool
from orchenv.tasks import Task, TaskSource, make_task_source

#: Appendix A: per-query cost budgets (USD) of the multi-expert study
DEFAULT_BUDGETS: dict[str, float] = {"low": 0.001, "medium": 0.006, "high": 1000.0}

CONTROLLER_SYSTEM = """\
You solve math problems and may consult paid expert models. Budget mode: {mode}.
{guidance}

Experts (name, price in USD per 1M prompt / completion tokens), strongest first:
{experts}

Each round, do exactly one of the following:
- Ask one expert a question: <search>EXPERT NAME: your question</search>
  The expert's reply is shown to you in the next round.
- Give your final answer and stop: <answer>FINAL ANSWER</answer>
You may think first inside <think>...</think>. You have {max_rounds} rounds in total; \
without an answer by then the problem counts as unsolved."""

MODE_GUIDANCE: dict[str, str] = {
    "low": "Money is tight: solve the problem yourself when you can, and if you need help, "
    "prefer the cheapest expert.",
    "medium": "Spend moderately: balance inexpensive and expensive experts and consult the "
    "dearest ones only when the problem needs them.",
    "high": "Money is no object: consult the most capable experts whenever it helps you "
    "get the answer right.",
}
GENERIC_GUIDANCE = "Keep the total cost of expert calls within this budget mode."

EXPERT_SYSTEM = (
    "You are an expert mathematician. Answer the question step by step and give the final "
    "answer as \\boxed{ANSWER}."
)

FORMAT_REMINDER = (
    "Reply with <search>EXPERT NAME: question</search> or <answer>FINAL ANSWER</answer>."
)

_Parsed = tuple[str | None, str | None, str | None, str | None]


def _fail(error: str) -> _Parsed:
    return None, None, None, error


class BudgetRouteEnv(OrchestrationEnv):
    """Answer a math problem, consulting paid experts under a per-query dollar budget.

    ## Description
    A controller LLM (seed 001, CoRL) faces a math problem and a budget mode
    (``low`` / ``medium`` / ``high``) stated in its prompt. Over up to
    ``max_rounds`` rounds it either sends a sub-query to one expert of the
    pool (its reply joins the context of the next round) or gives its own
    final answer, which ends the episode. The controller is the policy: the
    environment never solves the problem for it. In the simulated pools an
    expert's correctness depends on the task, not on the wording of the
    sub-query, and the expert answers the original problem.

    ## Action format
    One of (the first tag that appears wins; ``<think>...</think>`` blocks are
    ignored):

    - ``<search>EXPERT NAME: sub-query</search>``: call that expert (names
      match ignoring case and punctuation, e.g. ``gpt-4.1-nano``).
    - ``<answer>FINAL ANSWER</answer>``: stop; the answer is graded against
      the task's reference answers (a bare expression, or a ``\\boxed{...}``).

    Anything else (no tag, unknown expert, empty query or answer, no ``:``)
    is malformed: it costs ``format_penalty``, uses up the round, calls nobody,
    and ``info["parse_error"]`` says what was wrong. It never raises.

    ## Observation
    The controller prompt as one string: the system instructions with the
    budget mode and the experts with their prices, the problem, the rounds
    used, and the transcript so far (sub-queries and expert replies);
    ``info["messages"]`` holds the same as chat messages. ``info["phase"]``
    is always ``"act"``; ``info["valid_agents"]`` lists the experts.

    ## Rewards
    Only at the episode's end (eq. 5-7 of seed 001): ``R = r_perf * r_cost``
    with ``r_perf`` = 1 if the final answer is correct else 0 and
    ``r_cost`` = 1 if the episode's dollar cost (the sum of the expert calls'
    ``cost_usd``; the controller is free) is at most the budget of the
    episode's mode, else 0. Intermediate steps give 0. A malformed action
    adds ``format_penalty`` (default 0.0: the paper uses no format reward) to
    that step's reward. ``info["performance_reward"]``, ``info["cost_reward"]``
    are reported at the end; ``info["budget_mode"]`` and ``info["budget_usd"]``
    at every step. The per-step expert-call vector is
    ``info["constraint_costs"]``.

    ## Episode end
    Terminated when the controller answers, or after ``max_rounds`` rounds
    (default 3) without an answer (performance 0). A ``<search>`` in the last
    round is not executed: there is no round left to read the reply. ``info``
    then carries ``task_id``, ``final_answer``, ``correct``, ``turns`` and the
    usage figures.

    ## Arguments
    See ``__init__``. ``budgets`` maps mode -> USD per query (default
    appendix A: low 0.001, medium 0.006, high 1000). ``budget_mode=None``
    draws the mode uniformly per episode from the env's ``np_random``; a mode
    fixes it; ``reset(options={"budget_mode": ...})`` overrides both.

    ## Version history
    - v0: initial version.
    """

    def __init__(
        self,
        *,
        pool: str | AgentPool = "corl",
        task_source: str | TaskSource = "procedural-math",
        task_source_kwargs: Mapping[str, Any] | None = None,
        split: str = "train",
        max_rounds: int = 3,
        budgets: Mapping[str, float] | None = None,
        budget_mode: str | None = None,
        format_penalty: float = 0.0,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        max_reply_chars: int = 4000,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        if max_rounds < 1:
            raise ConfigError(f"max_rounds must be >= 1, got {max_rounds}")
        self.budgets = dict(DEFAULT_BUDGETS if budgets is None else budgets)
        if not self.budgets:
            raise ConfigError("budgets must name at least one budget mode")
        for mode, usd in self.budgets.items():
            if not isinstance(usd, (int, float)) or not usd >= 0:
                raise ConfigError(f"budget for mode {mode!r} must be a number >= 0, got {usd!r}")
        if budget_mode is not None and budget_mode not in self.budgets:
            raise UnknownNameError("budget mode", budget_mode, self.budgets)
        self._pool_arg = pool
        self._task_source_arg = task_source
        self._task_source_kwargs = dict(task_source_kwargs or {})
        self._backend = backend
        self._backend_kwargs = dict(backend_kwargs or {})
        self.split = split
        self.max_rounds = max_rounds
        self.fixed_budget_mode = budget_mode
        self.format_penalty = format_penalty
        self.max_reply_chars = max_reply_chars
        # episode state
        self.task: Task | None = None
        self.budget_mode: str | None = None
        self.history: list[tuple[str, str, str]] = []  # (expert, sub-query, reply)
        self._notice = ""

    # -- lazily built collaborators (no I/O in __init__) -----------------------------
    def _ensure_built(self) -> None:
        if self._pool is None:
            self._pool = make_pool(
                self._pool_arg, backend=self._backend, backend_kwargs=self._backend_kwargs
            )
        if self._task_source is None:
            self._task_source = make_task_source(self._task_source_arg, **self._task_source_kwargs)
            self._task_source.check_split(self.split)

    @property
    def task_source(self) -> TaskSource:
        self._ensure_built()
        return self._task_source

    @property
    def budget_usd(self) -> float | None:
        return None if self.budget_mode is None else float(self.budgets[self.budget_mode])

    # -- prompts ----------------------------------------------------------------------
    def _system_prompt(self) -> str:
        assert self.budget_mode is not None
        lines = []
        for name in reversed(self.pool.names):  # strongest first
            spec = self.pool.spec(name)
            lines.append(f"- {name}: ${spec.price_prompt:g} / ${spec.price_completion:g}")
        return CONTROLLER_SYSTEM.format(
            mode=self.budget_mode,
            guidance=MODE_GUIDANCE.get(self.budget_mode, GENERIC_GUIDANCE),
            experts="\n".join(lines),
            max_rounds=self.max_rounds,
        )

    def _controller_messages(self) -> list[Message]:
        assert self.task is not None
        parts = [f"Problem:\n{self.task.prompt}"]
        for expert, query, reply in self.history:
            parts.append(
                f"<search>{expert}: {query}</search>\n<information>\n{reply}\n</information>"
            )
        left = self.max_rounds - self.turn
        if left <= 1:
            parts.append(f"(Round {self.turn + 1} of {self.max_rounds}: the last one; answer now.)")
        else:
            parts.append(f"(Round {self.turn + 1} of {self.max_rounds}.)")
        if self._notice:
            parts.append(f"Your previous reply could not be used: {self._notice} {FORMAT_REMINDER}")
        return [
            {"role": "system", "content": self._system_prompt()},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation(self) -> tuple[str, dict[str, Any]]:
        messages = self._controller_messages()
        text = self.render_messages(messages)
        return text, {
            "messages": messages,
            "phase": "act",
            "budget_mode": self.budget_mode,
            "budget_usd": self.budget_usd,
        }

    # -- parsing ----------------------------------------------------------------------
    def _parse(self, action: str) -> _Parsed:
        """(kind, expert, text, error) with kind "search" or "answer"; never raises."""
        visible = strip_reasoning(action)
        positions = {}
        for tag in ("search", "answer"):
            match = re.search(rf"<\s*{tag}\s*>", visible, re.IGNORECASE)
            if match is not None:
                positions[tag] = match.start()
        if not positions:
            return None, None, None, "no <search> or <answer> tag found."
        kind = min(positions, key=lambda t: positions[t])
        body = extract_tag(action, kind)
        if body is None:
            other = "answer" if kind == "search" else "search"
            if other in positions:  # an unclosed first tag, a complete second one
                kind, body = other, extract_tag(action, other)
            if body is None:
                return None, None, None, f"<{kind}> is not closed with </{kind}>."
        if kind == "answer":
            if not body:
                return None, None, None, "the <answer> is empty."
            return "answer", None, body, None
        name, sep, query = body.partition(":")
        agents = self.pool.names
        if not sep:
            return _fail(
                "the <search> lacks 'EXPERT NAME:' before the question; experts: "
                f"{', '.join(agents)}."
            )
        expert = match_agent(name.strip(), agents)
        if expert is None:
            hint = suggest_agent(name.strip(), agents)
            return _fail(f"unknown expert {name.strip()!r}; experts: {', '.join(agents)}.{hint}")
        if not query.strip():
            return None, None, None, f"the question to {expert} is empty."
        return "search", expert, query.strip(), None

    def _is_correct(self, answer: str) -> bool:
        """Grade a final answer; never raises (a grader error counts as wrong)."""
        try:
            return self._grade(answer)
        except (ValueError, ArithmeticError, RecursionError):
            # e.g. a 1 MB digit string exceeds int()'s digit limit inside the grader
            return False

    def _grade(self, answer: str) -> bool:
        assert self.task is not None
        if extract_boxed(answer) is not None:
            return check_math_solution(answer, self.task.answers)
        bare = answer.strip().strip("$").strip()
        if check_math_solution(f"\\boxed{{{bare}}}", self.task.answers):
            return True
        return any(math_equal(ref, bare) for ref in self.task.answers)

    # -- episode ------------------------------------------------------------------------
    def _pick_mode(self, options: Mapping[str, Any]) -> str:
        mode = options.get("budget_mode", self.fixed_budget_mode)
        if mode is None:
            modes = list(self.budgets)
            return modes[int(self.np_random.integers(len(modes)))]
        if mode not in self.budgets:
            raise UnknownNameError("budget mode", str(mode), self.budgets)
        return str(mode)

    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        self.task = self.pick_task(options)
        self.budget_mode = self._pick_mode(options)
        self.history = []
        self._notice = ""
        obs, extra = self._observation()
        extra["task_id"] = self.task.id
        return obs, extra

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        kind, expert, text, error = self._parse(action)
        self.turn += 1
        self.transcript.append({"turn": self.turn, "role": "controller", "text": action})
        extra: dict[str, Any] = {"task_id": self.task.id}
        privileged: dict[str, Any] = {}
        reward = 0.0
        terminated = False
        final_answer: str | None = None
        if error is not None:
            reward += self.format_penalty
            self._notice = error
            extra.update(invalid_action=True, parse_error=error)
        else:
            self._notice = ""
            if kind == "answer":
                final_answer, terminated = text, True
            elif self.turn >= self.max_rounds:
                extra["unexecuted_search"] = expert  # no round left to read the reply
            else:
                assert expert is not None and text is not None
                messages: list[Message] = [
                    {"role": "system", "content": EXPERT_SYSTEM},
                    {"role": "user", "content": text},
                ]
                context = CallContext(task=self.task, turn=self.turn)
                completion = self.call_agent(expert, messages, context)
                reply = completion.text[: self.max_reply_chars]
                self.history.append((expert, text, reply))
                extra["called_agent"] = expert
                privileged["expert_correct"] = check_math_solution(
                    completion.text, self.task.answers
                )
        if self.turn >= self.max_rounds:
            terminated = True
        if terminated:
            correct = final_answer is not None and self._is_correct(final_answer)
            cost = self.meter.cost_usd
            budget = self.budget_usd
            assert budget is not None
            r_perf = 1.0 if correct else 0.0
            r_cost = 1.0 if cost <= budget else 0.0
            reward += r_perf * r_cost
            extra.update(
                performance_reward=r_perf,
                cost_reward=r_cost,
                correct=correct,
                final_answer=(math_answer(final_answer) or final_answer) if final_answer else None,
                answered=final_answer is not None,
                turns=self.turn,
                level=self.task.level,
            )
        extra["privileged"] = privileged
        obs, obs_extra = self._observation()  # at the end: the would-be next prompt, for logging
        extra.update(obs_extra)
        return obs, reward, terminated, False, extra

    # -- helpers for tests and demos ---------------------------------------------------
    def demo_action(self, rng: np.random.Generator) -> str:
        """A valid action for the current state: ask a random expert, or answer "0"."""
        experts = self.valid_agents()
        if experts and self.turn < self.max_rounds - 1 and rng.random() < 0.5:
            expert = experts[int(rng.integers(len(experts)))]
            problem = self.task.prompt if self.task is not None else "the problem"
            return f"<search>{expert}: {problem}</search>"
        return "<answer>0</answer>"
