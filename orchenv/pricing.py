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

from orchenv.error import UnknownNameError


@dataclass(frozen=True)
class Price:
    """USD per one million prompt / completion tokens, and where that figure came from."""

    key: str
    model: str
    prompt: float
    completion: float
    source: str


@lru_cache(maxsize=1)
def price_table() -> dict[str, Price]:
    """Every known price, by key."""
    text = resources.files("orchenv").joinpath("pricing.json").read_text("utf-8")
    raw = json.loads(text)["prices"]
    return {
        key: Price(
            key, entry["model"], float(entry["prompt"]), float(entry["completion"]), entry["source"]
        )
        for key, entry in raw.items()
    }


def price_for(key: str) -> Price:
    """The price entry ``key``; ``UnknownNameError`` with a suggestion otherwise."""
    table = price_table()
    if key not in table:
        raise UnknownNameError("price table entry", key, table)
    return table[key]
