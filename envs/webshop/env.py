"""``orch/WebShop-v0``: WebShop's text shopping environment (Yao et al. 2022).

The single-learner view of seed 004's WebShop benchmark: one policy reads an
instruction, searches the catalog, browses results and item pages, picks options
and buys. The website is ``orchenv.envs.webshop.site``, the reward
``orchenv.envs.webshop.reward``, the catalog ``generate`` (embedded, from a seed) or
``loaders`` (the original data files).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.core import NO_POOL_OWN_TASKS, OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.webshop import original
from orchenv.envs.webshop.catalog import Catalog, CatalogSpec, get_catalog
from orchenv.envs.webshop.choices import canonical_choices, page_features, shortcuts, slot_count
from orchenv.envs.webshop.products import Goal
from orchenv.envs.webshop.reward import REWARD_RULES, RewardBreakdown, webshop_reward
from orchenv.envs.webshop.search import search_engine_for
from orchenv.envs.webshop.site import DONE, SEARCH_BUTTON, Site, SiteState
from orchenv.envs.webshop.text import page_nodes, render_text, render_text_rich
from orchenv.error import ConfigError, UnknownNameError
from orchenv.parsing import is_placeholder, strip_reasoning
from orchenv.pool import NO_AGENTS, Message
from orchenv.seeding import sealed_int
from orchenv.tasks import SealedTaskSource, Task, TaskSource

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: observation modes: the original text env's two, and orchenv's chat prompt
OBSERVATION_MODES = ("text", "text_rich", "chat")
#: longest accepted search query (longer ones are refused as invalid, not truncated)
MAX_QUERY_CHARS = 1000

SYSTEM_PROMPT = """\
You are shopping on WebShop, a simulated online store, for a customer. Find the product \
that fits the customer's instruction, choose its options, and buy it.

