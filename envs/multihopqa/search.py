"""The Searcher's tool: BM25 over a task's paragraphs (``orchenv.search.BM25Index``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchenv.error import DataError
from orchenv.search import BM25Index
from orchenv.seeding import stable_digest
from orchenv.tasks import Task

#: a paragraph: its title and its sentences
Paragraph = tuple[str, Sequence[str]]


@dataclass(frozen=True)
class Hit:
    """One retrieved paragraph; ``rank`` is 0-based."""

    title: str
    sentences: tuple[str, ...]
    score: float
    rank: int

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


class ParagraphIndex:
    """BM25 (Lucene variant, English stopwords) over ``(title, sentences)`` paragraphs.

    The indexed text is the title twice followed by the sentences, so a query that
    names an entity finds that entity's own paragraph before paragraphs that merely
    mention it. Results are deterministic: ties break by paragraph order.
    """

    def __init__(self, paragraphs: Sequence[Paragraph]) -> None:
        self._paragraphs: list[tuple[str, tuple[str, ...]]] = []
        for i, item in enumerate(paragraphs):
            try:
                title, sentences = item
            except (TypeError, ValueError):
                raise DataError(
                    f"paragraph {i}: expected a (title, [sentence, ...]) pair, got {item!r:.80}"
                ) from None
            if isinstance(sentences, str):
                sentences = [sentences]
            self._paragraphs.append((str(title), tuple(str(s) for s in sentences)))
        self._index = BM25Index([f"{t}. {t}. " + " ".join(s) for t, s in self._paragraphs])

    def __len__(self) -> int:
        return len(self._paragraphs)

    @property
    def paragraphs(self) -> list[tuple[str, tuple[str, ...]]]:
        return list(self._paragraphs)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every paragraph for ``query`` (zeros when nothing matches)."""
        return np.asarray(self._index.scores(query), dtype=np.float64)

    def search(self, query: str, k: int = 2) -> list[Hit]:
        """The ``k`` best paragraphs with a positive score, best first; [] if none match."""
        return [
            Hit(*self._paragraphs[i], score, rank)
            for rank, (i, score) in enumerate(self._index.search(query, k))
        ]


class _IndexKey:
    """lru_cache key: task id + content digest; carries the paragraphs without hashing them."""

    __slots__ = ("key", "paragraphs")

    def __init__(self, key: tuple[str, str], paragraphs: Sequence[Paragraph]) -> None:
        self.key, self.paragraphs = key, paragraphs

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _IndexKey) and other.key == self.key


@functools.lru_cache(maxsize=512)
def _cached_index(key: _IndexKey) -> ParagraphIndex:
    return ParagraphIndex(key.paragraphs)


def paragraph_index(task: Task) -> ParagraphIndex:
    """The task's distractor-setting paragraphs as a ``ParagraphIndex``, built once and cached."""
    context = task.meta.get("context")
    if not isinstance(context, Sequence) or isinstance(context, str):
        raise DataError(
            f"task {task.id!r} has no meta['context'] (a list of [title, [sentence, ...]]); "
            "paragraph_index needs a multihop task"
        )
    content = json.dumps(context, ensure_ascii=False, default=str)
    digest = stable_digest(content, size=16).hex()
    return _cached_index(_IndexKey((task.id, digest), context))
