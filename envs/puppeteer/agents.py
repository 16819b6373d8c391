"""Puppeteer's agent space: models x reasoning patterns (appendix B of seed 003).

The simulated model agents (``PatternBackend``), the model presets (``puppeteer_pool``),
the system prompt that tells an agent its pattern, and the majority vote over parallel
width branches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchenv.backends.simulated import estimate_prompt_tokens
from orchenv.envs.puppeteer.tasks import LETTERS, concept_coverage
from orchenv.error import UnknownNameError
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.seeding import stable_uniform

#: appendix B reasoning patterns
PATTERNS: tuple[str, ...] = (
    "planning", "reasoning", "critique", "reflect", "question", "summarize", "conclude", "modify",
)  # fmt: skip

#: margin bonus (logit) of each pattern
PATTERN_LOGIT: dict[str, float] = {
    "planning": 0.5, "reasoning": 1.0, "critique": 0.0, "reflect": 0.0, "question": -0.5,
    "summarize": 0.0, "conclude": 0.0, "modify": 0.0,
}  # fmt: skip
REVISE_LOGIT = 0.5  # critique / reflect / modify when an earlier answer exists
REVISING_PATTERNS = ("critique", "reflect", "modify")
RESTATING_PATTERNS = ("summarize", "conclude")

#: presets: model -> (one-shot accuracy with a neutral pattern, completion tokens, USD/1M)
PRESETS: dict[str, dict[str, tuple[float, int, float]]] = {
    "mimas": {"qwen2.5-1.5b": (0.15, 250, 0.1), "qwen2.5-7b": (0.3, 300, 0.3)},
    "titan": {"gpt-4o-mini": (0.45, 400, 0.6), "llama-3.1-405b": (0.55, 450, 3.0)},
}

#: the agents' system prompt per task kind (its first line ``Pattern: X`` is read by
#: ``PatternBackend``)
AGENT_SYSTEMS: dict[str, str] = {
    "gsm-hard": (
        "Pattern: {pattern}\nYou are one agent in a team solving a math word problem. Apply the "
        "'{pattern}' reasoning pattern to the task and the trajectory so far, and end with the "
        "answer as \\boxed{{ANSWER}}."
    ),
    "multiple-choice": (
        "Pattern: {pattern}\nYou are one agent in a team answering a multiple-choice question. "
        "Apply the '{pattern}' reasoning pattern to the task and the trajectory so far, and end "
        "with the letter of the chosen option as \\boxed{{LETTER}} (one of A, B, C, D)."
    ),
    "commongen": (
        "Pattern: {pattern}\nYou are one agent in a team writing one coherent sentence that uses "
        "every given concept. Apply the '{pattern}' reasoning pattern to the task and the "
        "trajectory so far, and end with the sentence as \\boxed{{SENTENCE}}."
    ),
}


def agent_messages(
    kind: str,
    pattern: str,
    problem: str,
    history: Sequence[tuple[str, str]],
    *,
    branch: int = 0,
    width: int = 1,
) -> list[Message]:
    """The messages of one model agent: its pattern's system prompt (with a "Branch b of W"
    line when ``width > 1``), then the task and the trajectory so far (``(agent, output)``)."""
    system = AGENT_SYSTEMS[kind].format(pattern=pattern)
    if width > 1:
        system += f"\nBranch {branch + 1} of {width} (parallel exploration)."
    lines = [f"{agent}: {output}" for agent, output in history]
    user = f"Task:\n{problem}\n\nTrajectory so far:\n" + ("\n".join(lines) or "-")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _pattern_of(messages: Sequence[Message]) -> str:
    """The pattern named on the first system message's first line (``question`` if none)."""
    for message in messages:
        if message.get("role") == "system":
            first = message.get("content", "").split("\n", 1)[0]
            if first.startswith("Pattern: "):
                return first[len("Pattern: ") :].strip()
            break
    return "question"


