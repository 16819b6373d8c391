"""Issue 37 item 2 for orch/Puppeteer-v0: its generated tasks take the board's secret.

Puppeteer generates its own tasks (``envs/puppeteer/tasks.py``, ``PuppeteerTaskSource``):
a sealed env (shared argument ``sealed``) builds the generator with its seed mixed with the
secret (``PuppeteerTaskSource.sealed``), every bit of which enters the task streams, and
draws no task whose prompt is public. Checked here:

- the public tasks are bit-identical to those of the code before sealing existed (digests of
  the first 40 tasks per split of each task kind, computed on commit d09d57b's tasks.py);
- sealed tasks are in no public split, have opaque ids, differ under another secret, and
  cannot be chosen by reset options;
- ``orchenv board init --sealed-episodes`` accepts the id with its own pool
  (``--pool puppeteer-mimas``);
- a *public-source* cheater (finds the episode's task by its prompt in the public source,
  rebuilds a private copy of the env with the public seeds and looks one step ahead in it for
  the agent whose answer is right, stopping once the answer is right) beats the best blind
  policy on the public dev plan (so the test can fail), and on the sealed plan scores no
  better than the best blind policy within its interval.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest

# the MathRoute / BudgetRoute pattern's scores helper
from test_board_sealed_tasks import _scores  # noqa: E402

import orchenv  # noqa: F401 - registers the envs
from orchenv.controllers import register_controller
from orchenv.envs.puppeteer.tasks import PuppeteerTaskSource
from orchenv.error import ConfigError
from orchenv.eval.board import make_spec, play_sealed, sealed_secret
from orchenv.eval.harness import EvalConfig, evaluate
from orchenv.verify.keys import read_key, write_key

ENV_ID = "orch/Puppeteer-v0"
POOL = "puppeteer-mimas"
SECRET = "5e" * 32


def _digest(source: Any, n: int = 40) -> str:
    h = hashlib.sha256()
    for split in source.splits:
        for i in range(min(n, source.size(split))):
            t = source.get(split, i)
            h.update(json.dumps([split, t.id, t.prompt, list(t.answers)]).encode())
    return h.hexdigest()


#: computed on the code before sealing existed (tasks.py of commit d09d57b)
PUBLIC_DIGESTS = {
    "gsm-hard": "221b86e7631275ccbd9f49f595fe9b77f920ff8bfe10905c181442152c138c0a",
    "multiple-choice": "c81318661293a1c0706a11711a064c4e73d6b202af40dfed24937544c09b1101",
    "commongen": "ac43c3d6759e538d865a0863bbb4bf586d0058095e3158af163bf1319cba9aae",
    "srdd": "51d3c11e716d523eb93cdbd9ba62afa1e321d982394b8c86a506acde7bbfd5e3",
}


@pytest.mark.parametrize("kind", sorted(PUBLIC_DIGESTS))
def test_public_tasks_are_unchanged(kind):
    assert _digest(PuppeteerTaskSource(kind)) == PUBLIC_DIGESTS[kind]


@pytest.mark.parametrize("kind", ["gsm-hard", "multiple-choice"])
def test_sealed_tasks_are_not_public(kind):
    kwargs = {"tasks": kind, "split": "test", "n_tasks": 2000}
    public = gym.make(ENV_ID, **kwargs).unwrapped
    prompts = {t.prompt for s in public.task_source.splits for t in public.task_source.iter(s)}
    sealed = gym.make(ENV_ID, **kwargs, sealed=SECRET).unwrapped
    other = gym.make(ENV_ID, **kwargs, sealed="a7" * 32).unwrapped
    seen = []
    for seed in range(25):
        obs, info = sealed.reset(seed=seed)
        assert sealed.task.prompt not in prompts  # in no public split
        assert info["task_id"].startswith("sealed-") and sealed.task.id not in obs
        seen.append(sealed.task.prompt)
        other.reset(seed=seed)
        assert other.task.prompt != sealed.task.prompt  # another secret, other tasks
    assert len(set(seen)) > 20
    # the sealed generator's seed has more than 32 bits, all of which pick the tasks
    assert sealed.task_source.inner.seed >= 2**32
    with pytest.raises(ConfigError, match="refused"):
        sealed.reset(seed=0, options={"task_index": 0})
    for env in (public, sealed, other):
        env.close()


def test_pool_by_its_name_is_the_preset_pool():
    by_name = gym.make(ENV_ID, pool=POOL).unwrapped
    default = gym.make(ENV_ID).unwrapped
    assert by_name.pool.name == default.pool.name == POOL
    assert by_name.pool.names == default.pool.names
    with pytest.raises(ConfigError, match="backend"):
        gym.make(ENV_ID, pool=POOL, backend="simulated").unwrapped.pool  # noqa: B018


def test_board_init_accepts_the_id(tmp_path):
    key = read_key(write_key(tmp_path / "board.key"))
    spec = make_spec(ENV_ID, pool=POOL, split="test", dev_episodes=10, sealed_episodes=10,
                     key=key)  # fmt: skip
    assert spec["sealed_plan"]["episodes"] == 10
    sealed = gym.make(ENV_ID, pool=POOL, sealed=sealed_secret(spec, key)).unwrapped
    assert type(sealed.task_source).__name__ == "SealedTaskSource"
    # the pool's luck is sealed too: its simulated agents draw from another seed
    assert sealed._pattern_seed() != gym.make(ENV_ID, pool=POOL).unwrapped._pattern_seed()
    sealed.close()


# -- the public-source cheater ------------------------------------------------------------------
#: the best blind recipe the audit finds on the default cell (docs/audit.md): a program, an
#: answer, two critiques
RECIPE = [
    "qwen-2.5-14b:run_python",
    "qwen-2.5-14b:reasoning",
    "llama-3.1-8b:critique",
    "llama-3.1-8b:critique",
]
SELF_REFINE = ["llama-3.1-8b:reasoning", "llama-3.1-8b:critique", "llama-3.1-8b:modify"]
KWARGS: dict[str, Any] = {"n_tasks": 2000}


class _Public:
    """The env's public task source (its own generator with the public seed), indexed by
    prompt (all splits): ``test_board_sealed_tasks._Public`` for an env without a named
    task source."""

    _cache: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        tag = json.dumps([env_id, env_kwargs], sort_keys=True)
        if tag not in self._cache:
            source = gym.make(env_id, **env_kwargs).unwrapped.task_source
            self._cache[tag] = {t.prompt: t for s in source.splits for t in source.iter(s)}
        self.prompts = self._cache[tag]

    def find(self, obs: str, info: dict[str, Any]) -> Any:
        return next((t for p, t in self.prompts.items() if p in obs), None)


class PuppeteerPublicSource:
    """Finds the task by its prompt in the public source; then plays a private copy of the
    env (public seeds) one step ahead: the first agent whose answer comes out right, then
    terminate; else a program that comes out right; else the blind recipe. Task not found
    (or the copy out of step): the blind recipe."""

    privileged = False

    def __init__(self, *, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.public = _Public(env_id, env_kwargs)
        self.copy: Any = gym.make(env_id, **env_kwargs).unwrapped
        self.synced = False
        self.steps = 0

    def reset(self, seed: int | None = None) -> None:
        self.steps, self.synced = 0, False

    def _right(self, env: Any) -> bool:
        return env.answer is not None and env._grade(env.answer)[0] >= 0.999

    def _choose(self) -> str:
        copy = self.copy
        if self._right(copy):
            return "terminate"
        models = copy.pool.names
        for pattern in ("reasoning", "critique", "modify", "reflect", "question", "conclude"):
            for model in models:
                fork = copy.fork()
                fork.step(f"<agent>{model}:{pattern}</agent>")
                if self._right(fork):
                    return f"{model}:{pattern}"
        if copy.branches[0].evidence.get("run_python", 0.0) <= 0 and not copy.is_last_turn:
            for model in models:
                fork = copy.fork()
                fork.step(f"<agent>{model}:run_python</agent>")
                if fork.branches[0].evidence.get("run_python", 0.0) > 0:
                    return f"{model}:run_python"
        return RECIPE[min(self.steps, len(RECIPE) - 1)]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if info.get("turn", 0) == 0:
            task = self.public.find(obs, info)
            self.synced = task is not None
            if task is not None:
                self.copy.reset(seed=0, options={"task": task})
        if self.synced:
            agent = self._choose()
            self.copy.step(f"<agent>{agent}</agent>")
        else:
            agent = RECIPE[self.steps] if self.steps < len(RECIPE) else "terminate"
        self.steps += 1
        return f"<agent>{agent}</agent>"


register_controller("test-puppeteer-public-source", PuppeteerPublicSource)

N = 100
BLIND = [
    ("scripted-puppeteer", {"script": RECIPE}),
    ("scripted-puppeteer", {"script": SELF_REFINE}),
    ("env-random", {}),
]
CHEATER = "test-puppeteer-public-source"


def _play(tmp_path: Path) -> tuple[dict[str, dict[str, tuple[float, float, float]]], str]:
    """(mean, low, high) of the primary metric per controller on the dev and sealed plans,
    and the cheater's label."""
    key = read_key(write_key(tmp_path / "board.key"))
    spec = make_spec(ENV_ID, pool=POOL, split="test", env_kwargs=KWARGS, dev_episodes=N,
                     sealed_episodes=N, key=key)  # fmt: skip
    played: dict[str, dict[str, tuple[float, float, float]]] = {"dev": {}, "sealed": {}}
    rows = [*BLIND, (CHEATER, {"env_id": ENV_ID, "env_kwargs": {**KWARGS, "split": "test"}})]
    for i, (controller, ckwargs) in enumerate(rows):
        label = f"{controller}-{i}"
        config = EvalConfig(ENV_ID, controller=controller, controller_kwargs=ckwargs, pool=POOL,
                            split="test", episodes=N, seeds=[0], env_kwargs=KWARGS)  # fmt: skip
        dev = tmp_path / f"dev-{i}"
        evaluate(config, dev, progress=False)
        played["dev"][label] = _scores(dev, ENV_ID)
        sealed = play_sealed(dev, spec, key, tmp_path / f"sealed-{i}")
        played["sealed"][label] = _scores(sealed, ENV_ID)
    return played, f"{CHEATER}-{len(rows) - 1}"


