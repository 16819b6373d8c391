"""Every registered env trains through the discrete view (``orchenv.discrete``): the wrapped
env passes Gymnasium's ``check_env``, a masked-out index is refused by the env, and a short
MaskablePPO run beats a uniformly random valid choice on held-out reset seeds (paired by
seed, by more than twice the standard error of the difference). PPO plays its argmax, or
samples its policy where ``SAMPLED_EVAL`` says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from orchenv.core import OrchestrationEnv
from orchenv.discrete import make_discrete_env, orch_base
from orchenv.registry import ENV_SUMMARIES

ENV_IDS = sorted(ENV_SUMMARIES)
#: PPO steps per env (about 3 s per 1,000 on two cores); an env that needs more says so here
TRAIN_STEPS: dict[str, int] = {
    "orch/ALFWorldRoles-v0": 4096,
    "orch/ALFWorld-v0": 6144,
    # issue 25: MultihopQA's appendix-E routing needs the hops in order (longer to learn)
    "orch/MultihopQA-v0": 4096,
    "orch/MultihopQAFull-v0": 8192,
    # issue 31's role prompts (filled-in examples) re-draw the simulated roles' luck, which
    # hashes the whole prompt: at 1,024 steps PPO then ties random (-0.03 +- 0.05)
    "orch/MultihopQAStatic-v0": 8192,
}
DEFAULT_TRAIN_STEPS = 1024
#: env kwargs for the training test only: WebShop's original horizon (100 turns) lets a random
#: clicker stumble onto "buy now" while a 1,024-step PPO run sees about ten episodes; at 15
#: turns (orchenv's earlier default) the test measures learning, not patience
TRAIN_KWARGS: dict[str, dict[str, Any]] = {"orch/WebShop-v0": {"max_turns": 15}}
EVAL_SEEDS = range(10_000, 10_064)
#: ids whose PPO gain over random is small, evaluated on more seeds: MultihopQA's is about
#: 0.09 (1.4 standard errors on 64 seeds after issue 31's role prompts re-drew the simulated
#: roles' luck; 8,192 training steps did not raise it)
MORE_EVAL_SEEDS: dict[str, range] = {
    "orch/MultihopQA-v0": range(10_000, 10_160),
    # issue 38: the Recommender's answer no longer follows the chain for free, so the fixed
    # plan PPO found there (look it up) is gone and what it learns is a smaller gain
    "orch/MultihopQAFull-v0": range(10_000, 10_160),
    "orch/MultihopQAStatic-v0": range(10_000, 10_160),
}
#: ids whose PPO policy is evaluated by sampling, with fewer seeds, and why: on ALFWorld (a
#: random command wins 0-3% of 50-step games) the policy learns to win by about 6,000 steps,
#: but its argmax loops (take X, put it back; A -> B -> C -> A) where sampling breaks the loop;
#: 32 games keep the evaluation near a minute (docs/audit.md, ALFWorld)
SAMPLED_EVAL: dict[str, range] = {"orch/ALFWorld-v0": range(10_000, 10_032)}
N_FEATURES = 64
#: forked probes of a masked index per episode (a fork replays the episode: ALFWorld's costs
#: about 0.5 s, so probing every step of a 50-step game dominated the suite)
PROBES_PER_EPISODE = 4

Policy = Callable[[np.ndarray, np.ndarray], int]


def skip_without_choices(env_id: str) -> None:
    base = orch_base(gym.make(env_id))
    if type(base).action_choices is OrchestrationEnv.action_choices:
        pytest.skip("no action_choices yet")


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_and_masks(env_id: str):
    skip_without_choices(env_id)
    env = make_discrete_env(env_id, n_features=N_FEATURES)
    check_env(env, skip_render_check=True)
    rng = np.random.default_rng(0)
    for seed in range(5):  # a masked index is refused (probed on a fork, a few times per episode)
        _, info = env.reset(seed=seed)
        done, probes = False, 0
        while not done:
            mask = env.get_wrapper_attr("action_masks")()
            assert mask.any() and np.array_equal(mask, info["action_mask"])
            masked = np.flatnonzero(~mask)
            if masked.size and probes < PROBES_PER_EPISODE:
                probes += 1
                probe = orch_base(env).fork()
                *_, probe_info = probe.step(env.get_wrapper_attr("action")(int(masked[0])))
                assert probe_info["invalid_action"], f"masked index {masked[0]} was accepted"
            _, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
            done = terminated or truncated


def returns(env: gym.Env, policy: Policy, seeds: range = EVAL_SEEDS) -> np.ndarray:
    out = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action = policy(obs, env.get_wrapper_attr("action_masks")())
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        out.append(total)
    return np.array(out)


#: ids where a 1,024-step MaskablePPO does not yet beat a random valid choice (issue 14 is
#: open for them: long horizons and choice sets that need more than this CI budget, or a
#: reward a random choice already reaches). strict: the test fails once PPO does beat random,
#: so the entry must then be removed.
NOT_YET: dict[str, str] = {
    "orch/MathRoute-v0": (
        "issue 25: under the default outcome reward the only skill that pays is judging the "
        "draft (random valid choices 0.688, the best blind policy 0.720, the skill reference "
        "at s = 0.7 0.826 on 100 tasks); 64 hashed n-gram features cannot judge a draft, and "
        "MaskablePPO (1,024 or 4,096 steps) ends at a blind policy tied with random (paired "
        "difference 0.000 +- 0.024). Issue 27 added MathRoute's observation_features (problem "
        "and draft statistics, author, calls): below 2 SE on these 64 seeds; 0.044 +- 0.031 "
        "(95%) on 256 seeds. "
        "The eq. 3 reward it beat random under paid reject-all."
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id",
    [
        pytest.param(i, marks=pytest.mark.xfail(reason=NOT_YET[i], strict=True))
        if i in NOT_YET
        else i
        for i in ENV_IDS
    ],
)
def test_maskable_ppo_beats_random(env_id: str):
    skip_without_choices(env_id)
    sb3_contrib = pytest.importorskip("sb3_contrib")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    kwargs = TRAIN_KWARGS.get(env_id, {})
    env = make_discrete_env(env_id, n_features=N_FEATURES, **kwargs)
    model = sb3_contrib.MaskablePPO(
        "MlpPolicy",
        env,
        n_steps=256,
        batch_size=64,
        n_epochs=4,
        learning_rate=3e-3,
        gamma=1.0,
        policy_kwargs={"net_arch": [64]},
        seed=0,
        device="cpu",
    )
    model.learn(TRAIN_STEPS.get(env_id, DEFAULT_TRAIN_STEPS))

    sampled = env_id in SAMPLED_EVAL
    seeds = SAMPLED_EVAL.get(env_id, MORE_EVAL_SEEDS.get(env_id, EVAL_SEEDS))

    def ppo(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(model.predict(obs, action_masks=mask, deterministic=not sampled)[0])

    rng = np.random.default_rng(0)

    def random_choice(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(rng.choice(np.flatnonzero(mask)))

    evaluation = make_discrete_env(env_id, n_features=N_FEATURES, **kwargs)
    diff = returns(evaluation, ppo, seeds) - returns(evaluation, random_choice, seeds)
    se = diff.std(ddof=1) / np.sqrt(diff.size)
    assert diff.mean() > 2 * se, (env_id, diff.mean(), se)
