"""The discrete view of ``orch/Puppeteer-v0``: one choice per agent, and the audit's shortcuts.

The puppeteer's agent space is already discrete (appendix B: model x reasoning pattern, the
tools, terminate); what a discrete policy cannot write is a tool's argument. The choices give
each tool whose argument follows from what the puppeteer sees a canonical one
(``tool:read_file`` reads ``problem.txt``; ``tool:search`` queries the task text) and leave
out ``tool:run_python``, whose code would have to be the solution. Nothing here reads the
reference answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchenv.envs.puppeteer.agents import PATTERNS
from orchenv.envs.puppeteer.protocol import TERMINATE

#: the file every task's sandbox holds
PROBLEM_FILE = "problem.txt"
#: the longest search query the choices send (the task text, cut at a word)
MAX_QUERY_CHARS = 300

Strategy = Callable[[Any], str]


def model_text(model: str, pattern: str) -> str:
    return f"<agent>{model}:{pattern}</agent>"


def terminate_text() -> str:
    return f"<agent>{TERMINATE}</agent>"


def read_file_text() -> str:
    return f"<agent>tool:read_file</agent><path>{PROBLEM_FILE}</path>"


def search_text(problem: str) -> str:
    """A search whose query is the task text (whitespace collapsed, cut at a word)."""
    query = " ".join(problem.replace("<", " ").split())
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]
    return f"<agent>tool:search</agent><query>{query}</query>"


def canonical_choices(models: Sequence[str], problem: str) -> list[str]:
    """Every ``MODEL:PATTERN`` (models in pool order, patterns in ``PATTERNS`` order), then
    ``tool:read_file``, ``tool:search``, ``terminate``; all available in every state."""
    choices = [model_text(m, p) for m in models for p in PATTERNS]
    return [*choices, read_file_text(), search_text(problem), terminate_text()]


def shortcuts(strongest: str) -> dict[str, Strategy]:
    """The named shortcuts ``orchenv audit`` plays (``PuppeteerEnv.audit_strategies``)."""
    reason = model_text(strongest, "reasoning")

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
        """Read the problem file, search the corpus, then terminate (no model agent)."""
        steps = [read_file_text(), search_text(env.task.prompt)]
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
