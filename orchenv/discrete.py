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
import itertools
import operator
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from importlib import import_module
from itertools import accumulate, chain, compress, repeat
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
#: token -> its word shape (``#3`` for a three-character number, else the token itself)
_SHAPES: dict[str, str] = {}
#: the most tokens kept in :data:`_SHAPES` (then it starts over)
_SHAPES_MAX = 1 << 16
#: the separator of the paragraphs whose counts are kept apart (see :func:`hashed_ngrams`)
_PARAGRAPH = "\n\n"
#: a text with more paragraphs than this is counted whole (no per-paragraph work)
_MAX_PARAGRAPHS = 64
#: the longest paragraph whose counts are kept (longer ones are counted on every call)
_PARAGRAPH_CACHE_CHARS = 4096
#: the most paragraphs kept in :data:`_PARAGRAPHS` (then it starts over; their bytes are
#: bounded too, by :data:`_PARAGRAPH_BUDGET`)
_PARAGRAPH_CACHE_SIZE = 4096
#: (options, lower-cased paragraph) -> its :class:`_Counted`
_PARAGRAPHS: dict[tuple[Any, ...], _Counted] = {}
#: the most bytes (about) kept in :data:`_PARAGRAPHS` (then it starts over), whatever
#: ``n_features`` a caller asks for
_PARAGRAPH_BUDGET = 64 << 20
#: about how many bytes :data:`_PARAGRAPHS` holds now
_PARAGRAPH_BYTES = 0


def _gram_codes(kind: str, keys: list[Any], n_features: int) -> np.ndarray:
    """The code (``sign * (index + 1)``, never 0) of each of ``keys`` (grams of ``kind``:
    ``"c3"``, ``"w1"``, ``"w2"``, ...; one entry per occurrence), in the same order
    (float64)."""
    table = _CODES.get((n_features, kind))
    if table is None:
        table = _CODES.setdefault((n_features, kind), {})
    codes = np.fromiter(map(table.get, keys, repeat(0.0)), dtype=np.float64, count=len(keys))
    if not codes.all():  # grams not seen yet in this process (code 0.0): hash them once
        for i in (codes == 0.0).nonzero()[0].tolist():
            codes[i] = _code(table, kind, keys[i], n_features)
    return codes


def _code(table: dict[Any, float], kind: str, key: Any, n_features: int) -> float:
    """The code of gram ``key`` of ``kind``, from ``table`` or hashed (then kept)."""
    code = table.get(key)
    if code is None:
        if len(table) >= _CODES_MAX:
            table.clear()
        prefix = "c:" if kind[0] == "c" else f"{kind}:"
        text = " ".join(key) if isinstance(key, tuple) else key
        index, sign = _slot(prefix + text, n_features)
        code = table[key] = sign * (index + 1)
    return code


def _shapes(words: list[str]) -> list[str]:
    """Each token's word shape: numbers (a first character ``str.isdigit``) become ``#`` and
    their length, other tokens stay themselves."""
    shapes: list[Any] = list(map(_SHAPES.get, words))
    if None in shapes:
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        for i, shape in enumerate(shapes):
            if shape is None:
                w = words[i]
                shapes[i] = _SHAPES[w] = f"#{len(w)}" if w[0].isdigit() else w
    return shapes


def _char_grams(flat: str, n: int) -> list[str]:
    """The ``n``-character substrings of ``flat``, in order."""
    if n == 1:
        return list(flat)
    return list(map("".join, zip(*(flat[k:] for k in range(n)), strict=False)))


class _Packed:
    """The codes of one kind of short char gram under packed keys: sorted keys and their
    codes (numpy, replaced together in one tuple) and the grams met since the arrays were
    last rebuilt (a dict, merged into the arrays in batches)."""

    __slots__ = ("arrays", "pending")

    def __init__(self) -> None:
        self.arrays = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
        self.pending: dict[int, float] = {}

    def merge(self) -> None:
        """Move the pending grams into the sorted arrays (or start over past the bound)."""
        with _MERGE_LOCK:
            items = list(self.pending.items())
            keys, codes = self.arrays
            if keys.size + len(items) > _CODES_MAX:
                self.arrays = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
                self.pending.clear()
                return
            if not items:
                return
            new_keys = np.fromiter((k for k, _ in items), dtype=np.int64, count=len(items))
            new_codes = np.fromiter((c for _, c in items), dtype=np.float64, count=len(items))
            keys = np.concatenate([keys, new_keys])
            codes = np.concatenate([codes, new_codes])
            order = keys.argsort(kind="stable")
            self.arrays = (keys[order], codes[order])
            for k, _ in items:
                self.pending.pop(k, None)


