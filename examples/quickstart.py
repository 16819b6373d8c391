"""Reset, step and read the info of orch/MathRoute-v0 with a hand-written controller.

python examples/quickstart.py
"""

from __future__ import annotations

import gymnasium as gym

import orchenv  # noqa: F401  (registers the orch/ ids)

env = gym.make("orch/MathRoute-v0")
obs, info = env.reset(seed=0)
print(obs, "\n")
agents = info["valid_agents"]  # weakest first

# Turn 1: route to the middle agent.
obs, reward, terminated, truncated, info = env.step(
    f"<thinking>medium</thinking><model>{agents[1]}</model>"
)
print(f"reward {reward:+.3f}  called {info['called_agent']}  cost ${info['cost_usd']:.6f}\n")
print(obs[-600:], "\n")

# Turn 2: accept the draft (a real controller would check it first).
obs, reward, terminated, truncated, info = env.step(
    "<checking>looks right</checking><verdict>True</verdict>"
)
print(
    f"reward {reward:+.3f}  terminated {terminated}  correct {info['correct']}  answer {info['final_answer']}"
)
