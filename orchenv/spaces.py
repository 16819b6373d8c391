"""``AnyText``: a Gymnasium ``Text`` space that accepts any Python string.

Gymnasium's ``Text`` space restricts the character set to alphanumerics by
default, which rejects real controller prompts and LLM outputs (punctuation,
LaTeX, unicode). ``AnyText`` keeps ``Text``'s interface (so ``check_env`` and
wrappers recognise it) but ``contains`` accepts every ``str`` whose length is
within bounds, and ``sample`` draws from a printable alphabet.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class AnyText(spaces.Text):
    """Any ``str`` of length ``min_length..max_length`` (default up to 1,000,000)."""

    def __init__(
        self,
        max_length: int = 1_000_000,
        *,
        min_length: int = 0,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(
            max_length=max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed
        )

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short random printable string (samples are for fuzzing, not meaningful text)."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, min(self.max_length, 64) + 1))
        chars = self.np_random.choice(len(_SAMPLE_CHARSET), size=length)
        return "".join(_SAMPLE_CHARSET[i] for i in chars)

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, AnyText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


class TextObservation(str):
    """A ``str`` that also carries the ``dtype`` of ``AnyText``.

    PettingZoo's ``api_test`` checks ``observation_space.dtype == observation.dtype``,
    which a plain ``str`` cannot satisfy (it has no ``dtype``). The PettingZoo
    role views return their observations as this subclass; everywhere else it
    is an ordinary string.
    """

    __slots__ = ()
    dtype = np.dtype("<U")
