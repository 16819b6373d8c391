"""A scripted WebShop shopper that knows the goal: a privileged upper-bound baseline.

``GoalShopper`` reads the goal (the env's ``goal``: privileged, as an oracle in the
papers' tables is), searches the instruction's words (without the option and price
parts), pages through the results to the goal's product, falls back to searching
the product's title when it is not among the hits, clicks the goal options and
buys. It shows what a perfect shopper scores with this catalog and search (1.0
whenever the product is found) and is the scripted player of the tests and example.
"""

from __future__ import annotations

import re
from typing import Any

from orchenv.envs.webshop.products import Goal
from orchenv.envs.webshop.site import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE

_TAIL = re.compile(r"(,? with [a-z ]+: .*|, and price lower than .*)$")


def instruction_query(instruction: str) -> str:
    """The instruction without its ``with size: ...`` and price parts."""
    return _TAIL.sub("", instruction.lower()).strip()


class GoalShopper:
    """``act(obs, info) -> action`` toward ``goal``; ``privileged = True``."""

    privileged = True

    def __init__(self, goal: Goal, *, max_result_pages: int = 5) -> None:
        self.goal = goal
        self.max_result_pages = max_result_pages
        self.queries = [instruction_query(goal.instruction), goal.name.lower()]
        self._searches = 0
        self._pages_seen = 0

    def act(self, obs: str, info: dict[str, Any]) -> str:
        available = info["available_actions"]
        clickables = available["clickables"]
        if available["has_search_bar"]:
            query = self.queries[min(self._searches, len(self.queries) - 1)]
            self._searches += 1
            self._pages_seen = 0
            return f"search[{query}]"
        page = info["page"]
        target = self.goal.asin.lower()
        if page == "results":
            self._pages_seen += 1
            if target in clickables:
                return f"click[{target}]"
            if NEXT_PAGE in clickables and self._pages_seen < self.max_result_pages:
                return f"click[{NEXT_PAGE}]"
            return f"click[{BACK_TO_SEARCH}]"
        if page == "item":
            chosen = set(info.get("chosen_options", {}).values())
            for _, value in self.goal.options:
                if value in clickables and value not in chosen:
                    return f"click[{value}]"
            return f"click[{BUY_NOW}]"
        if page == "item_sub_page":
            return f"click[{PREV_PAGE}]"
        return f"click[{BACK_TO_SEARCH}]"
