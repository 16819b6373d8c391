"""One schema check for every number orchenv reads from outside.

Token counts, prices and costs arrive from servers (``usage``), replay files, eval logs and
pool files. Each source is parsed with ``parse_json`` (bounded integer digits, float length
and nesting depth, so a hostile document fails with a clear error instead of a raw
``ValueError``/``RecursionError`` or a number that overflows later) and then checked by one
``Schema``: token counts are ints in ``[0, MAX_CALL_TOKENS]`` (``MAX_TOTAL_TOKENS`` for an
episode's totals), costs and prices are finite and non-negative, unknown keys are an error
with a "did you mean" hint, and every error names the file, the line and the field.

Why a small module of our own and not ``pydantic`` or ``msgspec``: neither is a dependency
today (pydantic brings a compiled core for a handful of checks); what matters most here,
the digits of an integer and the depth of nesting, has to be bounded while the JSON is
parsed, before any validation library sees a value; and every failure must become an
``orchenv.error`` in orchenv's words (file, line, field, fix, close key names), which
would otherwise mean translating another library's error objects. The checks are plain
functions, so each source's schema reads as a table.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchenv.error import OrchEnvError, SchemaError

#: the most tokens one call may report as its prompt or its completion (10**9 - 1). No model
#: reads or writes a billion tokens in one call; a larger figure is a broken or hostile
#: server, and would price a call at thousands of dollars or more.
MAX_CALL_TOKENS = 10**9 - 1
#: the most tokens an episode or a run may total (10**15 - 1)
MAX_TOTAL_TOKENS = 10**15 - 1
#: the highest price accepted, in USD per one million tokens (list prices are below $1,000)
MAX_PRICE_PER_MTOK = 1e6
#: the largest dollar figure accepted for a call or an episode
MAX_COST_USD = 1e12
#: the longest integer literal ``parse_json`` accepts (a 64-bit number has 20 digits)
MAX_INT_DIGITS = 40
#: the longest float literal ``parse_json`` accepts (a double needs at most 24 characters)
MAX_FLOAT_CHARS = 100
#: the deepest nesting of lists and objects ``parse_json`` accepts
MAX_DEPTH = 64

Check = Callable[[Any], Any]


class Invalid(ValueError):
    """A value fails a check; the message says what was expected (``Schema`` adds where)."""


class JSONLimitError(SchemaError):
    """A JSON document is beyond ``parse_json``'s limits (digits, float length, depth)."""


# -- parsing ------------------------------------------------------------------------------------
def _parse_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise Invalid(f"an integer with {digits:,} digits (at most {MAX_INT_DIGITS})")
    return int(literal)


def _parse_float(literal: str) -> float:
    if len(literal) > MAX_FLOAT_CHARS:
        raise Invalid(
            f"a number written with {len(literal):,} characters (at most {MAX_FLOAT_CHARS})"
        )
    return float(literal)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise Invalid(f"the key {show(twice)} appears twice in one object (the last would win)")
    return out


def parse_json(raw: bytes | str, where: str, *, finite: bool = True) -> Any:
    """``json.loads`` with bounded integers, floats and nesting, finite numbers only
    (``NaN``, ``Infinity``, and ``1e309``, which reads as infinity, are refused naming the
    field; ``finite=False`` leaves them to a schema that names the field itself) and no
    key twice in one object.

    A document beyond the limits raises ``JSONLimitError`` naming ``where``; text that is
    not JSON raises ``json.JSONDecodeError`` or ``UnicodeDecodeError`` as usual (callers
    tell a torn last line from corruption).
    """
    try:
        value = json.loads(
            raw,
            parse_int=_parse_int,
            parse_float=_parse_float,
            object_pairs_hook=_unique_keys,
        )
    except Invalid as exc:
        raise JSONLimitError(f"{where}: {exc}") from None
    except RecursionError:
        raise JSONLimitError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    depth, all_finite = depth_and_finite(value)
    if depth > MAX_DEPTH:
        raise JSONLimitError(f"{where}: JSON nested {depth} levels deep (at most {MAX_DEPTH})")
    if finite and not all_finite:
        path, bad = _first_non_finite(value)
        raise JSONLimitError(
            f"{where}: field {path!r} must be a finite number, got {bad!r} (NaN, Infinity "
            "and numbers past 1.8e308 are refused)"
        )
    return value


