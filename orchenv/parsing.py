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
- Non-string input, empty strings and megabyte strings are handled.

Linear time
-----------
An action is written by a model that may be hostile, so every scan here is linear in
the input: each pattern is simple (no repeat can run past the next ``<``), and every
scan starts where the previous one stopped instead of rescanning from each candidate
position. The scans go through ``counted_search`` / ``counted_finditer``, which add the
characters they cover to a counter (``scanned_chars``): the tests bound the work of a
parser on 10 MB adversarial inputs by that count, not by a clock.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from difflib import get_close_matches
from functools import lru_cache
from typing import Any

_REASONING_TAGS = ("think", "thinking")
_TRUE_WORDS = {"true", "yes", "correct", "accept", "accepted"}
_FALSE_WORDS = {"false", "no", "incorrect", "wrong", "reject", "rejected"}
#: names longer than this are not compared for a "did you mean" hint (difflib is quadratic)
_MAX_HINT_CHARS = 200

_scanned = 0  # characters covered by the scans below (see ``scanned_chars``)


def scanned_chars() -> int:
    """Characters covered by this module's scans since the process started.

    A test hook: the difference around a call measures its work without a clock, so a
    test can assert that a parser stays linear (e.g. at most ``8 * len(text)``).
    """
    return _scanned


def counted_search(pattern: re.Pattern[str], text: str, pos: int = 0) -> re.Match[str] | None:
    """``pattern.search(text, pos)``, counting the characters it covered."""
    global _scanned
    match = pattern.search(text, pos)
    _scanned += (match.end() if match else len(text)) - pos
    return match


def counted_finditer(pattern: re.Pattern[str], text: str, pos: int = 0) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text, pos)``, counting one pass over the rest of the text."""
    global _scanned
    _scanned += len(text) - pos
    return pattern.finditer(text, pos)


@lru_cache(maxsize=64)
def _open_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*{re.escape(tag)}\s*>", re.IGNORECASE)


@lru_cache(maxsize=64)
def _close_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/\s*{re.escape(tag)}\s*>", re.IGNORECASE)


# -- one normalisation for every string that comes out of a parsed structure ----------------

_UNCLEAN = re.compile("[\x00\ud800-\udfff]")
#: nesting deeper than this is not walked (``json.loads`` itself stops near 1,000 levels)
_MAX_CLEAN_DEPTH = 10_000


def clean_text(text: str) -> str:
    """``text`` with lone surrogates and NULs replaced by U+FFFD (a valid surrogate pair is
    joined into its character), as a plain ``str``; unchanged text is returned as is.

    The same rule as ``orchenv.core.normalize_action``, for strings that only appear once a
    structure is decoded: a JSON escape (``"\\ud800"``, ``"\\u0000"``) in an all-ASCII
    action becomes a lone surrogate or a NUL after ``json.loads``, which no encoder accepts."""
    if not isinstance(text, str):
        return text
    if _UNCLEAN.search(text) is None:
        return str.__str__(text)
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "\ufffd")


def clean_parsed(value: object) -> object:
    """A parsed structure (JSON, YAML: dicts, lists, tuples, scalars) with every string in
    it, keys included, passed through ``clean_text``. Iterative, so no depth limit applies
    beyond the parser's own; other objects are returned unchanged."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, target, key or index)
    while stack:
        source, target, slot = stack.pop()
        if isinstance(source, dict):
            out: dict[Any, Any] = {}
            for key, item in source.items():
                key = clean_text(key) if isinstance(key, str) else key
                out[key] = None
                stack.append((item, out, key))
            built: Any = out
        elif isinstance(source, (list, tuple)):
            items: list[Any] = [None] * len(source)
            if isinstance(source, tuple):
                items = _TupleSlot(items)
            for index, item in enumerate(source):
                stack.append((item, items, index))
            built = items
        elif isinstance(source, str):
            built = clean_text(source)
        else:
            built = source
        target[slot] = built
    return _untuple(root[0])


class _TupleSlot(list[Any]):  # a tuple being filled in; turned into one by ``_untuple``
    __slots__ = ()


def _untuple(value: object) -> object:
    """Turn ``_TupleSlot`` lists back into tuples (bottom-up, iteratively)."""
    if not isinstance(value, (dict, list)):
        return value
    order: list[Any] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        order.append(item)
        children = item.values() if isinstance(item, dict) else item
        stack.extend(c for c in children if isinstance(c, (dict, list)))
    for item in reversed(order):  # children before parents
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(child, _TupleSlot):
                    item[key] = tuple(child)
        else:
            for index, child in enumerate(item):
                if isinstance(child, _TupleSlot):
                    item[index] = tuple(child)
    return tuple(value) if isinstance(value, _TupleSlot) else value


