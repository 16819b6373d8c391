"""One store for "this call again": the n-th identical request gets the n-th recorded answer.

A request is identified by its replay key (task, agent, prompt hash or turn; see
``orchenv.backends.replay``). Identical requests are not the same call: forked branches of one
state, self-consistency samples and retries all repeat a request, and against a sampling model
each gets its own answer. The store therefore keeps a key's records by *occurrence* (0, 1, 2,
...) and hands out occurrences in the order a run asks for them, so a recording answers (and a
replay reproduces) every repeat with the answer that repeat got live, instead of collapsing all
of them onto the first.

Files written before occurrences were recorded (format 1: no ``occurrence`` field) mean "the
same answer for every occurrence": such a key answers every repeat with its first record, as
orchenv did before. Used by ``RecordingBackend`` and ``ReplayBackend``; the eval journal
(``orchenv.eval.journal``) counts occurrences the same way within an episode.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = ["OccurrenceStore"]


class OccurrenceStore:
    """Records by (key, occurrence), and the next occurrence of each key asked for in this run.

    Thread-safe. ``load`` adds a record read from a file; ``take`` claims the next occurrence
    of a key (returning its record when one is stored); ``put`` stores a new record for a
    claimed occurrence.
    """

    def __init__(self) -> None:
        self._records: dict[str, dict[int, dict[str, Any]]] = {}
        self._repeat_first: set[str] = set()  # format-1 keys: one answer for every occurrence
        self._next: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(by_n) for by_n in self._records.values())

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def load(self, key: str, record: Mapping[str, Any]) -> bool:
        """Add a record read from a file; False when its (key, occurrence) is already there
        (the first record wins). A record without ``occurrence`` is format 1."""
        occurrence = record.get("occurrence")
        with self._lock:
            by_n = self._records.setdefault(key, {})
            if occurrence is None:
                if by_n:
                    return False
                self._repeat_first.add(key)
                by_n[0] = dict(record)
                return True
            n = int(occurrence)
            if n in by_n:
                return False
            by_n[n] = dict(record)
            return True

    def take(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """Claim the next occurrence of ``key``: its number and its stored record (or None)."""
        with self._lock:
            n = self._next[key]
            self._next[key] = n + 1
            by_n = self._records.get(key)
            if not by_n:
                return n, None
            if key in self._repeat_first:
                return n, by_n[0]
            return n, by_n.get(n)

    def put(self, key: str, n: int, record: Mapping[str, Any]) -> bool:
        """Store the record of a claimed occurrence; False if one is already stored."""
        with self._lock:
            by_n = self._records.setdefault(key, {})
            if n in by_n or key in self._repeat_first:
                return False
            by_n[n] = dict(record)
            return True

    def occurrences(self, key: str) -> int:
        """How many answers are stored for ``key`` (format-1 keys: 1, repeated forever)."""
        return len(self._records.get(key, {}))

    def keys(self) -> list[str]:
        return list(self._records)
