"""WebShop's purchase reward (Yao et al. 2022, section 3.2): ``webshop_reward(..., rule=...)``.

``rule="original"`` (the env's default) is princeton-nlp/WebShop master's ``get_reward``
(``orchenv.envs.webshop.original``: ``normalize_color``, fuzzy matching of every option
group, spaCy nouns for ``r_type``; needs the ``webshop`` extra). ``rule="approx"`` is
orchenv's earlier approximation, kept for users who name it (no spaCy or ``thefuzz``
needed); its rules follow, and docs/webshop.md lists where the two differ.

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price])
               / (|U_att| + |U_opt| + 1)

``Y`` is the bought product (its attributes, the options chosen on its page, its
price), ``U`` the goal (instruction attributes, goal options, price bound). How each
part is decided (the original code's rules, ``web_agent_site/engine/goal.py``,
the unmerged v2 branch's option rule, re-implemented without spaCy or ``thefuzz``):

* **attributes**: a goal attribute counts when a product attribute matches it
  fuzzily (``token_set_ratio > 85``), or when it occurs verbatim (lowercase) in the
  product's title, features (bullet points) or description.
* **options**: a goal option counts when a chosen option matches it: exactly for
  the ``size`` group (sizes like ``x-large`` / ``xx-large`` must not blur), fuzzily
  (``token_set_ratio > 85``) otherwise. Each goal option and each chosen option
  counts at most once, so ``|U_opt ∩ Y_opt| <= |U_opt|`` as in the paper. (The
  original counts matched *chosen* options and also counts a chosen value that
  merely occurs in the product text; with human goals that can push r_opt above 1.)
* **price**: 1 when the product's price is at most the bound.
* **type** ``r_type``: 1, lowered when the product is of another kind than the
  target: ``query_match`` (same collection query), ``category_match`` (at least two
  breadcrumb levels in common), and ``title_score`` = the share of the target
  title's content words that the product title also has. Then ``r_type = 0.5`` when
  none of query match, category match or ``title_score > 0.2`` holds; ``0.1`` when
  ``title_score < 0.1``; ``0`` when ``title_score == 0``. The original takes nouns
  and proper nouns from spaCy's ``en_core_web_lg``; here content words are the
  lowercase alphanumeric tokens of two or more characters that are neither numbers
  nor English function words (no model download needed).

``token_set_ratio`` is fuzzywuzzy's token-set ratio with ``difflib``'s matcher (the
library's own pure-Python mode): the best ``SequenceMatcher`` ratio (0-100) between
the sorted token intersection and the intersection plus each side's remaining tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from orchenv.envs.webshop import original
from orchenv.envs.webshop.products import CATEGORY_SEP, Goal, Product
from orchenv.error import UnknownNameError

#: option groups matched exactly (the original's ``EXACT_MATCH_OPTS``)
EXACT_MATCH_GROUPS = frozenset({"size"})
#: fuzzy matches need a token-set ratio above this (as in the original)
FUZZY_THRESHOLD = 85

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_WORD = re.compile(r"[a-z0-9]+")
#: function words that never name a product type
_FUNCTION_WORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it"}
    | {"its", "of", "on", "or", "over", "than", "that", "the", "this", "to", "up", "with"}
    | {"without", "your", "you", "our", "de", "la", "le"}
)


def _tokens(text: str) -> frozenset[str]:
    return frozenset(_NON_ALNUM.sub(" ", text.lower()).split())


def _ratio(a: str, b: str) -> int:
    if not a or not b:
        return 0
    return round(100 * SequenceMatcher(None, a, b, autojunk=False).ratio())


@lru_cache(maxsize=65536)
def token_set_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``token_set_ratio`` (0-100) on lowercase alphanumeric tokens."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0
    common = " ".join(sorted(ta & tb))
    left = f"{common} {' '.join(sorted(ta - tb))}".strip()
    right = f"{common} {' '.join(sorted(tb - ta))}".strip()
    return max(_ratio(common, left), _ratio(common, right), _ratio(left, right))


def fuzzy_match(a: str, b: str) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


def title_words(title: str) -> frozenset[str]:
    """Content words of a title (the stand-in for the original's spaCy nouns)."""
    return frozenset(
        w
        for w in _WORD.findall(title.lower())
        if len(w) >= 2 and not w.isdigit() and w not in _FUNCTION_WORDS
    )


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal) -> TypeMatch:
    """``r_type``: is the bought product the kind of thing the goal asked for?"""
    query_match = product.query.strip().lower() == goal.query.strip().lower()
    bought = {part.strip() for part in product.product_category.split(CATEGORY_SEP.strip())}
    wanted = {part.strip() for part in goal.product_category.split(CATEGORY_SEP.strip())}
    category_match = len((bought & wanted) - {""}) >= 2
    desired = title_words(goal.name)
    got = title_words(product.title)
    title_score = len(desired & got) / len(desired) if desired else 0.2
    r_type = original.type_score(query_match, category_match, title_score)
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    """``|U_att ∩ Y_att|``: goal attributes the product has (fuzzy) or states in its text."""
    title = product.title.lower()
    features = " ".join(product.bullet_points).lower()
    description = product.description.lower()
    count = 0
    for wanted in goal_attributes:
        wanted = wanted.lower()
        if any(fuzzy_match(have, wanted) for have in product.attributes) or (
            wanted in title or wanted in features or wanted in description
        ):
            count += 1
    return count


