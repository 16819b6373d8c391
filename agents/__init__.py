"""Controllers (anything with ``act(obs, info) -> str``); installed as ``orchenv.agents``."""

from __future__ import annotations

if __name__ != "orchenv.agents":  # guard rail: the folder is mapped into the orchenv package
    raise ImportError(
        f"this package must be imported as 'orchenv.agents', not {__name__!r}; "
        "install orchenv (pip install -e .) and use `import orchenv.agents`"
    )

from typing import Any

from orchenv.agents.base import CONTROLLERS, Controller, make_controller
from orchenv.agents.baselines import CascadeController, OracleRouter, RandomRouter, SingleAgent

# learned and LLM controllers import their heavier dependencies only when first used
_LAZY = {
    "KNNRouter": "orchenv.agents.routers",
    "ClassifierRouter": "orchenv.agents.routers",
    "LLMController": "orchenv.agents.llm",
    "RouterR1Controller": "orchenv.agents.llm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'orchenv.agents' has no attribute {name!r}")


__all__ = [
    "CONTROLLERS",
    "CascadeController",
    "ClassifierRouter",
    "Controller",
    "KNNRouter",
    "LLMController",
    "OracleRouter",
    "RandomRouter",
    "RouterR1Controller",
    "SingleAgent",
    "make_controller",
]
