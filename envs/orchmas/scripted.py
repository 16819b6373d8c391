"""Scripted orchestrators for ``orch/OrchMAS-v0``: fixed plans over the discrete view.

``ScriptedOrchestrator`` plays the env's ``action_choices()`` (so it sees only what a
discrete policy sees: the question and, with ``feedback=True``, the executor's answers),
following one plan:

1. ``decompose``: while a next sub-question of a multi-hop question is offered and the
   budget leaves room for it, the whole question and the answer, ask it (as the
   researcher, the role that fits multi-hop questions);
2. ask the whole question once, as the role ``role`` picks (``"domain"``: read from the
   question's wording by ``domain_role``; ``"generic"``: the assistant);
3. ``verify``: if that was the only call and a call is left, ask for a check of it;
4. answer with the executor's last answer (choice 0).

``single_executor()`` is one call with the generic role and the whole question, then the
answer (the paper's single-model baselines, Table 3); ``decompose_orchestrator()`` is the
full plan with domain roles (seed 002's orchestration, scripted; ``examples/orchmas_roles.py``
and ``orchenv reproduce 002``).
"""

from __future__ import annotations

import re
from typing import Any

from orchenv.envs.orchmas.choices import CHOICE_ROLES, SUBQUESTION_PREFIX

#: a question that looks like math (digits, LaTeX, operators) gets the math role
MATHY = re.compile(r"[\d$\\=+^]")
#: the role names ``domain_role`` returns (both in ``CHOICE_ROLES``)
MATH_ROLE, RESEARCH_ROLE, GENERIC_ROLE = "math solver", "researcher", "assistant"
ROLE_CHOICES = ("domain", "generic")

_N = len(CHOICE_ROLES)
ANSWER_INDEX = 0


def domain_role(question: str) -> str:
    """The role that fits ``question``, read from its wording only (never the task's meta)."""
    return MATH_ROLE if MATHY.search(question) else RESEARCH_ROLE


def solve_index(role: str) -> int:
    """The discrete choice "solve the question as ``role``"."""
    return 1 + CHOICE_ROLES.index(role)


def verify_index(role: str) -> int:
    """The discrete choice "verify your previous answer as ``role``"."""
    return 1 + _N + CHOICE_ROLES.index(role)


def subquestion_index(role: str) -> int:
    """The discrete choice "answer the next sub-question as ``role``"."""
    return 1 + 2 * _N + CHOICE_ROLES.index(role)


class ScriptedOrchestrator:
    """A fixed orchestration plan over ``OrchMASEnv.action_choices()`` (module docstring).

    A controller (``act(obs, info)``); ``bind(env)`` gives it the env whose choices it
    plays. ``max_calls`` caps its executor calls (the env's own budget always applies).
    """

    def __init__(
        self,
        *,
        role: str = "domain",
        decompose: bool = True,
        verify: bool = True,
        max_calls: int | None = None,
    ) -> None:
        if role not in ROLE_CHOICES:
            raise ValueError(f"role must be one of {ROLE_CHOICES}, got {role!r}")
        self.role, self.decompose, self.verify, self.max_calls = role, decompose, verify, max_calls
        self.env: Any = None

    def bind(self, env: Any) -> None:
        self.env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        env = self.env
        if env is None:
            raise RuntimeError("ScriptedOrchestrator needs bind(env) before act()")
        return self.choose(env)

    def choose(self, env: Any) -> str:
        """The text of the plan's next choice in ``env``'s current state."""
        choices = env.action_choices()
        made = env.executor_calls()
        budget = env.max_calls if self.max_calls is None else min(self.max_calls, env.max_calls)
        left = budget - made
        question = env.task.prompt
        role = domain_role(question) if self.role == "domain" else GENERIC_ROLE
        asked_whole = any(
            h["kind"] == "call" and not h["prompt"].startswith(SUBQUESTION_PREFIX)
            for h in env.history
        )
        if left > 0 and not asked_whole:
            sub = choices[subquestion_index(RESEARCH_ROLE)]
            # room for this sub-question, then the whole question
            if self.decompose and sub is not None and left >= 2:
                return str(sub)
            whole = choices[solve_index(role)]
            if whole is not None:
                return str(whole)
        if left > 0 and self.verify and made == 1:
            check = choices[verify_index(role)]
            if check is not None:
                return str(check)
        return str(choices[ANSWER_INDEX])


def single_executor() -> ScriptedOrchestrator:
    """One call, generic role, the whole question; then the answer."""
    return ScriptedOrchestrator(role="generic", decompose=False, verify=False, max_calls=1)


def decompose_orchestrator() -> ScriptedOrchestrator:
    """Sub-questions as the researcher, the whole question as the domain role, a check
    when only one call was made; then the answer."""
    return ScriptedOrchestrator(role="domain", decompose=True, verify=True)
