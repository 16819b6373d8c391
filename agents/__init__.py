"""Controllers that apply to several envs (anything with ``act(obs, info) -> str``), learned
routers, LLM controllers and the reference GRPO trainer; installed as ``orchenv.agents``.

Importing this package only registers controller names (``orchenv.controllers``); the
classes and their dependencies load on first use.
"""

from __future__ import annotations

if __name__ != "orchenv.agents":  # guard rail: the folder is mapped into the orchenv package
    raise ImportError(
        f"this package must be imported as 'orchenv.agents', not {__name__!r}; "
        "install orchenv (pip install -e .) and use `import orchenv.agents`"
    )

import importlib
from typing import Any

from orchenv.controllers import register_controller
from orchenv.registry import CLI_COMMANDS

#: public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "EnvRandomController": "orchenv.agents.baselines",
    "PoolAgentController": "orchenv.agents.baselines",
    "KNNRouter": "orchenv.agents.routers",
    "ClassifierRouter": "orchenv.agents.routers",
    "LLMController": "orchenv.agents.llm",
    "RouterR1Controller": "orchenv.agents.llm",
}


def register_controllers() -> None:
    """Register this package's controllers by name (idempotent)."""
    for name, cls in {
        "env-random": "EnvRandomController",
        "pool-agent": "PoolAgentController",
        "knn": "KNNRouter",
        "classifier": "ClassifierRouter",
        "llm": "LLMController",
        "router-r1": "RouterR1Controller",
    }.items():
        register_controller(name, f"{_LAZY[cls]}:{cls}")
    # `orchenv train grpo ...`: the parser only, torch loads when training starts
    CLI_COMMANDS.register("train", "orchenv.agents.grpo.cli:add_subcommands")
    CLI_COMMANDS.register("sft", "orchenv.agents.sft:add_subcommand")  # issue 31 item 3


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'orchenv.agents' has no attribute {name!r}")


register_controllers()

__all__ = sorted(_LAZY)
