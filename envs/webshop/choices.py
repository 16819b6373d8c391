"""The discrete view of ``orch/WebShop-v0``: fixed button slots, and the audit's shortcuts.

A discrete shopper picks a slot, not a string: slot 0 searches for the instruction text, then
come the navigation buttons, the (up to) ten products of a results page in their listed
order, the option values of an item page in the product's order (``OPTION_SLOTS`` of them),
the item's sub-pages and ``buy now``. A slot the current page does not offer is ``None``.
Everything comes from the page and the instruction a shopper sees, never from the goal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from orchenv.envs.webshop.site import (
    BACK_TO_SEARCH,
    BUY_NOW,
    ITEM,
    NEXT_PAGE,
    PREV_PAGE,
    PRODUCT_WINDOW,
    RESULTS,
    Site,
    SiteState,
)

#: navigation buttons, in slot order
NAVIGATION = (BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE)
#: option-value slots of an item page (the generated catalog's products have at most 14
#: values; a product with more offers only its first ``OPTION_SLOTS`` here)
OPTION_SLOTS = 16
#: the longest query slot 0 sends (the env refuses longer ones)
MAX_QUERY_CHARS = 1000

Strategy = Callable[[Any], str]


def slot_count(site: Site) -> int:
    """How many choices an env over ``site`` has (the same in every state)."""
    return 1 + len(NAVIGATION) + PRODUCT_WINDOW + OPTION_SLOTS + len(site.sub_pages) + 1


def search_text(instruction: str) -> str:
    """``search[...]`` for the instruction (one line, at most ``MAX_QUERY_CHARS``)."""
    query = " ".join(instruction.replace("[", " ").replace("]", " ").split())
    return f"search[{query[:MAX_QUERY_CHARS].strip()}]"


def option_values(site: Site, state: SiteState) -> list[str]:
    """The option buttons of the current item page, in the product's order."""
    if state.page != ITEM or state.item is None:
        return []
    clickables = set(site.available_actions(state)["clickables"])
    return [v for v in site.option_buttons(state.item) if v in clickables]


def canonical_choices(site: Site, state: SiteState, instruction: str) -> list[str | None]:
    """Search, navigation, result slots, option slots, sub-pages, buy now (``None`` where
    the page lacks the button)."""
    available = site.available_actions(state)
    clickables = set(available["clickables"])

    def click(button: str | None) -> str | None:
        return f"click[{button}]" if button is not None and button in clickables else None

    choices = [search_text(instruction) if available["has_search_bar"] else None]
    choices += [click(b) for b in NAVIGATION]
    hits = site.page_hits(state) if state.page == RESULTS else ()
    asins = [site.catalog.asins[i].lower() for i in hits]
    choices += [click(asins[k]) if k < len(asins) else None for k in range(PRODUCT_WINDOW)]
    values = option_values(site, state)[:OPTION_SLOTS]
    choices += [click(values[k]) if k < len(values) else None for k in range(OPTION_SLOTS)]
    choices += [click(page) for page in site.sub_pages]
    choices.append(click(BUY_NOW))
    return choices


#: the pages, in the order of ``page_features``' one-hot block
PAGES = ("search", RESULTS, ITEM, "item_sub_page", "done")


def page_features(site: Site, state: SiteState, instruction: str) -> list[float]:
    """Numbers a shopper reads off the page: which page (one-hot over ``PAGES``); per
    option slot, whether its value is named in the instruction and its group is still
    open; the share of the item's option groups chosen."""
    page = [1.0 if state.page == name else 0.0 for name in PAGES]
    named = [0.0] * OPTION_SLOTS
    share = 0.0
    if state.page == ITEM and state.item is not None:
        owner = site.option_buttons(state.item)
        text = instruction.lower()
        for k, value in enumerate(option_values(site, state)[:OPTION_SLOTS]):
            named[k] = float(owner[value] not in state.chosen and _mentioned(value, text))
        groups = len(site.catalog.product(state.item).options)
        share = len(state.chosen) / groups if groups else 1.0
    return [*page, *named, share]


def _mentioned(value: str, instruction: str) -> bool:
    return (
        re.search(rf"(?<![a-z0-9]){re.escape(value.lower())}(?![a-z0-9])", instruction) is not None
    )


def _first_result_then(pick_options: Callable[[Any], str | None], doc: str) -> Strategy:
    """Search the instruction, open the first result, click what ``pick_options`` says
    (``None``: done), buy."""

    def act(env: Any) -> str:
        state, site = env.state, env.site
        if state.page == "search":
            return search_text(env.goal.instruction)
        if state.page == RESULTS:
            hits = site.page_hits(state)
            if not hits:
                return f"click[{BACK_TO_SEARCH}]"
            return f"click[{site.catalog.asins[hits[0]].lower()}]"
        if state.page == ITEM:
            option = pick_options(env)
            return f"click[{option}]" if option else f"click[{BUY_NOW}]"
        return f"click[{PREV_PAGE}]"

    act.__doc__ = doc
    return act


def _unchosen_groups(env: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The item's option groups not chosen yet, each with the values that select it (a
    value shared by two groups selects only one of them)."""
    state = env.state
    product = env.catalog.product(state.item)
    owner = env.site.option_buttons(state.item)
    clickable = set(option_values(env.site, state))
    return [
        (group, tuple(v for v in values if owner.get(v) == group and v in clickable))
        for group, values in product.options
        if group not in state.chosen
    ]


def shortcuts() -> dict[str, Strategy]:
    """The named shortcuts ``orchenv audit`` plays (``WebShopEnv.audit_strategies``)."""

    def no_options(env: Any) -> str | None:
        return None

    def first_values(env: Any) -> str | None:
        for _, values in _unchosen_groups(env):
            if values:
                return str(values[0])
        return None

    def mentioned_values(env: Any) -> str | None:
        instruction = env.goal.instruction.lower()
        for _, values in _unchosen_groups(env):
            for value in values:
                if _mentioned(value, instruction):
                    return str(value)
        return None

    def browse(env: Any) -> str:
        """Search the instruction, then page through the results; never buy."""
        state = env.state
        if state.page == "search":
            return search_text(env.goal.instruction)
        clickables = env.site.available_actions(state)["clickables"]
        for button in (NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH):
            if button in clickables:
                return f"click[{button}]"
        return f"click[{BACK_TO_SEARCH}]"

    return {
        "buy-first-result": _first_result_then(
            no_options, "Search the instruction, buy the first result without choosing options."
        ),
        "first-result-first-options": _first_result_then(
            first_values, "Buy the first result with the first value of every option group."
        ),
        "first-result-mentioned-options": _first_result_then(
            mentioned_values,
            "Buy the first result with the option values the instruction names "
            "(no product choice).",
        ),
        "browse-without-buying": browse,
    }
