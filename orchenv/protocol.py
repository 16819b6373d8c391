"""The route-then-verify controller protocol, for controllers that must not import an env package.

Controllers that work on several envs (``agents/llm.py``'s one-shot router) need two things
of the route-then-verify protocol that MathRoute introduced and other envs may share: which
phase a state is in, and the text that accepts the current draft. They live here, next to
the core, so a controller imports no env package. ``orchenv.envs.mathroute.protocol`` writes
the same accept text (``verdict_text(True)``); ``tests/test_choice_mode.py`` checks that they
agree.
"""

from __future__ import annotations

from typing import Any

from orchenv.controllers import env_label
from orchenv.error import ConfigError

__all__ = ["PHASES", "accept_text", "require_phase"]

#: the phases of a route-then-verify env (``info["phase"]``)
PHASES = ("route", "verify")


def require_phase(info: dict[str, Any], controller: str, env: Any = None) -> str:
    """``info["phase"]`` ("route" or "verify"), or a ConfigError naming what is missing.

    Controllers written for the route-then-verify protocol only apply to envs that follow it
    (``info["phase"]`` and ``info["valid_agents"]``, as ``orch/MathRoute-v0`` provides); on
    any other env they fail here with a clear message instead of emitting unreadable actions.
    """
    phase = info.get("phase")
    if phase in PHASES and isinstance(info.get("valid_agents"), list):
        return str(phase)
    raise ConfigError(
        f"controller {controller!r} does not apply to {env_label(env)}: it needs info['phase'] "
        "('route' or 'verify') and info['valid_agents'] (agents weakest first), as "
        f"orch/MathRoute-v0 provides; this env's info has phase={phase!r} and keys "
        f"{sorted(info)}. Use a controller written for this env, or 'llm' (which only "
        "needs info['messages'])."
    )


def accept_text(note: str = "") -> str:
    """The verification action that accepts the current draft (``<verdict>True</verdict>``)."""
    return f"<checking>{note}</checking>\n<verdict>True</verdict>"
