"""A discrete, vector view of any orchenv env, for classical RL and for ``orchenv audit``.

An env that implements ``OrchestrationEnv.action_choices()`` (the canonical controller text
of each discrete choice, ``None`` where a choice is unavailable) gets, without code of its
own:

* :class:`ChoiceActions`: ``Discrete(n)`` actions mapped to that text, with action masks
  (``action_masks()``, sb3-contrib ``MaskablePPO``'s convention, and ``info["action_mask"]``);
* :class:`ObservationFeatures`: a fixed-size float32 vector of the text observation (hashed
  n-grams, the turn fraction, the action mask and the env's ``observation_features()``);
* :func:`make_discrete_env`: ``gym.make`` with both, what stable-baselines3 trains on;
* :class:`MaskedPolicyController`: a policy trained on that view played on the text env, and
  :class:`SavedPolicy`: one saved by a reproduction (``{seed}`` in its path), by name.

:func:`hashed_ngrams` is the one text hasher of orchenv's core (stable across processes);
env-specific feature wrappers may reuse it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import operator
import re
from collections import Counter, OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from orchenv.core import OrchestrationEnv
from orchenv.error import ConfigError, EnvStateError, OrchEnvError

__all__ = [
    "FEATURE_BOUND",
    "UNAVAILABLE_TEXT",
    "ChoiceActions",
    "EpisodeStatistics",
    "MaskedPolicyController",
    "ObservationFeatures",
    "SavedPolicy",
    "available",
    "current_choices",
    "hashed_ngrams",
    "make_discrete_env",
    "orch_base",
    "resolve_policy_path",
]

#: absolute bound of every feature (the observation ``Box``); values are clipped to it
FEATURE_BOUND = 10.0
#: the text a masked-out index maps to: no env's parser accepts it, so the env refuses the
#: step as unusable (format penalty, ``info["invalid_action"]``) and nothing changes
UNAVAILABLE_TEXT = "[discrete choice {index} is not available in this state]"

#: words, LaTeX commands, numbers (decimals whole) and single symbols of lower-cased text
_TOKEN_RE = re.compile(r"\\[a-z]+|[a-z]+|\d+(?:\.\d+)?|[^\sa-z\d]")


# -- the env's choices ---------------------------------------------------------------------------
def orch_base(env: gym.Env) -> OrchestrationEnv:
    """The ``OrchestrationEnv`` under ``env``'s wrappers (a clear error for any other env)."""
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise ConfigError(
            f"{type(base).__name__} is not an orchenv.core.OrchestrationEnv; the discrete view "
            "needs an env with action_choices()"
        )
    return base


def current_choices(base: OrchestrationEnv, n: int | None = None) -> list[str | None]:
    """``base.action_choices()``, checked: a list of ``str`` or ``None`` of length ``n``
    (when given) with at least one available choice."""
    choices = list(base.action_choices())
    name = type(base).__name__
    if n is not None and len(choices) != n:
        raise OrchEnvError(
            f"{name}.action_choices() returned {len(choices)} choices here and {n} before; "
            "the list must have the same length in every state (None marks a masked choice)"
        )
    bad = [c for c in choices if c is not None and not isinstance(c, str)]
    if bad:
        raise OrchEnvError(f"{name}.action_choices() must hold str or None, got {bad[0]!r}")
    if all(c is None for c in choices):
        raise OrchEnvError(f"{name}.action_choices() offers no available choice in this state")
    return choices


def available(choices: Sequence[str | None]) -> list[int]:
    """Indices of the available choices."""
    return [i for i, c in enumerate(choices) if c is not None]


def _probe(base: OrchestrationEnv) -> tuple[int, int]:
    """``(number of choices, number of env features)``, read from a state after a reset.

    An env that has not been reset yet is probed on a ``fork()`` reset with seed 0, so the
    wrapped env's own state and random stream stay untouched. The pool and tasks are built
    first so the fork shares them instead of building its own.
    """
    if getattr(base, "task", None) is None:  # no episode yet
        _ = base.pool
        with contextlib.suppress(OrchEnvError):  # envs without one draw tasks elsewhere
            _ = base.task_source
        probe = base.fork()
        probe.reset(seed=0)
    else:
        probe = base
    n = len(current_choices(probe))
    extra = np.asarray(probe.observation_features(), dtype=np.float32).reshape(-1)
    return n, int(extra.size)


