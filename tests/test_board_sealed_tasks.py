"""Issue 37 item 2, acceptance: sealed tasks cannot be looked up or simulated from public code.

Two cheating controllers, registered here and re-executed by the board like any submission
(``orchenv.eval.board.play_sealed``); both read only the observation, ``info`` (never
``info["privileged"]``), public code and, as a blind fallback, the env's observation-only
discrete view (``action_choices``):

- *public-source*: rebuilds the env's public task source (its public seed) and finds the task
  by ``info["task_id"]`` or by its prompt in the public splits; it then answers from the
  reference answer (BudgetRoute: answers it; MathRoute: accepts a draft exactly when it is
  right, else sends the problem to a stronger solver). Task not found: a blind move.
- *private-copy* (MathRoute): builds its own copy of the env with the public seeds, resets it
  with the episode seed it is given (or, when the copy's prompt differs, with the public task
  that has the prompt it sees), and before each move searches every action sequence in
  forks of its copy (the simulated pool's luck included) for the best return. Copy out of
  step: a blind move.

On the public dev plan both score far above the best blind policy (so this test can fail);
on the sealed plan (task-source seed, task draw and backend seeds mixed with the board's
secret; opaque task ids; no public prompt) neither scores above the best blind policy's 95%
interval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.controllers import register_controller
from orchenv.eval.board import make_spec, play_sealed
from orchenv.eval.harness import EvalConfig, evaluate, read_episode_log
from orchenv.eval.metrics import mean_interval, primary_metric
from orchenv.grading import check_math_solution
from orchenv.tasks import Task, make_task_source
from orchenv.verify.keys import read_key, write_key

N = 150
#: smaller public splits than the default keep the public-prompt tables quick to build
SOURCE = {"task_source_kwargs": {"train_size": 600, "test_size": 600}}


class _Public:
    """The public task source of an env, indexed by id and by prompt (all splits)."""

    _cache: ClassVar[dict[str, tuple[Any, dict[str, Task]]]] = {}

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        tag = json.dumps([env_id, env_kwargs], sort_keys=True)
        if tag not in self._cache:
            env = gym.make(env_id, **env_kwargs).unwrapped
            source = make_task_source(env._task_source_arg, **env._task_source_kwargs)
            prompts = {t.prompt: t for s in source.splits for t in source.iter(s)}
            self._cache[tag] = (source, prompts)
        self.source, self.prompts = self._cache[tag]

    def find(self, obs: str, info: dict[str, Any]) -> Task | None:
        try:
            return self.source.by_id(str(info.get("task_id", "")))
        except Exception:  # noqa: BLE001 - an opaque id: look the prompt up instead
            pass
        return next((t for p, t in self.prompts.items() if p in obs), None)


def _blind_math(info: dict[str, Any]) -> str:
    """MathRoute's blind move: the strongest solver, then accept."""
    if info.get("phase") == "verify":
        return "<checking></checking>\n<verdict>True</verdict>"
    return f"<model>{info['valid_agents'][-1]}</model>"


