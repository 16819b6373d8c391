"""benchmarks/llm_learning.py, the pre-registered choice-mode GRPO experiment (issue 39), in
miniature: the tiny local Qwen2 of ``orchenv.agents.grpo.tiny`` instead of SmolLM2, a few
tasks and two steps. The same code paths as the long run: baselines, the untrained model, GRPO
with a checkpoint per step, an interrupted run resumed, the trained model, the paired table,
and ``--rescore`` reproducing it from the adapter.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location(
        "llm_learning", ROOT / "benchmarks" / "llm_learning.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from orchenv.agents.grpo.tiny import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")


def _args(model: Path, run: Path) -> list[str]:
    return [
        "--model-dir", str(model), "--env", "orch/MathRoute-v0", "--max-turns", "1",
        "--test-episodes", "3", "--select-episodes", "40", "--steps", "2", "--queries", "2",
        "--group-size", "4", "--lora-layers", "1", "--lora-r", "2", "--temperature", "100",
        "--choice-score", "mean",
        "--lr", "0.05", "--threads", "1", "--train-budget-s", "100000",
        "--work-dir", str(run), "--out", str(run / "results.json"),
    ]  # fmt: skip


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tiny_model, tmp_path, monkeypatch):
    bench = _module()
    from orchenv.agents.grpo import trainer

    straight, cut = tmp_path / "straight", tmp_path / "cut"
    assert bench.main(_args(tiny_model, straight)) == 0

    real = trainer.train

    def killed_at_step_2(config, **kwargs):
        if config.total_steps == 2:
            raise KeyboardInterrupt  # what a kill between checkpoints leaves behind
        return real(config, **kwargs)

    monkeypatch.setattr(trainer, "train", killed_at_step_2)
    with pytest.raises(KeyboardInterrupt):
        bench.main(_args(tiny_model, cut))
    assert (cut / "grpo" / "checkpoint-1").is_dir()
    assert not (cut / "grpo" / "checkpoint-2").exists()
    calls = []

    def recorded(config, **kwargs):
        calls.append((config.total_steps, config.resume_from))
        return real(config, **kwargs)

    monkeypatch.setattr(trainer, "train", recorded)
    # the same command without --resume would start over; with it, only step 2 runs, from
    # checkpoint 1, and the baselines and the untrained model are not evaluated again
    assert bench.main([*_args(tiny_model, cut), "--resume"]) == 0
    assert calls == [(2, "latest")]

    a = json.loads((straight / "results.json").read_text())
    b = json.loads((cut / "results.json").read_text())
    assert a["training"]["steps"] == b["training"]["steps"] == 2
    assert [m["step"] for m in b["training"]["metrics"]] == [1, 2]
    wa, wb = _tensors(straight / "grpo" / "checkpoint-2"), _tensors(cut / "grpo" / "checkpoint-2")
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_allclose(wa[name], wb[name], rtol=1e-5, atol=1e-6)
    # the update moved the adapter (LoRA's B starts at zero), so the comparison can fail
    assert any(np.abs(v).max() > 0 for k, v in wa.items() if "lora_B" in k)
    for key in ("random", "best_fixed", "level_router"):
        assert a[key]["per_episode_return"] == b[key]["per_episode_return"]
    assert a["trained"]["greedy"]["picks"] == b["trained"]["greedy"]["picks"]
    table = b["comparison"]["greedy"]
    for row in (
        "trained_minus_best_fixed",
        "trained_minus_untrained",
        "trained_minus_level_router",
    ):
        assert table[row]["n"] == 3
    assert table["learned"] in (True, False)
    assert set(b["comparison"]["per_level"]) == {
        "best_fixed",
        "level_router",
        "untrained",
        "trained",
    }
    text = bench.markdown_table(b)
    assert "| trained - best fixed |" in text and "| trained |" in text

    # one command re-scores the adapter and reproduces every per-task return
    out = tmp_path / "rescored.json"
    code = bench.main(
        ["--model-dir", str(tiny_model), "--rescore", str(straight / "results.json"),
         "--adapter", str(straight / "grpo" / "checkpoint-2"), "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    assert all(json.loads(out.read_text())["reproduced"].values())


def test_resume_refuses_a_results_file_of_other_settings(tiny_model, tmp_path):
    bench = _module()
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"args": {"env": "orch/BudgetRoute-v0"}}))
    with pytest.raises(SystemExit):
        bench.main([*_args(tiny_model, run), "--resume"])


def test_the_gap_report_keeps_a_setting_only_beyond_the_interval(monkeypatch):
    bench = _module()
    monkeypatch.setattr(bench, "GAP_SETTINGS", [("orch/MathRoute-v0", {"max_turns": 1})])
    report = bench.gap_report(300, 120, 0)
    (row,) = report.values()
    diff = row["feature_minus_best_fixed"]
    assert row["kept"] == (diff["ci95"][0] > 0)
    # the oracle bounds every policy from above, per task, so on average too
    for name in ("best_fixed", "feature_router", "level_router"):
        assert row[name]["mean"] <= row["oracle"]["mean"] + 1e-12
    assert row["best_fixed"]["sequence"] == [2]  # always the 30B solver, chosen on train
    assert set(row["level_router"]["route"]) == {"1", "2", "3", "4", "5"}


def test_the_probe_precheck_scores_a_frozen_model_against_the_majority_class(tiny_model):
    bench = _module()
    report = bench.probe_report(tiny_model, 100, 30, 0)
    assert report["route_per_level"]["1"] == [0] and report["route_per_level"]["5"] == [2]
    for target in ("best_route", "level"):
        row = report[target]
        assert sum(row["classes"].values()) == 30
        assert row["probe_accuracy"]["n"] == row["majority_accuracy"]["n"] == 30
        diff = row["probe_minus_majority"]["mean"]
        gap = row["probe_accuracy"]["mean"] - row["majority_accuracy"]["mean"]
        assert abs(diff - gap) < 1e-12
        majority = max(row["classes"].values()) / 30
        assert abs(row["majority_accuracy"]["mean"] - majority) < 1e-12


def test_choice_enumerate_tries_every_route_once_per_group(tiny_model):
    """GRPOConfig.choice_enumerate (run 2): a state's G rows take the available choices in
    turn, each with its log-probability under softmax(score / T); off by default (draws)."""
    import math

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.config import GRPOConfig
    from orchenv.agents.grpo.generation import ChoicePolicySampler
    from orchenv.choice_policy import choice_distribution
    from orchenv.error import ConfigError

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "Route."}, {"role": "user", "content": "2 + 3?"}]
    options = ["<model>a</model>", None, "<model>b</model>", "<model>c</model>"]
    other = [{"role": "user", "content": "7 * 6?"}]
    sampler = ChoicePolicySampler(
        model, tokenizer, temperature=1.0, max_new_tokens=0, enumerate_choices=True
    )
    samples = sampler([messages] * 3 + [other] * 6, choices=[options] * 9)
    assert [s.chosen for s in samples] == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    texts = [c for c in options if c is not None]
    _, _, scores, _ = sampler.score_state(messages, options)
    p = choice_distribution(scores, 1.0)
    for s in samples[:3]:
        assert s.text == texts[s.chosen]
        assert s.logprobs == pytest.approx([math.log(p[s.chosen])], abs=1e-5)
    # the default draws: a tiny random model's near-equal scores at T = 100 give both routes
    drawn = ChoicePolicySampler(model, tokenizer, temperature=100.0, max_new_tokens=0, seed=3)
    picks = [s.chosen for s in drawn([messages] * 30, choices=[options] * 30)]
    assert picks != [0, 1, 2] * 10 and len(set(picks)) > 1
    assert GRPOConfig(model_path="x").choice_enumerate is False
    with pytest.raises(ConfigError, match="choice_enumerate"):
        GRPOConfig(model_path="x", choice_enumerate=True)


def test_difficulty_routing_compares_easy_and_hard_levels_off_the_fixed_route():
    """Run 2's second criterion on hand-made per-level picks (30B = choice 2 is the best fixed
    plan): levels 1-2 mostly off 30B and 4-5 on it count; the same share everywhere does not."""
    m = _module()

    def results(easy: dict, hard: dict) -> dict:
        cell = {"n": 0, "return": 0.0}
        levels = {"1": {**cell, "first_turn_picks": easy}, "2": {**cell, "first_turn_picks": easy},
                  "3": {**cell, "first_turn_picks": {"1": 5}},
                  "4": {**cell, "first_turn_picks": hard}, "5": {**cell, "first_turn_picks": hard}}  # fmt: skip
        return {"best_fixed": {"policy": "best-fixed(2,)"},
                "comparison": {"per_level": {"trained": levels}}}  # fmt: skip

    routed = m.difficulty_routing(results({"0": 30, "2": 10}, {"2": 38, "1": 2}))
    assert routed["share_levels_1_2_off_fixed"] == pytest.approx(0.75)
    assert routed["share_levels_4_5_off_fixed"] == pytest.approx(0.05)
    assert routed["n_levels_1_2"] == 80 and routed["differs_by_level"] is True
    flat = m.difficulty_routing(results({"0": 2, "2": 38}, {"1": 2, "2": 38}))
    assert flat["difference"]["mean"] == pytest.approx(0.0) and flat["differs_by_level"] is False
    assert m.difficulty_routing({"comparison": {}}) is None
