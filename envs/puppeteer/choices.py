"""The discrete view of ``orch/Puppeteer-v0``: one choice per agent, and the audit's shortcuts.

The puppeteer's agent space is discrete (appendix B: model x reasoning pattern, model x tool,
terminate); since tool agents write their own calls, every agent is a choice. Nothing here
reads the reference answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchenv.envs.puppeteer.agents import PATTERNS, TOOLS
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


def shortcuts(strongest: str) -> dict[str, Strategy]:
    """The named shortcuts ``orchenv audit`` plays (``PuppeteerEnv.audit_strategies``)."""
    reason = agent_text(strongest, "reasoning")

    def terminate_now(env: Any) -> str:
        """Terminate at once, without calling an agent."""
        return terminate_text()

    def one_call(env: Any) -> str:
        """The strongest model with the reasoning pattern once, then terminate."""
        return reason if not env.history else terminate_text()

    def max_turns(env: Any) -> str:
        """The strongest model with the reasoning pattern at every step, never terminate."""
        return reason

    def tools_only(env: Any) -> str:
        """The strongest model's run_python, read_file and search agents, then terminate (no
        reasoning agent: tool output never becomes the team's answer)."""
        steps = [agent_text(strongest, t) for t in TOOLS]
        return steps[len(env.history)] if len(env.history) < len(steps) else terminate_text()

    def garbage(env: Any) -> str:
        """As one call then terminate, with filler text around the tags."""
        return f"lorem ipsum {one_call(env)} dolor sit amet"

    return {
        "terminate-immediately": terminate_now,
        "one-call-then-terminate": one_call,
        "max-turns": max_turns,
        "tools-then-terminate": tools_only,
        "garbage-around-tag": garbage,
    }
