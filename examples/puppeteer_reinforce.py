"""Train a Puppeteer orchestrator with REINFORCE (seed 003, eq. 5) on CPU.

Titan-Mono (every agent is Llama-3.1-405B) on the MMLU-Pro stand-in, as in the paper's
Figure 3: online updates after each episode, reward eq. 6 (lambda 0.1, gamma 0.99, phi =
the episode length 4). Prints the return, score and tokens of a random puppeteer, of the
training's first and last episodes, and of the trained policy.

    python examples/puppeteer_reinforce.py
"""

from __future__ import annotations

import numpy as np

from orchenv.agents.reinforce import evaluate, train
from orchenv.envs.puppeteer.env import PuppeteerEnv

env = PuppeteerEnv(preset="titan-mono", tasks="multiple-choice", n_tasks=500)
policy, log = train(env, 3000, lr=0.1, baseline="mean")


def show(name: str, row: dict[str, float]) -> None:
    print(
        f"{name:<22} return {row['return']:+.3f}  score {row['score']:.3f}  tokens {row['tokens']:.0f}"
    )


show("random", evaluate(env, None, 200))
for name, part in (("training, first 200", log[:200]), ("training, last 200", log[-200:])):
    show(name, {k: float(np.mean([r[k] for r in part])) for k in part[0]})
show("trained (sampling)", evaluate(env, policy, 200))