# -- actions -------------------------------------------------------------------------------------
class ChoiceActions(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """``Discrete(n)`` actions: index ``i`` sends ``action_choices()[i]`` to the env.

    ``n`` is the length of the env's ``action_choices()`` (the same in every state). An index
    whose choice is ``None`` (masked) sends :data:`UNAVAILABLE_TEXT`, which the env refuses
    as an unusable action; :meth:`action_masks` and ``info["action_mask"]`` rule those out,
    so a masked policy never sends one. A ``str`` action passes through unchanged, so text
    controllers and learned policies run on the same wrapped env.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        self.n_choices, _ = _probe(orch_base(env))
        self.action_space = spaces.Discrete(self.n_choices)
        self._choices: list[str | None] = [None] * self.n_choices
        self._done = True  # no episode yet: every index is allowed, none is known

    @property
    def choices(self) -> list[str | None]:
        """The choices of the current state (all ``None`` before the first reset)."""
        return list(self._choices)

    def action(self, action: Any) -> str:
        """The controller text of discrete ``action`` in the current state."""
        index = int(np.asarray(action).item())
        if not 0 <= index < self.n_choices:
            raise ConfigError(f"action must be in [0, {self.n_choices - 1}], got {index}")
        text = self._choices[index]
        return UNAVAILABLE_TEXT.format(index=index) if text is None else text

    def action_masks(self) -> np.ndarray:
        """Which indices are available now (bool, one per index); all True between episodes."""
        if self._done:
            return np.ones(self.n_choices, dtype=bool)
        return np.array([c is not None for c in self._choices], dtype=bool)

    def _refresh(self, info: dict[str, Any], done: bool) -> None:
        self._done = done
        if not done:
            self._choices = current_choices(orch_base(self.env), self.n_choices)
        info["action_mask"] = self.action_masks()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._refresh(info, done=False)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        text = action if isinstance(action, str) else self.action(action)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self._refresh(info, done=bool(terminated or truncated))
        return obs, reward, terminated, truncated, info


# -- features ------------------------------------------------------------------------------------
@lru_cache(maxsize=1 << 18)
def _slot(gram: str, n_features: int) -> tuple[int, float]:
    """Index and sign of ``gram`` (BLAKE2b: the same in every process, unlike ``hash()``)."""
    data = gram.encode("utf-8", "surrogatepass")  # a lone surrogate hashes, never raises
    value = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return (value >> 1) % n_features, (1.0 if value & 1 else -1.0)


#: the most grams kept per table of :data:`_CODES` (then that table starts over)
_CODES_MAX = 1 << 18
#: (n_features, gram kind) -> gram key -> ``sign * (index + 1)``: :func:`_slot` of the gram's
#: text in one number, looked up with a plain dict by a key that needs no string building
#: (the raw substring of a char n-gram, a word, a tuple of words): the hot path of the
#: discrete view, hundreds of grams per observation
_CODES: dict[tuple[int, str], dict[Any, float]] = {}


def _gram_codes(kind: str, counts: Counter[Any], n_features: int) -> tuple[list[float], Any]:
    """The codes of ``counts``' keys (grams of ``kind``: ``"c3"``, ``"w1"``, ``"w2"``, ...)
    and their counts, in the same order."""
    table = _CODES.setdefault((n_features, kind), {})
    if len(table) >= _CODES_MAX:
        table.clear()
    prefix = "c:" if kind[0] == "c" else f"{kind}:"

    def miss(key: Any) -> float:
        index, sign = _slot(prefix + (" ".join(key) if isinstance(key, tuple) else key), n_features)
        code = table[key] = sign * (index + 1)
        return code

    get = table.get
    return [get(key) or miss(key) for key in counts], counts.values()


def hashed_ngrams(
    text: str,
    n_features: int = 256,
    *,
    word_ngrams: Sequence[int] = (1, 2),
    char_ngrams: Sequence[int] = (3,),
    raw_numbers: bool = False,
    damp: bool = True,
) -> np.ndarray:
    """Signed feature hashing of word and character n-grams, l2-normalised.

    Numbers become their shape (``#3``: three digits) in word n-grams, so they generalise
    across values; ``raw_numbers`` also counts each number as itself (MathRoute's features,
    where the values matter). ``damp`` takes ``sign * log1p(|count|)`` so a long, repeated
    part of a prompt does not drown the short part that changes between states.

    Each distinct gram ``g`` (``"w{n}:"`` + the n word shapes joined by a space, ``"c:"`` +
    n characters of the whitespace-collapsed text) adds ``sign(g) * count(g)`` at
    ``index(g)`` (BLAKE2b of ``g``: :func:`_slot`); the sums are exact, so counting each kind
    of gram apart gives the same vector as counting them together.
    """
    vec = np.zeros(n_features, dtype=np.float32)
    if not text:
        return vec
    lower = text.lower()
    words = _TOKEN_RE.findall(lower)
    shapes = [f"#{len(w)}" if w[0].isdigit() else w for w in words]
    groups: list[tuple[str, Counter[Any]]] = []
    for n in word_ngrams:
        if n == 1:
            grams: Counter[Any] = Counter(shapes)
        elif n == 2:
            grams = Counter(zip(shapes, shapes[1:], strict=False))
        else:
            grams = Counter(tuple(shapes[i : i + n]) for i in range(len(shapes) - n + 1))
        groups.append((f"w{n}", grams))
    if raw_numbers:
        groups.append(("w1", Counter(w for w, s in zip(words, shapes, strict=True) if w != s)))
    flat = " ".join(lower.split())
    for n in char_ngrams:
        groups.append((f"c{n}", Counter([flat[i : i + n] for i in range(len(flat) - n + 1)])))
    codes: list[float] = []
    counts: list[int] = []
    for kind, grams in groups:
        if grams:
            more, how_many = _gram_codes(kind, grams, n_features)
            codes += more
            counts += how_many
    if codes:
        code = np.array(codes, dtype=np.float64)
        weights = np.sign(code) * np.array(counts, dtype=np.float64)
        index = np.abs(code).astype(np.int64) - 1
        vec = np.bincount(index, weights=weights, minlength=n_features).astype(np.float32)
    if damp:
        vec = np.sign(vec) * np.log1p(np.abs(vec))
    norm = float(np.linalg.norm(vec))
    return (vec / norm if norm > 0 else vec).astype(np.float32)


class ObservationFeatures(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """The text observation as a fixed-size float32 vector (a ``Box``), for MLP policies.

    Layout (``self.slices`` names each block's place):

    1. ``ngrams``: :func:`hashed_ngrams` of the observation's messages other than the system
       message (the instructions are the same in every state), ``n_features`` values
       (``raw_numbers``: numbers also count as themselves, not only as their shape);
    2. ``turn``: ``turn / max_turns`` (``max_turns``: the env's unless given, e.g. the
       training horizon of a policy played at another one);
    3. ``mask``: the action mask (1.0 available), one value per discrete choice;
    4. ``env``: the env's ``observation_features()`` (its own numbers; may be empty).

    Values are clipped to ``[-FEATURE_BOUND, FEATURE_BOUND]``. Nothing privileged is read:
    only the observation, ``info`` and the env's public hooks.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        n_features: int = 256,
        word_ngrams: Sequence[int] = (1, 2),
        char_ngrams: Sequence[int] = (3,),
        raw_numbers: bool = False,
        max_turns: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            n_features=n_features,
            word_ngrams=tuple(word_ngrams),
            char_ngrams=tuple(char_ngrams),
            raw_numbers=raw_numbers,
            max_turns=max_turns,
            cache_size=cache_size,
        )
        gym.ObservationWrapper.__init__(self, env)
        if n_features < 1:
            raise ConfigError(f"n_features must be >= 1, got {n_features}")
        if any(n < 1 for n in (*word_ngrams, *char_ngrams)):
            raise ConfigError("n-gram lengths must be >= 1")
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        ):
            raise ConfigError(f"max_turns must be a positive int or None, got {max_turns!r}")
        base = orch_base(env)
        self.n_choices, n_env = _probe(base)
        self.n_features = n_features
        self.word_ngrams, self.char_ngrams = tuple(word_ngrams), tuple(char_ngrams)
        self.raw_numbers = bool(raw_numbers)
        self.max_turns = max(int(base.max_turns if max_turns is None else max_turns), 1)
        sizes = {"ngrams": n_features, "turn": 1, "mask": self.n_choices, "env": n_env}
        #: where each block sits in the vector (name -> slice)
        self.slices: dict[str, slice] = {}
        start = 0
        for name, size in sizes.items():
            self.slices[name] = slice(start, start + size)
            start += size
        self.observation_space = spaces.Box(
            -FEATURE_BOUND, FEATURE_BOUND, shape=(start,), dtype=np.float32
        )
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._info: dict[str, Any] = {}
        self._done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._info, self._done = info, False
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._info, self._done = info, bool(terminated or truncated)
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: Any) -> np.ndarray:
        """Features of the current state (see the class docstring for the layout)."""
        info = self._info
        base = orch_base(self.env)
        messages = info.get("messages")
        if messages:
            text = "\n\n".join(m["content"] for m in messages if m.get("role") != "system")
        else:
            text = str(observation)
        mask = info.get("action_mask")
        if mask is None:  # not under ChoiceActions: read the env's choices directly
            if self._done:
                mask = np.ones(self.n_choices, dtype=bool)
            else:
                mask = [c is not None for c in current_choices(base, self.n_choices)]
        extra = np.asarray(base.observation_features(), dtype=np.float32).reshape(-1)
        size = self.slices["env"].stop - self.slices["env"].start
        if extra.size != size:
            raise OrchEnvError(
                f"{type(base).__name__}.observation_features() returned {extra.size} values "
                f"here and {size} before; it must have a fixed size"
            )
        turn = float(info.get("turn", base.turn)) / self.max_turns
        vec = np.concatenate(
            [
                self._ngrams(text),
                np.array([turn], dtype=np.float32),
                np.asarray(mask, dtype=np.float32),
                extra
                if np.isfinite(extra).all()
                else np.nan_to_num(extra, nan=0.0, posinf=FEATURE_BOUND, neginf=-FEATURE_BOUND),
            ]
        )
        return np.clip(vec, -FEATURE_BOUND, FEATURE_BOUND).astype(np.float32)

    def action_masks(self) -> np.ndarray:
        """Which discrete choices are available now (bool, one per choice): the
        :class:`ChoiceActions` mask below when there is one, else the env's own choices (all
        True between episodes). Defined here so ``env.action_masks()`` works on the view
        itself, as sb3-contrib's ``MaskablePPO`` and the README call it (Gymnasium >= 1.0
        wrappers do not forward attributes)."""
        with contextlib.suppress(AttributeError):
            return np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=bool)
        if self._done:
            return np.ones(self.n_choices, dtype=bool)
        choices = current_choices(orch_base(self.env), self.n_choices)
        return np.array([c is not None for c in choices], dtype=bool)

    def features_of(self, observation: Any, info: dict[str, Any], done: bool = False) -> np.ndarray:
        """The vector ``step``/``reset`` would return for a state reached outside this wrapper
        (a controller playing the text env itself: ``MaskedPolicyController``)."""
        self._info, self._done = info, done
        return self.observation(observation)

    def _ngrams(self, text: str) -> np.ndarray:
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        vec = hashed_ngrams(
            text,
            self.n_features,
            word_ngrams=self.word_ngrams,
            char_ngrams=self.char_ngrams,
            raw_numbers=self.raw_numbers,
        )
        self._cache[text] = vec
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vec


