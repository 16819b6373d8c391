"""Guard rails of the package layout (DESIGN.md).

- ``envs/`` and ``agents/`` live only under ``orchenv`` (as ``orchenv.envs`` and
  ``orchenv.agents``).
- Layering: no module of core (the ``orchenv/`` folder) imports ``orchenv.envs`` or
  ``orchenv.agents``, at module level or inside a function, with ``import``/``from`` or
  ``importlib.import_module("...")`` with a literal name. The one exception is
  ``orchenv/__init__.py``, the package facade: it imports both so that ``import orchenv``
  fills the registries (env ids, task sources, controllers).
- Private names stay in their package: no module of ``orchenv/``, ``envs/`` or ``agents/``
  imports a name (or module) with a leading underscore (dunders aside) from a module of
  another package, a package being a directory: ``from orchenv.backends.simulated import
  _x`` is fine in ``orchenv/backends/``, an error anywhere else. Make the name public in its
  home module instead.
- Packaging: a non-editable install ships every module and data file, without warnings.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import prefix -> folder, longest prefix first (setup.py's package_dir)
FOLDERS = {
    "orchenv.envs": ROOT / "envs",
    "orchenv.agents": ROOT / "agents",
    "orchenv": ROOT / "orchenv",
}
PLUGINS = ("orchenv.envs", "orchenv.agents")
FACADE = ROOT / "orchenv" / "__init__.py"


# -- reading imports ---------------------------------------------------------------------------
def module_name(path: Path) -> str:
    """The import name of a source file (``envs/webshop/env.py`` -> ``orchenv.envs.webshop.env``)."""
    for prefix, folder in FOLDERS.items():
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([prefix, *parts])
    raise ValueError(f"{path} is outside the package folders")


def module_path(name: str) -> Path | None:
    """The file or package folder of an orchenv module name (``None`` for other libraries)."""
    for prefix, folder in FOLDERS.items():
        if name == prefix or name.startswith(prefix + "."):
            rest = name[len(prefix) :].lstrip(".")
            return folder.joinpath(*rest.split(".")) if rest else folder
    return None


def package_dir(name: str) -> Path | None:
    """The directory (the "package") a module belongs to: the folder of a package, the
    parent folder of a module file."""
    path = module_path(name)
    if path is None:
        return None
    return path if path.is_dir() else path.parent


def source_files() -> list[Path]:
    return sorted(p for folder in FOLDERS.values() for p in folder.rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every import in ``path``, anywhere in the file;
    ``name`` is ``None`` for ``import module``. Relative imports are made absolute."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            for alias in node.names:
                yield node.lineno, module, alias.name
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value, None


def is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


# -- the rules -----------------------------------------------------------------------------------
def plugin_imports_in_core() -> list[str]:
    found = []
    for path in (ROOT / "orchenv").rglob("*.py"):
        if path == FACADE:
            continue
        for line, module, name in imports(path):
            target = f"{module}.{name}" if name else module
            if any(target == p or target.startswith(p + ".") for p in PLUGINS):
                found.append(f"{where(path, line)}: imports {target}")
    return sorted(found)


def private_imports_across_packages() -> list[str]:
    found = []
    for path in source_files():
        for line, module, name in imports(path):
            parts = [*module.split("."), *([name] if name else [])]
            private = [i for i, part in enumerate(parts) if is_private(part)]
            if not private:
                continue
            owner = ".".join(parts[: private[0]])  # the module that holds the private name
            home = package_dir(owner) if owner else None
            if home is None or home != path.parent:
                found.append(
                    f"{where(path, line)}: imports {'.'.join(parts)} from another package "
                    f"({home.relative_to(ROOT) if home else owner}); make it public there"
                )
    return sorted(found)


def test_core_never_imports_envs_or_agents():
    found = plugin_imports_in_core()
    assert not found, (
        "core (orchenv/) must not import orchenv.envs or orchenv.agents (only the facade "
        "orchenv/__init__.py does); register a 'module:attr' string in orchenv.registry "
        "from the plug-in package instead:\n" + "\n".join(found)
    )


def test_no_private_imports_across_packages():
    found = private_imports_across_packages()
    assert not found, "private names imported across packages:\n" + "\n".join(found)


def test_the_rules_see_what_they_should(tmp_path, monkeypatch):
    """The scanners catch each form (module level, in a function, relative, importlib)."""
    core = tmp_path / "orchenv"
    (core / "eval").mkdir(parents=True)
    bad = core / "eval" / "bad.py"
    bad.write_text(
        "import orchenv.envs\n"
        "from orchenv import agents\n"
        "from .. import envs as e\n"
        "from orchenv.backends.simulated import _sigmoid\n"
        "from . import _own_private\n"
        "def later():\n"
        "    from orchenv.envs.mathroute.env import MathRouteEnv\n"
        "    importlib.import_module('orchenv.agents.grpo')\n"
        "    from orchenv.pool import AgentPool, __all__\n"
    )
    (core / "backends").mkdir()
    (core / "backends" / "simulated.py").write_text("")
    for prefix in FOLDERS:
        folder = tmp_path / prefix.replace(".", "/")
        folder.mkdir(parents=True, exist_ok=True)
        monkeypatch.setitem(FOLDERS, prefix, folder)
    monkeypatch.setitem(globals(), "FACADE", core / "__init__.py")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert plugin_imports_in_core() == [
        f"orchenv/eval/bad.py:{n}: imports {t}"
        for n, t in [
            (1, "orchenv.envs"),
            (2, "orchenv.agents"),
            (3, "orchenv.envs"),
            (7, "orchenv.envs.mathroute.env.MathRouteEnv"),
            (8, "orchenv.agents.grpo"),
        ]
    ]
    assert private_imports_across_packages() == [
        "orchenv/eval/bad.py:4: imports orchenv.backends.simulated._sigmoid from another "
        "package (orchenv/backends); make it public there"
    ]


# -- install layout -----------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", ["envs", "agents"])
def test_mapped_folders_refuse_a_global_name(folder):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import {folder}"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert f"must be imported as 'orchenv.{folder}'" in result.stderr


def test_installed_names():
    import orchenv.agents
    import orchenv.envs

    assert Path(orchenv.envs.__file__).parent.name == "envs"
    assert Path(orchenv.agents.__file__).parent.name == "agents"
    assert (Path(orchenv.__file__).parent / "py.typed").exists()


def test_a_plain_install_ships_every_module_and_data_file(tmp_path):
    """``pip install .`` (not editable) from a clean copy: every package that setup.py
    discovers, every data file, and no setuptools warning (e.g. an ignored package)."""
    src, site = tmp_path / "src", tmp_path / "site"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in FOLDERS.values():
        shutil.copytree(folder, src / folder.name, ignore=skip)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation"]
        + ["--no-compile", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = result.stdout + result.stderr
    for warning in ("Warning:", "would be ignored", "is absent from the `packages`"):
        assert warning not in log, log[log.find(warning) - 500 : log.find(warning) + 1500]
    expected = {
        f"{module_name(p).replace('.', '/')}{'/__init__' if p.name == '__init__.py' else ''}.py"
        for p in source_files()
        if "__pycache__" not in p.parts
    }
    installed = {str(p.relative_to(site)) for p in (site / "orchenv").rglob("*.py")}
    assert installed == expected
    data = {
        "orchenv/py.typed",
        "orchenv/pricing.json",
        "orchenv/presets/system1.json",
        "orchenv/envs/webshop/vocabulary.json",
    }
    assert all((site / f).is_file() for f in data), [f for f in data if not (site / f).is_file()]
    games = ROOT / "envs" / "alfworld" / "games"
    bundled = {str(p.relative_to(games)) for p in games.rglob("*") if p.is_file()}
    shipped = site / "orchenv" / "envs" / "alfworld" / "games"
    assert bundled == {str(p.relative_to(shipped)) for p in shipped.rglob("*") if p.is_file()}


def test_core_import_stays_light():
    code = "import sys, orchenv, gymnasium; gymnasium.make('orch/MathRoute-v0').reset(seed=0); print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