_MERGE_LOCK = threading.Lock()
#: (n_features, n) -> the :class:`_Packed` codes of char n-grams (n <= 3)
_PACKED: dict[tuple[int, int], _Packed] = {}


def _char_codes(
    flat: str, n: int, n_features: int, *, dedupe: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """The codes of ``flat``'s ``n``-character grams (``len(flat) >= n``), in order.

    For ``n <= 3`` each gram is its code points packed in one integer (21 bits each: every
    code point fits), computed with numpy and looked up in a sorted array
    (``searchsorted``): no substring is built and no Python runs per gram. A gram not seen
    yet is hashed from its text (:func:`_code`, same code) and kept.

    ``dedupe`` (long texts): the codes of the distinct grams and their counts (else one code
    per occurrence and ``None``), so a 10 MB observation needs no per-gram Python objects."""
    if n > 3:
        grams = _char_grams(flat, n)
        if dedupe:
            counted = Counter(grams)
            return _gram_codes(f"c{n}", list(counted), n_features), _counts(counted)
        return _gram_codes(f"c{n}", grams, n_features), None
    code_points = np.frombuffer(flat.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    points = code_points.astype(np.int64)
    if n == 1:
        keys = points
    elif n == 2:
        keys = (points[:-1] << 21) | points[1:]
    else:
        keys = (points[:-2] << 42) | (points[1:-1] << 21) | points[2:]
    where: np.ndarray | None = None  # the first place of each key (dedupe)
    counts: np.ndarray | None = None
    if dedupe:
        keys, where, counts = np.unique(keys, return_index=True, return_counts=True)
    packed = _PACKED.get((n_features, n))
    if packed is None:
        packed = _PACKED.setdefault((n_features, n), _Packed())
    known, known_codes = packed.arrays
    if known.size:
        pos = known.searchsorted(keys)
        pos[pos == known.size] = 0
        codes = known_codes[pos]
        found = known[pos] == keys
        if found.all():
            return codes, counts
        missing = (~found).nonzero()[0].tolist()
    else:
        codes = np.zeros(keys.size, dtype=np.float64)
        missing = list(range(keys.size))
    pending = packed.pending
    strings = _CODES.setdefault((n_features, f"c{n}"), {})
    for i in missing:
        key = int(keys[i])
        code = pending.get(key)
        if code is None:
            if len(pending) >= _CODES_MAX:
                pending.clear()
            at = i if where is None else int(where[i])
            code = pending[key] = _code(strings, f"c{n}", flat[at : at + n], n_features)
        codes[i] = code
    if len(pending) >= max(64, known.size >> 4):  # merged in batches: amortised
        packed.merge()
    return codes, counts


def _counts(counted: Counter[Any]) -> np.ndarray:
    """``counted``'s counts as float64, in its keys' order."""
    return np.fromiter(counted.values(), dtype=np.float64, count=len(counted))


class _Counted:
    """The gram counts of one paragraph: the raw (signed, undamped) vector, its word shapes
    and its whitespace-collapsed text (what grams across its borders are made of)."""

    __slots__ = ("flat", "shapes", "vector")

    def __init__(self, vector: np.ndarray, shapes: list[str], flat: str) -> None:
        self.vector, self.shapes, self.flat = vector, shapes, flat


def _bincount(
    codes: list[np.ndarray], n_features: int, counts: list[np.ndarray | None] | None = None
) -> np.ndarray:
    """The signed sum of the codes per index, each code ``counts`` times (once where the
    count is ``None``) (float64; exact: integer sums)."""
    if not codes:
        return np.zeros(n_features, dtype=np.float64)
    code = codes[0] if len(codes) == 1 else np.concatenate(codes)
    index = np.abs(code).astype(np.int64) - 1
    weights = np.sign(code)
    if counts is not None and any(c is not None for c in counts):
        times = [np.ones(len(k)) if c is None else c for k, c in zip(codes, counts, strict=True)]
        weights *= np.concatenate(times)
    return np.bincount(index, weights=weights, minlength=n_features)


#: a paragraph longer than this is counted by distinct gram (counts first, then codes)
_DEDUPE_CHARS = 20_000


def _count(lower: str, options: tuple[Any, ...]) -> _Counted:
    """The :class:`_Counted` of lower-cased text ``lower`` (no paragraph split)."""
    n_features, word_ngrams, char_ngrams, raw_numbers = options
    dedupe = len(lower) > _DEDUPE_CHARS
    words = _TOKEN_RE.findall(lower)
    shapes = _shapes(words) if words else []
    codes: list[np.ndarray] = []
    counts: list[np.ndarray | None] = []

    def add(kind: str, keys: Any) -> None:
        if dedupe:
            counted = Counter(keys)
            codes.append(_gram_codes(kind, list(counted), n_features))
            counts.append(_counts(counted))
        else:
            keys = keys if isinstance(keys, list) else list(keys)
            codes.append(_gram_codes(kind, keys, n_features))
            counts.append(None)

    for n in word_ngrams:
        if len(shapes) < n:
            continue
        if n == 1:
            add("w1", shapes)
        elif n == 2:
            add("w2", zip(shapes, shapes[1:], strict=False))
        else:
            add(f"w{n}", (tuple(shapes[i : i + n]) for i in range(len(shapes) - n + 1)))
    if raw_numbers and words:
        numbers = list(compress(words, map(operator.ne, words, shapes)))
        if numbers:
            add("w1", numbers)
    flat = " ".join(lower.split())
    for n in char_ngrams:
        if len(flat) >= n:
            char_codes, char_counts = _char_codes(flat, n, n_features, dedupe=dedupe)
            codes.append(char_codes)
            counts.append(char_counts)
    return _Counted(_bincount(codes, n_features, counts), shapes, flat)


def _paragraph(lower: str, options: tuple[Any, ...]) -> _Counted:
    """:func:`_count` of one paragraph, kept (bounded) when short: the prompt's problem, a
    draft or a search result recurs across the turns of an episode."""
    global _PARAGRAPH_BYTES
    if len(lower) > _PARAGRAPH_CACHE_CHARS:
        return _count(lower, options)
    key = (options, lower)
    hit = _PARAGRAPHS.get(key)
    if hit is None:
        hit = _count(lower, options)
        cost = hit.vector.nbytes + 16 * len(lower)  # the vector, the text, its shapes
        if len(_PARAGRAPHS) >= _PARAGRAPH_CACHE_SIZE or _PARAGRAPH_BYTES + cost > _PARAGRAPH_BUDGET:
            _PARAGRAPHS.clear()
            _PARAGRAPH_BYTES = 0
        if cost <= _PARAGRAPH_BUDGET:
            _PARAGRAPHS[key] = hit
            _PARAGRAPH_BYTES += cost
    return hit


def _across(pieces: list[_Counted], options: tuple[Any, ...]) -> list[float]:
    """The codes of the grams that span a paragraph border: the word n-grams (n > 1) and
    character n-grams of the whole text that lie in no single paragraph (a few per border,
    looked up one by one)."""
    n_features, word_ngrams, char_ngrams, _ = options
    codes: list[float] = []
    worded = [piece.shapes for piece in pieces if piece.shapes]
    longest = max(word_ngrams, default=1)
    if len(worded) > 1 and longest > 1 and min(map(len, worded)) >= longest - 1:
        # every gram across a border lies in the two paragraphs beside it
        for n in word_ngrams:
            if n > 1:
                table = _CODES.setdefault((n_features, f"w{n}"), {})
                for before, after in itertools.pairwise(worded):
                    joint = before[len(before) - n + 1 :] + after[: n - 1]
                    codes += [
                        _code(table, f"w{n}", tuple(joint[j : j + n]), n_features)
                        for j in range(n - 1)
                    ]
    elif len(worded) > 1 and longest > 1:
        shapes = list(chain.from_iterable(worded))
        borders = list(accumulate(len(s) for s in worded[:-1]))  # where a paragraph starts
        for n in word_ngrams:
            last = len(shapes) - n  # the last start of an n-gram
            if n > 1 and last >= 0:
                starts = {
                    j for b in borders for j in range(max(b - n + 1, 0), min(b - 1, last) + 1)
                }
                table = _CODES.setdefault((n_features, f"w{n}"), {})
                codes += [
                    _code(table, f"w{n}", tuple(shapes[j : j + n]), n_features) for j in starts
                ]
    flats = [piece.flat for piece in pieces if piece.flat]
    longest = max(char_ngrams, default=1)
    if len(flats) > 1 and char_ngrams and min(map(len, flats)) >= longest - 1:
        for n in char_ngrams:
            table = _CODES.setdefault((n_features, f"c{n}"), {})
            for left, right in itertools.pairwise(flats):
                seam = left[len(left) - n + 1 :] + " " + right[: n - 1]
                codes += [_code(table, f"c{n}", seam[j : j + n], n_features) for j in range(n)]
    elif char_ngrams and len(flats) > 1:
        flat = " ".join(flats)
        spaces = list(accumulate(len(f) + 1 for f in flats[:-1]))  # one past each joint
        for n in char_ngrams:
            last = len(flat) - n
            starts = {j for s in spaces for j in range(max(s - 1 - n + 1, 0), min(s - 1, last) + 1)}
            table = _CODES.setdefault((n_features, f"c{n}"), {})
            codes += [_code(table, f"c{n}", flat[j : j + n], n_features) for j in starts]
    return codes


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
    ``index(g)`` (BLAKE2b of ``g``: :func:`_slot`); the sums are exact, so counting parts of
    the text apart gives the same vector as counting it whole. That is how it is computed:
    each paragraph (``"\\n\\n"`` apart; no token and no collapsed-text gram other than those
    counted by :func:`_across` spans one) is counted once per process (kept while short, in
    a bounded table) and the grams across paragraph borders are added, so the turns of an
    episode, which repeat the problem, hash only what is new. Each gram is hashed once per
    process; later it is a dict lookup (words) or a ``searchsorted`` in a sorted table of
    packed code points (1-3 character grams); a paragraph over 20,000 characters is counted
    by distinct gram. ``tests/test_discrete_golden.py`` holds the recorded features this
    must reproduce bit for bit.
    """
    if not text:
        return np.zeros(n_features, dtype=np.float32)
    lower = text.lower()
    options = (int(n_features), tuple(word_ngrams), tuple(char_ngrams), bool(raw_numbers))
    parts = lower.split(_PARAGRAPH) if _PARAGRAPH in lower else [lower]
    if len(parts) > _MAX_PARAGRAPHS:
        parts = [lower]
    pieces = [_paragraph(part, options) for part in parts]
    if len(pieces) == 1:
        raw = pieces[0].vector
    else:
        raw = pieces[0].vector + pieces[1].vector
        for piece in pieces[2:]:
            raw += piece.vector
        for code in _across(pieces, options):  # a few per border: added one by one
            raw[int(abs(code)) - 1] += 1.0 if code > 0 else -1.0
    vec = raw.astype(np.float32)
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
        slices = self.slices
        vec = np.empty(slices["env"].stop, dtype=np.float32)
        vec[slices["ngrams"]] = self._ngrams(text)
        vec[slices["turn"]] = turn
        vec[slices["mask"]] = mask
        if not np.isfinite(extra).all():
            extra = np.nan_to_num(extra, nan=0.0, posinf=FEATURE_BOUND, neginf=-FEATURE_BOUND)
        vec[slices["env"]] = extra
        return np.clip(vec, -FEATURE_BOUND, FEATURE_BOUND, out=vec)

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
        if len(text) <= _PARAGRAPH_CACHE_CHARS * 4:  # a 10 MB observation is not kept
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


#: the largest saved-policy archive read (members summed, uncompressed): a zip bomb stops here
MAX_POLICY_BYTES = 512 * 2**20
#: the activation functions a saved policy's ``policy_kwargs`` may name (by class name)
_ACTIVATIONS = ("Tanh", "ReLU", "ELU", "LeakyReLU", "GELU", "SiLU", "Sigmoid")


def safe_sb3_objects(path: Path, loader: Any) -> dict[str, Any]:
    """``custom_objects`` for Stable-Baselines3's ``load`` that replace every cloudpickled
    entry of the archive's ``data``, so loading a saved policy never unpickles its bytes.

    SB3 stores the policy class, the spaces, schedules and buffers as cloudpickle (base64)
    in ``data`` and runs ``cloudpickle.loads`` on each unless ``custom_objects`` names it;
    the weights (``*.pth``) it reads with ``torch.load(weights_only=True)``. This reads the
    JSON itself and rebuilds what inference needs from its plain fields: ``MlpPolicy`` of
    ``loader``, the observation ``Box`` (shape and float dtype) and the ``Discrete`` action
    space, constant schedules; everything else (last observations, episode buffers, the
    rollout buffer class) is dropped. ``policy_kwargs`` may hold only ``net_arch``,
    ``ortho_init`` and an ``activation_fn`` from a short list of ``torch.nn`` classes.
    Anything else, an archive over ``MAX_POLICY_BYTES`` or an unreadable ``data``, is a
    ``ConfigError``. Written by hand: SB3 has no safe-load mode.
    """
    import json
    import zipfile

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{str(path)!r}: {why}; a saved policy is loaded without running code")

    try:
        with zipfile.ZipFile(path) as archive:
            if sum(i.file_size for i in archive.infolist()) > MAX_POLICY_BYTES:
                raise refuse(f"the archive unpacks to more than {MAX_POLICY_BYTES} bytes")
            data = json.loads(archive.read("data").decode("utf-8"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise refuse(f"no readable SB3 'data' ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise refuse("'data' is not an object")
    custom: dict[str, Any] = {}
    for key, item in data.items():
        serialized = isinstance(item, dict) and ":serialized:" in item
        if key == "policy_class":
            custom[key] = loader.policy_aliases["MlpPolicy"]
        elif key == "observation_space":
            custom[key] = _plain_box(item, refuse)
        elif key == "action_space":
            custom[key] = _plain_discrete(item, refuse)
        elif key == "policy_kwargs":
            custom[key] = _plain_policy_kwargs(item, refuse)
        elif key == "lr_schedule":
            custom[key] = _constant_zero
        elif key == "clip_range":
            custom[key] = 0.2  # a training setting; inference never reads it
        elif serialized:
            custom[key] = None  # buffers, last observations, classes: not needed to act
    if "observation_space" not in custom or "action_space" not in custom:
        raise refuse("'data' names no observation or action space")
    return custom


def _constant_zero(_progress: float) -> float:
    return 0.0


def _plain_box(item: Any, refuse: Any) -> spaces.Box:
    shape = item.get("_shape") if isinstance(item, dict) else None
    dtype = item.get("dtype") if isinstance(item, dict) else None
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= 4
        or not all(isinstance(d, int) and 0 < d <= 2**20 for d in shape)
        or dtype not in ("float32", "float64")
    ):
        raise refuse("its observation space is not a plain float Box")
    return spaces.Box(-np.inf, np.inf, shape=tuple(shape), dtype=np.dtype(dtype))


def _plain_discrete(item: Any, refuse: Any) -> spaces.Discrete:
    if not isinstance(item, dict) or not str(item.get(":type:", "")).endswith("Discrete'>"):
        raise refuse("its action space is not Discrete")
    try:
        n, start = int(str(item.get("n"))), int(str(item.get("start", "0")))
    except ValueError:
        raise refuse("its action space's size is not an integer") from None
    if not 1 <= n <= 2**20 or abs(start) > 2**20:
        raise refuse(f"its action space's size {n} is out of range")
    return spaces.Discrete(n, start=start)


def _plain_policy_kwargs(item: Any, refuse: Any) -> dict[str, Any]:
    import torch

    if item is None:
        return {}
    if not isinstance(item, dict):
        raise refuse("its policy_kwargs are not an object")
    out: dict[str, Any] = {}
    for key, value in item.items():
        if key in (":type:", ":serialized:"):
            continue
        plain = (key == "net_arch" and _plain_net_arch(value)) or (
            key == "ortho_init" and isinstance(value, bool)
        )
        if plain:
            out[key] = value
        elif key == "activation_fn" and isinstance(value, str):
            name = value.rsplit(".", 1)[-1].rstrip("'>")
            if name not in _ACTIVATIONS:
                raise refuse(f"its activation function {value[:80]!r} is not one of {_ACTIVATIONS}")
            out[key] = getattr(torch.nn, name)
        else:
            raise refuse(f"its policy_kwargs key {str(key)[:80]!r} cannot be read as plain data")
    return out


def _plain_net_arch(value: Any) -> bool:
    def sizes(v: Any) -> bool:
        return (
            isinstance(v, list)
            and len(v) <= 16
            and all(isinstance(d, int) and 0 < d <= 2**16 for d in v)
        )

    if isinstance(value, dict):
        return set(value) <= {"pi", "vf"} and all(sizes(v) for v in value.values())
    return sizes(value)


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
            policy = loader.load(
                str(path), device="cpu", custom_objects=safe_sb3_objects(path, loader)
            )
        except Exception as exc:  # a corrupt, foreign or unsafe zip: say which file, do not crash
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