class MaskedPolicyController:
    """A policy trained on :func:`make_discrete_env`'s view, played as an ordinary controller
    on the text env (the eval harness, ``orchenv run``): ``bind`` puts the same feature view
    (``feature_kwargs`` as trained) over the bound env, ``act`` sends the text of the policy's
    greedy choice among the available ones. ``model`` is anything with sb3's
    ``predict(obs, deterministic=True)``; a ``MaskablePPO``'s ``action_masks`` are passed, and
    a masked pick by an unmasked model falls back to the first available choice."""

    privileged = False

    def __init__(self, model: Any, **feature_kwargs: Any) -> None:
        self.model = model
        self.feature_kwargs = feature_kwargs
        self._base: OrchestrationEnv | None = None
        self._features: ObservationFeatures | None = None
        self._masked = "action_masks" in inspect.signature(model.predict).parameters

    def reset(self, seed: int | None = None) -> None:
        """The greedy policy is deterministic: nothing to reseed."""

    def bind(self, env: gym.Env) -> None:
        base = orch_base(env)
        if base is not self._base:
            features = ObservationFeatures(base, **self.feature_kwargs)
            expected = getattr(getattr(self.model, "observation_space", None), "shape", None)
            if expected is not None and tuple(expected) != features.observation_space.shape:
                raise ConfigError(
                    f"the policy reads {tuple(expected)}-shaped observations but this view of "
                    f"{type(base).__name__} ({self.feature_kwargs or 'defaults'}) gives "
                    f"{features.observation_space.shape}: it was trained on other features "
                    "(another n_features, or an older view; retrain it on this one)"
                )
            self._base, self._features = base, features

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._base is None or self._features is None:
            raise EnvStateError("MaskedPolicyController.act before bind(env)")
        choices = current_choices(self._base, self._features.n_choices)
        mask = np.array([c is not None for c in choices], dtype=bool)
        vector = self._features.features_of(obs, info)
        kwargs = {"action_masks": mask} if self._masked else {}
        index = int(np.asarray(self.model.predict(vector, deterministic=True, **kwargs)[0]))
        text = choices[index] if 0 <= index < len(choices) else None
        if text is None:
            text = next(c for c in choices if c is not None)
        return text


