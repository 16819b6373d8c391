"""A tiny scripted pool and task source for hand-checked scenarios (imported by tests)."""

from __future__ import annotations

from orchenv.pool import AgentPool, AgentSpec
from orchenv.tasks import ListTaskSource, Task
from orchenv.testing.scripted import ScriptedBackend

WEAK, MID, STRONG = "weak", "mid", "strong"
RIGHT = "Step 1: 2 + 3 = 5.\nThe final answer is $\\boxed{5}$."
WRONG = "Step 1: 2 + 3 = 6.\nThe final answer is $\\boxed{6}$."


def scripted_pool(replies: dict[str, str]) -> AgentPool:
    """Three agents (weak < mid < strong) with Table 9's constraints and multipliers."""
    specs = [
        AgentSpec(
            name=WEAK, model="w", tier=2, price_prompt=0.1, price_completion=0.2, backend="scripted"
        ),
        AgentSpec(
            name=MID, model="m", tier=1, price_prompt=1.0, price_completion=2.0, backend="scripted"
        ),
        AgentSpec(
            name=STRONG,
            model="s",
            tier=0,
            price_prompt=10.0,
            price_completion=20.0,
            backend="scripted",
        ),
    ]
    return AgentPool(
        specs,
        {"scripted": ScriptedBackend(replies)},
        name="scripted",
        usage_constraints={STRONG: 0.25, MID: 0.5, WEAK: 1.0},
        lagrange_multipliers={STRONG: 0.25, MID: 0.125, WEAK: 0.0},
    )


def tiny_source() -> ListTaskSource:
    tasks = [
        Task(id=f"t{i}", prompt=f"What is 2 + 3? (copy {i})", answers=("5",), meta={"level": 1})
        for i in range(4)
    ]
    return ListTaskSource("tiny", {"train": tasks, "test": tasks})


#: fragments fuzzers glue together: tags (exact and near-miss), verdict words, agent names
NEAR_MISS_FRAGMENTS = [
    "<model>", "</model>", "<verdict>", "</verdict>", "<checking>", "</checking>",
    "<think>", "</think>", "< model >", "<MODEL>", "True", "False",
    "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct", "qwen3-30b-a3b-instruct",
    "Llama-3.2-1B-Instruct", "Qwen2.5-1.5B-Instruct", "Ministral-3-8B-Instruct",
    "\n", " ", "<", ">", "/", "\\boxed{", "}",
]  # fmt: skip