def loads_json(text: str | bytes, **kwargs: object) -> object:
    """``json.loads`` whose strings (keys and values) are cleaned (``clean_text``): the one
    JSON decoder for text a model or a file supplied. Raises what ``json.loads`` raises."""
    return clean_parsed(json.loads(text, **kwargs))  # type: ignore[arg-type]


def strip_reasoning(text: str) -> str:
    """``text`` without ``<think>``/``<thinking>`` blocks (an unclosed one hides the rest)."""
    if not isinstance(text, str):
        return ""
    if "think" not in text.lower():  # fast path: nothing to strip
        return text
    for tag in _REASONING_TAGS:
        opener, closer = _open_pattern(tag), _close_pattern(tag)
        kept, pos = [], 0
        while True:  # one forward scan: each search starts where the last one ended
            start = counted_search(opener, text, pos)
            if start is None:
                kept.append(text[pos:])
                break
            kept.append(text[pos : start.start()])
            end = counted_search(closer, text, start.end())
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
    opens = [m.end() for m in counted_finditer(_open_pattern(tag), text)]
    if not opens:
        return None
    closes = [(m.start(), m.end()) for m in counted_finditer(_close_pattern(tag), text)]
    for j in range(len(closes) - 1, -1, -1):
        i = bisect.bisect_right(opens, closes[j][0]) - 1
        # a close with another close between it and its opener is a stray one
        if i >= 0 and (j == 0 or closes[j - 1][1] <= opens[i]):
            return clean_text(text[opens[i] : closes[j][0]].strip())
    return None


def find_tag(text: object, tag: str) -> int | None:
    """Where the first ``<tag>`` starts (whitespace and case tolerated), or None."""
    if not isinstance(text, str):
        return None
    match = counted_search(_open_pattern(tag), text)
    return None if match is None else match.start()


def iter_blocks(
    text: str, opener: re.Pattern[str], closers: Mapping[str, re.Pattern[str]]
) -> Iterator[tuple[re.Match[str], re.Match[str]]]:
    """Every complete block of ``text`` as ``(opener match, closer match)``, in linear time.

    A block is an ``opener`` match (its group ``tag``, lowercased, picks the pattern in
    ``closers``) through the nearest following match of that closer. Blocks are taken
    leftmost first and never overlap, which is what ``re.finditer`` of the lazy alternation
    ``<a>(.*?)</a>|<b>(.*?)</b>`` does; that regex rescans the rest of the text from every
    unclosed opener (quadratic), while this scans each pattern once and pairs the matches
    by binary search. ``opener`` must not match across a ``<`` after its first character
    (then its matches cannot hide one another).
    """
    opens = list(counted_finditer(opener, text))
    if not opens:
        return
    ends: dict[str, list[re.Match[str]]] = {}
    for tag in {m.group("tag").lower() for m in opens}:
        closer = closers.get(tag)
        ends[tag] = [] if closer is None else list(counted_finditer(closer, text))
    starts = {tag: [m.start() for m in found] for tag, found in ends.items()}
    pos = 0
    for match in opens:
        if match.start() < pos:  # inside a block already taken
            continue
        tag = match.group("tag").lower()
        j = bisect.bisect_left(starts[tag], match.end())
        if j == len(starts[tag]):  # never closed
            continue
        close = ends[tag][j]
        yield match, close
        pos = close.end()


def remove_blocks(
    text: str,
    opener: re.Pattern[str],
    closers: Mapping[str, re.Pattern[str]],
    replacement: str = "",
) -> str:
    """``text`` with every complete block (``iter_blocks``) replaced by ``replacement``."""
    kept, pos = [], 0
    for match, close in iter_blocks(text, opener, closers):
        kept.append(text[pos : match.start()])
        kept.append(replacement)
        pos = close.end()
    if not kept:
        return text
    kept.append(text[pos:])
    return "".join(kept)


def has_open_tag(text: object, tag: str) -> bool:
    """True if ``<tag>`` appears at all (used to tell 'unclosed' from 'absent' in errors)."""
    return isinstance(text, str) and counted_search(_open_pattern(tag), text) is not None


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


_NOT_NAME_CHARS = re.compile(r"[^0-9a-z]+")


def _normalize_name(name: str) -> str:
    return _NOT_NAME_CHARS.sub("", name.casefold())


@lru_cache(maxsize=256)
def _agent_index(agents: tuple[str, ...]) -> dict[str, str]:
    """Normalized name -> the first agent of ``agents`` with it (the order ``match_agent``
    scans in); an env's agent list is parsed against on every step."""
    index: dict[str, str] = {}
    for agent in agents:
        index.setdefault(_normalize_name(agent), agent)
    return index


