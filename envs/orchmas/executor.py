"""A simulated executor whose accuracy depends on the role and the request it is given.

OrchMAS (seed 002) learns free-form agent roles and requests for one external
executor LLM. Offline, that action space only carries signal if the simulated
executor reacts to it. ``RoleAwareExecutorBackend`` extends ``SimulatedBackend``
(same calibrated item-response model, same per-task luck ``xi``) and adds a
documented bonus to the agent's margin, read from the messages it receives:

* **role fit** (``role_fit_logit``, +1.0): the role (the system prompt's first
  line, ``"Act as: ROLE"``) mentions the task's domain: a word of
  ``task.meta["type"]`` or one of the domain's keywords (``DOMAIN_KEYWORDS``,
  e.g. "math", "algebra", "solver" for math tasks; "geograph", "atlas" for
  capital questions);
* **mismatched expert** (``mismatch_logit``, -0.5): the role names another
  domain's keywords and not this task's;
* **empty role** (``empty_role_logit``, -1.0): no role at all (blank);
* **verification request** (``verify_logit``, +0.5): the current request asks
  to verify / check / double-check / validate / confirm;
* **refinement** (inherited, ``refinement_logit`` +0.75): earlier exchanges
  are in the conversation (``context.draft`` is the previous reply).

A generic role ("assistant", "expert") gets no bonus, so the calibration
accuracy (``calibration["accuracy"]``) is the accuracy of a one-shot call with
a generic role. Outcomes are deterministic in (seed, task, agent, bonus).

Replies: math tasks get a worked solution ending in ``\\boxed{...}`` (as the
parent backend writes them); other tasks (short-answer QA) get a short
justification ending in ``\\boxed{ANSWER}``, where a wrong reply boxes one of
``task.meta["distractors"]`` (or a made-up name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchenv.backends.common import require_task
from orchenv.backends.simulated import OUTCOMES_KEYED_ON, SimulatedBackend, sigmoid
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform
from orchenv.tasks import Task

#: name of this backend in env-built pools
BACKEND_NAME = "orchmas-executor"

#: the executor's name in the default pool (``orchmas_pool``)
DEFAULT_EXECUTOR = "executor"

#: role prefix of the executor's system prompt (the backend reads the role from it)
ROLE_PREFIX = "Act as: "

_MATH_KEYWORDS = (
    "math", "algebra", "arithmetic", "calculat", "number theor", "geometr", "probabilit",
    "combinator", "statistic", "solver", "quantitative",
)  # fmt: skip

#: domain -> keywords (lower-case substrings) that make a role fit that domain
DOMAIN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "math": _MATH_KEYWORDS,
    "geography": ("geograph", "atlas", "cartograph", "capital", "travel"),
    "economics": ("econom", "financ", "currenc", "monetar", "banker"),
    "linguistics": ("linguist", "language", "translat", "philolog"),
}

VERIFY_WORDS = ("verify", "verif", "check", "validate", "confirm", "double-check")

_MATH_TYPES = ("algebra", "prealgebra", "number theory", "counting", "probability", "geometry")


def task_domain(task: Task) -> str:
    """The domain of a task: its ``meta["domain"]``, else "math" for MATH-style types."""
    domain = task.meta.get("domain")
    if isinstance(domain, str) and domain:
        return domain
    kind = str(task.meta.get("type", "")).lower()
    if not kind or any(word in kind for word in _MATH_TYPES):
        return "math"
    return kind


def role_of(messages: Sequence[Message]) -> str | None:
    """The role in the system prompt's first line (``"Act as: ROLE"``), or None if absent."""
    for message in messages:
        if message.get("role") == "system":
            first = message.get("content", "").split("\n", 1)[0]
            if first.startswith(ROLE_PREFIX):
                return first[len(ROLE_PREFIX) :].strip()
            return None
    return None


def role_fit(role: str | None, task: Task) -> str:
    """``"empty"``, ``"fit"``, ``"mismatch"`` or ``"generic"`` for a role on a task."""
    if role is None or not role.strip():
        return "empty"
    text = role.lower()
    domain = task_domain(task)
    own = DOMAIN_KEYWORDS.get(domain, ()) + tuple(
        w for w in re.split(r"[^a-z]+", str(task.meta.get("type", "")).lower()) if len(w) > 3
    )
    if any(word in text for word in own):
        return "fit"
    others = [kw for d, kws in DOMAIN_KEYWORDS.items() if d != domain for kw in kws]
    if any(word in text for word in others):
        return "mismatch"
    return "generic"


