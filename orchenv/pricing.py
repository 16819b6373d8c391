"""Public per-token prices of well-known models (``orchenv/pricing.json``).

Each entry carries USD per 1M prompt and completion tokens and the public
source it was read from, with the date. Pool presets and pool files name an
entry with ``"price": KEY``; explicit ``price_prompt`` / ``price_completion``
on an agent override it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from orchenv.error import ConfigError, UnknownNameError
from orchenv.schema import Schema, price, text


@dataclass(frozen=True)
class Price:
    """USD per one million prompt / completion tokens, and where that figure came from."""

    key: str
    model: str
    prompt: float
    completion: float
    source: str


#: one entry of ``pricing.json`` (prices in USD per 1M tokens, finite and non-negative)
PRICE_ENTRY = Schema(
    "price entry",
    {"model": text, "prompt": price, "completion": price, "source": text},
    required=frozenset({"model", "prompt", "completion", "source"}),
)


@lru_cache(maxsize=1)
def price_table() -> dict[str, Price]:
    """Every known price, by key (each entry checked by ``PRICE_ENTRY``: the table prices
    every call of every preset, so a bad entry must fail loudly, not poison costs)."""
    text = resources.files("orchenv").joinpath("pricing.json").read_text("utf-8")
    raw = json.loads(text)["prices"]
    table = {}
    for key, entry in raw.items():
        e = PRICE_ENTRY.validate(entry, f"pricing.json, prices[{key!r}]", error=ConfigError)
        table[key] = Price(key, e["model"], e["prompt"], e["completion"], e["source"])
    return table


def price_for(key: str) -> Price:
    """The price entry ``key``; ``UnknownNameError`` with a suggestion otherwise."""
    table = price_table()
    if key not in table:
        raise UnknownNameError("price table entry", key, table)
    return table[key]
