"""deploy/ (issue 29): each family's openenv.yaml is what deploy/make_manifests.py writes from
docs/audit_tables.md, OpenEnv's own manifest parser accepts it, and its ids are registered."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("openenv")

from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser  # noqa: E402

import orchenv  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "make_manifests", ROOT / "deploy" / "make_manifests.py"
)
assert spec is not None and spec.loader is not None
make_manifests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_manifests)


def test_manifests_are_current_and_parse() -> None:
    gaps = make_manifests.audit_gaps((ROOT / "docs" / "audit_tables.md").read_text("utf-8"))
    assert "orch/MathRoute-v0" in gaps
    for family, (ids, _, (low, high), _) in make_manifests.FAMILIES.items():
        root = ROOT / "deploy" / family
        text = (root / "openenv.yaml").read_text("utf-8")
        assert text == make_manifests.manifest(family, gaps), (
            f"rerun deploy/make_manifests.py ({family})"
        )
        parsed = OpenEnvYamlParser().parse(root)
        assert parsed.capabilities.set_state and parsed.capabilities.task_api
        assert parsed.reward.range == (low, high)
        assert parsed.reward.floor_margin == max(0.0, min(gaps[i][1] for i in ids))
        for env_id in ids:
            gym.spec(env_id)  # registered
    # a family whose gap interval reaches zero declares no margin rather than a negative one
    assert make_manifests.manifest("alfworld", gaps).count("floor_margin: 0.0") == 1


def test_dockerfile_serves_on_all_interfaces() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text("utf-8")
    assert text.startswith("# orchenv serve") and "ARG BASE=python:3.11-slim" in text
    assert "FROM ${BASE}" in text
    assert (ROOT / "deploy" / "make_base_image.sh").read_text("utf-8").startswith("#!/bin/sh")
    assert 'pip install ".[${EXTRAS}]"' in text and "--host 0.0.0.0" in text