class PublicSource:
    """Answers from the public task source (module docstring)."""

    def __init__(self, *, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.env_id = env_id
        self.public = _Public(env_id, env_kwargs)
        self._env: Any = None

    def bind(self, env: Any) -> None:  # only for the blind fallback (action_choices)
        self._env = getattr(env, "unwrapped", env)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        task = self.public.find(obs, info)
        if "BudgetRoute" in self.env_id:
            if task is not None:
                return f"<answer>{task.answer}</answer>"
            return next(c for c in self._env.action_choices() if c)  # its own answer
        if task is None:
            return _blind_math(info)
        agents = list(info["valid_agents"])
        if info.get("phase") != "verify":
            return f"<model>{agents[0]}</model>"  # the cheapest: the check comes next
        draft = obs.rsplit("Proposed solution from", 1)[-1]
        if check_math_solution(draft, task.answers) or not agents:
            return "<checking></checking>\n<verdict>True</verdict>"
        return f"<checking></checking>\n<verdict>False</verdict>\n<model>{agents[-1]}</model>"


class PrivateCopy:
    """Searches its own public copy of the env before each move (module docstring)."""

    def __init__(self, *, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.copy = gym.make(env_id, **env_kwargs).unwrapped
        self.public = _Public(env_id, env_kwargs)
        self.seed: int | None = None
        self.synced = False

    def reset(self, seed: int | None) -> None:
        self.seed, self.synced = seed, False

    def _value(self, env: Any) -> float:
        best = None
        for choice in env.action_choices():
            if choice is None:
                continue
            fork = env.fork()
            _, reward, term, trunc, _ = fork.step(choice)
            value = reward + (0.0 if term or trunc else self._value(fork))
            best = value if best is None else max(best, value)
        return 0.0 if best is None else best

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if info.get("turn", 0) == 0:  # a new episode: put the copy in the same state
            copy_obs, _ = self.copy.reset(seed=self.seed)
            if copy_obs != obs:
                task = self.public.find(obs, info)
                copy_obs = (
                    self.copy.reset(seed=self.seed, options={"task": task})[0] if task else ""
                )
            self.synced = copy_obs == obs
        if not self.synced:
            return _blind_math(info)
        best, best_value = None, None
        for choice in self.copy.action_choices():
            if choice is None:
                continue
            fork = self.copy.fork()
            _, reward, term, trunc, _ = fork.step(choice)
            value = reward + (0.0 if term or trunc else self._value(fork))
            if best_value is None or value > best_value:
                best, best_value = choice, value
        assert best is not None
        self.copy.step(best)  # the copy follows the move
        return best


register_controller("test-public-source", PublicSource)
register_controller("test-private-copy", PrivateCopy)

BOARDS = {
    "math": ("orch/MathRoute-v0", "system1"),
    "budget": ("orch/BudgetRoute-v0", "corl"),
}
#: the blind policies (observation-blind fixed plans) each board compares with
BLIND = {
    "math": [("single", {"agent": a}) for a in (0, 1, 2)] + [("random", {})],
    "budget": [("budget-baseline", {"expert": e}) for e in ("none", "random")],
}
CHEATERS = {
    "math": ["test-public-source", "test-private-copy"],
    "budget": ["test-public-source"],
}


def _scores(run: Path, env_id: str) -> tuple[float, float, float]:
    metric = primary_metric(env_id)
    return mean_interval([metric.value(r) for r in read_episode_log(run / "episodes.jsonl")])


@pytest.fixture(scope="module", params=sorted(BOARDS))
def played(request, tmp_path_factory) -> dict[str, Any]:
    name = request.param
    env_id, pool = BOARDS[name]
    tmp = tmp_path_factory.mktemp(f"sealed-{name}")
    key = read_key(write_key(tmp / "board.key"))
    spec = make_spec(env_id, pool=pool, split="test", env_kwargs=SOURCE, dev_episodes=N,
                     sealed_episodes=N, key=key)  # fmt: skip
    out: dict[str, Any] = {"env_id": env_id, "dev": {}, "sealed": {}}
    for controller, kwargs in [*BLIND[name], *((c, None) for c in CHEATERS[name])]:
        if kwargs is None:
            kwargs = {"env_id": env_id, "env_kwargs": SOURCE | {"split": "test"}}
        label = f"{controller}-{json.dumps(kwargs, sort_keys=True)[:40]}"
        config = EvalConfig(env_id, controller=controller, controller_kwargs=kwargs, pool=pool,
                            split="test", episodes=N, seeds=[0], env_kwargs=SOURCE)  # fmt: skip
        dev = tmp / f"dev-{len(out['dev'])}"
        evaluate(config, dev, progress=False)  # the public dev plan
        sealed = play_sealed(dev, spec, key, tmp / f"sealed-{len(out['sealed'])}")
        out["dev"][label] = _scores(dev, env_id)
        out["sealed"][label] = _scores(sealed, env_id)
    return out


@pytest.mark.slow  # ~40 s here: 6 + 3 controllers, 150 dev and 150 sealed episodes each
def test_cheaters_win_on_the_dev_plan_and_not_on_the_sealed_plan(played):
    blind = [k for k in played["dev"] if not k.startswith("test-")]
    cheaters = [k for k in played["dev"] if k.startswith("test-")]
    for plan in ("dev", "sealed"):
        best = max(blind, key=lambda k: played[plan][k][0])
        _, _, best_high = played[plan][best]
        for cheater in cheaters:
            mean, low, _ = played[plan][cheater]
            if plan == "dev":  # the shortcut works on public tasks: the test can fail
                assert low > best_high, (plan, cheater, played[plan])
            else:  # sealed: no better than the best blind policy, within its interval
                assert mean <= best_high, (plan, cheater, played[plan])