Reply with exactly one action per turn:
- search[your query]: look for products.
- click[button]: press one of the buttons listed under "Available actions" (a product ID \
on a results page, an option value, next >, < prev, back to search, description, features, \
reviews, buy now).
Clicking buy now ends the episode. The purchase scores 0 to 1 by how well the product, its \
attributes, the chosen options and its price fit the instruction. You have {max_turns} actions."""

_ACTION = re.compile(r"\A\s*(?:action\s*:\s*)?(search|click)\s*\[(.*)\]\s*\Z", re.I | re.S)


#: bracket contents copied from the format lines (``search[your query]``, ``click[button]``)
PLACEHOLDER_ARGUMENTS = frozenset(
    {"query", "your query", "<your query>", "search terms", "button", "<button>", "product id"}
)
#: words left out of the example query built from an instruction
_FILLER = frozenset(
    [
        "i",
        "a",
        "an",
        "the",
        "and",
        "or",
        "to",
        "for",
        "with",
        "it",
        "is",
        "that",
        "be",
        "should",
        "want",
        "need",
        "would",
        "like",
        "looking",
        "buy",
        "find",
        "me",
        "my",
        "of",
        "in",
        "on",
        "than",
        "less",
        "lower",
        "price",
        "dollars",
    ]
)


def example_search(instruction: str) -> str:
    """A filled-in search for the notice: the first content words of the instruction."""
    words = [w.strip(",.;:!?") for w in instruction.lower().split()]
    kept = [w for w in words if w and w not in _FILLER][:6]
    return f"search[{' '.join(kept) or 'product'}]"


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
    if arg in PLACEHOLDER_ARGUMENTS or (arg and is_placeholder(arg)):
        what = "your own search terms" if kind == "search" else "a button's exact text"
        return (
            None,
            None,
            f"{kind}[{arg[:40]}] holds a placeholder; put {what} inside the brackets.",
        )
    if not arg:
        return (
            None,
            None,
            f"{kind}[...] is empty; put the {'query' if kind == 'search' else 'button'} inside the brackets.",
        )
    if kind == "search" and len(arg) > MAX_QUERY_CHARS:
        return None, None, f"the search query has {len(arg)} characters; at most {MAX_QUERY_CHARS}."
    return kind, arg, None


def sealed_catalog_spec(public: CatalogSpec, secret: str) -> CatalogSpec:
    """The catalog of a sealed WebShop env (a board's sealed plan; ``sealed``): ``public``'s
    recipe with its seed replaced by an HMAC of the board's ``secret`` and the public recipe
    (``orchenv.seeding.sealed_int``, label ``"webshop-tasks"``), so its products, ASINs,
    target products and instructions cannot be generated from public code. Only a generated
    catalog can be sealed: the original's files (``source="files"``) and their instructions
    are public, so a sealed env over them is a ``ConfigError``."""
    if public.source != "generated":
        raise ConfigError(
            'a sealed WebShop env needs the generated catalog (source="generated"): the '
            "original's files and their human instructions are public, so their sealed tasks "
            "would be the public ones"
        )
    seed = sealed_int(
        secret.encode("utf-8"),
        "webshop-tasks",
        public.seed,
        public.num_products,
        public.num_goals,
        public.test_fraction,
    )
    return replace(public, seed=seed % 2**32)


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
    ``search[query]`` (from any page; with ``protocol="orchenv"`` only on the search page) or ``click[button]``
    with a button the page offers (``info["available_actions"]["clickables"]``:
    ``back to search``, ``next >``, ``< prev``, product ASINs, option values,
    ``description``, ``features``, ``reviews``, ``buy now``). Case does not matter;
    ``<think>`` blocks, an ``Action:`` prefix, or reasoning lines before the action
    on its last line are allowed. Anything else, a search without a search bar, a
    button the page does not have, or a query over 1,000 characters is invalid:
    the state stays as it was, the step is used up, the reward is
    ``format_penalty`` (default 0.0) and ``info["parse_error"]`` says why.

    ## Observation
    ``observation_mode="text"`` (default): the page as the original text env renders it
    (`` [SEP] ``-joined texts, ``orchenv.envs.webshop.text``), nothing added, also after
    an unusable action; ``"text_rich"`` its rich form. ``"chat"``:
    one string: the rules (system message), the instruction, the current page as
    text, the step count and the available actions (``search[<query>]`` and
    ``click[...]`` lines), and after an invalid action the shared notice ("Your
    previous reply could not be used: <why> Reply with one of the available
    actions."); ``info["messages"]`` holds the same as chat messages.
    ``info["available_actions"]`` is ``{"has_search_bar": bool, "clickables": [...]}``
    as the original env's ``get_available_actions()``; ``info["page"]`` names the
    page, ``info["chosen_options"]`` maps option group -> value and
    ``info["instruction"]`` is the instruction.

    ## Rewards
    Zero until ``click[buy now]``, then the paper's purchase reward in [0, 1] by master's
    rules (``reward="original"``; ``orchenv.envs.webshop.original``):
    ``r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price]) /
    (|U_att| + |U_opt| + 1)``, with U the goal's attributes, options and price
    bound and Y the bought product's (see ``orchenv.envs.webshop.reward`` for the
    matching rules and ``r_type``). ``info["reward_parts"]`` gives the parts.
    Invalid actions add ``format_penalty`` (<= 0).

    ## Episode end
    ``terminated`` by ``click[buy now]`` (the action that ends the episode);
    ``truncated`` when ``max_turns`` actions (default 100) pass without a purchase
    (score 0). The last ``info`` carries ``score`` (the reward, a float in [0, 1]),
    ``success`` (score == 1, WebShop's success rate), both also in ``metrics``,
    ``correct`` (equal to ``success``: what run records and boards count as accuracy),
    ``task_id``, ``final_answer`` (``{"asin", "title", "options", "price"}`` of the
    bought item, or None) and ``turns``; ``info["privileged"]["goal"]`` holds the
    goal for analysis (policies must not read it).

    ## Arguments
    - ``source``: ``"generated"`` (default; an embedded catalog) or ``"files"`` (the
      original ``items_shuffle*.json``, ``items_ins_v2*.json``, ``items_human_ins.json``
      in ``data_dir`` or ``$WEBSHOP_DATA``).
    - ``num_products``: products in the catalog (default 1,000; with ``"files"``,
      ``None`` reads all).
    - ``num_goals``: goals of a generated catalog (default 1,000).
    - ``catalog_seed``: the seed of a generated catalog (files: of goal shuffling,
      price bounds and prices inside price ranges).
    - ``test_fraction``: the share of a generated catalog's goals in ``test`` (0.2).
    - ``data_dir``: the folder of the original data files (``"files"`` only).
    - ``goals``: ``"human"`` (default) or ``"synthetic"`` instructions (``"files"`` only).
    - ``show_attrs``: add the original's optional ``attributes`` sub-page.
    - ``reward``: ``"original"`` (default; master's ``get_reward``, needs the ``webshop``
      extra) or ``"approx"`` (orchenv's earlier dependency-free rule, a departure).
    - ``observation_mode``: ``"text"`` (default; the original's `` [SEP] `` text),
      ``"text_rich"`` (its rich text) or ``"chat"`` (orchenv's earlier prompt).
    - ``protocol``: ``"original"`` (default; search from any page, ``next >`` always,
      clickables as the original lists them) or ``"orchenv"`` (the earlier strict one).
    - ``index_fields``: ``"original"`` (title, description, first bullet, options) or
      ``"extended"`` (plus attributes and category path, a departure).

    ``reset(options={"task_id": ...})`` picks a goal, ``{"task_index": i}`` the i-th
    goal of the split, ``{"goal": Goal(...)}`` a custom goal. The catalog and its
    search index are built on first use and shared across envs, forks and copies in
    the process.

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``; ``choices.py``),
    fixed slots read from the page and the instruction, never from the goal: 0
    ``search[instruction]``; 1-3 ``back to search``, ``< prev``, ``next >``; 4-13 the
    results page's products in listed order; 14-29 the item page's option values in the
    product's order (16 slots); then ``description``, ``features``, ``reviews`` (and
    ``attributes`` with ``show_attrs``) and ``buy now``. A slot the page lacks is ``None``.
    ``audit_strategies()`` names the shortcuts the audit must find clearly worse than the
    best response. ``observation_features()`` adds the page (one-hot), which option slots
    the instruction names, and the share of option groups chosen.

    ## Shared arguments
    - ``pool``: none (``None``, or ``"none"``: the name of its empty pool, which board specs
      and run records use); any other pool is a ``ConfigError``.
    - ``split``: ``"train"`` or ``"test"`` (files: also ``"eval"``).
    - ``sealed`` (a board's sealed plan): the generated catalog is built with its seed mixed
      with the board's secret (``sealed_catalog_spec``), so the products, the goals' target
      products and their instructions differ from every public catalog and cannot be
      generated from public code; a sealed goal whose instruction a public split also has is
      never drawn, the task id is opaque, and the options that choose a task (``task_id``,
      ``task_index``, ``goal``) are refused. The original's files (``source="files"``) are
      public and cannot be sealed (``ConfigError``). The public catalog (``catalog_seed``) is
      unchanged.
    - ``max_turns``: 100 by default (the original has no limit; its RL baselines stop at 100).
    - ``format_penalty``: must be <= 0 (default 0.0).

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``max_steps``), the notice after an invalid action is the
      shared one ("Your previous reply could not be used: ..."; it was "Your last
      action could not be used: ..."), and ``info["metrics"]`` holds ``score`` and
      ``success``. Pages, rewards and the horizon rule are unchanged.
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = ("_pool", "_task_source", "_catalog", "_site")
    format_reminder: ClassVar[str] = "Reply with one of the available actions."

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "max_turns": 100,
    }

    #: the learner acts alone on tasks of its own (passing one of these is an error); ``pool``
    #: is taken only as ``None`` or ``"none"`` (see "Shared arguments")
    unused_shared_arguments = tuple(a for a in NO_POOL_OWN_TASKS if a != "pool")

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
        show_attrs: bool = False,
        reward: str = "original",
        observation_mode: str = "text",
        protocol: str = "original",
        index_fields: str = "original",
        **shared: Unpack[SharedArguments],
    ) -> None:
        pool = shared.pop("pool", None)
        if pool is not None and pool != NO_AGENTS.name:
            raise ConfigError(
                f"WebShopEnv does not use pool (the policy is the shopper: there is no agent "
                f"to call), got {str(pool)[:200]!r}; pass none, or pool={NO_AGENTS.name!r}, the "
                "name of its empty pool (what a board spec and run.json name)"
            )
        super().__init__(**shared)
        if self.format_penalty > 0:
            raise ConfigError(
                f"format_penalty is added to the reward of an invalid action and must be <= 0, "
                f"got {self.format_penalty}"
            )
        if reward not in REWARD_RULES:
            raise UnknownNameError("WebShop reward", reward, REWARD_RULES)
        if observation_mode not in OBSERVATION_MODES:
            raise UnknownNameError("WebShop observation_mode", observation_mode, OBSERVATION_MODES)
        if reward == "original":
            original.check_available()  # fail now, not at the first purchase
        #: the public catalog's recipe (``catalog_seed``): what public code can rebuild
        self.public_catalog = CatalogSpec(
            source=source,
            num_products=num_products,
            num_goals=num_goals,
            test_fraction=test_fraction,
            seed=catalog_seed,
            data_dir=data_dir,
            goals=goals,
            index_fields=index_fields,
        )
        #: the catalog episodes play: the public one, or in a sealed env (``sealed``) the
        #: same recipe with a seed mixed with the board's secret (``sealed_catalog_spec``)
        self.spec_catalog = (
            self.public_catalog
            if self._sealed is None
            else sealed_catalog_spec(self.public_catalog, self._sealed)
        )
        self.show_attrs = show_attrs
        self.reward_rule = reward
        self.observation_mode = observation_mode
        self.protocol = protocol
        if protocol not in ("original", "orchenv"):
            raise UnknownNameError("WebShop protocol", protocol, ("original", "orchenv"))
        self._catalog: Catalog | None = None
        self._site: Site | None = None
        # episode state
        self.goal: Goal | None = None
        self.state = SiteState()
        self._result: RewardBreakdown | None = None

    # -- collaborators, built lazily and shared -----------------------------------------
    @property
    def catalog(self) -> Catalog:
        """The products and goals (built on first use, then shared in the process)."""
        if self._catalog is None:
            self._catalog = get_catalog(self.spec_catalog)
        return self._catalog

    @property
    def site(self) -> Site:
        """The shop over the catalog and its search index (built on first use)."""
        if self._site is None:
            catalog = self.catalog
            self._site = Site(
                catalog,
                search_engine_for(catalog),
                show_attrs=self.show_attrs,
                protocol=self.protocol,
            )
        return self._site

    def _build_task_source(self) -> TaskSource:
        if self._sealed is None:
            return self.catalog.tasks
        # a sealed catalog's goals, less any whose instruction a public split also has
        public = get_catalog(self.public_catalog)
        return SealedTaskSource(self.catalog.tasks, public.tasks, tag=repr(self.public_catalog))

    # -- observation --------------------------------------------------------------------
    def available_actions(self) -> dict[str, Any]:
        return self.site.available_actions(self.state)

    def action_lines(self) -> list[str]:
        available = self.available_actions()
        lines = ["search[<your query>]"] if available["has_search_bar"] else []
        return lines + [f"click[{c}]" for c in available["clickables"] if c != SEARCH_BUTTON]

    def page_text(self) -> str:
        """The current page as the original text env shows it (``observation_mode``
        ``"text"`` or ``"text_rich"``; ``orchenv.envs.webshop.text``)."""
        assert self.goal is not None
        reward = self._result.reward if self._result is not None else None
        nodes = page_nodes(self.site, self.state, self.goal.instruction, reward)
        if self.observation_mode == "text_rich":
            return render_text_rich(self.site, self.state, nodes)
        return render_text(nodes)

    def _with_notice(self, messages: list[Message]) -> list[Message]:
        # the original shows an unusable action nothing but the unchanged page
        if self.observation_mode != "chat":
            return messages
        return super()._with_notice(messages)

    def _messages(self) -> list[Message]:
        assert self.goal is not None
        if self.observation_mode != "chat":
            return [{"role": "user", "content": self.page_text()}]
        parts = [f"Instruction: {self.goal.instruction}", self.site.render(self.state)]
        if self.state.page != DONE:
            parts.append(self.turn_line("Step"))
            parts.append("Available actions:\n" + "\n".join(self.action_lines()))
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=self.max_turns)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation_info(self) -> dict[str, Any]:
        return {
            "available_actions": self.available_actions(),
            "page": self.state.page,
            "chosen_options": self.state.chosen,
            "instruction": self.goal.instruction if self.goal else "",
        }

    # -- episode ------------------------------------------------------------------------
    def _custom_task(self, goal: Any) -> Task:
        """The task of ``reset(options={"goal": Goal(...)})``: a goal on this catalog."""
        if not isinstance(goal, Goal):
            raise ConfigError(f"options['goal'] must be a Goal, got {type(goal).__name__}")
        if self.catalog.index_of(goal.asin) is None:
            raise ConfigError(f"the goal's ASIN {goal.asin!r} is not in the catalog")
        return Task(id=goal.id, prompt=goal.instruction, answers=(goal.asin,), meta={"goal": goal})

    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        custom = options.get("goal")
        if custom is not None and self._sealed is not None:
            raise ConfigError(
                "a sealed env draws its own tasks: reset option 'goal' is refused (the board "
                "assigns sealed tasks; nobody chooses them)"
            )
        self.task = self.pick_task(options) if custom is None else self._custom_task(custom)
        self.goal = self.task.meta["goal"]
        self.state = SiteState()
        self._result = None
        return {}

    def _apply(self, action: str) -> Outcome:
        assert self.goal is not None
        kind, arg, error = parse_action(action)
        if error is not None:  # the notice shows a valid action for this page (issue 31)
            available = self.available_actions()
            clicks = [c for c in available["clickables"] if c != SEARCH_BUTTON]
            example = (
                example_search(self.goal.instruction)
                if available["has_search_bar"] or not clicks
                else f"click[{clicks[0]}]"
            )
            return Outcome(error=f"{error.rstrip('.')}. A valid action now, for example: {example}")
        assert arg is not None
        move = (
            self.site.search(self.state, arg)
            if kind == "search"
            else self.site.click(self.state, arg)
        )
        self.state = move.state
        if not move.purchased:
            return Outcome(error=move.error)
        assert self.state.item is not None
        product = self.catalog.product(self.state.item)
        self._result = webshop_reward(product, self.goal, self.state.chosen, rule=self.reward_rule)
        return Outcome(
            reward=self._result.reward,
            done=True,
            info={"reward_parts": self._result.as_dict()},
        )

    def _summary(self) -> dict[str, Any]:
        assert self.goal is not None
        final: dict[str, Any] | None = None
        score = 0.0
        if self._result is not None:
            assert self.state.item is not None
            product = self.catalog.product(self.state.item)
            final = {
                "asin": product.asin,
                "title": product.title,
                "options": self.state.chosen,
                "price": product.price,
            }
            score = float(self._result.reward)
        success = score >= 1.0 - 1e-9
        return {
            "final_answer": final,
            "score": score,
            "success": success,
            "correct": success,  # what run records and boards count as accuracy
            "metrics": {"score": score, "success": float(success)},
            "privileged": {"goal": self.goal.as_dict()},
        }

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def action_choices(self) -> list[str | None]:
        """Fixed button slots of the current page (see "Discrete actions" above)."""
        if self.goal is None:
            return [None] * slot_count(self.site)
        return canonical_choices(self.site, self.state, self.goal.instruction)

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return shortcuts()

    #: the original paper's human experts: success rate 59.6% of 500 test instructions
    #: (Yao et al. 2022, Table 2), the closest published figure to "shops with the skill"
    realistic_skill: ClassVar[float | None] = 0.6
    realistic_skill_source: ClassVar[str] = (
        "WebShop (Yao et al. 2022): human experts reach a 59% success rate (abstract; the "
        "best trained agent 29%, the rule baseline 9.6%); s is the share of decisions taken "
        "with the goal in hand, not a success rate, so this is an order of magnitude"
    )

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The audit's skill reference: skilled, with the privileged goal, search the goal's
        words (the instruction without its option and price parts; the product's name
        after five result pages without it), open the goal's product, choose the goal's
        options, buy; otherwise go back. Unskilled: a uniformly random available choice."""
        if self.goal is None:
            return None
        if not skilled:
            available = [c for c in self.action_choices() if c is not None]
            return available[int(rng.integers(len(available)))] if available else None
        return goal_action(self, self.goal)

    def observation_features(self) -> np.ndarray:
        """The page (one-hot), which option slots the instruction names, the share of
        option groups chosen (``choices.page_features``)."""
        instruction = self.goal.instruction if self.goal else ""
        return np.array(page_features(self.site, self.state, instruction), dtype=np.float32)

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


def goal_action(env: WebShopEnv, goal: Any) -> str:
    """The next action of a shopper that knows ``goal`` (stateless ``GoalShopper``)."""
    from orchenv.envs.webshop.baselines import instruction_query
    from orchenv.envs.webshop.site import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE

    state, site = env.state, env.site
    clickables = set(site.available_actions(state)["clickables"])
    target = goal.asin.lower()
    if state.page == "search":
        return f"search[{instruction_query(goal.instruction)}]"
    if state.page == "results":
        asins = {site.catalog.asins[i].lower() for i in site.page_hits(state)}
        if target in asins:
            return f"click[{target}]"
        if NEXT_PAGE in clickables and state.results_page < 5 and state.hits:
            return f"click[{NEXT_PAGE}]"
        return f"search[{goal.name.lower()}]"
    if state.page == "item":
        if state.item is None or site.catalog.asins[state.item].lower() != target:
            return f"click[{PREV_PAGE}]" if PREV_PAGE in clickables else f"click[{BACK_TO_SEARCH}]"
        chosen = set(state.chosen.values())
        for _, value in goal.options:
            if value in clickables and value not in chosen:
                return f"click[{value}]"
        return f"click[{BUY_NOW}]"
    return f"click[{PREV_PAGE}]" if PREV_PAGE in clickables else f"click[{BACK_TO_SEARCH}]"
