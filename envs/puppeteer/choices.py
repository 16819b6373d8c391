"""The discrete view of ``orch/Puppeteer-v0``: one choice per agent, and the audit's shortcuts.

The puppeteer's agent space is discrete (appendix B: model x reasoning pattern, model x tool,
terminate); since tool agents write their own calls, every agent is a choice. Nothing here
reads the reference answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from orchenv.envs.puppeteer.agents import PATTERNS, TOOLS, reply_answer
from orchenv.envs.puppeteer.protocol import TERMINATE

Strategy = Callable[[Any], str]


def agent_text(model: str, what: str) -> str:
    """The action naming ``MODEL:PATTERN`` or ``MODEL:TOOL``."""
    return f"<agent>{model}:{what}</agent>"


def terminate_text() -> str:
    return f"<agent>{TERMINATE}</agent>"


def canonical_choices(models: Sequence[str]) -> list[str]:
    """Every ``MODEL:PATTERN`` then ``MODEL:TOOL`` per model (pool order; ``PATTERNS`` then
    ``TOOLS`` order), then ``terminate``; all available in every state."""
    return [*(agent_text(m, p) for m in models for p in (*PATTERNS, *TOOLS)), terminate_text()]


def shortcuts(model: Callable[[Any], str]) -> dict[str, Strategy]:
    """The named shortcuts ``orchenv audit`` plays (``PuppeteerEnv.audit_strategies``).

    ``model(env)`` names the model they call: the pool's best single-call model for the
    task's family (``PuppeteerEnv.single_call_model``; public, truth-independent). "The
    strongest model" below means that model."""

    def reason_for(env: Any) -> str:
        return agent_text(model(env), "reasoning")

    def terminate_now(env: Any) -> str:
        """Terminate at once, without calling an agent."""
        return terminate_text()

    def one_call(env: Any) -> str:
        """The strongest model with the reasoning pattern once, then terminate."""
        return reason_for(env) if not env.history else terminate_text()

    def max_turns(env: Any) -> str:
        """The strongest model with the reasoning pattern at every step, never terminate."""
        return reason_for(env)

    def tools_only(env: Any) -> str:
        """The strongest model's run_python, read_file and search agents, then terminate (no
        reasoning agent: tool output never becomes the team's answer)."""
        steps = [agent_text(model(env), t) for t in TOOLS]
        return steps[len(env.history)] if len(env.history) < len(steps) else terminate_text()

    def garbage(env: Any) -> str:
        """As one call then terminate, with filler text around the tags."""
        return f"lorem ipsum {one_call(env)} dolor sit amet"

    def agree_twice(env: Any) -> str:
        """Reason until the current answer repeats an earlier one (self-consistency's stopping
        rule), then terminate."""
        seen = visible_answers(env)
        return terminate_text() if seen and seen[-1] in seen[:-1] else reason_for(env)

    def majority_of_3(env: Any) -> str:
        """Reason three times, then terminate once the current answer is the most frequent
        one seen (else reason again)."""
        seen = visible_answers(env)
        if len(seen) < 3:
            return reason_for(env)
        most = max(map(seen.count, seen))
        return terminate_text() if seen.count(seen[-1]) == most else reason_for(env)

    def smaller_answer(env: Any) -> str:
        """GSM-Hard magnitude rule: reason twice, then terminate once the current answer is
        the smallest number seen (a rule that pays only if wrong answers run large)."""
        return _extreme(env, reason_for(env), min)

    def marker_reading(env: Any) -> str:
        """Reason, and reason again while the current answer carries an edit marker or a
        TODO-like comment (a rule that pays only if wrong outputs are labelled)."""
        current = env.answer  # the observation's "Current answer"
        if not current:
            return reason_for(env) if len(env.history) < env.max_turns - 1 else terminate_text()
        return reason_for(env) if MARKER.search(current) else terminate_text()

    def consult_and_compare(env: Any) -> str:
        """Consult the strongest and compare: the strongest model answers, then the pool's
        other strongest model (mean quality, ``pool.strongest()``, or the second in pool
        order when they are the same) answers too; terminate when the two answers agree,
        else the strongest model critiques and revises once, then terminate."""
        seen = visible_answers(env)
        first = model(env)
        if not seen:
            return reason_for(env)
        if len(seen) == 1:
            other = env.pool.strongest()
            if other == first:
                other = next((m for m in reversed(env.pool.names) if m != first), first)
            return agent_text(other, "reasoning")
        if len(seen) == 2 and seen[0] != seen[1]:
            return agent_text(first, "critique")
        return terminate_text()

    def blind_critique(env: Any) -> str:
        """Self-Refine played blind: the strongest model answers, critiques its answer and
        revises with the critique (``reasoning``, ``critique``, ``modify``), then terminate,
        whatever the answer is."""
        steps = [reason_for(env), agent_text(model(env), "critique")]
        steps.append(agent_text(model(env), "modify"))
        return steps[len(env.history)] if len(env.history) < len(steps) else terminate_text()

    return {
        "terminate-immediately": terminate_now,
        "one-call-then-terminate": one_call,
        "max-turns": max_turns,
        "tools-then-terminate": tools_only,
        "garbage-around-tag": garbage,
        "agree-twice": agree_twice,
        "majority-of-3": majority_of_3,
        "smaller-answer": smaller_answer,
        "marker-reading": marker_reading,
        "consult-the-strongest-and-compare": consult_and_compare,
        "blind-critique": blind_critique,
    }


#: what a labelled wrong output would carry (the simulator's old SRDD tell and its kin)
MARKER = re.compile(r"unfinished|\bTODO\b|FIXME|\bXXX\b", re.I)


def visible_answers(env: Any) -> list[str]:
    """The ``FINAL ANSWER`` of every answering or revising agent in branch 0's trajectory,
    stripped, in order: what the observation shows (no privileged information)."""
    out = []
    for agent, text in env.history:
        what = str(agent).rsplit(":", 1)[-1]
        if what in TOOLS or what == "planning":
            continue
        answer = reply_answer(env.tasks, text)
        if answer:
            out.append(answer.strip())
    return out


def number(text: str) -> float | None:
    try:
        return float(re.sub(r"[,$\s]", "", text))
    except ValueError:
        return None


def _extreme(env: Any, reason: str, pick: Callable[..., float]) -> str:
    """Reason twice, then terminate once the current answer is ``pick`` (min / max) of the
    numbers seen; non-numeric answers: terminate after two."""
    seen = visible_answers(env)
    if len(seen) < 2:
        return reason
    values = [v for v in map(number, seen) if v is not None]
    current = number(seen[-1])
    if current is None or not values or current == pick(values):
        return terminate_text()
    return reason