def depth_and_finite(value: Any, stop: int = MAX_DEPTH + 1) -> tuple[int, bool]:
    """How deeply lists and dicts nest in ``value`` (0 for a scalar; counted without
    recursion, stopping once past ``stop``) and whether every float in it is finite (as far
    as the count went), in one pass."""
    deepest, finite = 0, True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, float):
            finite = finite and math.isfinite(node)
            continue
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest >= stop:
            return deepest, finite
        stack.extend((child, depth) for child in children)
    return deepest, finite


def _first_non_finite(value: Any) -> tuple[str, float]:
    """The dotted path (``completion.cost_usd``, ``items[3]``) of a non-finite float."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path or "(the document)", node
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return "(the document)", math.nan


def nesting_depth(value: Any, stop: int = MAX_DEPTH + 1) -> int:
    """How deeply lists and dicts nest in ``value`` (0 for a scalar), counted without
    recursion and stopping once past ``stop`` (``depth_and_finite``'s first half)."""
    return depth_and_finite(value, stop)[0]


# -- checks: each returns the (normalised) value or raises Invalid ------------------------------
def show(value: Any) -> str:
    """A short description of a bad value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(lo: int, hi: int) -> Check:
    """An int (not a bool) in ``[lo, hi]``."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise Invalid(f"must be an integer in [{lo:,}, {hi:,}], got {show(value)}")
        return value

    return check


def count(limit: int = MAX_CALL_TOKENS) -> Check:
    """A non-negative int up to ``limit`` (token counts, call counts)."""
    return integer(0, limit)


def number(lo: float = -math.inf, hi: float = math.inf) -> Check:
    """A finite int or float (not a bool) in ``[lo, hi]``, returned as a float."""

    def check(value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and isinstance(value, int):
            ok = abs(value) <= 2**1000  # float() of a larger int overflows
        if not ok or not math.isfinite(value) or not lo <= value <= hi:
            span = f"in [{lo:g}, {hi:g}]" if math.isfinite(lo) or math.isfinite(hi) else ""
            raise Invalid(f"must be a finite number {span}, got {show(value)}".replace("  ", " "))
        return float(value)

    return check


#: a finite dollar figure >= 0
money = number(0.0, MAX_COST_USD)
#: a finite duration >= 0
seconds = number(0.0, math.inf)
#: a price in USD per one million tokens
price = number(0.0, MAX_PRICE_PER_MTOK)


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false, got {show(value)}")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"must be a string, got {show(value)}")
    return value


#: the longest agent name a pool file may hold
MAX_NAME_CHARS = 200
_BAD_NAME_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")


def name(value: Any) -> str:
    """A name (an agent's, a key that names an agent): 1 to ``MAX_NAME_CHARS`` characters,
    without control characters, lone surrogates (a ``\\ud800`` escape in a JSON file) or
    bidi overrides, which would break every log line it reaches or show another name."""
    if not isinstance(value, str):
        raise Invalid(f"must be a string, got {show(value)}")
    if not value.strip() or len(value) > MAX_NAME_CHARS:
        raise Invalid(f"must hold 1 to {MAX_NAME_CHARS} characters, got {len(value):,}")
    bad = _BAD_NAME_CHARS.search(value)
    if bad is not None:
        raise Invalid(
            f"must not contain control characters, lone surrogates or bidi overrides, got "
            f"U+{ord(bad.group()):04X} at position {bad.start()}"
        )
    return value


def optional(check: Check) -> Check:
    """``check``, or None."""
    return lambda value: None if value is None else check(value)


def one_of(*choices: Any) -> Check:
    def check(value: Any) -> Any:
        if value not in choices:
            raise Invalid(f"must be one of {', '.join(map(repr, choices))}, got {show(value)}")
        return value

    return check


def list_of(item: Check) -> Check:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise Invalid(f"must be a list, got {show(value)}")
        out = []
        for i, element in enumerate(value):
            try:
                out.append(item(element))
            except Invalid as exc:
                raise Invalid(f"item {i} {exc}") from None
        return out

    return check


def dict_of(item: Check, key_check: Check | None = None) -> Check:
    """An object with string keys (passing ``key_check`` too, if given) whose values pass
    ``item``."""

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise Invalid(f"must be an object, got {show(value)}")
        out = {}
        for key, element in value.items():
            if not isinstance(key, str):
                raise Invalid(f"keys must be strings, got {show(key)}")
            if key_check is not None:
                try:
                    key_check(key)
                except Invalid as exc:
                    raise Invalid(f"key {show(key)} {exc}") from None
            try:
                out[key] = item(element)
            except Invalid as exc:
                raise Invalid(f"entry {key!r} {exc}") from None
        return out

    return check


def free(value: Any) -> Any:
    """Any value nested at most ``MAX_DEPTH`` deep (backend extras, env state)."""
    if nesting_depth(value) > MAX_DEPTH:
        raise Invalid(f"must nest at most {MAX_DEPTH} levels deep")
    return value


#: an object of free values
free_dict = dict_of(free)


# -- schemas ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schema:
    """What one kind of record holds: ``fields`` (name -> check), which are ``required``, and
    whether keys outside ``fields`` are an error (``open=False``) or kept unchecked."""

    what: str
    fields: Mapping[str, Check]
    required: frozenset[str] = frozenset()
    open: bool = False

    def validate(
        self,
        data: Any,
        where: str,
        *,
        error: type[OrchEnvError] = SchemaError,
        prefix: str = "",
        also_allowed: Iterable[str] = (),
    ) -> dict[str, Any]:
        """A checked copy of ``data``; ``error`` (naming ``where`` and the field) otherwise.

        ``prefix`` names a nested record's fields (``"completion."``); ``also_allowed`` are
        extra keys a closed schema keeps unchecked.
        """
        if not isinstance(data, dict):
            raise error(f"{where}: {self.what} must be a JSON object, got {show(data)}")
        allowed = set(also_allowed)
        if not self.open:
            unknown = [k for k in data if k not in self.fields and k not in allowed]
            if unknown:
                raise error(f"{where}: {self.unknown_message(unknown[0], prefix)}")
        missing = [k for k in self.fields if k in self.required and data.get(k) is None]
        if missing:
            names = ", ".join(prefix + k for k in missing)
            raise error(f"{where}: {self.what} lacks {names}")
        out = dict(data)
        for key, check in self.fields.items():
            if key in data:
                try:
                    out[key] = check(data[key])
                except Invalid as exc:
                    raise error(f"{where}: {self.what} field {prefix + key!r} {exc}") from None
        return out

    def unknown_message(self, key: Any, prefix: str = "") -> str:
        """``unknown field 'price_promt'; did you mean 'price_prompt'?``, with the known keys."""
        known = sorted(self.fields)
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        return f"unknown {self.what} field {prefix + str(key)!r}{hint} (known: {', '.join(known)})"


#: a chat-completions reply's ``usage`` (extra keys such as ``prompt_tokens_details`` are kept)
USAGE = Schema(
    "usage",
    {
        "prompt_tokens": optional(count()),
        "completion_tokens": optional(count()),
        "total_tokens": optional(count(2 * MAX_CALL_TOKENS)),
    },
    open=True,
)

#: ``Completion.to_dict()`` as a replay record stores it
COMPLETION = Schema(
    "completion",
    {
        "agent": optional(text),
        "text": text,
        "prompt_tokens": count(),
        "completion_tokens": count(),
        "cost_usd": money,
        "latency_s": optional(seconds),
        "cached": optional(boolean),
        "token_source": optional(one_of("server", "tokenizer", "estimate", "record")),
        "meta": optional(free_dict),
    },
    required=frozenset({"text", "prompt_tokens", "completion_tokens", "cost_usd"}),
)

#: one line of a replay file (``orchenv.backends.replay``); ``completion`` is checked by
#: ``COMPLETION`` (parquet files store it as a JSON string)
REPLAY_RECORD = Schema(
    "replay record",
    {
        "v": optional(integer(0, 2**31)),
        "key": optional(text),
        "task_id": text,
        "agent": text,
        "turn": integer(0, MAX_CALL_TOKENS),
        "prompt_sha256": optional(text),
        "occurrence": optional(integer(0, 2**31)),
        "completion": lambda value: value,  # checked by COMPLETION
        "recorded_at": optional(text),
    },
    required=frozenset({"task_id", "agent", "turn", "completion"}),
)

#: one pool file (or shipped preset); each of ``agents`` is checked by ``POOL_AGENT``
POOL_FILE = Schema(
    "pool",
    {
        "name": text,
        "description": text,
        "paper": text,
        "controller_model": text,
        "agents": list_of(lambda value: value),
        "usage_constraints": dict_of(number(0.0), name),
        "lagrange_multipliers": dict_of(number(), name),
    },
    required=frozenset({"agents"}),
)

#: one agent of a pool file: ``AgentSpec``'s fields, plus ``price`` (a ``pricing.json`` key)
POOL_AGENT = Schema(
    "agent",
    {
        "name": name,
        "model": name,
        "tier": integer(0, 10**6),
        "price": text,
        "price_prompt": price,
        "price_completion": price,
        "backend": text,
        "role_prompt": optional(text),
        "calibration": dict_of(number()),
        "backend_kwargs": free_dict,
    },
    required=frozenset({"name", "model", "tier"}),
)

#: one line of an eval log (``orchenv.eval.harness``): the run identity, the (seed, episode)
#: pair and ``EpisodeRecord``'s fields. ``EpisodeRecord`` fields missing here are passed
#: as ``also_allowed`` by the reader, so a new field does not make old readers fail.
EVAL_ROW = Schema(
    "episode",
    {
        "run_key": text,
        "env_id": text,
        "pool": optional(text),
        "split": optional(text),
        "controller": text,
        "controller_kwargs": free_dict,
        "seed": integer(-(2**63), 2**63 - 1),
        "episode": count(),
        "episode_seed": integer(-(2**64), 2**64),
        "task_id": text,
        "correct": boolean,
        "score": number(),
        "reward": number(),
        "turns": count(),
        "cost_usd": money,
        "prompt_tokens": count(MAX_TOTAL_TOKENS),
        "completion_tokens": count(MAX_TOTAL_TOKENS),
        "tokens": count(2 * MAX_TOTAL_TOKENS),
        "agent_calls": dict_of(count()),
        "invalid_actions": count(),
        "latency_s": seconds,
        "cached_calls": count(),
        "estimated_calls": count(),
        "actions": list_of(free),
        "final_answer": free,
        "metrics": dict_of(number()),
        "wall_s": seconds,
        "env_state": optional(free_dict),
    },
    required=frozenset(
        {
            "seed",
            "episode",
            "task_id",
            "correct",
            "score",
            "reward",
            "turns",
            "cost_usd",
            "prompt_tokens",
            "completion_tokens",
            "agent_calls",
            "invalid_actions",
        }
    ),
)


def pair_of(item: Check) -> Check:
    """A list of exactly two values passing ``item`` (an interval)."""

    def check(value: Any) -> list[Any]:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise Invalid(f"must be a list of two numbers, got {show(value)}")
        return [item(value[0]), item(value[1])]

    return check


#: the ``pooled`` section of ``summary.json`` (``orchenv.eval.harness``): the numbers the
#: leaderboard reads, finite. Other keys are kept unchecked (a newer writer may add some).
SUMMARY_POOLED = Schema(
    "summary",
    {
        "episodes": count(),
        "accuracy": number(0.0, 1.0),
        "accuracy_ci95": pair_of(number(0.0, 1.0)),
        "mean_cost_usd": money,
        "mean_tokens": number(0.0),
        "mean_prompt_tokens": number(0.0),
        "mean_completion_tokens": number(0.0),
        "usage_ratios": dict_of(number(0.0)),
        "mean_turns": number(0.0),
        "invalid_action_rate": number(0.0),
        "mean_reward": number(),
        "seeds": list_of(integer(-(2**63), 2**63 - 1)),
        "privileged": boolean,
    },
    required=frozenset(
        {"episodes", "accuracy", "accuracy_ci95", "mean_cost_usd", "usage_ratios",
         "mean_turns", "invalid_action_rate", "mean_reward"}
    ),
    open=True,
)  # fmt: skip

#: ``run.json`` (and a summary's ``run`` section): the run's identity; free values, but
#: parsed with ``parse_json`` (finite numbers, no key twice)
RUN_INFO = Schema(
    "run",
    {"env_id": text, "episodes": count(), "seeds": list_of(integer(-(2**63), 2**63 - 1))},
    open=True,
)
