"""MathRoute's own numbers for the core discrete view (``MathRouteEnv.observation_features``).

``orchenv.discrete.ObservationFeatures`` hashes the prompt's n-grams and adds the turn and
the action mask; these are the MathRoute-specific blocks it appends (issue 27 item 4: they
were part of the removed ``envs/mathroute/wrappers.py`` ``TextFeatures``). Written by hand:
they are statistics of orchenv's own procedural problems and drafts, which no library knows.

Layout (:data:`BLOCKS` names each block and its size; ``n`` is the number of agents):

1. ``problem_stats``: :func:`text_statistics` of the problem (:data:`STAT_NAMES`);
2. ``draft_stats``: the same for the draft under review, then :func:`answer_statistics` of its
   boxed answer (zeros at a route turn);
3. ``verify``: 1.0 at a verify turn;
4. ``draft_author``: one-hot of the draft's author (zeros at a route turn);
5. ``episode_calls``: this episode's calls per agent divided by :data:`CALLS_SCALE`.

Every value is computed from what the controller sees (the problem, the draft and its author,
the calls it made); nothing privileged is read. Values stay around [0, 1].
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from orchenv.grading import extract_boxed

__all__ = [
    "CALLS_SCALE",
    "STAT_NAMES",
    "answer_statistics",
    "blocks",
    "mathroute_features",
    "text_statistics",
]

#: the scale of the call counts: seed 000's horizon (Table 9), fixed so a policy trained at
#: three turns reads the same numbers in the turn ablation's longer or shorter episodes
CALLS_SCALE = 3.0
#: the longest text whose statistics are computed in full (a hostile 10 MB draft is cut)
MAX_STAT_CHARS = 100_000

_NUMBER_RE = re.compile(r"\d{1,64}(?:\.\d{1,64})?")
_OPERATOR_RE = re.compile(r"[+\-*/^=<>]|\\(?:cdot|times|div|pm|le|ge|leq|geq|neq)\b")
_LATEX_RE = re.compile(r"\\[A-Za-z]+")

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
#: names of :func:`answer_statistics`' outputs, in order
ANSWER_NAMES = ("has_boxed", "log_max_number", "negative", "fraction", "radical_or_pi")


def _log10p(number: str) -> float:
    """``log10(1 + x)`` of a decimal numeral, without overflow for a 64-digit one."""
    return math.log10(1.0 + float(number))


def _digit_count(text: str) -> int:
    """How many characters of ``text`` are ``str.isdigit`` (ASCII text: ten C-level counts)."""
    if text.isascii():
        return sum(map(text.count, "0123456789"))
    return sum(map(str.isdigit, text))


@lru_cache(maxsize=4096)
def text_statistics(text: str) -> np.ndarray:
    """Scaled counts that carry difficulty: length, digits, how many and how large the numbers
    are, operators and LaTeX commands. Each is a log1p count divided by a typical maximum, so
    values stay around [0, 1]. Only the first :data:`MAX_STAT_CHARS` characters are read
    (the length itself is counted in full)."""
    head = text[:MAX_STAT_CHARS]
    numbers = _NUMBER_RE.findall(head)
    log10 = math.log10
    logs = [log10(1.0 + float(x)) for x in numbers]  # _log10p, inlined (same floats)
    out = np.array(
        [
            math.log1p(len(text)) / 8.0,
            math.log1p(len(head.split())) / 6.0,
            math.log1p(_digit_count(head)) / 5.0,
            math.log1p(len(numbers)) / 4.0,
            math.log1p(len(set(numbers))) / 4.0,
            max(logs, default=0.0) / 6.0,
            (sum(logs) / len(logs) if logs else 0.0) / 4.0,
            math.log1p(len(_OPERATOR_RE.findall(head))) / 4.0,
            math.log1p(len(_LATEX_RE.findall(head))) / 4.0,
            math.log1p(head.count("\n")) / 4.0,
            float("." in "".join(numbers)),
            float("%" in head),
        ],
        dtype=np.float32,
    )
    out.flags.writeable = False  # cached: shared between calls
    return out


def answer_statistics(draft: str) -> np.ndarray:
    """What the draft's final ``\\boxed{}`` answer looks like (:data:`ANSWER_NAMES`: present,
    size, sign, fraction, radical or pi); zeros without one."""
    answer = extract_boxed(draft[-MAX_STAT_CHARS:])
    if answer is None:
        return np.zeros(len(ANSWER_NAMES), dtype=np.float32)
    numbers = _NUMBER_RE.findall(answer)
    return np.array(
        [
            1.0,
            max((_log10p(x) for x in numbers), default=0.0) / 6.0,
            float(answer.lstrip().startswith("-")),
            float("frac" in answer or "/" in answer),
            float("sqrt" in answer or "pi" in answer),
        ],
        dtype=np.float32,
    )


def blocks(n_agents: int) -> dict[str, int]:
    """The feature blocks of :func:`mathroute_features`, in order: name -> size."""
    return {
        "problem_stats": len(STAT_NAMES),
        "draft_stats": len(STAT_NAMES) + len(ANSWER_NAMES),
        "verify": 1,
        "draft_author": n_agents,
        "episode_calls": n_agents,
    }


def mathroute_features(
    problem: str,
    draft: str | None,
    author: str | None,
    agents: Sequence[str],
    calls: dict[str, int],
) -> np.ndarray:
    """The vector of :func:`blocks` for one state (see the module docstring)."""
    n = len(agents)
    if draft is None or author is None:
        draft_part = np.zeros(len(STAT_NAMES) + len(ANSWER_NAMES), dtype=np.float32)
    else:
        draft_part = np.concatenate([text_statistics(draft), answer_statistics(draft)])
    author_hot = np.zeros(n, dtype=np.float32)
    if author is not None and author in agents:
        author_hot[list(agents).index(author)] = 1.0
    episode = np.array([calls.get(a, 0) for a in agents], dtype=np.float32) / CALLS_SCALE
    verify = np.array([float(author is not None)], dtype=np.float32)
    return np.concatenate([text_statistics(problem), draft_part, verify, author_hot, episode])
