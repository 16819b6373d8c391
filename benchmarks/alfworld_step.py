"""orch/ALFWorld-v0 step throughput against the bare alfworld engine, same games, same commands.

The bare engine is alfworld's TextWorld stack as ``alfworld-generate`` builds it
(textworld ``PddlEnv`` + ``AlfredDemangler`` + ``AlfredInfos``) driven by a plain
``step`` loop; the wrapped side is ``orch/ALFWorld-v0`` (unwrapped: no Gymnasium
checker wrappers), which adds command normalisation, the admissibility check,
the observation prompt and the info dict. Both replay one recorded command
sequence per bundled training game (a seeded random walk of admissible and a few
inadmissible commands, then alfworld's planner to the win), with loading and
resetting outside the timed region. Target: the wrapper adds at most 20%.

    python benchmarks/alfworld_step.py [--walk 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401  (registers the ids)
from orchenv.envs.alfworld import ALFWorldEnv
from orchenv.envs.alfworld.engine import ALFWorldEngine
from orchenv.envs.alfworld.games import BUNDLED_ROOT, GameCatalog


def record(game_path: str, walk: int, seed: int) -> list[str]:
    """A random walk (with an inadmissible command every fifth step), then the planner's plan."""
    engine = ALFWorldEngine(game_path, expert="planner")
    rng = np.random.default_rng(seed)
    state = engine.reset()
    commands = []
    for i in range(walk):
        options = state.admissible_commands
        command = (
            "dance with the fridge" if i % 5 == 4 else options[int(rng.integers(len(options)))]
        )
        commands.append(command)
        state = engine.step(command)
        if state.won:
            break
    while not state.won and state.expert_plan:
        commands.append(state.expert_plan[0])
        state = engine.step(commands[-1])
    engine.close()
    return commands


def bare_engine(game_path: str):  # noqa: ANN201 - a textworld environment
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs import PddlEnv

    request = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = AlfredInfos(AlfredDemangler(PddlEnv(request), shuffle=False))
    env.load(game_path)
    return env


def time_bare(games, sequences) -> tuple[float, int]:
    total, steps = 0.0, 0
    for game, commands in zip(games, sequences, strict=True):
        env = bare_engine(game.path)
        env.reset()
        start = time.perf_counter()
        for command in commands:
            env.step(command)
        total += time.perf_counter() - start
        steps += len(commands)
    return total, steps


def time_wrapped(env: ALFWorldEnv, games, sequences) -> tuple[float, int]:
    total, steps = 0.0, 0
    for game, commands in zip(games, sequences, strict=True):
        env.reset(options={"task_id": game.id})
        start = time.perf_counter()
        for command in commands:
            env.step(command)
        total += time.perf_counter() - start
        steps += len(commands)
    return total, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", type=int, default=20, help="random commands before the plan")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()

    games = GameCatalog.build(data_dir=BUNDLED_ROOT).games("train")
    sequences = [record(g.path, args.walk, seed) for seed, g in enumerate(games)]
    env_id = "orch/ALFWorld-v0"
    if env_id in gym.registry:
        env = gym.make(env_id, max_turns=10_000, data_dir=BUNDLED_ROOT).unwrapped
    else:  # before the id is registered: the class it names
        env = ALFWorldEnv(max_turns=10_000, data_dir=BUNDLED_ROOT)
    time_bare(games[:2], sequences[:2])  # warm-up: imports, first engine instances
    time_wrapped(env, games[:2], sequences[:2])
    bare, wrapped = [], []
    for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
        seconds, steps = time_bare(games, sequences)
        bare.append(seconds / steps)
        seconds, steps = time_wrapped(env, games, sequences)
        wrapped.append(seconds / steps)
    bare_s, wrapped_s = min(bare), min(wrapped)
    overhead = wrapped_s / bare_s - 1.0
    print(f"{len(games)} games, {steps} commands per pass, best of {args.repeats}")
    print(f"bare alfworld engine     {1 / bare_s:>8,.1f} steps/s   {bare_s * 1e3:8.2f} ms/step")
    print(f"{env_id:<24} {1 / wrapped_s:>8,.1f} steps/s   {wrapped_s * 1e3:8.2f} ms/step")
    print(
        f"ratio (wrapped / bare step time): {wrapped_s / bare_s:.3f}   overhead {overhead:+.1%}   "
        f"target <= +20%: {'met' if overhead <= 0.20 else 'NOT met'}"
    )
    env.close()


if __name__ == "__main__":
    main()
