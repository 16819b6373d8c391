"""orchenv environments; installed as ``orchenv.envs``. Every ``register()`` call lives here.

Importing ``orchenv`` runs ``register_envs()``, so ``gym.make("orch/MathRoute-v0")``
works after ``import orchenv`` (or with ``gym.make("orchenv:orch/MathRoute-v0")``).
Entry points are strings: an environment's optional dependencies load only
when it is made.
"""

from __future__ import annotations

if __name__ != "orchenv.envs":  # guard rail: the folder is mapped into the orchenv package
    raise ImportError(
        f"this package must be imported as 'orchenv.envs', not {__name__!r}; "
        "install orchenv (pip install -e .) and use `import orchenv.envs`"
    )

from orchenv.backends.simulated import register_solution_writer
from orchenv.controllers import register_controller
from orchenv.registry import ENV_SUMMARIES, register_env, register_reproduction
from orchenv.tasks import register_task_source


def register_task_sources() -> None:
    """Register the env families' task sources by name (``task_source="..."``)."""
    for name, factory in {
        "procedural-math": "orchenv.envs.mathroute.mathgen:ProceduralMathSource",
        "champ": "orchenv.envs.mathroute.loaders:load_champ",
        "reasoning-gym": "orchenv.envs.mathroute.loaders:ReasoningGymSource",
        "multihop-synth": "orchenv.envs.multihopqa.synth:SyntheticMultihopSource",
        "multihop-file": "orchenv.envs.multihopqa.loaders:load_multihop",
        "fanoutqa": "orchenv.envs.multihopqa.loaders:load_fanoutqa",
        "orchmas-qa": "orchenv.envs.orchmas.qa:orchmas_qa_source",
    }.items():
        register_task_source(name, factory)
    # the simulated backend writes math tasks' worked solutions with the math family's writer
    register_solution_writer("math", "orchenv.envs.mathroute.mathgen:worked_solution")


def register_controllers() -> None:
    """Register the env families' own baselines (they apply to one family only)."""
    for name, cls in {
        "random": "RandomRouter",
        "single": "SingleAgent",
        "cascade": "CascadeController",
        "oracle": "OracleRouter",
        "strategy": "StrategyController",  # an env's audit_strategies() entry (issue 25)
    }.items():
        register_controller(name, f"orchenv.envs.mathroute.baselines:{cls}")
    # seed 000's page: its saved PPO policies replayed by `orchenv eval` (issue 26)
    register_controller("ppo-policy", "orchenv.envs.mathroute.saved_policy:SavedPolicyController")
    # seed 001's Table 2 baselines (controller alone, one expert, random assign)
    register_controller("budget-baseline", "orchenv.envs.budgetroute.baselines:BudgetBaseline")
    # seed 001's page: its saved MaskablePPO policies replayed by `orchenv eval` (issue 26)
    register_controller(
        "budgetroute-ppo-policy", "orchenv.envs.budgetroute.saved_policy:SavedBudgetPolicy"
    )
    # seed 002's page: its scripted orchestrators and saved policies (issue 26)
    for name, cls in {
        "scripted-single-executor": "ScriptedSingleExecutor",
        "scripted-decompose": "ScriptedDecompose",
        "orchmas-ppo-policy": "SavedMaskablePolicy",
    }.items():
        register_controller(name, f"orchenv.envs.orchmas.controllers:{cls}")
    # seed 003's page: its fixed workflows (one call, Self-Refine) (issue 26)
    register_controller("scripted-puppeteer", "orchenv.envs.puppeteer.topology:ScriptedPuppeteer")
    # ALFWorldRoles' adaptive coordinator, reading only the observation (issue 37's boards)
    register_controller(
        "alfworld-adaptive", "orchenv.envs.alfworld.coordination:AdaptiveRoleCoordinator"
    )


def register_reproductions() -> None:
    """``orchenv reproduce SEED``: each seed paper's experiments live with its env family."""
    for seed_id, family, title in (
        ("000", "mathroute", "MathRoute: an RL-trained router over a multi-LLM pool"),
        ("001", "budgetroute", "BudgetRoute: budget-aware routing to experts"),
        ("002", "orchmas", "OrchMAS: role-playing orchestration with GRPO"),
        ("003", "puppeteer", "Puppeteer: an evolving orchestrator trained by REINFORCE"),
        ("004", "multihopqa", "RCR-Router: role-aware context routing"),
    ):
        register_reproduction(seed_id, f"orchenv.envs.{family}.reproduce:build", title)


__all__ = ["ENV_SUMMARIES", "register_envs"]


def register_envs() -> None:
    """Register every orchenv id in Gymnasium's registry (idempotent)."""
    register_task_sources()
    register_controllers()
    register_reproductions()
    mathroute = "orchenv.envs.mathroute.env:MathRouteEnv"
    register_env(
        "orch/MathRoute-v0",
        mathroute,
        "seed 000 critique-and-routing controller, System 1 pool (Qwen3-30B / Qwen2.5-7B / Qwen2.5-1.5B)",
        pool="system1",
    )
    register_env(
        "orch/MathRouteSystem2-v0",
        mathroute,
        "seed 000 critique-and-routing controller, System 2 pool (Qwen3-30B / Ministral-3-8B / Llama-3.2-1B)",
        pool="system2",
    )
    register_env(
        "orch/BudgetRoute-v0",
        "orchenv.envs.budgetroute.env:BudgetRouteEnv",
        "seed 001 CoRL: answer itself or consult paid experts under a low/medium/high dollar budget",
        pool="corl",
    )
    register_env(
        "orch/OrchMAS-v0",
        "orchenv.envs.orchmas.env:OrchMASEnv",
        "seed 002 OrchMAS: give one executor a free-form role and request each turn, then answer",
    )
    register_env(
        "orch/Puppeteer-v0",
        "orchenv.envs.puppeteer.env:PuppeteerEnv",
        "seed 003 Puppeteer: name the next agent (model x reasoning pattern, tool, terminate)",
    )
    register_env(
        "orch/WebShop-v0",
        "orchenv.envs.webshop:WebShopEnv",
        "seed 004 WebShop: search, browse, choose options and buy (text mode, generated catalog or the original data files)",
    )
    register_env(
        "orch/ALFWorld-v0",
        "orchenv.envs.alfworld:ALFWorldEnv",
        "seed 004 ALFWorld: type household commands in alfworld's text engine (six task types)",
    )
    register_env(
        "orch/ALFWorldRoles-v0",
        "orchenv.envs.alfworld.roles:ALFWorldControllerEnv",
        "seed 004 appendix F: pick which of Planner / Navigator / Interactor / Evaluator acts next (routed shared memory, simulated role agents)",
    )
    multihop = "orchenv.envs.multihopqa.env:MultihopQAEnv"
    for suffix, router, label in (
        ("", "rcr", "RCR routing (token budgets, importance scores)"),
        ("Full", "full", "full-context routing"),
        ("Static", "static", "static per-role routing"),
    ):
        register_env(
            f"orch/MultihopQA{suffix}-v0",
            multihop,
            f"seed 004 multihop QA: plan the hops for a Searcher and a Recommender over shared memory, {label}",
            router=router,
        )


register_envs()
