"""Controllers (anything with ``act(obs, info) -> str``); installed as ``orchenv.agents``."""

from __future__ import annotations

if __name__ != "orchenv.agents":  # guard rail: the folder is mapped into the orchenv package
    raise ImportError(
        f"this package must be imported as 'orchenv.agents', not {__name__!r}; "
        "install orchenv (pip install -e .) and use `import orchenv.agents`"
    )

from orchenv.agents.base import CONTROLLERS, Controller, make_controller
from orchenv.agents.baselines import CascadeController, RandomRouter, SingleAgent

__all__ = [
    "CONTROLLERS",
    "CascadeController",
    "Controller",
    "RandomRouter",
    "SingleAgent",
    "make_controller",
]
