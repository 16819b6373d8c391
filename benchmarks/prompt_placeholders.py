"""Count unfilled placeholders in every env's controller prompts (issue 31).

A placeholder is a tag body a model could copy back verbatim without acting: ``...``,
an all-capitals stand-in (``SOLVER NAME``, ``FINAL ANSWER``, ``MODEL:PATTERN``) or an
alternative list (``True|False``); ``orchenv.parsing.find_placeholders`` finds them.
Each env plays ``--episodes`` episodes with its own ``demo_action`` (every phase is
visited), plus one deliberately invalid action per episode (the notice), and the script
prints, per env: observations read, observations with a placeholder, placeholders in all.

    .venv/bin/python benchmarks/prompt_placeholders.py --episodes 3
"""

from __future__ import annotations

import argparse
import json
import warnings

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401  (registers the envs)
from orchenv.core import OrchestrationEnv
from orchenv.parsing import find_placeholders


def count(env_id: str, episodes: int) -> dict[str, object]:
    env = gym.make(env_id)
    base = env.unwrapped
    assert isinstance(base, OrchestrationEnv)
    rng = np.random.default_rng(0)
    seen = with_any = total = 0
    examples: set[str] = set()

    def look(obs: str) -> None:
        nonlocal seen, with_any, total
        found = find_placeholders(obs)
        seen += 1
        with_any += bool(found)
        total += len(found)
        examples.update(found)

    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        look(obs)
        obs, *_ = env.step("I am not sure what to do.")  # the notice after an invalid action
        look(obs)
        for _ in range(64):
            obs, _, terminated, truncated, _ = env.step(base.demo_action(rng))
            if terminated or truncated:
                break
            look(obs)
    env.close()
    return {
        "env": env_id,
        "observations": seen,
        "with_placeholder": with_any,
        "placeholders": total,
        "examples": sorted(examples)[:6],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--env", action="append", help="env id (default: every orch/ env)")
    args = parser.parse_args()
    ids = args.env or sorted(k for k in gym.registry if k.startswith("orch/"))
    warnings.simplefilter("ignore")
    for env_id in ids:
        print(json.dumps(count(env_id, args.episodes)), flush=True)


if __name__ == "__main__":
    main()
