"""WebShop (Yao et al. 2022) for orchenv: ``orch/WebShop-v0`` and its role view.

* ``WebShopEnv``: the text shopping environment (single learner).
* ``WebShopRoleGame``: seed 004's Planner / Searcher / Recommender team over shared
  memory; ``webshop_aec_env`` / ``webshop_parallel_env`` are its PettingZoo views.
* ``baselines.GoalShopper``: a privileged scripted shopper (the upper bound).
* ``get_catalog(CatalogSpec(...))``: a generated catalog or the original data files;
  ``webshop_reward``: the purchase reward; ``SearchEngine``: the BM25 product search.
"""

from __future__ import annotations

# generate and loaders register the catalog builders get_catalog uses
from orchenv.envs.webshop import generate, loaders  # noqa: F401
from orchenv.envs.webshop.catalog import Catalog, CatalogSpec, get_catalog
from orchenv.envs.webshop.env import WebShopEnv, parse_action
from orchenv.envs.webshop.products import Goal, Product, Review
from orchenv.envs.webshop.reward import RewardBreakdown, token_set_ratio, webshop_reward
from orchenv.envs.webshop.roles import WebShopRoleGame, webshop_aec_env, webshop_parallel_env
from orchenv.envs.webshop.search import SearchEngine, search_engine_for

__all__ = [
    "Catalog",
    "CatalogSpec",
    "Goal",
    "Product",
    "Review",
    "RewardBreakdown",
    "SearchEngine",
    "WebShopEnv",
    "WebShopRoleGame",
    "get_catalog",
    "parse_action",
    "search_engine_for",
    "token_set_ratio",
    "webshop_aec_env",
    "webshop_parallel_env",
    "webshop_reward",
]