def match_agent(name: str | None, agents: Sequence[str]) -> str | None:
    """The agent in ``agents`` that ``name`` refers to, ignoring case, spaces and punctuation."""
    if not name:
        return None
    wanted = _normalize_name(name)
    if not wanted:
        return None
    plain = type(agents) in (tuple, list) and len(agents) <= 1024
    if plain and all(type(a) is str for a in agents):
        return _agent_index(tuple(agents)).get(wanted)
    for agent in agents:
        if _normalize_name(agent) == wanted:
            return agent
    return None


def suggest_agent(name: str, agents: Sequence[str]) -> str:
    """A ' Did you mean X?' hint, or '' (also for names too long to be a typo)."""
    if len(name) > _MAX_HINT_CHARS:
        return ""
    close = get_close_matches(name, list(agents), n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""


# -- placeholders copied from a format line (issue 31) ----------------------------------------

#: capitalised words that stand for a value in a format line (``SOLVER NAME``, ``FINAL ANSWER``,
#: ``MODEL:PATTERN``, ``YOUR_REQUEST``); a tag body made only of these is a placeholder
_PLACEHOLDER_WORDS = frozenset(
    [
        "NAME",
        "ANSWER",
        "FINAL",
        "SOLVER",
        "EXPERT",
        "AGENT",
        "MODEL",
        "PATTERN",
        "TOOL",
        "ROLE",
        "QUERY",
        "QUESTION",
        "REQUEST",
        "YOUR",
        "ACTION",
        "TEXT",
        "THE",
        "SHORT",
        "SEARCH",
        "TERMS",
        "SUB",
        "QUESTION",
        "NUMBER",
        "VALUE",
    ]
)
#: bodies (casefolded, whitespace collapsed) that are descriptions of a value, not a value
_PLACEHOLDER_PHRASES = frozenset(
    {
        "your answer",
        "the answer",
        "the final answer",
        "the final answer only",
        "final answer here",
        "answer here",
        "name here",
        "search terms",
        "a short answer",
        "short answer",
        "true|false",
        "true or false",
        "supported|unsupported",
        "your question",
        "your reasoning",
        "your request",
        "your role",
        "the next sub-question",
    }
)
_DOTS = re.compile(r"^[\s.…]*$")
_CAPS_WORDS = re.compile(r"[A-Za-z]+")
#: a tag pair with a short body and no nested tag, for ``find_placeholders``
_SHORT_TAG = re.compile(r"<(?P<tag>[A-Za-z_]{1,30})>(?P<body>[^<>]{0,160})</(?P=tag)>")
_ALTERNATIVES = re.compile(r"\b[A-Za-z]+\|[A-Za-z]+")
_DESCRIPTIVE_START = (
    "your ",
    "the final answer",
    "the next sub-question",
    "search terms",
    "a short answer",
    "short note",
    "final reasoning",
)


def is_placeholder(value: object, extra: Sequence[str] = ()) -> bool:
    """Whether a decision tag's body is a stand-in copied from a format line, not a value.

    True for bodies made only of dots (``...``, ``…``), for known descriptions of a value
    (``FINAL ANSWER``, ``your answer``, ``True|False``; any case), for bodies made only of
    capitalised stand-in words (``SOLVER NAME``, ``EXPERT NAME``, ``MODEL:PATTERN``,
    ``YOUR_REQUEST``) and for ``extra`` (an env's own stand-ins, compared the same way).
    A parser calls it on a tag body before using it, so a policy that copies the prompt's
    format back is invalid instead of acting. Never raises; non-strings are not placeholders.
    """
    if not isinstance(value, str) or len(value) > 200:
        return False
    if _DOTS.match(value):
        return True
    folded = " ".join(value.split()).casefold()
    if folded in _PLACEHOLDER_PHRASES or folded in {" ".join(e.split()).casefold() for e in extra}:
        return True
    words = _CAPS_WORDS.findall(value)
    return bool(words) and all(w.isupper() and w in _PLACEHOLDER_WORDS for w in words)


def find_placeholders(text: object) -> list[str]:
    """Every ``<tag>body</tag>`` of ``text`` whose body is an unfilled placeholder: the
    measure of issue 31 (``benchmarks/prompt_placeholders.py``). Besides ``is_placeholder``
    it counts bodies holding ``...`` or ``…`` anywhere, an alternative list (``a|b``) or a
    description of what to write (``your reasoning``, ``search terms``, ``the final answer
    only``). A heuristic for prompts written by hand; never raises."""
    if not isinstance(text, str):
        return []
    found = []
    for match in counted_finditer(_SHORT_TAG, text):
        body = match.group("body").strip()
        folded = body.casefold()
        if (
            is_placeholder(body)
            or "..." in body
            or "…" in body
            or _ALTERNATIVES.search(body)
            or folded.startswith(_DESCRIPTIVE_START)
        ):
            found.append(match.group(0))
    return found
