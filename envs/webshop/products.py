"""The records WebShop is made of: a ``Product`` on sale and a ``Goal`` (an instruction).

Field names follow the meaning of the original data (``princeton-nlp/WebShop``),
in Python style: ``Title`` -> ``title``, ``BulletPoints`` -> ``bullet_points``,
``Attributes`` -> ``attributes``, ``options`` (option group -> values, lowercase),
``query`` (the search query the product was collected under), ``product_category``
(the breadcrumb ``A › B › C``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: separator of the breadcrumb in ``product_category`` (as in the original data)
CATEGORY_SEP = " › "


@dataclass(frozen=True)
class Review:
    title: str
    score: int
    body: str


@dataclass(frozen=True)
class Product:
    """One item of the catalog.

    ``price`` is what the reward compares with the goal's price bound; ``price_tag``
    is what the pages show (``$12.99``, or ``$10.0 to $15.0`` for a price range in the
    original data, whose ``price`` is then drawn inside the range). ``options`` keeps
    the option groups in page order as ``(group, values)`` pairs; every value is
    lowercase (the original lowercases them too, and so does the action parser).
    """

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    price: float
    price_tag: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    bullet_points: tuple[str, ...]
    description: str
    reviews: tuple[Review, ...] = ()
    rating: str = "N.A."

    @property
    def option_groups(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)

    def option_group_of(self, value: str) -> str | None:
        """The group an option value belongs to (the last group that has it, as the
        original's clickable map does when two groups share a value)."""
        found = None
        for group, values in self.options:
            if value in values:
                found = group
        return found


@dataclass(frozen=True)
class Goal:
    """One shopping instruction and what it asks for.

    ``attributes`` are the instruction attributes ``Y_att``; ``options`` the goal
    options ``Y_opt`` as ``(group, value)`` pairs (the group is ``""`` for human
    instructions of the original data, which list values only); ``price_upper`` the
    price bound (``1e6`` when the instruction states none). ``name``, ``query`` and
    ``product_category`` describe the target product, for the type reward.
    """

    id: str
    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price_upper: float
    name: str
    query: str
    category: str
    product_category: str

    @property
    def option_values(self) -> tuple[str, ...]:
        return tuple(value for _, value in self.options)

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "asin": self.asin,
            "instruction": self.instruction,
            "attributes": list(self.attributes),
            "options": {group or f"option {i}": v for i, (group, v) in enumerate(self.options)},
            "price_upper": self.price_upper,
            "name": self.name,
            "query": self.query,
            "category": self.category,
            "product_category": self.product_category,
        }


def options_text(options: Mapping[str, str]) -> str:
    """``size: large, and color: black`` (the original's goal option phrasing)."""
    return ", and ".join(f"{k}: {v}" for k, v in options.items())
