"""Where orchenv's packages are; everything else about the build is in pyproject.toml.

``envs/`` and ``agents/`` install as ``orchenv.envs`` and ``orchenv.agents``.
``[tool.setuptools.packages.find]`` cannot put a prefix on the names it finds, so
each folder is searched here and its packages are named under its prefix. Namespace
discovery also lists data-only folders with importable names (the bundled ALFWorld
games), so their files ship as package data without setuptools warnings.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent

#: import name -> folder (relative to this file)
PACKAGE_DIR = {"orchenv": "orchenv", "orchenv.envs": "envs", "orchenv.agents": "agents"}


def packages() -> list[str]:
    """Every package under each mapped folder, named with the folder's import prefix."""
    found = []
    for prefix, folder in PACKAGE_DIR.items():
        found.append(prefix)
        found += [f"{prefix}.{name}" for name in find_namespace_packages(str(HERE / folder))]
    return sorted(found)


setup(package_dir=PACKAGE_DIR, packages=packages())
