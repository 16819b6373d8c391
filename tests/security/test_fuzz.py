"""Fuzz every registered env id with hostile actions (issue 13, part 2).

The fuzzer is ``benchmarks/fuzz_actions.py`` (the benchmark steps 2,500 actions per id and
reports timings and memory); here each id gets a few hundred of the same actions: lone
surrogates, NULs, 10 MB strings, deep nesting, huge numbers, every tag of the protocol
unclosed, repeated, nested or filled with hostile payloads, and non-``str`` actions.
Every step must return (0 exceptions), with a text observation, a finite reward and an
info that serialises to JSON with finite numbers. Left out here for speed: the answers
whose cost is the grading budget (``tests/security/test_actions.py`` covers them) and
``tool:run_python`` (the sandbox's own tests cover it; the benchmark includes both).
``pytest-timeout`` is the hang guard.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the ids)

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("orch/"))
ACTIONS_PER_ID = 300


def load_fuzzer():  # noqa: ANN201 - the benchmark module
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_actions.py"
    spec = importlib.util.spec_from_file_location("fuzz_actions", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fuzz = load_fuzzer()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_actions_never_break_a_step(env_id):
    report = fuzz.fuzz_env(
        env_id, ACTIONS_PER_ID, seed=13, fuzzer=fuzz.Fuzzer(expensive=False, code=False)
    )
    assert report.actions == ACTIONS_PER_ID
    assert not report.exceptions, "\n\n".join(report.exceptions[:3])
    assert not report.problems, "\n".join(report.problems[:5])


PARENS = "(" * 100_000
#: each attack, as seen in an action's first 300k characters (``t``) and its length (``n``)
FEATURES = {
    "lone surrogate": lambda t, n: "\udcff" in t or "\ud800" in t,
    "NUL": lambda t, n: "\x00" in t,
    "10 MB": lambda t, n: n >= fuzz.TEN_MB,
    "just under the cap": lambda t, n: fuzz.MAX_ACTION_CHARS - 1000 < n <= fuzz.MAX_ACTION_CHARS,
    "100k parentheses": lambda t, n: PARENS in t,
    "nested tags": lambda t, n: "<a><a><a>" in t,
    "power tower": lambda t, n: "9^{9^{9}}" in t,
    "5,000 digits": lambda t, n: "9" * 5000 in t,
    "10**400": lambda t, n: "10**400" in t,
    "1e999999": lambda t, n: "1e999999" in t,
    # issue 28
    "JSON escape of a surrogate": lambda t, n: "\\ud800" in t or "\\udfff" in t,
    "JSON escape of NUL": lambda t, n: "\\u0000" in t,
    "confusable letters": lambda t, n: "\u0430" in t or "\u043e" in t,
    "RTL override": lambda t, n: "\u202e" in t,
    "30k nested tags": lambda t, n: any(f"<{g}>" * 30_000 in t for g in ("think", "answer")),
    "path-like name": lambda t, n: "../../etc/passwd" in t or "/etc/shadow" in t,
    "250k-character name": lambda t, n: "x" * 250_000 in t,
    "1e309": lambda t, n: "1e309" in t,
    "NaN": lambda t, n: "NaN" in t,
    **{
        f"unclosed <{tag}>": lambda t, n, tag=tag: f"<{tag}>" in t and f"</{tag}>" not in t
        for tag in ("think", "interaction_prompt", "answer", "model", "agent", "path", "plan")
    },
}


def test_the_fuzzer_covers_the_attacks_of_the_issue():
    """The fuzzer really sends each kind of attack (so a green run above means something)."""
    fuzzer = fuzz.Fuzzer(expensive=False, code=False)
    rng = np.random.default_rng(0)
    demo = (
        '<think>x</think><interaction_prompt>{"name": "n", "arguments": {"prompt": "2 + 2", '
        '"agent_role": "r", "k": 3}}</interaction_prompt><model>m</model><answer>4</answer>'
    )
    seen: set[str] = set()
    kinds: set[type] = set()
    for _ in range(3000):
        action = fuzzer.action(rng, demo)
        kinds.add(type(action))
        if isinstance(action, str):
            assert "tool:run_python</agent><code>" not in action
            head, n = action[:300_000], len(action)
            seen.update(name for name, has in FEATURES.items() if has(head, n))
    assert set(FEATURES) == seen, sorted(set(FEATURES) - seen)
    assert {type(None), bytes, int, dict} <= kinds