class EpisodeStatistics(gym.wrappers.RecordEpisodeStatistics):  # type: ignore[type-arg]
    """Gymnasium's ``RecordEpisodeStatistics`` that keeps ``action_masks()`` reachable on the
    outermost wrapper (the mask of the discrete view below it)."""

    def action_masks(self) -> np.ndarray:
        """The mask of the wrapped discrete view (see :meth:`ChoiceActions.action_masks`)."""
        return np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=bool)


def make_discrete_env(
    env_id: str,
    *,
    n_features: int = 256,
    word_ngrams: Sequence[int] = (1, 2),
    char_ngrams: Sequence[int] = (3,),
    raw_numbers: bool = False,
    record_episode_statistics: bool = False,
    **env_kwargs: Any,
) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` with :class:`ChoiceActions` then
    :class:`ObservationFeatures` (optionally :class:`EpisodeStatistics` on top).

    ``env.action_masks()`` works on the returned env itself (every wrapper of the view
    defines it), and ``env.get_wrapper_attr("action_masks")`` too, as sb3's vector envs and
    sb3-contrib's ``MaskablePPO`` look it up. ``env_id`` may be Gymnasium's
    ``"module:ENV_ID"`` form (the module is imported first, registering the id).
    """
    env: gym.Env = ObservationFeatures(
        ChoiceActions(gym.make(env_id, **env_kwargs)),
        n_features=n_features,
        word_ngrams=word_ngrams,
        char_ngrams=char_ngrams,
        raw_numbers=raw_numbers,
    )
    if record_episode_statistics:
        env = EpisodeStatistics(env)
    return env


# -- policies saved by a reproduction, played by name ---------------------------------------------
#: the longest model path a saved-policy controller accepts (a path, not a payload)
MAX_POLICY_PATH_CHARS = 4096


def resolve_policy_path(model: object, seed: int, *, name: str, made_by: str = "") -> Path:
    """The policy file for run ``seed``: ``model`` with ``{seed}`` replaced (nothing else is
    formatted), which must be an existing file. ``name`` (the controller's) and ``made_by``
    (what writes such files) go into the ``ConfigError`` raised otherwise."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{name} needs model=PATH (a saved .zip), got {model!r}")
    if len(model) > MAX_POLICY_PATH_CHARS or "\x00" in model:
        raise ConfigError(f"{name}: the model path is not a usable path")
    path = Path(model.replace("{seed}", str(seed))).expanduser()
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{name}: cannot read {str(path)!r}: {exc}") from exc
    if not found:
        where = f"; {made_by}" if made_by else ""
        raise ConfigError(f"{name}: no saved policy at {str(path)!r} (run seed {seed}){where}")
    return path


class SavedPolicy:
    """A policy saved by a reproduction, played greedily as an ordinary controller.

    The one class behind the registered ``*-ppo-policy`` controllers: ``model`` is the path
    of the saved ``.zip``, where ``{seed}`` is replaced by the run seed (the harness passes
    ``--seeds``), so ``--seeds 0 1 2`` plays each run seed's own policy, as the reproduction
    pages do. A subclass names itself and its policy's kind and view in class attributes:

    - ``name``: the registered controller name (for error messages);
    - ``made_by``: what trains and saves such files (said when the file is missing);
    - ``algorithm``: ``"module:Class"`` of the saved policy (``sb3_contrib:MaskablePPO``,
      ``stable_baselines3:PPO``), loaded on the CPU;
    - ``feature_kwargs()``: the :class:`ObservationFeatures` options it was trained with;
      or ``player(policy)`` for a policy trained on another view.

    A missing, unreadable or foreign file, a hostile path or a non-integer seed is a
    ``ConfigError`` that names the controller and the file.

    Args:
        model: path of the policy's ``.zip``; ``{seed}`` is replaced by the run seed.
        seed: the run seed (set by the harness from ``--seeds``); it only picks the file.
    """

    privileged = False
    name: ClassVar[str] = "saved-policy"
    made_by: ClassVar[str] = ""
    algorithm: ClassVar[str] = "sb3_contrib:MaskablePPO"

    def __init__(self, model: str = "", seed: int = 0) -> None:
        try:
            if isinstance(seed, bool):
                raise TypeError
            run_seed = operator.index(seed)
        except TypeError:
            raise ConfigError(f"{self.name}: seed must be an integer, got {seed!r}") from None
        path = resolve_policy_path(model, run_seed, name=self.name, made_by=self.made_by)
        module, _, attr = self.algorithm.partition(":")
        loader = getattr(import_module(module), attr)
        try:
            policy = loader.load(str(path), device="cpu")
        except Exception as exc:  # a corrupt or foreign zip: say which file, do not crash
            raise ConfigError(
                f"{self.name}: {str(path)!r} is not a saved {attr} policy: {exc}"
            ) from exc
        self.model_path = str(path)
        self.policy = policy
        self._player = self.player(policy)

    def feature_kwargs(self) -> dict[str, Any]:
        """The :class:`ObservationFeatures` options the saved policy was trained with."""
        return {}

    def player(self, policy: Any) -> Any:
        """The controller that plays ``policy`` (default: :class:`MaskedPolicyController` on
        :func:`make_discrete_env`'s view with ``feature_kwargs()``)."""
        return MaskedPolicyController(policy, **self.feature_kwargs())

    def reset(self, seed: int | None = None) -> None:
        """The greedy policy is deterministic: nothing to reseed."""
        self._player.reset(seed)

    def bind(self, env: gym.Env) -> None:
        self._player.bind(env)

    def act(self, obs: Any, info: dict[str, Any]) -> str:
        return str(self._player.act(obs, info))
