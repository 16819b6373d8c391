"""REINFORCE for a discrete agent space (seed 003, eq. 5), runnable on CPU.

Seed 003 trains its puppeteer online with REINFORCE: after each episode,
``theta <- theta + alpha * (sum_t grad log pi(a_t | S_t)) * R(tau)``, where ``pi`` scores the
candidate agents from the state and ``R(tau)`` is eq. 6's return (``r - lambda * C`` with
``gamma``-discounting and the step factor ``phi``; the env computes it, so lambda, gamma and
phi are the env's ``lam``, ``gamma``, ``phi``). The paper's scorer is a reward model on top
of Llama-3.1; here it is a linear softmax over hashed words and word pairs of the state's
text, one weight row per choice of ``env.action_choices()``. Written by hand because it is a
few dozen lines of numpy on top of the env's own discrete view; no maintained library trains
a policy on text observations with a changing discrete choice list without a neural stack.

The state's text features are what the episode added to the first observation (``delta``:
the trajectory and the current answer; the task text is the same in every state of an
episode and, shared, would act as a bias that cannot tell "nothing done yet" from "an
answer is there"). There is no per-choice bias by default for the same reason (``use_bias``).

Named options that depart from eq. 5 as written: ``baseline="mean"`` subtracts a running mean
return (variance reduction; default ``"none"``); ``credit="to-go"`` weights step t by eq. 6's
``R_t`` instead of ``R(tau)`` (default ``"episode"``); ``entropy`` > 0 adds an entropy bonus
(default 0).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchenv.discrete import available
from orchenv.error import ConfigError

BASELINES = ("none", "mean")
#: what each step's log-probability is weighted by: R(tau) (eq. 5) or R_t (eq. 6, to go)
CREDITS = ("episode", "to-go")
_WORD = re.compile(r"[a-z0-9][a-z0-9.:\-]*")
#: how many characters of the state text are read (hostile input is bounded)
MAX_STATE_CHARS = 50_000


def words_of(text: str, tail_chars: int = MAX_STATE_CHARS) -> set[str]:
    """The words and adjacent word pairs of the last ``tail_chars`` characters of ``text``."""
    words = _WORD.findall(text[-min(tail_chars, MAX_STATE_CHARS) :].lower())
    return set(words) | {f"{a} {b}" for a, b in zip(words, words[1:], strict=False)}


def text_features(
    text: str,
    n_features: int,
    tail_chars: int = MAX_STATE_CHARS,
    since: set[str] | None = None,
) -> np.ndarray:
    """Hashed words and word pairs of ``text`` (indices into ``n_features``; CRC32, so
    features agree across processes). With ``since`` (the words of the episode's first
    observation), only what the episode added: the trajectory and the current answer, not
    the task text, which would act as noise shared by every state of the episode; a state
    that added nothing has the single feature ``<start>``."""
    keys = words_of(text, tail_chars)
    if since is not None:
        keys = (keys - since) or {"<start>"}
    return np.fromiter(sorted({zlib.crc32(k.encode()) % n_features for k in keys}), dtype=np.int64)


@dataclass
class ReinforcePolicy:
    """A linear softmax scorer over hashed state-text features, one row per choice."""

    n_choices: int
    n_features: int = 1 << 14
    tail_chars: int = MAX_STATE_CHARS
    lr: float = 0.05
    baseline: str = "none"
    credit: str = "episode"
    entropy: float = 0.0
    use_bias: bool = False
    delta: bool = True
    seed: int = 0
    weights: np.ndarray = field(init=False)
    bias: np.ndarray = field(init=False)
    episodes: int = field(init=False, default=0)
    #: running mean return per step index (index 0 only with ``credit="episode"``)
    mean_returns: dict[int, float] = field(init=False, default_factory=dict)
    counts: dict[int, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.credit not in CREDITS:
            raise ConfigError(f"credit must be one of {CREDITS}, got {self.credit!r}")
        if self.baseline not in BASELINES:
            raise ConfigError(f"baseline must be one of {BASELINES}, got {self.baseline!r}")
        if self.n_choices < 1:
            raise ConfigError(f"n_choices must be >= 1, got {self.n_choices}")
        self.weights = np.zeros((self.n_choices, self.n_features))
        self.bias = np.zeros(self.n_choices)
        self.rng = np.random.default_rng(self.seed)

    def probabilities(self, features: np.ndarray, legal: Sequence[int]) -> np.ndarray:
        """``pi(a | S)`` over ``legal`` choices (others 0)."""
        scale = 1.0 / max(1.0, np.sqrt(len(features)))
        logits = self.weights[:, features].sum(axis=1) * scale + self.bias
        mask = np.full(self.n_choices, -np.inf)
        mask[list(legal)] = 0.0
        z = logits + mask
        z -= z[list(legal)].max()
        p = np.exp(z)
        return p / p.sum()

    def sample(self, features: np.ndarray, legal: Sequence[int], greedy: bool = False) -> int:
        p = self.probabilities(features, legal)
        return int(np.argmax(p)) if greedy else int(self.rng.choice(self.n_choices, p=p))

    def update(
        self,
        steps: Sequence[tuple[np.ndarray, Sequence[int], int]],
        ret: float,
        to_go: Sequence[float] | None = None,
    ) -> None:
        """One eq. 5 step for one episode: ``steps`` = (features, legal choices, chosen),
        ``ret`` = R(tau); with ``to_go`` (eq. 6's R_t per step) each step is credited with
        its own R_t instead."""
        self.episodes += 1
        targets = [ret] * len(steps) if to_go is None else list(to_go)
        for t, (features, legal, chosen) in enumerate(steps):
            key = 0 if to_go is None else t  # one running mean, or one per step index
            base = self.mean_returns.get(key, 0.0) if self.baseline == "mean" else 0.0
            advantage = targets[t] - base
            p = self.probabilities(features, legal)
            grad = -p * advantage
            grad[chosen] += advantage  # advantage * d log softmax / d logits
            if self.entropy:
                logp = np.log(np.where(p > 0, p, 1.0))
                h = -float(np.sum(p * logp))
                grad += self.entropy * (-p * (logp + h))  # d H / d logits
            scale = 1.0 / max(1.0, np.sqrt(len(features)))
            self.weights[:, features] += self.lr * scale * grad[:, None]
            if self.use_bias:
                self.bias += self.lr * grad
        for t, target in enumerate(targets if to_go is not None else targets[:1]):
            count = self.counts.get(t, 0) + 1
            self.counts[t] = count
            mean = self.mean_returns.get(t, 0.0)
            self.mean_returns[t] = mean + (target - mean) / min(count, 100)


def _state_text(obs: Any) -> str:
    return obs if isinstance(obs, str) else str(obs)


def run_episode(
    env: Any,
    policy: ReinforcePolicy | None,
    *,
    seed: int,
    learn: bool = True,
    greedy: bool = False,
    rng: np.random.Generator | None = None,
) -> dict[str, float]:
    """Play one episode (``policy`` None: uniform over the available choices); with
    ``learn``, update the policy on its return. Returns the return, score and tokens."""
    base = env.unwrapped
    obs, info = env.reset(seed=seed)
    since = words_of(_state_text(obs), policy.tail_chars) if policy and policy.delta else None
    steps: list[tuple[np.ndarray, list[int], int]] = []
    rewards: list[float] = []
    done = False
    while not done:
        choices = base.action_choices()
        legal = available(choices)
        if policy is None:
            assert rng is not None
            chosen = int(rng.choice(legal))
        else:
            features = text_features(_state_text(obs), policy.n_features, policy.tail_chars, since)
            chosen = policy.sample(features, legal, greedy=greedy)
            steps.append((features, legal, chosen))
        obs, reward, terminated, truncated, info = env.step(choices[chosen])
        rewards.append(float(reward))
        done = terminated or truncated
    gamma = float(getattr(base, "gamma", 1.0))
    ret, to_go = 0.0, []
    for r in reversed(rewards):  # eq. 6: R_t = gamma * R_{t+1} + (step reward)
        ret = gamma * ret + r
        to_go.append(ret)
    to_go.reverse()
    if policy is not None and learn:
        policy.update(steps, ret, to_go if policy.credit == "to-go" else None)
    metrics = info.get("metrics", {})
    return {
        "return": ret,
        "score": float(info.get("score", 0.0)),
        "tokens": float(metrics.get("tokens", 0.0)),
        "steps": float(len(rewards)),
    }


def train(
    env: Any,
    episodes: int,
    *,
    lr: float = 0.05,
    baseline: str = "none",
    credit: str = "episode",
    entropy: float = 0.0,
    use_bias: bool = False,
    delta: bool = True,
    n_features: int = 1 << 14,
    tail_chars: int = MAX_STATE_CHARS,
    seed: int = 0,
) -> tuple[ReinforcePolicy, list[dict[str, float]]]:
    """Online REINFORCE for ``episodes`` episodes (one update each, as in seed 003); returns
    the policy and each episode's return, score and tokens."""
    env.reset(seed=seed)
    n = len(env.unwrapped.action_choices())
    policy = ReinforcePolicy(
        n,
        n_features=n_features,
        tail_chars=tail_chars,
        lr=lr,
        baseline=baseline,
        credit=credit,
        entropy=entropy,
        use_bias=use_bias,
        delta=delta,
        seed=seed,
    )
    log = [run_episode(env, policy, seed=seed + 1 + i) for i in range(episodes)]
    return policy, log


def evaluate(
    env: Any,
    policy: ReinforcePolicy | None,
    episodes: int,
    *,
    seed: int = 10_000,
    greedy: bool = False,
) -> dict[str, float]:
    """Mean return, score and tokens of ``policy`` (None: uniformly random) without learning."""
    rng = np.random.default_rng(seed)
    rows = [
        run_episode(env, policy, seed=seed + i, learn=False, greedy=greedy, rng=rng)
        for i in range(episodes)
    ]
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
