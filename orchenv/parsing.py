"""Controller-output parsing: text in, decision or error message out. Never raises.

Rules shared by every parser here (documented because controllers rely on them):

- Tags are matched case-insensitively and tolerate whitespace inside the
  brackets: ``<Model>``, ``< model >`` and ``</ MODEL >`` all work.
- Tag contents are stripped of surrounding whitespace.
- Reasoning blocks (``<think>...</think>`` and ``<thinking>...</thinking>``)
  are removed before decision tags are read, so tags a controller mentions
  while reasoning do not count. An unclosed reasoning block hides everything
  after it.
- When a decision tag occurs more than once, the LAST complete occurrence wins
  (the controller's final word). A tag opened but never closed does not count.
- Non-string input, empty strings and megabyte strings are handled; the
  scan is linear in the input length.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from difflib import get_close_matches
from functools import lru_cache

_REASONING_TAGS = ("think", "thinking")
_TRUE_WORDS = {"true", "yes", "correct", "accept", "accepted"}
_FALSE_WORDS = {"false", "no", "incorrect", "wrong", "reject", "rejected"}


@lru_cache(maxsize=64)
def _open_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*{re.escape(tag)}\s*>", re.IGNORECASE)


@lru_cache(maxsize=64)
def _close_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/\s*{re.escape(tag)}\s*>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """``text`` without ``<think>``/``<thinking>`` blocks (an unclosed one hides the rest)."""
    if not isinstance(text, str):
        return ""
    if "think" not in text.lower():  # fast path: nothing to strip
        return text
    for tag in _REASONING_TAGS:
        opener, closer = _open_pattern(tag), _close_pattern(tag)
        kept, pos = [], 0
        while True:  # one forward scan: linear even on megabyte inputs full of tags
            start = opener.search(text, pos)
            if start is None:
                kept.append(text[pos:])
                break
            kept.append(text[pos : start.start()])
            end = closer.search(text, start.end())
            if end is None:
                break
            kept.append(" ")
            pos = end.end()
        text = "".join(kept)
    return text


def extract_tag(text: object, tag: str, *, keep_reasoning: bool = False) -> str | None:
    """Stripped contents of the last complete ``<tag>...</tag>``, or None. Never raises."""
    if not isinstance(text, str) or not text:
        return None
    if tag.lower() not in text.lower():
        return None
    if not keep_reasoning and tag.lower() not in _REASONING_TAGS:
        text = strip_reasoning(text)
    # Pair the last closing tag with the nearest opening tag before it; scanning the
    # opens and closes separately keeps this linear (a lazy regex would be quadratic).
    opens = [m.end() for m in _open_pattern(tag).finditer(text)]
    if not opens:
        return None
    closes = [(m.start(), m.end()) for m in _close_pattern(tag).finditer(text)]
    for j in range(len(closes) - 1, -1, -1):
        i = bisect.bisect_right(opens, closes[j][0]) - 1
        # a close with another close between it and its opener is a stray one
        if i >= 0 and (j == 0 or closes[j - 1][1] <= opens[i]):
            return text[opens[i] : closes[j][0]].strip()
    return None


def has_open_tag(text: object, tag: str) -> bool:
    """True if ``<tag>`` appears at all (used to tell 'unclosed' from 'absent' in errors)."""
    return isinstance(text, str) and _open_pattern(tag).search(text) is not None


def parse_bool(value: str | None) -> bool | None:
    """``True``/``False`` (and yes/no, correct/incorrect) in any case; None otherwise."""
    if value is None:
        return None
    word = value.strip().strip(".!*`'\"").strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def _normalize_name(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", name.casefold())


def match_agent(name: str | None, agents: Sequence[str]) -> str | None:
    """The agent in ``agents`` that ``name`` refers to, ignoring case, spaces and punctuation."""
    if not name:
        return None
    wanted = _normalize_name(name)
    if not wanted:
        return None
    for agent in agents:
        if _normalize_name(agent) == wanted:
            return agent
    return None


def suggest_agent(name: str, agents: Sequence[str]) -> str:
    """A ' Did you mean X?' hint, or ''."""
    close = get_close_matches(name, list(agents), n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""
