"""``orch/WebShop-v0``: WebShop's text shopping environment (Yao et al. 2022).

The single-learner view of seed 004's WebShop benchmark: one policy reads an
instruction, searches the catalog, browses results and item pages, picks options
and buys. The website is ``orchenv.envs.webshop.site``, the reward
``orchenv.envs.webshop.reward``, the catalog ``generate`` (embedded, from a seed) or
``loaders`` (the original data files).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.envs.webshop.catalog import Catalog, CatalogSpec, get_catalog
from orchenv.envs.webshop.products import Goal
from orchenv.envs.webshop.reward import RewardBreakdown, webshop_reward
from orchenv.envs.webshop.search import SearchEngine, search_engine_for
from orchenv.envs.webshop.site import DONE, Outcome, Site, SiteState
from orchenv.error import ConfigError
from orchenv.parsing import strip_reasoning
from orchenv.pool import NO_AGENTS, AgentPool, Message
from orchenv.tasks import Task, TaskSource

log = logging.getLogger(__name__)

#: longest accepted search query (longer ones are refused as invalid, not truncated)
MAX_QUERY_CHARS = 1000

SYSTEM_PROMPT = """\
You are shopping on WebShop, a simulated online store, for a customer. Find the product \
that fits the customer's instruction, choose its options, and buy it.

