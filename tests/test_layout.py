"""Guard rails of the package layout (DESIGN.md): envs/ and agents/ live only under orchenv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def test_core_import_stays_light():
    code = "import sys, orchenv, gymnasium; gymnasium.make('orch/MathRoute-v0').reset(seed=0); print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