def asks_verification(messages: Sequence[Message]) -> bool:
    """Whether the last user message asks to verify or check something."""
    for message in reversed(messages):
        if message.get("role") == "user":
            text = message.get("content", "").lower()
            return any(word in text for word in VERIFY_WORDS)
    return False


class RoleAwareExecutorBackend(SimulatedBackend):
    """``SimulatedBackend`` plus role / request bonuses (see the module docstring)."""

    def __init__(
        self,
        *,
        role_fit_logit: float = 1.0,
        mismatch_logit: float = -0.5,
        empty_role_logit: float = -1.0,
        verify_logit: float = 0.5,
        **kwargs: float,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.role_fit_logit = float(role_fit_logit)
        self.mismatch_logit = float(mismatch_logit)
        self.empty_role_logit = float(empty_role_logit)
        self.verify_logit = float(verify_logit)

    def prompt_logit(self, messages: Sequence[Message], task: Task) -> float:
        """The margin bonus the role and the request earn on this task."""
        fit = role_fit(role_of(messages), task)
        bonus = {
            "fit": self.role_fit_logit,
            "mismatch": self.mismatch_logit,
            "empty": self.empty_role_logit,
        }.get(fit, 0.0)
        if asks_verification(messages):
            bonus += self.verify_logit
        return bonus

    def p_correct_for(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> float:
        """The model's probability of a right reply to these messages (analysis, tests)."""
        assert context.task is not None
        margin = self._mean_margin(spec, context.task, context)
        margin += self.prompt_logit(messages, context.task)
        return sigmoid(margin / self.agent_noise)

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = require_task(context, spec, "simulated executor", OUTCOMES_KEYED_ON)
        margin = self._mean_margin(spec, task, context) + self.prompt_logit(messages, task)
        correct = margin + self.agent_noise * self._luck(spec, task) > 0.0
        digest = self._prompt_digest(spec, task, messages)
        variant = digest[0] % self.text_variants
        if task_domain(task) == "math" and "family" in task.meta:
            text = self._solution_text(spec, task, correct, variant)
        else:
            text = self._short_answer_text(task, correct, variant)
        return self.metered(
            spec,
            task,
            messages,
            text,
            digest,
            self.outcome_meta(text, margin, correct, role_fit=role_fit(role_of(messages), task)),
        )

    def _short_answer_text(self, task: Task, correct: bool, variant: int) -> str:
        if correct:
            answer = task.answer
        else:
            wrong = [d for d in task.meta.get("distractors", ()) if d not in task.answers]
            if wrong:
                pick = int(stable_uniform("executor-distractor", self.seed, task.id) * len(wrong))
                answer = wrong[pick]
            else:
                answer = "Unknown"
        openers = (
            "Going through what I know about this,",
            "Based on the available facts,",
            "After weighing the candidates,",
            "From the reference material,",
        )
        return f"{openers[variant % len(openers)]} the answer is \\boxed{{{answer}}}."


def orchmas_pool(*, seed: int = 0, accuracy: float = 0.6, **backend_kwargs: float) -> AgentPool:
    """The default pool: one executor, Qwen2.5-7B-Instruct, on the role-aware simulated backend.

    The paper's executor is GPT-OSS-120B (section 4.1); orchenv's default is a
    7B instruct model so that the role and request matter (calibration accuracy
    0.6 for a one-shot call with a generic role). Built in code rather than as a
    preset JSON because the backend is not in ``orchenv.pool.BACKENDS``.
    """
    spec = AgentSpec.priced(
        DEFAULT_EXECUTOR,
        "Qwen/Qwen2.5-7B-Instruct",
        "qwen2.5-7b-instruct",
        backend=BACKEND_NAME,
        calibration={"accuracy": accuracy, "mean_completion_tokens": 250, "tokens_per_second": 120},
    )
    backend = RoleAwareExecutorBackend(seed=seed, **backend_kwargs)
    return AgentPool([spec], {BACKEND_NAME: backend}, name="orchmas")
