"""Name registries with lazy ``"module:attr"`` entry points.

One mechanism for every pluggable name in orchenv (task sources, pool backends,
controllers, simulated solution writers), in the style of Gymnasium's env
registry: core holds the tables, env families and controller packages fill
them from their ``__init__`` with strings, and the code behind a name is
imported only when that name is first used (so optional dependencies load
late and core never imports ``orchenv.envs`` or ``orchenv.agents``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from orchenv.error import UnknownNameError

T = TypeVar("T")


def load_entry_point(spec: str) -> Any:
    """Import ``"package.module:attr"`` and return the attribute."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point must look like 'package.module:attr', got {spec!r}")
    return getattr(importlib.import_module(module_name), attr)


class Registry(Generic[T]):
    """``name -> factory`` where a factory is a callable or a ``"module:attr"`` string.

    Behaves as a read-only mapping of names to their registered values, so
    ``name in registry``, ``sorted(registry)`` and ``registry[name]`` work.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, str | Callable[..., T]] = {}
        self._loaded: dict[str, Callable[..., T]] = {}

    def register(self, name: str, factory: str | Callable[..., T]) -> None:
        """Register (or replace) ``name``."""
        self._entries[name] = factory
        self._loaded.pop(name, None)

    def resolve(self, name: str) -> Callable[..., T]:
        """The factory behind ``name``, imported on first use."""
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self._entries)
        if name not in self._loaded:
            factory = self._entries[name]
            self._loaded[name] = load_entry_point(factory) if isinstance(factory, str) else factory
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> str | Callable[..., T]:
        if name not in self._entries:
            raise UnknownNameError(self.kind, name, self._entries)
        return self._entries[name]

    def __setitem__(self, name: str, factory: str | Callable[..., T]) -> None:
        self.register(name, factory)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]
        self._loaded.pop(name, None)

    def get(self, name: str, default: Any = None) -> Any:
        return self._entries.get(name, default)

    def items(self) -> Iterator[tuple[str, str | Callable[..., T]]]:
        return iter(self._entries.items())


#: env id -> one-line summary (``orchenv list``, the README table); filled by ``register_env``
ENV_SUMMARIES: dict[str, str] = {}

#: CLI subcommand groups contributed by plug-in packages: name -> ``add_subcommands(subparsers)``
CLI_COMMANDS: Registry[None] = Registry("cli command")


def register_env(env_id: str, entry_point: str, summary: str, **kwargs: object) -> None:
    """Register an orchenv env id in Gymnasium's registry with its summary (idempotent).

    Entry points are strings, so an env's optional dependencies load only when it is made.
    """
    from gymnasium.envs.registration import register, registry

    ENV_SUMMARIES[env_id] = summary
    if env_id not in registry:
        register(
            id=env_id,
            entry_point=entry_point,
            kwargs=kwargs,
            disable_env_checker=False,
            # gym.make_vec(env_id, n) builds orchenv.vector.make_vec's default vector env
            vector_entry_point=functools.partial(_make_vec, env_id),
        )


def _make_vec(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """``orchenv.vector.vector_entry_point`` (imported when a vector env is made)."""
    from orchenv.vector import vector_entry_point

    return vector_entry_point(env_id, num_envs, **kwargs)


#: seed id -> the plug-in's ``build(rep) -> list[Section]`` (``orchenv reproduce``)
REPRODUCTIONS: Registry[Any] = Registry("reproduction")
#: seed id -> the paper's short name, shown in page titles and ``orchenv reproduce --help``
REPRODUCTION_TITLES: dict[str, str] = {}


def register_reproduction(seed_id: str, build: str, title: str) -> None:
    """Register seed ``seed_id``'s reproduction: ``build`` is a ``"module:attr"`` string, so
    the experiments' dependencies load only when that seed is reproduced."""
    REPRODUCTIONS.register(seed_id, build)
    REPRODUCTION_TITLES[seed_id] = title
