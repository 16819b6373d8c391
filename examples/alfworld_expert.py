"""ALFWorld in orchenv: alfworld's planner expert vs. random commands, then the role team.

1. Plays one game of ``orch/ALFWorld-v0`` with alfworld's planner expert and
   prints it step by step.
2. Compares the expert with random admissible commands on every bundled game
   (12 train + 20 valid_unseen; or the full set if ``ALFWORLD_DATA`` holds it).
3. Coordinates the Planner / Navigator / Interactor / Evaluator team of seed 004
   (``orch/ALFWorldRoles-v0``, simulated role agents): a coordinator that calls
   the role whose kind of command is due vs. one that picks roles at random.

    python examples/alfworld_expert.py
"""

from __future__ import annotations

from typing import cast

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.alfworld import ALFWorldEnv
from orchenv.envs.alfworld.agents import command_role
from orchenv.envs.alfworld.roles import ALFWorldControllerEnv


def show_one_game() -> None:
    env = gym.make("orch/ALFWorld-v0", expert="planner")
    obs, info = env.reset(options={"task_type": "pick_cool_then_place_in_recep"})
    print(f"Task: {info['goal']}   (game {info['task_id']})")
    done = False
    while not done:
        command = info["privileged"]["expert_plan"][0]  # alfworld's planner, replanned each step
        obs, reward, term, trunc, info = env.step(command)
        feedback = cast(ALFWorldEnv, env.unwrapped).steps[-1][1]
        print(f"  > {command:<36} {feedback}")
        done = term or trunc
    print(f"correct={info['correct']} reward={reward} turns={info['turns']}\n")
    env.close()


def expert_vs_random(limit: int = 50) -> None:
    envs = {  # the random player needs no expert: replanning after every step costs time
        "expert": gym.make("orch/ALFWorld-v0", expert="planner", max_turns=limit),
        "random": gym.make("orch/ALFWorld-v0", max_turns=limit),
    }
    games = cast(ALFWorldEnv, envs["expert"].unwrapped).catalog.all()
    rng = np.random.default_rng(0)
    wins = {"expert": 0, "random": 0}
    for game in tqdm(games, desc="games", unit="game", leave=False):
        for player, env in envs.items():
            _, info = env.reset(options={"task_id": game.id})
            done = False
            while not done:
                if player == "expert":
                    command = info["privileged"]["expert_plan"][0]
                else:
                    command = str(rng.choice(info["admissible_commands"]))
                *_, term, trunc, info = env.step(command)
                done = term or trunc
            wins[player] += info["correct"]
    for env in envs.values():
        env.close()
    for player, won in wins.items():
        print(f"{player:<7} solves {won:>2} of {len(games)} games ({limit} steps each)")
    print()


def coordinate(episodes: int = 12) -> None:
    env = gym.make("orch/ALFWorldRoles-v0")
    team = cast(ALFWorldControllerEnv, env.unwrapped)
    rng = np.random.default_rng(0)

    def due_role(info: dict, turn: int) -> str:
        plan = info["privileged"]["expert_plan"]  # privileged: an upper-bound coordinator
        role = "planner" if turn == 0 else command_role(plan[0]) if plan else "evaluator"
        return f"<role>{role}</role>"

    for name in ("due role", "random"):
        correct, turns, cost = [], [], []
        for seed in tqdm(range(episodes), desc=name, unit="ep", leave=False):
            _, info = env.reset(seed=seed)
            done, turn = False, 0
            while not done:
                action = due_role(info, turn) if name == "due role" else team.demo_action(rng)
                *_, term, trunc, info = env.step(action)
                done, turn = term or trunc, turn + 1
            correct.append(info["correct"])
            turns.append(info["turns"])
            cost.append(info["episode_cost_usd"])
        print(
            f"coordinator {name:<9} correct {np.mean(correct):.2f}  steps {np.mean(turns):5.1f}  "
            f"cost ${np.mean(cost):.6f}/episode"
        )
    env.close()


if __name__ == "__main__":
    show_one_game()
    expert_vs_random()
    coordinate()
