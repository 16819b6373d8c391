"""WebShop's text-mode website: pages, their buttons, and where each action leads.

Written for orchenv after the original simulator (``web_agent_site/envs/
web_agent_text_env.py``: ``SimServer`` / ``SimBrowser`` and the page templates); no
HTML is produced, pages render straight to text.

Two protocols. ``protocol="original"`` (the env's default) is the original text env's:
``search[...]`` works from any page (a new search leaves the product and its options),
``next >`` is on every results page (past the last hit it shows an empty page), and the
clickables are listed as its ``get_available_actions`` lists them (the search page offers
``search``, its submit button, which the original refuses to click). ``protocol="orchenv"``
is orchenv's earlier, stricter one, described below.

Pages and their clickables (all lowercase, as the original's ``get_available_actions``):

* **search**: the search bar only (``has_search_bar``); ``search[query]``.
* **results**: ``back to search``, ``< prev`` (page > 1), ``next >`` (more hits), and
  the ASIN of each of the (up to) 10 products on this page. A search returns at
  most 50 hits.
* **item**: ``back to search``, ``< prev`` (back to the results page it came from),
  ``description``, ``features``, ``reviews`` (and ``attributes`` when
  ``show_attrs``), ``buy now``, and every option value of the product (clicking
  one selects it for its group; the page shows what is chosen).
* **item sub-page** (description / features / reviews / attributes): ``back to
  search`` and ``< prev`` (back to the item, options kept).
* **done**: after ``buy now``; nothing more to do.

``back to search`` forgets the query, the product and the chosen options; returning
to the results list forgets the chosen options (as the original, which resets them
whenever it renders results).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchenv.envs.webshop.catalog import Catalog
from orchenv.envs.webshop.search import SEARCH_RETURN_N, SearchEngine
from orchenv.error import UnknownNameError

BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
ATTRIBUTES_PAGE = "attributes"
#: products per results page (the original's ``PRODUCT_WINDOW``)
PRODUCT_WINDOW = 10

SEARCH, RESULTS, ITEM, SUB_PAGE, DONE = "search", "results", "item", "item_sub_page", "done"
#: the search page's submit button, listed by the original but never clickable
SEARCH_BUTTON = "search"
#: the protocols a ``Site`` follows (see the module docstring)
PROTOCOLS = ("original", "orchenv")


@dataclass(frozen=True)
class SiteState:
    """Where the browser is. Immutable (a value): every action yields a new state.

    ``options`` are the chosen ``(group, value)`` pairs in the order they were first
    chosen; ``visited`` the product indices opened so far this episode; ``session_items``
    those opened since the last ``back to search`` (the original's ``session["asins"]``,
    which ``text_rich`` marks as clicked).
    """

    page: str = SEARCH
    query: str = ""
    hits: tuple[int, ...] = ()
    results_page: int = 1
    item: int | None = None
    options: tuple[tuple[str, str], ...] = ()
    sub_page: str | None = None
    visited: tuple[int, ...] = ()
    session_items: tuple[int, ...] = ()

    @property
    def chosen(self) -> dict[str, str]:
        return dict(self.options)

    def with_option(self, group: str, value: str) -> SiteState:
        chosen = self.chosen
        chosen[group] = value
        return replace(self, options=tuple(chosen.items()))


@dataclass(frozen=True)
class Transition:
    """Where one action leads: the next state, or why the action was refused."""

    state: SiteState
    error: str | None = None
    purchased: bool = False


class Site:
    """The shop over one catalog and its search index (stateless; states are values)."""

    def __init__(
        self,
        catalog: Catalog,
        engine: SearchEngine,
        *,
        show_attrs: bool = False,
        protocol: str = "original",
    ) -> None:
        if protocol not in PROTOCOLS:
            raise UnknownNameError("WebShop protocol", protocol, PROTOCOLS)
        self.catalog = catalog
        self.engine = engine
        self.show_attrs = show_attrs
        self.protocol = protocol

    def __deepcopy__(self, memo: dict[int, Any]) -> Site:
        return self

    @property
    def sub_pages(self) -> tuple[str, ...]:
        return (*SUB_PAGES, ATTRIBUTES_PAGE) if self.show_attrs else SUB_PAGES

    # -- what can be done -------------------------------------------------------------
    def page_hits(self, state: SiteState) -> tuple[int, ...]:
        start = (state.results_page - 1) * PRODUCT_WINDOW
        return state.hits[start : start + PRODUCT_WINDOW]

    def option_buttons(self, item: int) -> dict[str, str]:
        """Clickable option value -> its group (a value in two groups: the last group)."""
        buttons: dict[str, str] = {}
        for group, values in self.catalog.product(item).options:
            for value in values:
                buttons[value] = group
        return buttons

    def available_actions(self, state: SiteState) -> dict[str, Any]:
        """``{"has_search_bar": bool, "clickables": [...]}`` (the original's format)."""
        clickables: list[str] = []
        original = self.protocol == "original"
        if state.page == SEARCH and original:
            clickables.append(SEARCH_BUTTON)
        elif state.page == RESULTS:
            clickables.append(BACK_TO_SEARCH)
            if state.results_page > 1:
                clickables.append(PREV_PAGE)
            if original or state.results_page * PRODUCT_WINDOW < len(state.hits):
                clickables.append(NEXT_PAGE)
            clickables += [self.catalog.asins[i].lower() for i in self.page_hits(state)]
        elif state.page == ITEM:
            assert state.item is not None
            clickables += [BACK_TO_SEARCH, PREV_PAGE, *self.sub_pages, BUY_NOW]
            clickables += [v for v in self.option_buttons(state.item) if v not in clickables]
        elif state.page == SUB_PAGE:
            clickables += [BACK_TO_SEARCH, PREV_PAGE]
        return {"has_search_bar": state.page == SEARCH, "clickables": clickables}

    # -- transitions ------------------------------------------------------------------
    def search(self, state: SiteState, query: str) -> Transition:
        if state.page == DONE:
            return Transition(state, "the purchase is done; nothing more can be done.")
        if state.page != SEARCH and self.protocol != "original":
            return Transition(
                state,
                f"there is no search bar on the {state.page} page; click[{BACK_TO_SEARCH}] first.",
            )
        hits = tuple(self.engine.search(query, SEARCH_RETURN_N))
        return Transition(
            SiteState(
                page=RESULTS,
                query=query,
                hits=hits,
                visited=state.visited,
                session_items=state.session_items,
            )
        )

    def click(self, state: SiteState, button: str) -> Transition:
        available = self.available_actions(state)["clickables"]
        if button == SEARCH_BUTTON and state.page == SEARCH:
            return Transition(state, "the search button is not clickable; use search[your query].")
        if button not in available:
            if state.page == SEARCH:
                why = "the search page has no buttons; use search[your query]."
            elif state.page == DONE:
                why = "the purchase is done; nothing can be clicked."
            else:
                shown = ", ".join(available[:12]) + (", ..." if len(available) > 12 else "")
                why = f"{_quote(button)} is not a button on this page; buttons: {shown}."
            return Transition(state, why)
        if button == BACK_TO_SEARCH:
            return Transition(SiteState(visited=state.visited))
        if state.page == RESULTS:
            if button == NEXT_PAGE:
                return Transition(replace(state, results_page=state.results_page + 1))
            if button == PREV_PAGE:
                return Transition(replace(state, results_page=state.results_page - 1))
            item = self.catalog.index_of(button)
            assert item is not None
            visited = state.visited if item in state.visited else (*state.visited, item)
            session = state.session_items
            session = session if item in session else (*session, item)
            return Transition(
                replace(state, page=ITEM, item=item, visited=visited, session_items=session)
            )
        if state.page == ITEM:
            if button == PREV_PAGE:
                return Transition(replace(state, page=RESULTS, item=None, options=()))
            if button == BUY_NOW:
                return Transition(replace(state, page=DONE), purchased=True)
            if button in self.sub_pages:
                return Transition(replace(state, page=SUB_PAGE, sub_page=button))
            assert state.item is not None
            return Transition(state.with_option(self.option_buttons(state.item)[button], button))
        # sub-page: the only other button is "< prev"
        return Transition(replace(state, page=ITEM, sub_page=None))

    # -- rendering --------------------------------------------------------------------
    def render(self, state: SiteState) -> str:
        if state.page == SEARCH:
            return "[search page] Type what you are looking for: search[your query]"
        if state.page == RESULTS:
            return self._render_results(state)
        if state.page == ITEM:
            return self._render_item(state)
        if state.page == SUB_PAGE:
            return self._render_sub_page(state)
        return self._render_done(state)

    def _render_results(self, state: SiteState) -> str:
        lines = [f"[{BACK_TO_SEARCH}]"]
        total = len(state.hits)
        lines.append(f"Page {state.results_page} (Total results: {total}) for: {state.query}")
        if state.results_page > 1:
            lines.append(f"[{PREV_PAGE}]")
        if NEXT_PAGE in self.available_actions(state)["clickables"]:
            lines.append(f"[{NEXT_PAGE}]")
        if not total:
            lines.append("No products match this query.")
        for i in self.page_hits(state):
            p = self.catalog.product(i)
            seen = " (visited)" if i in state.visited else ""
            lines += [f"[{p.asin}]{seen}", p.title, p.price_tag]
        return "\n".join(lines)

    def _render_item(self, state: SiteState) -> str:
        assert state.item is not None
        p = self.catalog.product(state.item)
        chosen = state.chosen
        lines = [f"You have clicked {v}." for v in chosen.values()]
        lines += [f"[{BACK_TO_SEARCH}]", f"[{PREV_PAGE}]"]
        for group, values in p.options:
            buttons = " ".join(f"[{v}]" for v in values)
            mark = f" (chosen: {chosen[group]})" if group in chosen else ""
            lines.append(f"{group}: {buttons}{mark}")
        lines += [p.title, f"Price: {p.price_tag}", f"Rating: {p.rating}"]
        lines += [f"[{b}]" for b in self.sub_pages]
        lines.append(f"[{BUY_NOW}]")
        return "\n".join(lines)

    def _render_sub_page(self, state: SiteState) -> str:
        assert state.item is not None
        p = self.catalog.product(state.item)
        lines = [f"[{BACK_TO_SEARCH}]", f"[{PREV_PAGE}]", f"{state.sub_page} of {p.asin}:"]
        if state.sub_page == "description":
            lines.append(p.description or "(no description)")
        elif state.sub_page == "features":
            lines += [f"- {b}" for b in p.bullet_points if b] or ["(no features listed)"]
        elif state.sub_page == "reviews":
            if not p.reviews:
                lines.append("No reviews found")
            for r in p.reviews:
                lines += [f'"{r.title}"', f"{r.score} out of 5 stars", r.body]
        else:
            lines += [f"- {a}" for a in p.attributes]
        return "\n".join(lines)

    def _render_done(self, state: SiteState) -> str:
        assert state.item is not None
        p = self.catalog.product(state.item)
        chosen = ", ".join(f"{g}: {v}" for g, v in state.options) or "none"
        return "\n".join(
            [
                "Thank you for shopping with us!",
                f"Purchased: [{p.asin}] {p.title} at {p.price_tag}",
                f"Options: {chosen}",
            ]
        )


def _quote(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