Reply with exactly one action per turn:
- search[your query]: look for products (only on the search page, which has the search bar).
- click[button]: press one of the buttons listed under "Available actions" (a product ID \
on a results page, an option value, next >, < prev, back to search, description, features, \
reviews, buy now).
Clicking buy now ends the episode. The purchase scores 0 to 1 by how well the product, its \
attributes, the chosen options and its price fit the instruction. You have {max_steps} actions."""

_ACTION = re.compile(r"\A\s*(?:action\s*:\s*)?(search|click)\s*\[(.*)\]\s*\Z", re.I | re.S)


def parse_action(text: str) -> tuple[str | None, str | None, str | None]:
    """``(kind, argument, error)``: ``("search", "red shoes", None)`` or ``(None, None, why)``.

    Accepts ``search[...]`` / ``click[...]`` as the whole reply (``<think>`` blocks and an
    ``Action:`` prefix are ignored) or as its last non-empty line (ReAct-style
    ``Thought: ...`` then the action). The argument is stripped and lowercased, as the
    original does. Never raises; linear in the length of ``text``.
    """
    visible = strip_reasoning(text)
    match = _ACTION.match(visible)
    if match is None:
        tail = visible.rstrip()
        last = tail[tail.rfind("\n") + 1 :]
        match = _ACTION.match(last)
    if match is None:
        shown = visible.strip()
        shown = repr(shown if len(shown) <= 80 else shown[:80] + "...")
        return None, None, f"expected search[query] or click[button], got {shown}."
    kind, arg = match.group(1).lower(), match.group(2).strip().lower()
    if not arg:
        return (
            None,
            None,
            f"{kind}[...] is empty; put the {'query' if kind == 'search' else 'button'} inside the brackets.",
        )
    if kind == "search" and len(arg) > MAX_QUERY_CHARS:
        return None, None, f"the search query has {len(arg)} characters; at most {MAX_QUERY_CHARS}."
    return kind, arg, None


class WebShopEnv(OrchestrationEnv):
    """Shop for a product that fits an instruction: search, browse, choose options, buy.

    ## Description
    WebShop (Yao et al. 2022) in text mode, as seed 004 uses it. Each episode draws
    an instruction goal (a product type with attributes, one value per option group
    and a price bound), e.g. "i need t-shirt for men which is machine wash with color:
    black, and size: large, and price lower than 30.00 dollars". The policy starts on
    the search page, searches the catalog (BM25 over titles, attributes, category
    and options; 50 hits, 10 per page), opens items, reads their description /
    features / reviews sub-pages, chooses options and buys. There is no agent pool
    here: the policy is the shopper (``info["calls"]`` is empty, cost 0); the
    Planner / Searcher / Recommender team view is ``WebShopRoleGame``.

    ## Action format
    ``search[query]`` (only where the page has the search bar) or ``click[button]``
    with a button the page offers (``info["available_actions"]["clickables"]``:
    ``back to search``, ``next >``, ``< prev``, product ASINs, option values,
    ``description``, ``features``, ``reviews``, ``buy now``). Case does not matter;
    ``<think>`` blocks, an ``Action:`` prefix, or reasoning lines before the action
    on its last line are allowed. Anything else, a search without a search bar, a
    button the page does not have, or a query over 1,000 characters is invalid:
    the state stays as it was, the step is used up, the reward is
    ``format_penalty`` (default 0.0) and ``info["parse_error"]`` says why.

    ## Observation
    One string: the rules (system message), the instruction, the current page as
    text, the step count and the available actions (``search[<query>]`` and
    ``click[...]`` lines); ``info["messages"]`` holds the same as chat messages.
    ``info["available_actions"]`` is ``{"has_search_bar": bool, "clickables": [...]}``
    as the original env's ``get_available_actions()``; ``info["page"]`` names the page.

    ## Rewards
    Zero until ``click[buy now]``, then the paper's purchase reward in [0, 1]:
    ``r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price]) /
    (|U_att| + |U_opt| + 1)``, with U the goal's attributes, options and price
    bound and Y the bought product's (see ``orchenv.envs.webshop.reward`` for the
    matching rules and ``r_type``). ``info["reward_parts"]`` gives the parts.
    Invalid actions add ``format_penalty`` (<= 0).

    ## Episode end
    Terminated by ``click[buy now]``; truncated after ``max_steps`` actions (default
    15) without a purchase (score 0). The last ``info`` carries ``score`` (the
    reward, a float in [0, 1]), ``success`` (score == 1, WebShop's success rate),
    ``task_id``, ``final_answer`` (``{"asin", "title", "options", "price"}`` of the
    bought item, or None) and ``turns``; ``info["privileged"]["goal"]`` holds the
    goal for analysis (policies must not read it).

    ## Arguments
    ``source``: ``"generated"`` (default; an embedded catalog of ``num_products``
    products and ``num_goals`` goals from ``catalog_seed``, ``test_fraction`` of the
    goals in ``test``) or ``"files"`` (the original ``items_shuffle*.json``,
    ``items_ins_v2*.json``, ``items_human_ins.json`` in ``data_dir`` or
    ``$WEBSHOP_DATA``; ``goals="human"`` or ``"synthetic"``; ``num_products=None``
    reads all). ``split``: ``train`` / ``test`` (files: also ``eval``).
    ``show_attrs`` adds the original's optional ``attributes`` sub-page.
    ``reset(options={"task_id": ...})`` picks a goal, ``{"task_index": i}`` the
    i-th goal of the split, ``{"goal": Goal(...)}`` a custom goal. The catalog and
    its search index are built on the first ``reset`` and shared across envs,
    forks and copies in the process.

    ## Version history
    - v0: initial version.
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = (
        "_pool",
        "_task_source",
        "_catalog",
        "_search",
        "_site",
    )

    def __init__(
        self,
        *,
        source: str = "generated",
        num_products: int | None = 1000,
        num_goals: int = 1000,
        catalog_seed: int = 0,
        test_fraction: float = 0.2,
        data_dir: str | None = None,
        goals: str = "human",
        split: str = "train",
        max_steps: int = 15,
        show_attrs: bool = False,
        format_penalty: float = 0.0,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        if max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
        if format_penalty > 0:
            raise ConfigError(
                f"format_penalty is added to the reward of an invalid action and must be <= 0, "
                f"got {format_penalty}"
            )
        self.spec_catalog = CatalogSpec(
            source=source,
            num_products=num_products,
            num_goals=num_goals,
            test_fraction=test_fraction,
            seed=catalog_seed,
            data_dir=data_dir,
            goals=goals,
        )
        self.split = split
        self.max_steps = max_steps
        self.show_attrs = show_attrs
        self.format_penalty = float(format_penalty)
        self._catalog: Catalog | None = None
        self._search: SearchEngine | None = None
        self._site: Site | None = None
        # episode state
        self.goal: Goal | None = None
        self.state = SiteState()
        self._notice = ""
        self._result: RewardBreakdown | None = None

    # -- collaborators, built lazily and shared -----------------------------------------
    def _ensure_built(self) -> None:
        if self._catalog is None:
            self._catalog = get_catalog(self.spec_catalog)
            self._task_source = self._catalog.tasks
            self._task_source.check_split(self.split)
        if self._search is None:
            self._search = search_engine_for(self._catalog)
        if self._site is None:
            self._site = Site(self._catalog, self._search, show_attrs=self.show_attrs)

    @property
    def catalog(self) -> Catalog:
        self._ensure_built()
        assert self._catalog is not None
        return self._catalog

    @property
    def site(self) -> Site:
        self._ensure_built()
        assert self._site is not None
        return self._site

    @property
    def task_source(self) -> TaskSource:
        self._ensure_built()
        return self._task_source

    @property
    def pool(self) -> AgentPool:
        """No agents in this view (an empty stand-in, so pool-generic code still works)."""
        return NO_AGENTS  # type: ignore[return-value]

    # -- observation --------------------------------------------------------------------
    def available_actions(self) -> dict[str, Any]:
        return self.site.available_actions(self.state)

    def action_lines(self) -> list[str]:
        available = self.available_actions()
        lines = ["search[<your query>]"] if available["has_search_bar"] else []
        return lines + [f"click[{c}]" for c in available["clickables"]]

    def _messages(self) -> list[Message]:
        assert self.goal is not None
        parts = [f"Instruction: {self.goal.instruction}", self.site.render(self.state)]
        if self.state.page != DONE:
            parts.append(f"(Step {self.turn + 1} of {self.max_steps}.)")
            parts.append("Available actions:\n" + "\n".join(self.action_lines()))
        if self._notice:
            parts.append(f"Your last action could not be used: {self._notice}")
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_steps=self.max_steps)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation(self) -> tuple[str, dict[str, Any]]:
        messages = self._messages()
        return self.render_messages(messages), {
            "messages": messages,
            "available_actions": self.available_actions(),
            "page": self.state.page,
            "chosen_options": self.state.chosen,
            "instruction": self.goal.instruction if self.goal else "",
        }

    # -- episode ------------------------------------------------------------------------
    def _pick_goal(self, options: Mapping[str, Any]) -> Goal:
        custom = options.get("goal")
        if custom is not None:
            if not isinstance(custom, Goal):
                raise ConfigError(f"options['goal'] must be a Goal, got {type(custom).__name__}")
            if self.catalog.index_of(custom.asin) is None:
                raise ConfigError(f"the goal's ASIN {custom.asin!r} is not in the catalog")
            return custom
        task: Task = self.pick_task(options)
        return task.meta["goal"]

    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        self.goal = self._pick_goal(options)
        self.task = self.goal
        self.state = SiteState()
        self._notice = ""
        self._result = None
        obs, extra = self._observation()
        extra["task_id"] = self.goal.id
        return obs, extra

    def _apply(self, action: str) -> tuple[Outcome, str | None]:
        kind, arg, error = parse_action(action)
        if error is not None:
            return Outcome(self.state, error), error
        assert arg is not None
        outcome = (
            self.site.search(self.state, arg)
            if kind == "search"
            else self.site.click(self.state, arg)
        )
        return outcome, outcome.error

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.goal is not None
        self.turn += 1
        self.transcript.append({"turn": self.turn, "role": "controller", "text": action})
        outcome, error = self._apply(action)
        self.state = outcome.state
        extra: dict[str, Any] = {"task_id": self.goal.id}
        reward = 0.0
        if error is not None:
            reward += self.format_penalty
            self._notice = error
            extra.update(invalid_action=True, parse_error=error)
        else:
            self._notice = ""
        terminated = outcome.purchased
        truncated = not terminated and self.turn >= self.max_steps
        if terminated:
            assert self.state.item is not None
            product = self.catalog.product(self.state.item)
            self._result = webshop_reward(product, self.goal, self.state.chosen)
            reward += self._result.reward
            extra["reward_parts"] = self._result.as_dict()
            extra["final_answer"] = {
                "asin": product.asin,
                "title": product.title,
                "options": self.state.chosen,
                "price": product.price,
            }
        if terminated or truncated:
            score = self._result.reward if self._result else 0.0
            extra.setdefault("final_answer", None)
            extra.update(score=float(score), success=score >= 1.0 - 1e-9, turns=self.turn)
            extra["privileged"] = {"goal": self.goal.as_dict()}
        obs, obs_extra = self._observation()
        extra.update(obs_extra)
        return obs, reward, terminated, truncated, extra

    # -- helpers for tests and demos ------------------------------------------------------
    def demo_action(self, rng: np.random.Generator) -> str:
        """A random available action: a search with some instruction words, or a click."""
        available = self.available_actions()
        if available["has_search_bar"]:
            words = (self.goal.instruction if self.goal else "product").split()
            k = int(rng.integers(1, min(6, len(words)) + 1))
            picked = sorted(rng.choice(len(words), size=k, replace=False))
            return "search[" + " ".join(words[i] for i in picked) + "]"
        clickables = available["clickables"]
        if not clickables:
            return "click[back to search]"  # the done page: nothing is available
        return f"click[{clickables[int(rng.integers(len(clickables)))]}]"
