"""Two scripted controllers on BudgetRouteEnv (seed 001, simulated CoRL pool), per budget mode.

``cheap`` asks GPT-4.1-nano once and answers with its boxed answer; ``always-o3`` does the
same with o3. Prints mean reward, accuracy and dollar cost per query for each budget mode.

    python examples/budgetroute_cheap_vs_o3.py [EPISODES]
"""

from __future__ import annotations

import sys

import numpy as np
from tqdm.auto import tqdm

from orchenv.envs.budgetroute.env import BudgetRouteEnv
from orchenv.grading import extract_boxed
from orchenv.runner import usd


def ask_then_echo(expert: str):
    def controller(env: BudgetRouteEnv) -> str:
        if not env.history:
            return f"<search>{expert}: {env.task.prompt}</search>"
        return f"<answer>{extract_boxed(env.history[-1][2]) or '0'}</answer>"

    return controller


def evaluate(controller, mode: str, episodes: int) -> tuple[float, float, float]:
    env = BudgetRouteEnv(pool="corl", split="test")
    rewards, correct, costs = [], [], []
    for i in tqdm(range(episodes), desc=mode, unit="ep", leave=False):
        env.reset(seed=i, options={"budget_mode": mode})
        done, total = False, 0.0
        while not done:
            _, r, terminated, truncated, info = env.step(controller(env))
            total += r
            done = terminated or truncated
        rewards.append(total)
        correct.append(info["correct"])
        costs.append(info["episode_cost_usd"])
    return float(np.mean(rewards)), float(np.mean(correct)), float(np.mean(costs))


def main() -> None:
    episodes = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    controllers = {"cheap (nano)": ask_then_echo("GPT-4.1-nano"), "always-o3": ask_then_echo("o3")}
    print(f"{'controller':<14} {'mode':<7} {'reward':>7} {'accuracy':>9} {'$/query':>10}")
    for name, controller in controllers.items():
        for mode in ("low", "medium", "high"):
            reward, acc, cost = evaluate(controller, mode, episodes)
            print(f"{name:<14} {mode:<7} {reward:7.3f} {acc:9.3f} {usd(cost):>10}")


if __name__ == "__main__":
    main()