@pytest.mark.slow  # 1-3 minutes here: 4 controllers, 100 dev and 100 sealed episodes each
def test_public_source_cheater_gains_nothing_on_the_sealed_plan(tmp_path: Path):
    played, cheater = _play(tmp_path)
    for plan in ("dev", "sealed"):
        blind = [c for c in played[plan] if c != cheater]
        best = max(blind, key=lambda c: played[plan][c][0])
        _, _, best_high = played[plan][best]
        mean, low, _ = played[plan][cheater]
        if plan == "dev":  # the lookup works on public tasks: the test can fail
            assert low > best_high, (plan, played[plan])
        else:  # sealed: no better than the best blind policy, within its interval
            assert mean <= best_high, (plan, played[plan])


def test_scripted_puppeteer_default_is_the_single_call():
    """The board's baseline row (``scripted-puppeteer`` with no kwargs) plays the calibrated
    single call: the family's best model's reasoning, then terminate; unbound, it says why."""
    from orchenv.envs.puppeteer.topology import ScriptedPuppeteer

    env = gym.make(ENV_ID, pool=POOL, split="test").unwrapped
    obs, info = env.reset(seed=0)
    player = ScriptedPuppeteer()
    player.bind(env)
    assert player.act(obs, info) == f"<agent>{env.single_call_model()}:reasoning</agent>"
    assert player.act(obs, info) == "<agent>terminate</agent>"
    with pytest.raises(ConfigError, match="script"):
        ScriptedPuppeteer().act(obs, info)
    env.close()
