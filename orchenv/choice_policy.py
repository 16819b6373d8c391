"""Choice mode: an LLM policy that picks among an env's discrete choices by log-probability.

An env with ``action_choices()`` (``orchenv.core``) lists the canonical controller text of
every available choice. In choice mode a language model does not write its action: each
available choice's text, as the assistant's whole reply (text then end-of-turn token), is
scored by its summed log-probability given the chat prompt, the scores are normalised
(``softmax(score / temperature)`` over the available choices) and the action is sampled
from that distribution (or the arg-max at temperature 0). The policy therefore always acts
validly. It departs from the papers' free-text controllers (seed 000 samples the action
text token by token); ``docs/grpo.md`` says how.

Backends provide the scores (``HFBackend.score_choices``: one forward pass over the
choices with the prompt's KV cache shared; ``OpenAICompatBackend.score_choices``: prompt
log-probabilities of a completions server, vLLM's ``echo``). This module holds what both
controllers and trainers share: the scores' container and the sampling rule. Written by
hand: no library offers a choice-scoring policy over an arbitrary backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchenv.error import BackendError, ConfigError

__all__ = [
    "ACTION_SPACES",
    "CHOICE_SCORES",
    "ChoiceScores",
    "check_choice_score",
    "choice_distribution",
    "normalised_scores",
    "pick_choice",
]

#: the controller / trainer action spaces: free text, or the env's discrete choices
ACTION_SPACES = ("text", "choices")
#: how a choice's score is made from its tokens' log-probabilities: their sum, or their mean
#: (length-normalised: a long choice is not less likely a priori)
CHOICE_SCORES = ("sum", "mean")


@dataclass(frozen=True)
class ChoiceScores:
    """Summed log-probabilities of each scored choice (same order as the choices given)."""

    logprobs: list[float]
    prompt_tokens: int  # the prompt's tokens (counted once: the choices share it)
    choice_tokens: int  # all choices' tokens together
    cost_usd: float = 0.0
    #: each choice's token count (same order; empty where the backend does not say)
    token_counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        bad = [v for v in self.logprobs if not math.isfinite(v) and v != -math.inf]
        if bad:
            raise BackendError(f"choice log-probabilities must be finite or -inf, got {bad[0]!r}")
        if self.token_counts and len(self.token_counts) != len(self.logprobs):
            raise BackendError(
                f"{len(self.token_counts)} token counts for {len(self.logprobs)} choices"
            )


def check_choice_score(how: str) -> str:
    """``how`` if it is one of :data:`CHOICE_SCORES`, else a ``ConfigError``."""
    if how not in CHOICE_SCORES:
        raise ConfigError(f"choice_score must be one of {CHOICE_SCORES}, got {how!r}")
    return how


def normalised_scores(logprobs: Sequence[float], counts: Sequence[int], how: str) -> list[float]:
    """Each choice's score from its summed log-probability: ``"sum"`` keeps it, ``"mean"``
    divides it by the choice's token count (at least 1)."""
    if check_choice_score(how) == "sum":
        return [float(v) for v in logprobs]
    if len(counts) != len(logprobs):
        raise BackendError(
            "choice_score='mean' needs each choice's token count, and the backend gave "
            f"{len(counts)} for {len(logprobs)} choices"
        )
    return [float(v) / max(int(n), 1) for v, n in zip(logprobs, counts, strict=True)]


def choice_distribution(logprobs: Sequence[float], temperature: float = 1.0) -> np.ndarray:
    """``softmax(logprobs / temperature)`` (float64, sums to 1); temperature 0: one-hot arg-max
    (the first of ties). Choices scored ``-inf`` get probability 0; if every choice is
    ``-inf`` the distribution is uniform (the model gave no preference it could express)."""
    if not temperature >= 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
    values = np.asarray(list(logprobs), dtype=np.float64)
    if values.size == 0:
        raise ConfigError("no choices to pick from")
    if np.isnan(values).any():
        raise BackendError("a choice log-probability is NaN")
    if np.isneginf(values).all():
        return np.full(values.size, 1.0 / values.size)
    if temperature == 0:
        out = np.zeros(values.size)
        out[int(np.argmax(values))] = 1.0
        return out
    z = values / temperature
    z = z - z[np.isfinite(z)].max()
    p = np.exp(z)
    return p / p.sum()


def pick_choice(
    logprobs: Sequence[float], temperature: float, rng: np.random.Generator
) -> tuple[int, float]:
    """Index sampled from :func:`choice_distribution` and its log-probability under it."""
    p = choice_distribution(logprobs, temperature)
    index = int(np.argmax(p)) if temperature == 0 else int(rng.choice(p.size, p=p))
    return index, float(np.log(p[index])) if p[index] > 0 else -math.inf
