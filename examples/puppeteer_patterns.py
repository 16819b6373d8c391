"""orch/Puppeteer-v0: longer orchestration trajectories cost reward (seed 003, eq. 6).

Two scripted controllers on the simulated `mimas` preset (GSM-Hard), both naming its first
model: one asks it to reason and stops; the other plans, reasons, critiques and stops. The
critique acts on the draft (docs/puppeteer.md), so the longer chain is right more often
despite paying the step cost C_t = F_t * log(1 + t / phi) at every step.

    python examples/puppeteer_patterns.py
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401

SCRIPTS = {
    "reason, stop": ["reasoning", "terminate"],
    "plan, reason, critique, stop": ["planning", "reasoning", "critique", "terminate"],
}

env = gym.make("orch/Puppeteer-v0", split="test")
_, info = env.reset(seed=0)
model = next(a for a in info["valid_agents"] if a.endswith(":reasoning")).split(":")[0]
print(f"model: {model}")
for name, steps in SCRIPTS.items():
    returns, correct = [], []
    for episode in range(200):
        env.reset(seed=episode)
        total = 0.0
        for step in steps:
            agent = "terminate" if step == "terminate" else f"{model}:{step}"
            _, reward, terminated, truncated, info = env.step(f"<agent>{agent}</agent>")
            total += reward
            if terminated or truncated:
                break
        returns.append(total)
        correct.append(bool(info.get("correct")))
    print(f"{name:<30} accuracy {np.mean(correct):.3f}   mean return {np.mean(returns):+.3f}")
