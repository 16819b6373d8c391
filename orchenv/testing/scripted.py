"""A backend whose answers you script: a test double for controllers and environments.

``ScriptedBackend({"small": "... \\\\boxed{3}", "big": lambda spec, messages, ctx: ...})``
answers each agent with a fixed text or with what a callable returns. Token
counts are a whitespace word count, so costs are easy to compute by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from orchenv.error import UnknownNameError
from orchenv.pool import AgentSpec, CallContext, Completion, Message

Reply = str | Callable[[AgentSpec, Sequence[Message], CallContext], str]


class ScriptedBackend:
    """Answers from a table ``agent name -> text or callable``; records every call."""

    def __init__(self, replies: Mapping[str, Reply]) -> None:
        self.replies = dict(replies)
        self.calls: list[tuple[str, list[Message], CallContext]] = []

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        if spec.name not in self.replies:
            raise UnknownNameError("scripted agent", spec.name, self.replies)
        reply = self.replies[spec.name]
        text = reply(spec, messages, context) if callable(reply) else reply
        self.calls.append((spec.name, list(messages), context))
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return spec.completion(
            text, prompt_tokens, len(text.split()), latency_s=1e-3, token_source="estimate"
        )