def option_matches(
    goal_options: Sequence[tuple[str, str]] | Sequence[str], chosen: Mapping[str, str]
) -> int:
    """``|U_opt ∩ Y_opt|``: goal options met by the options chosen on the item page.

    ``goal_options`` are ``(group, value)`` pairs or bare values; ``chosen`` maps
    group -> chosen value. Exact match for ``size`` groups, fuzzy otherwise; each side
    is used at most once.
    """
    wanted = [g[1] if isinstance(g, tuple) else g for g in goal_options]
    left = [(group.lower(), value.lower()) for group, value in chosen.items()]
    count = 0
    for value in wanted:
        value = value.lower()
        for i, (group, have) in enumerate(left):
            same = have == value if group in EXACT_MATCH_GROUPS else fuzzy_match(have, value)
            if same:
                count += 1
                del left[i]
                break
    return count


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its parts (reported in ``info["reward_parts"]`` at purchase)."""

    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attribute_matches: int
    num_attributes: int
    option_matches: int
    num_options: int
    price_ok: bool

    def as_dict(self) -> dict[str, float | int | bool]:
        return dict(self.__dict__)


#: the reward rules ``webshop_reward`` (and the env's ``reward=`` argument) accept
REWARD_RULES = ("original", "approx")


def webshop_reward(
    product: Product,
    goal: Goal,
    chosen_options: Mapping[str, str],
    price: float | None = None,
    *,
    rule: str = "original",
) -> RewardBreakdown:
    """The reward of buying ``product`` with ``chosen_options`` for ``goal`` (in [0, 1]).

    ``rule="original"``: master's rules (raises ``DependencyError`` without spaCy's
    model or ``thefuzz``); ``rule="approx"``: orchenv's dependency-free approximation.
    """
    if rule not in REWARD_RULES:
        raise UnknownNameError("WebShop reward rule", rule, REWARD_RULES)
    price = product.price if price is None else price
    if rule == "original":
        r_type, query_match, category_match, title_score = original.type_parts(product, goal)
        kind = TypeMatch(r_type, query_match, category_match, title_score)
        n_att = original.attribute_matches(product, goal.attributes)
        n_opt = original.option_matches(original.goal_option_items(goal), chosen_options)
    else:
        kind = type_reward(product, goal)
        n_att = attribute_matches(product, goal.attributes)
        n_opt = option_matches(goal.options, chosen_options)
    price_ok = price <= goal.price_upper
    total = (n_att + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return RewardBreakdown(
        reward=float(kind.r_type * total),
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        attribute_matches=n_att,
        num_attributes=len(goal.attributes),
        option_matches=n_opt,
        num_options=len(goal.options),
        price_ok=price_ok,
    )