class PatternBackend:
    """Simulated model agents whose success depends on the reasoning pattern.

    ``P(correct) = sigmoid(logit(accuracy) + PATTERN_LOGIT[pattern] + revise)`` with
    ``revise = REVISE_LOGIT`` for critique / reflect / modify when an earlier answer exists.
    ``summarize`` and ``conclude`` restate the trajectory's current answer when there is one
    (so a right tool result followed by ``conclude`` stays right). A wrong reply boxes the true
    answer plus a nonzero offset. Outcomes are deterministic in (seed, task, model, pattern,
    step); the pattern is read from the system prompt's first line (``Pattern: X``) and the
    current answer from ``CallContext.draft``.

    Per task kind (``task.meta["family"]``): GSM-Hard boxes a number; multiple-choice boxes the
    correct letter with probability ``P(correct)``, else a fixed wrong letter (per task, model
    and pattern); CommonGen boxes a sentence in which each concept appears independently with
    probability ``P(correct)`` (concepts the draft already covers stay covered under critique /
    reflect / modify; summarize / conclude restate the draft), some in a plural / -ing form.
    Width branches differ through ``CallContext.turn`` (``turn + 1000 * branch``).
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = context.task
        assert task is not None
        pattern = _pattern_of(messages)
        draft = context.draft
        family = task.meta.get("family", "gsm-hard")
        accuracy = spec.calibration["accuracy"]
        logit = math.log(accuracy / (1 - accuracy)) + PATTERN_LOGIT.get(pattern, 0.0)
        revising = bool(draft) and pattern in REVISING_PATTERNS
        if revising:
            logit += REVISE_LOGIT
        p = 1.0 / (1.0 + math.exp(-logit))
        key = (self.seed, task.id, spec.name, pattern)
        if pattern in RESTATING_PATTERNS and draft:
            answer = draft
        elif family == "commongen":
            words = []
            for c in task.meta["concepts"]:
                kept = revising and concept_coverage(draft, (c,)) == 1.0
                if kept or stable_uniform("cgen", *key, c, context.turn) < p:
                    plural = stable_uniform("form", *key, c) < 0.3
                    words.append(c + "s" if plural else c)
            answer = "Here is a scene with " + (", ".join(words) or "nothing special") + "."
        elif stable_uniform("puppeteer", *key, context.turn) < p:
            answer = task.answer
        elif family == "multiple-choice":
            wrong = [x for x in LETTERS if x != task.answer]
            answer = wrong[int(stable_uniform("off", *key) * len(wrong))]
        else:
            off = 1 + int(stable_uniform("off", *key) * 997)
            answer = str(int(task.answer) + off)
        text = f"[{pattern}] Working through the problem step by step. \\boxed{{{answer}}}"
        completion_tokens = int(spec.calibration["tokens"])
        return spec.completion(
            text,
            estimate_prompt_tokens(messages),
            completion_tokens,
            latency_s=completion_tokens / 100.0,
            token_source="estimate",
            meta={"pattern": pattern, "answer": answer},
        )


def puppeteer_pool(preset: str = "mimas", *, seed: int = 0) -> AgentPool:
    """The simulated model pool of a preset (``"mimas"``: small models, ``"titan"``: large)."""
    if preset not in PRESETS:
        raise UnknownNameError("puppeteer preset", preset, PRESETS)
    models = PRESETS[preset]
    specs = [
        AgentSpec(
            name=name,
            model=name,
            tier=len(models) - 1 - rank,
            price_prompt=price,
            price_completion=price,
            backend="puppeteer-pattern",
            calibration={"accuracy": acc, "tokens": tokens},
        )
        for rank, (name, (acc, tokens, price)) in enumerate(models.items())
    ]
    return AgentPool(specs, {"puppeteer-pattern": PatternBackend(seed)}, name=f"puppeteer-{preset}")


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-None answer (exact string match); ties go to the earliest."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)
