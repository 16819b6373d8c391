"""Exception hierarchy for orchenv.

Every error says what was expected, what came, and how to fix it. Catch
``OrchEnvError`` to handle anything orchenv raises on purpose.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class OrchEnvError(Exception):
    """Base class of every error orchenv raises on purpose."""


class ConfigError(OrchEnvError, ValueError):
    """An argument, preset or configuration value is invalid."""


class UnknownNameError(ConfigError, KeyError):
    """A name (agent, preset, controller, task source, env id) is not known."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        msg = f"unknown {kind} {name!r}; known: {', '.join(known) or '(none)'}.{hint}"
        super().__init__(msg)
        self.kind, self.name, self.known = kind, name, known

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class NoTaskSourceError(ConfigError, AttributeError):
    """An env was asked for its task source but has none (also an ``AttributeError``, so
    ``hasattr(env, "task_source")`` is False for such envs)."""


class DependencyError(OrchEnvError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the optional package {package!r}, which is not installed. "
            f'Install it with: pip install "orchenv[{extra}]"'
        )


class DataError(OrchEnvError):
    """A data file is missing, empty or malformed."""


class SchemaError(DataError, ValueError):
    """A value read from outside (a replay file, an eval log, a server's reply) breaks its
    schema: a wrong type, a number out of range, an unknown key. The message names the
    file, line and field (``orchenv.schema``)."""


class OutputError(OrchEnvError, OSError):
    """A result file cannot be written (disk full, read-only, not a regular file). Raised
    before anything is lost: what was already written stays intact. Also an ``OSError``
    (same ``errno``), so code that handles I/O failures keeps working. Build it as
    ``OutputError(errno, message, filename)``; ``str()`` is the message alone."""

    def __str__(self) -> str:
        return str(self.strerror) if self.strerror else super().__str__()


class BackendError(OrchEnvError):
    """An agent backend failed (server error, timeout, missing record)."""


class EnvStateError(OrchEnvError, RuntimeError):
    """The environment was used out of order (step before reset, step after the end)."""


def require(package: str, extra: str, purpose: str):  # noqa: ANN201 - returns a module
    """Import ``package`` or raise a ``DependencyError`` naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise DependencyError(package, extra, purpose) from exc
