"""Shortcut strategies of ``orch/BudgetRoute-v0`` that ``orchenv audit`` must find clearly
worse than the best response (``BudgetRouteEnv.audit_strategies``).

Each maps the env's current state to an action text using only what a controller sees (the
problem, the transcript, the pool's names); the docstring's first line describes it in the
audit report.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from orchenv.envs.budgetroute.experts import KEY_STEPS, canonical_requests, finish_request

Strategy = Callable[[Any], str]


def _answer(env: Any, wrap: str = "{}") -> str:
    """Answer with the latest expert answer, else the own solution, else 0."""
    return wrap.format(f"<answer>{env.last_answer() or env.own_answer() or '0'}</answer>")


def _ask_once(expert: str, query: Callable[[Any], str], doc: str, wrap: str = "{}") -> Strategy:
    """Ask ``expert`` ``query(env)`` in the first turn, then answer with its reply."""

    def act(env: Any) -> str:
        if env.history or env.is_last_turn:
            return _answer(env, wrap)
        return wrap.format(f"<search>{expert}: {query(env)}</search>")

    act.__doc__ = doc
    return act


def _problem(env: Any) -> str:
    return str(env.task.prompt)


def _every_method(env: Any) -> str:
    steps = "; ".join(dict.fromkeys(k.instruction for k in KEY_STEPS))
    return f"{_problem(env)}\nKey steps: {steps}."


def _numbers_only(env: Any) -> str:
    return " ".join(dict.fromkeys(re.findall(r"\d+", _problem(env)))) or "0"


def _plan(expert: str, kind: str) -> Strategy:
    """A budget-blind fixed plan: ask ``expert`` the ``kind`` request (``"key-step"``: the key
    step alone, then the same expert to finish from it; the key step named instead when fewer
    than three turns are left), then answer with its answer."""

    def act(env: Any) -> str:
        if env.is_last_turn or (env.history and not (kind == "key-step" and _unfinished(env))):
            return _answer(env)
        question = _problem(env)
        if env.history:  # a key step worked out: hand it over to finish
            query = finish_request(question, env.key_step_replies[-1].shown)
        else:  # a key step needs two more turns (its finish, then the answer)
            fits = kind != "key-step" or env.max_turns - env.turn >= 3
            requests = canonical_requests(question)
            query = requests.get(kind if fits else "pointed") or question
        return f"<search>{expert}: {query}</search>"

    act.__doc__ = f"Budget-blind: ask {expert} the {kind} request in every mode, then answer."
    return act


def _unfinished(env: Any) -> bool:
    """A key step was worked out and not yet handed on to finish."""
    return bool(env.key_step_replies) and len(env.history) == 1


def budget_blind_plan(env: Any) -> str:
    """The best budget-blind fixed plan (docs/budgetroute.md): the cheapest expert's key
    step, then its finish, then its answer, in every mode (with ``max_turns`` 2: its pointed
    request, then its answer)."""
    return _plan(env.pool.weakest(), "key-step")(env)


def shortcuts(weakest: str, strongest: str) -> dict[str, Strategy]:
    """The named shortcuts for a pool whose cheapest expert is ``weakest`` and dearest
    ``strongest``."""

    def without_experts(env: Any) -> str:
        """Answer at once with the controller model's own solution (0 without one)."""
        return f"<answer>{env.own_answer() or '0'}</answer>"

    def copy_question(env: Any) -> str:
        """Answer with the question's own text."""
        return f"<answer>{_problem(env)}</answer>"

    def max_turns(env: Any) -> str:
        """Ask the cheapest expert the whole problem every turn, answer on the last."""
        if env.is_last_turn:
            return _answer(env)
        return f"<search>{weakest}: {_problem(env)}</search>"

    return {
        "answer-alone": without_experts,
        "copy-question": copy_question,
        "numbers-only-sub-query": _ask_once(
            weakest,
            _numbers_only,
            "Ask the cheapest expert a sub-query made of the problem's numbers alone.",
        ),
        "numbers-only-to-dearest": _ask_once(
            strongest,
            _numbers_only,
            "Ask the dearest expert a sub-query made of the problem's numbers alone.",
        ),
        **{
            f"budget-blind-{name}-{kind}": _plan(name, kind)
            for name in dict.fromkeys((weakest, strongest))
            for kind in ("pointed", "key-step")
        },
        "always-cheapest": _ask_once(
            weakest, _problem, "Ask the cheapest expert the whole problem, answer with its reply."
        ),
        "always-most-expensive": _ask_once(
            strongest, _problem, "Ask the dearest expert the whole problem, answer with its reply."
        ),
        "empty-sub-query": _ask_once(
            strongest,
            lambda env: "Please help.",
            "Send the dearest expert a generic request that says nothing of the problem.",
        ),
        "stuffed-sub-query": _ask_once(
            strongest,
            _every_method,
            "Send the dearest expert the problem with every method the playbook knows.",
        ),
        "garbage-around-tag": _ask_once(
            weakest,
            lambda env: "lorem ipsum",
            "Filler text around the tags and as the sub-query to the cheapest expert.",
            "lorem {} ipsum",
        ),
        "max-turns": max_turns,
    }
