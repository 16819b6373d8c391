"""WebShop as a routed three-role team (seed 004, appendix G, Table 9).

Planner, Searcher and Recommender shop together through one ``SharedMemory``;
before a role acts, a router (``"full"``, ``"static"`` or ``"rcr"``, built by
``orchenv.teams.RoleGame`` from the tables below) picks the memory items it sees,
and that routed context is the role's observation. The shop itself is one ``WebShopEnv`` session
(one browser) that the Searcher and the Recommender drive:

* **Planner** (stage ``plan``) turns the instruction into constraints and a query:
  ``<plan>type, attributes, options, price bound</plan><query>search terms</query>``
  (stored as ``plan`` / ``query`` items; a new plan replaces the old one).
* **Searcher** (stage ``search``) navigates: ``search[...]``, ``click[next >]``,
  ``click[< prev]``, ``click[back to search]``, ``click[PRODUCT ID]``,
  ``click[description|features|reviews]``. Every page it reaches goes to memory as
  ``evidence`` (keyed by the page).
* **Recommender** (stage ``recommend``) decides: ``click[PRODUCT ID]``, option
  values, ``click[< prev]``, ``click[back to search]`` and ``click[buy now]``; it may
  add ``<answer>a ranked shortlist with reasons</answer>`` to memory.

Either may reply ``pass`` to leave the browser alone this round. After every
browser action the current page goes to memory as the ``state`` item ``browser``.
The team reward is the WebShop purchase reward, given to every role in the round
of the purchase; without a purchase by ``max_turns`` rounds the episode is truncated
with score 0. A role's malformed or out-of-role action changes nothing and its
info says why (``invalid_action``, ``parse_error``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from orchenv.backends.simulated import counted_completion
from orchenv.core import arguments_for
from orchenv.envs.webshop.baselines import instruction_query
from orchenv.envs.webshop.env import WebShopEnv, parse_action
from orchenv.envs.webshop.site import (
    BACK_TO_SEARCH,
    BUY_NOW,
    ITEM,
    NEXT_PAGE,
    PREV_PAGE,
    RESULTS,
)
from orchenv.memory import AgentOutput, RoutingSettings, TokenCounter, make_token_counter
from orchenv.parsing import extract_tag, remove_blocks, strip_reasoning
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message
from orchenv.teams import (
    RoleAECEnv,
    RoleGame,
    RoleParallelEnv,
    TeamRole,
    inner_env_kwargs,
    role_agent_pool,
)

#: the tagged blocks around a browser's command (removed in linear time by ``remove_blocks``;
#: an opening tag's attributes may not contain ``<``)
_TAG_OPEN = re.compile(r"<(?P<tag>plan|query|answer|note)\b[^<>]*>", re.I)
_TAG_CLOSE = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in ("plan", "query", "answer", "note")}
_WORD = re.compile(r"[a-z][a-z0-9'-]{3,}")
NAVIGATION = frozenset({BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE})


class WebShopRoleGame(RoleGame):
    """Planner / Searcher / Recommender over shared memory, shopping in one WebShop session.

    Arguments:
        max_turns: rounds before truncation (each role acts once per round).
        env_kwargs: ``WebShopEnv`` arguments for the shop (catalog, split, ...).
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        routing: changes to ``default_routing`` (``RoutingSettings``: RCR's budgets, eq. 4,
            and scorer, appendix E; the memory's duplicate test), as a ``RoutingSettings``
            or a mapping of the fields to change.
        token_counter: how memory items are measured (default: the 4-chars estimate).

    ``done`` in the round of the purchase (every role earns its score);
    ``truncated`` after ``max_turns`` rounds without one (score 0).
    """

    name = "webshop_roles"
    #: Table 9's roles in acting order: stage, appendix E's keywords K_i (the latest query's
    #: words are added per round) and the static baseline's slice
    team = (
        TeamRole(
            "planner",
            stage="plan",
            keywords=("no products match", "total results"),
            static_types=("task", "plan", "state"),
        ),
        TeamRole(
            "searcher",
            stage="search",
            keywords=("query", "page"),
            static_types=("task", "query", "state"),
        ),
        TeamRole(
            "recommender",
            stage="recommend",
            keywords=("price", "chosen", "you have clicked"),
            static_types=("task", "plan", "evidence", "state", "answer"),
        ),
    )
    #: each role's instructions (its system prompt)
    role_prompts: ClassVar[Mapping[str, str]] = {
        "planner": (
            "You are the Planner of a shopping team on WebShop, a simulated online store. Turn the "
            "customer's instruction into the constraints the product must meet and a search query: "
            "reply with the product type, attributes, options and maximum price inside a <plan> "
            "tag and the search terms inside a <query> tag. Revise them when the evidence shows the "
            "search went wrong. Example reply (for your own instruction, your own values): "
            "<plan>type: running shoes; attributes: lightweight, breathable; options: size 9, "
            "black; max price: 60 dollars</plan> <query>lightweight breathable running shoes men "
            "black</query>"
        ),
        "searcher": (
            "You are the Searcher of a shopping team on WebShop. You operate the search and results "
            "pages. Reply with one action: search[query] (on the search page), click[next >], "
            "click[< prev], click[back to search], click[PRODUCT ID] to inspect a product, or "
            "click[description] / click[features] / click[reviews] on a product page. The pages you "
            "reach are stored as evidence for the team. Reply pass to leave the browser to the "
            "Recommender."
        ),
        "recommender": (
            "You are the Recommender of a shopping team on WebShop. From the evidence, pick the "
            "product that fits the plan: open it with click[PRODUCT ID], choose each option with "
            "click[option value] (one per turn), and buy it with click[buy now]; click[< prev] or "
            "click[back to search] to reconsider. You may add <answer>your ranked shortlist and "
            "why</answer>. Reply pass to wait for more evidence."
        ),
    }
    #: preferred item types per stage (appendix E's T_t)
    stage_types: ClassVar[Mapping[str, Sequence[str]]] = {
        "plan": ("task", "plan", "state"),
        "search": ("query", "state"),
        "recommend": ("plan", "evidence", "state", "answer"),
    }
    #: eq. (4): seed 004's WebShop runs use B_i = 2048 (Table 10) for the Recommender, half
    #: of it for the Planner and the Searcher
    default_routing: ClassVar[RoutingSettings] = RoutingSettings(
        beta_base=2048, budget_offsets={"planner": -1024, "searcher": -1024}
    )

    def __init__(
        self,
        *,
        max_turns: int = 10,
        env_kwargs: Mapping[str, Any] | None = None,
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        token_counter: str | TokenCounter | None = "estimate",
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        # at most two browser actions a round: the Searcher's and the Recommender's
        self.shop = WebShopEnv(
            **inner_env_kwargs(env_kwargs, rounds=max_turns, actions_per_round=2)
        )
        self._final: dict[str, Any] = {}

    # -- RoleGame -------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> None:
        self.shop.reset(seed=int(self.np_random.integers(2**31)), options=options)
        assert self.shop.goal is not None
        self.memory.write(
            "user", "task", f"Instruction: {self.shop.goal.instruction}", round=0, key="task"
        )
        self._final = {}

    @property
    def instruction(self) -> str:
        return self.shop.goal.instruction if self.shop.goal else ""

    def _task_line(self) -> str:
        return f"Instruction: {self.instruction}"

    def _keywords(self) -> tuple[str, ...]:
        """Per-round keywords added to every role's list: the words of the latest query."""
        queries = [m.text for m in self.memory if m.type == "query"]
        return tuple(dict.fromkeys(_WORD.findall(queries[-1].lower()))) if queries else ()

    def _role_lines(self, role: str) -> list[str]:
        actions = self.allowed_actions(role)
        return ["Actions you may take now: " + ", ".join(actions)] if actions else []

    def allowed_actions(self, role: str) -> list[str]:
        """The actions ``role`` may take now (what its prompt lists)."""
        if role == "planner" or self.done or self.truncated:
            return []
        available = self.shop.available_actions()
        lines = ["pass"]
        if role == "searcher" and available["has_search_bar"]:
            lines.append("search[<query>]")
        lines += [f"click[{b}]" for b in available["clickables"] if self._role_may_click(role, b)]
        return lines

    def _role_may_click(self, role: str, button: str) -> bool:
        """Searcher: navigation, products, sub-pages. Recommender: back / prev, products,
        options, buy now. (``button`` is one the current page offers.)"""
        page = self.shop.state.page
        is_product = page == RESULTS and button not in NAVIGATION
        is_sub_page = button in self.shop.site.sub_pages
        if role == "searcher":
            return button in NAVIGATION or is_product or is_sub_page
        is_option = (
            page == ITEM and button not in NAVIGATION and button != BUY_NOW and not is_sub_page
        )
        return button in (BACK_TO_SEARCH, PREV_PAGE, BUY_NOW) or is_product or is_option

    def _act(self, role: str, text: str, **kwargs: Any) -> dict[str, Any]:
        return self._act_planner(text) if role == "planner" else self._act_browser(role, text)

    def _act_planner(self, text: str) -> dict[str, Any]:
        plan, query = extract_tag(text, "plan"), extract_tag(text, "query")
        if not plan and not query:
            return {
                "invalid_action": True,
                "parse_error": "expected <plan>constraints</plan> and <query>search terms</query>",
            }
        outputs = []
        if plan:
            outputs.append(AgentOutput("planner", plan, type="plan"))
        if query:
            outputs.append(AgentOutput("planner", query, type="query", key="planner:query"))
        stored = self.memory.update(outputs, self.round + 1)
        return {"invalid_action": False, "parse_error": None, "stored": len(stored)}

    def _act_browser(self, role: str, text: str) -> dict[str, Any]:
        answer = extract_tag(text, "answer") if role == "recommender" else None
        if answer:
            self.memory.update([AgentOutput(role, answer, type="answer")], self.round + 1)
        command = remove_blocks(text, _TAG_OPEN, _TAG_CLOSE, " ").strip()
        visible = strip_reasoning(command).strip().lower()
        if visible[visible.rfind("\n") + 1 :].strip() in ("pass", "action: pass"):
            return {"invalid_action": False, "parse_error": None, "action": "pass"}
        kind, arg, error = parse_action(command)
        if error is None:
            assert arg is not None
            offered = arg in self.shop.available_actions()["clickables"]
            if kind == "search" and role != "searcher":
                error = "only the Searcher searches; the Recommender clicks products, options and buy now."
            elif kind == "click" and offered and not self._role_may_click(role, arg):
                owner = "Recommender" if role == "searcher" else "Searcher"
                error = f"click[{arg}] is the {owner}'s action, not the {role}'s."
        if error is not None:
            return {"invalid_action": True, "parse_error": error}
        _, reward, terminated, _, info = self.shop.step(command)
        if info["invalid_action"]:
            return {"invalid_action": True, "parse_error": info["parse_error"]}
        page = self.shop.site.render(self.shop.state)
        if role == "searcher":
            self.memory.write(role, "evidence", page, round=self.round + 1, key=self._page_key())
        self.memory.write(
            role, "state", f"Current page:\n{page}", round=self.round + 1, key="browser"
        )
        if terminated:
            self._final = {
                key: info[key] for key in ("score", "success", "final_answer", "reward_parts")
            }
        return {
            "invalid_action": False,
            "parse_error": None,
            "action": f"{kind}[{arg}]",
            "page": info["page"],
        }

    def _page_key(self) -> str:
        state = self.shop.state
        if state.page == RESULTS:
            return f"results {state.query!r} page {state.results_page}"
        asin = self.shop.catalog.asins[state.item] if state.item is not None else "-"
        return f"{state.sub_page or 'item'} {asin}"

    def _end_round(self) -> None:
        if self._final:
            self.done = True
            self.round_rewards = {role: float(self._final["score"]) for role in self.roles}

    def _on_truncate(self) -> None:
        self._final = {"score": 0.0, "success": False, "final_answer": None}

    def summary(self) -> dict[str, Any]:
        assert self.shop.goal is not None
        return {**self._final, "task_id": self.shop.goal.id}


def webshop_aec_env(**kwargs: Any) -> RoleAECEnv:
    """PettingZoo AEC view (roles act in turn, each sees this round's earlier writes)."""
    return RoleAECEnv(WebShopRoleGame(**kwargs))


def webshop_parallel_env(**kwargs: Any) -> RoleParallelEnv:
    """PettingZoo parallel view (every role acts each round on the round's start memory)."""
    return RoleParallelEnv(WebShopRoleGame(**kwargs))


# -- a simulated team (seed 004's Table 10 in simulation) -----------------------------------
_INSTRUCTION_LINE = re.compile(r"^Instruction: (.+)$", re.M)
_ACTIONS_LINE = re.compile(r"^Actions you may take now: (.+)$", re.M)
_CLICK = re.compile(r"click\[([^\]]+)\]")
_QUERY_ITEM = re.compile(r"type: query\n(?:  key: .*\n)?  text: \|?\s*\n?\s*(.+)")
_PRODUCT = re.compile(r"^\s*\[(B[0-9A-Z]{9})\](?: \(visited\))?\n\s*(.+)$", re.M)
_OPTION_LINE = re.compile(r"^\s*([a-z][a-z ]*): ((?:\[[^\]]+\] ?)+)(?:\(chosen: ([^)]+)\))?$", re.M)
_WANTED_OPTION = re.compile(r"([a-z][a-z ]*): ([^,]+?)(?:,|$| and price)")


def simulated_role_reply(role: str, prompt: str) -> str:
    """What a simulated WebShop role replies to its prompt, reading nothing else (no goal).

    * Planner: the instruction as the plan, its words without option and price parts
      (``baselines.instruction_query``) as the query.
    * Searcher: ``search[...]`` with the newest query routed to it (the instruction's words
      when none is), then ``pass``.
    * Recommender: on the results page, opens the clickable product whose title, as far
      as its routed memory shows one, shares the most words with the instruction (the
      first product when no title is routed to it: a blind pick); on a product page,
      clicks the instruction's option values for groups the routed page shows unchosen,
      then ``buy now``.

    So routing decides what the Recommender can compare: a product list or product page
    missing from its context makes it pick blindly or buy without options.
    """
    found = _INSTRUCTION_LINE.search(prompt)
    instruction = found.group(1).strip() if found else ""
    line = _ACTIONS_LINE.search(prompt)
    actions = line.group(1) if line else ""
    clickables = _CLICK.findall(actions)
    if role == "planner":
        return f"<plan>wanted: {instruction}</plan><query>{instruction_query(instruction)}</query>"
    if role == "searcher":
        if "search[<query>]" not in actions:
            return "pass"
        queries = _QUERY_ITEM.findall(prompt)
        query = queries[-1].strip().strip('"') if queries else instruction_query(instruction)
        return f"search[{query}]"
    if BUY_NOW in clickables:
        return f"click[{_next_option(instruction, prompt, clickables) or BUY_NOW}]"
    products = [c for c in clickables if re.fullmatch(r"b[0-9a-z]{9}", c)]
    if not products:
        return "pass"
    wanted = set(_WORD.findall(instruction_query(instruction)))
    titles = {asin.lower(): title for asin, title in _PRODUCT.findall(prompt)}

    def overlap(asin: str) -> int:
        return len(wanted & set(_WORD.findall(titles.get(asin, "").lower())))

    return f"click[{max(products, key=overlap)}]"  # ties (and no titles): the first listed


def _next_option(instruction: str, prompt: str, clickables: Sequence[str]) -> str | None:
    """The instruction's value for the first option group the routed product page shows
    unchosen (None when the page is not routed, or every wanted option is chosen)."""
    tail = instruction.lower().partition(" with ")[2]
    wanted = {g.strip(): v.strip() for g, v in _WANTED_OPTION.findall(tail)}
    page = prompt[prompt.rfind("Current page:") :] if "Current page:" in prompt else ""
    for group, _, chosen in _OPTION_LINE.findall(page):
        value = wanted.get(group.strip())
        if value and not chosen and value in clickables:
            return value
    return None


class WebShopRoleBackend:
    """The backend behind ``webshop_role_pool``'s agents: ``simulated_role_reply`` on the
    prompt, metered with the memory's token counter (deterministic: no luck)."""

    def __init__(self, *, token_counter: str | TokenCounter | None = "estimate") -> None:
        self.counter = make_token_counter(token_counter)

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        role = str(spec.backend_kwargs.get("role", spec.name))
        prompt = "\n\n".join(m["content"] for m in messages)
        text = simulated_role_reply(role, prompt)
        return counted_completion(spec, messages, text, self.counter, {})


def webshop_role_pool(*, token_counter: str | TokenCounter | None = "estimate") -> AgentPool:
    """One simulated agent per WebShop role (``WebShopRoleBackend``), named after its role."""
    backend = WebShopRoleBackend(token_counter=token_counter)
    roles = [role.name for role in WebShopRoleGame.team]
    return role_agent_pool("webshop-roles", "webshop-roles", backend, {r: {} for r in roles})
