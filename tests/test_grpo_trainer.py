"""The GRPO trainer (orchenv.agents.grpo): config, policy sampler, learning, resume, CLI, LoRA.

Everything runs on CPU with the tiny word-level policy of ``grpo_env`` (built in
seconds); the acceptance test trains it to route to the only correct agent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from grpo_env import (  # noqa: E402
    MAX_REWARD,
    env_kwargs,
    grpo_config,
    policy_path,
    uniform_sampler,
)
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source  # noqa: E402

import orchenv  # noqa: E402, F401  (registers the env ids)
from orchenv.agents.grpo import algorithms  # noqa: E402
from orchenv.agents.grpo.algorithms import Sample, build_batch, rollout_trees  # noqa: E402
from orchenv.agents.grpo.config import (  # noqa: E402
    AGGREGATIONS,
    GRPOConfig,
    LoRASettings,
    add_arguments,
)
from orchenv.agents.grpo.dist import Dist  # noqa: E402
from orchenv.agents.grpo.generation import HFPolicySampler, VLLMPolicySampler  # noqa: E402
from orchenv.agents.grpo.trainer import (  # noqa: E402
    comparable,
    make_envs,
    samples_from_trees,
    step_metrics,
    train,
)
from orchenv.error import ConfigError, DependencyError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls run faster on one thread than split over this machine's two cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(
        path / "tokenizer"
    )


def _prompts(n: int) -> list[list[dict[str, str]]]:
    """MathRoute prompts of different lengths (so batches are really left-padded)."""
    env = gym.make("orch/MathRoute-v0", **env_kwargs())
    prompts = []
    for i in range(n):
        system, user = env.reset(seed=i)[1]["messages"]
        prompts.append([system, {**user, "content": user["content"] + " easy" * (7 * i)}])
    return prompts


# -- config --------------------------------------------------------------------------------------


def test_config_defaults_follow_table_9():
    c = GRPOConfig(model_path="m")
    assert (c.queries_per_step, c.group_size, c.max_turns) == (128, 4, None)
    assert gym.make(c.env_id).unwrapped.max_turns == 3  # the horizon comes from the env
    assert (c.max_prompt_tokens, c.max_new_tokens, c.learning_rate) == (3072, 2048, 1e-6)
    assert (c.total_steps, c.temperature, c.eval_temperature, c.gamma) == (400, 1.0, 0.0, 1.0)
    assert c.normalize_std is False and c.mode == "tree" and c.lora is None
    assert AGGREGATIONS == algorithms.AGGREGATIONS  # config.py's torch-free copy


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model_path": ""}, "model_path is required"),
        ({"mode": "forest"}, "mode must be one of tree, trajectory"),
        ({"group_size": 1}, "group_size must be >= 2"),
        ({"temperature": 0.0}, "GRPO needs sampled groups"),
        ({"top_p": 1.5}, "top_p"),
        ({"queries_per_step": 0}, "queries_per_step must be an int >= 1"),
        ({"aggregation": "sum"}, "aggregation must be one of"),
        ({"precision": "fp8"}, "precision must be one of"),
        ({"env_kwargs": {"split": "test"}}, "set the training split with `split`"),
        ({"lora": {"r": 0}}, "lora.r must be an int >= 1"),
        ({"checkpoint_every": -1}, "checkpoint_every must be an int >= 0"),
        ({"max_turns": 3, "env_kwargs": {"max_turns": 2}}, "set it once"),
        ({"gamma": 1.5}, "gamma must be >= 0 and <= 1"),
    ],
)
def test_config_rejects_bad_values(fields, message):
    base = {"model_path": "m", **fields}
    with pytest.raises(ConfigError, match=message):
        GRPOConfig(**base)


def test_config_dict_round_trip_and_unknown_fields():
    c = GRPOConfig(model_path="m", lora=LoRASettings(r=8, alpha=16), env_kwargs={"max_turns": 2})
    data = json.loads(json.dumps(c.to_dict()))
    assert GRPOConfig.from_dict(data) == c
    with pytest.raises(ConfigError, match="did you mean 'learning_rate'"):
        GRPOConfig.from_dict({"model_path": "m", "learning_rte": 1e-5})
    # objects in env_kwargs (a built pool) are kept in the config and saved as their repr
    pooled = GRPOConfig(model_path="m", env_kwargs=env_kwargs())
    assert isinstance(pooled.to_dict()["env_kwargs"]["pool"], str)


def test_config_from_cli_flags_file_and_set(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("model_path: from-file\ngroup_size: 8\nlearning_rate: 2.0e-6\n")
    c = GRPOConfig.from_cli(
        [
            "--config", str(file),
            "--model", "flag-wins",
            "--env", "orch/MathRouteSystem2-v0",
            "-e", "max_turns=2", "-e", "use_lagrangian=false",
            "--queries-per-step", "16",
            "--steps", "10",
            "--lora-r", "8",
            "--resume", "latest",
            "--set", "kl_coef=0.01", "--set", "mode=trajectory",
        ]
    )  # fmt: skip
    assert c.model_path == "flag-wins" and c.group_size == 8 and c.learning_rate == 2e-6
    assert c.env_id == "orch/MathRouteSystem2-v0"
    assert c.env_kwargs == {"max_turns": 2, "use_lagrangian": False}
    assert (c.queries_per_step, c.total_steps, c.resume_from) == (16, 10, "latest")
    assert c.lora == LoRASettings(r=8, alpha=16) and c.kl_coef == 0.01 and c.mode == "trajectory"
    with pytest.raises(ConfigError, match="need --lora-r"):
        GRPOConfig.from_cli(["--model", "m", "--lora-alpha", "4"])


def test_every_field_is_a_flag_generated_from_the_dataclass():
    c = GRPOConfig.from_cli(
        [
            "--model", "m", "--learning-rate", "2e-6", "--no-local-files-only",
            "--adam-betas", "0.8", "0.9", "--vllm-kwarg", "dtype=half", "--normalize-std",
            "--lora-r", "4", "--lora-target-modules", "q_proj", "v_proj", "--max-turns", "2",
        ]
    )  # fmt: skip
    assert c.learning_rate == 2e-6 and not c.local_files_only and c.adam_betas == (0.8, 0.9)
    assert c.vllm_kwargs == {"dtype": "half"} and c.normalize_std and c.max_turns == 2
    assert c.lora == LoRASettings(r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    dests = {action.dest for action in parser._actions}
    assert {f.name for f in dataclasses.fields(GRPOConfig)} - dests == {"lora"}  # --lora-*


def test_the_horizon_is_the_envs_max_turns():
    """config.max_turns only reaches the env through gym.make; the depth is read back."""
    one_process = Dist(torch.device("cpu"))
    unset = {k: v for k, v in env_kwargs().items() if k != "max_turns"}
    envs, horizon = make_envs(GRPOConfig(model_path="m", env_kwargs=unset), "train", 2, one_process)
    assert len(envs) == 2 and horizon == envs[0].unwrapped.max_turns == 3  # the env's default
    config = GRPOConfig(model_path="m", env_kwargs=unset, max_turns=2)
    envs, horizon = make_envs(config, "train", 1, one_process)
    assert horizon == envs[0].unwrapped.max_turns == 2


# -- the policy sampler ----------------------------------------------------------------------------


def test_sampler_logprobs_match_the_trainers_forward_pass():
    model, tok = _load(policy_path(0))
    sampler = HFPolicySampler(model, tok, max_new_tokens=6, seed=3, batch_size=5)
    prompts = _prompts(4) * 3
    before = torch.get_rng_state()
    samples = sampler(prompts)
    assert torch.equal(before, torch.get_rng_state())  # the global RNG is never touched
    eos = tok.eos_token_id
    for s, messages in zip(samples, prompts, strict=True):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert s.prompt_ids == tok(text, add_special_tokens=False)["input_ids"]
        assert s.completion_ids, "every row generates at least one token"
        assert len(s.logprobs) == len(s.completion_ids)
        assert eos not in s.completion_ids[:-1]  # cut at the first EOS, padding dropped
        assert len(s.completion_ids) == 6 or s.completion_ids[-1] == eos
        assert s.text == tok.decode(s.completion_ids, skip_special_tokens=True)
    # the same prompt repeated gets different samples (one generator per row)
    assert len({tuple(s.completion_ids) for s in samples}) > 4

    batch = build_batch(samples, pad_id=sampler.pad_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    trainer_lp = algorithms.token_logprobs(logits, batch["targets"])
    gap = ((trainer_lp - batch["old_logprobs"]).abs() * batch["loss_mask"]).max()
    assert float(gap) < 1e-4


def test_sampler_is_seeded_and_independent_of_batching():
    model, tok = _load(policy_path(0))
    prompts = _prompts(6)
    a = HFPolicySampler(model, tok, max_new_tokens=4, seed=7, batch_size=64)(prompts)
    b = HFPolicySampler(model, tok, max_new_tokens=4, seed=7, batch_size=2)(prompts)
    c = HFPolicySampler(model, tok, max_new_tokens=4, seed=8, batch_size=64)(prompts)
    assert [s.completion_ids for s in a] == [s.completion_ids for s in b]
    assert [s.completion_ids for s in a] != [s.completion_ids for s in c]
    greedy = HFPolicySampler(model, tok, temperature=0.0, max_new_tokens=4)
    g1, g2 = greedy(prompts), greedy(prompts)
    assert [s.completion_ids for s in g1] == [s.completion_ids for s in g2]
    assert all(s.logprobs is None for s in g1)


def test_sampler_truncates_long_prompts_from_the_left():
    model, tok = _load(policy_path(0))
    sampler = HFPolicySampler(model, tok, max_new_tokens=2, max_prompt_tokens=10)
    (sample,) = sampler(_prompts(1))
    assert len(sample.prompt_ids) == 10
    assert sampler.pop_stats()["truncated_prompts"] == 1


def test_vllm_sampler_without_vllm_raises_dependency_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import now fails, as on this machine
    with pytest.raises(DependencyError, match=r"orchenv\[vllm\]"):
        VLLMPolicySampler("some/model")
    config = grpo_config(policy_path(0), tmp_path, generation_backend="vllm", total_steps=1)
    with pytest.raises(DependencyError, match=r"orchenv\[vllm\]"):
        train(config)


# -- learning (the acceptance test) ------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_learns_to_route_to_the_right_agent(tmp_path, seed):
    """From near-chance reward to >= 90% of the maximum in 40 steps (a few seconds on CPU).

    Max: routing to ``mid`` (the only correct agent) earns 0.4375 per episode; chance
    is a policy that emits uniformly random tokens (mostly malformed, -1).
    """
    path = policy_path(seed)
    model, tok = _load(path)
    queries = 25
    envs = [gym.make("orch/MathRoute-v0", **env_kwargs()) for _ in range(queries)]
    seeds = list(range(1000, 1000 + queries))

    def mean_reward(sampler) -> float:
        trees = rollout_trees(envs, sampler, group_size=8, max_depth=1, seeds=seeds)
        return float(np.mean([n.reward for t in trees for n in t.nodes]))

    chance = mean_reward(uniform_sampler(tok, max_new_tokens=4, seed=seed))
    start = mean_reward(HFPolicySampler(model, tok, max_new_tokens=4, seed=seed))
    assert chance < 0.0 < MAX_REWARD
    assert abs(start - chance) < 0.15, (start, chance)  # the initial policy is near chance

    steps = 40
    config = grpo_config(
        path,
        tmp_path,
        seed=seed,
        total_steps=steps,
        learning_rate=5e-3,
        eval_every=steps,
        eval_episodes=16,
    )
    result = train(config)
    rewards = [m["reward/node_mean"] for m in result.metrics]
    assert len(rewards) == steps
    assert rewards[0] < 0.0
    assert np.mean(rewards[-5:]) >= 0.9 * MAX_REWARD, rewards
    final = result.final_metrics
    assert final["eval/reward"] >= 0.9 * MAX_REWARD  # greedy decoding routes to mid
    assert final["usage/mid"] >= 0.9 and final["invalid_fraction"] <= 0.05
    assert final["routing_accuracy"] >= 0.9
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, steps + 1))


# -- checkpoints -------------------------------------------------------------------------------------


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_resume_from_a_checkpoint_repeats_the_next_step_exactly(tmp_path, lora):
    extra = {"lora": LoRASettings(r=4, alpha=8)} if lora else {}
    a, b = tmp_path / "a", tmp_path / "b"
    straight = train(grpo_config(policy_path(0), a, total_steps=3, checkpoint_every=2, **extra))
    assert sorted(p.name for p in a.iterdir()) == ["checkpoint-2", "checkpoint-3", "metrics.jsonl"]
    files = {p.name for p in (a / "checkpoint-2").iterdir()}
    assert {"optimizer.pt", "rng_state_0.pt", "trainer_state.json", "tokenizer.json"} <= files
    assert ("adapter_model.safetensors" in files) == lora
    assert ("model.safetensors" in files) == (not lora)
    state = json.loads((a / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["config"]["total_steps"] == 3

    resumed = train(
        grpo_config(policy_path(0), b, total_steps=3, resume_from=str(a / "checkpoint-2"), **extra)
    )
    assert [m["step"] for m in resumed.metrics] == [3]
    assert comparable(resumed.metrics[0]) == comparable(straight.metrics[-1])
    pa = dict(straight.model.named_parameters())
    pb = dict(resumed.model.named_parameters())
    assert pa.keys() == pb.keys()
    for name, value in pa.items():
        assert torch.equal(value, pb[name]), name


def test_resume_latest_continues_in_place_and_rewrites_later_metrics(tmp_path):
    train(grpo_config(policy_path(0), tmp_path, total_steps=2, checkpoint_every=1))
    # a crash after step 2's checkpoint... then "latest" picks checkpoint-2 and goes on
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 3, "stale": True}) + "\n")
    result = train(
        grpo_config(
            policy_path(0), tmp_path, total_steps=3, checkpoint_every=1, resume_from="latest"
        )
    )
    assert [m["step"] for m in result.metrics] == [3]
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and "stale" not in records[-1]
    # "latest" with no checkpoint starts fresh; a path that is not a checkpoint is an error
    fresh = train(
        grpo_config(policy_path(0), tmp_path / "new", total_steps=1, resume_from="latest")
    )
    assert [m["step"] for m in fresh.metrics] == [1]
    with pytest.raises(ConfigError, match="not a checkpoint directory"):
        train(grpo_config(policy_path(0), tmp_path / "x", resume_from=str(tmp_path)))


# -- update mechanics ----------------------------------------------------------------------------------


def _params(result) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in result.model.named_parameters()}


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
def test_micro_batching_does_not_change_the_update(tmp_path, aggregation):
    """Loss weights per micro-batch make the accumulated gradient the full batch's.

    A large Adam epsilon makes the first step ~ lr * g / eps, proportional to the
    gradient (Adam's usual first step is ~ lr * sign(g), blind to loss weights).
    """
    common = {
        "total_steps": 1,
        "aggregation": aggregation,
        "max_grad_norm": None,
        "learning_rate": 1.0,
        "adam_eps": 10.0,
    }
    whole = train(grpo_config(policy_path(0), tmp_path / "a", micro_batch_size=32, **common))
    split = train(grpo_config(policy_path(0), tmp_path / "b", micro_batch_size=5, **common))
    pa, pb = _params(whole), _params(split)
    for name in pa:
        torch.testing.assert_close(pa[name], pb[name], atol=1e-7, rtol=1e-5)


def test_trajectory_mode_equals_tree_mode_for_one_turn(tmp_path):
    """With one turn, a tree is G episodes from the same reset: the same update."""
    tree = train(grpo_config(policy_path(0), tmp_path / "t", mode="tree"))
    traj = train(grpo_config(policy_path(0), tmp_path / "j", mode="trajectory"))
    assert comparable(tree.metrics[-1]) == comparable(traj.metrics[-1])
    pa, pb = _params(tree), _params(traj)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_accelerate_single_process_matches_the_plain_loop(tmp_path):
    pytest.importorskip("accelerate")
    plain = train(grpo_config(policy_path(0), tmp_path / "p"))
    accel = train(grpo_config(policy_path(0), tmp_path / "a", use_accelerate=True))
    pa, pb = _params(plain), _params(accel)
    for name in pa:
        torch.testing.assert_close(pa[name], pb[name], atol=0, rtol=0)


def test_lora_step_changes_only_the_adapter(tmp_path):
    pytest.importorskip("peft")
    initial, _ = _load(policy_path(0))
    base = dict(initial.named_parameters())
    result = train(
        grpo_config(
            policy_path(0),
            tmp_path,
            total_steps=1,
            lora=LoRASettings(r=4, alpha=8),
            kl_coef=0.05,  # the reference is the base with the adapter disabled
            gradient_checkpointing=True,
        )
    )
    changed_adapter = 0
    for name, param in result.model.named_parameters():
        if "lora_" in name:
            assert param.requires_grad
            changed_adapter += bool(
                name.endswith("lora_B.default.weight") and param.abs().sum() > 0
            )
        else:
            assert not param.requires_grad
            plain = name.removeprefix("base_model.model.").replace(".base_layer", "")
            assert torch.equal(param, base[plain]), name
    assert changed_adapter > 0
    record = result.final_metrics
    assert record["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == base
    assert (tmp_path / "checkpoint-1" / "adapter_model.safetensors").is_file()


def test_full_finetune_with_kl_and_entropy_terms_runs(tmp_path):
    result = train(
        grpo_config(policy_path(0), tmp_path, total_steps=2, kl_coef=0.1, entropy_coef=0.01)
    )
    first, second = result.metrics
    assert first["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # reference == initial policy
    assert second["loss/kl"] > 0.0 and second["loss/entropy"] > 0.0


# -- metrics on a multi-turn tree ---------------------------------------------------------------------


def test_metrics_of_a_scripted_two_turn_tree():
    """Hand-checkable counts: route to weak (wrong), then accept or reject -> mid (right)."""
    replies = {WEAK: WRONG, MID: RIGHT, STRONG: WRONG}
    envs = [
        gym.make(
            "orch/MathRoute-v0", pool=scripted_pool(replies), task_source=tiny_source(), max_turns=2
        )
    ]
    actions = iter(
        ["<model>weak</model>", "<model>weak</model>"]  # depth 0: both route to weak
        + ["<verdict>True</verdict>", "<verdict>False</verdict><model>mid</model>"] * 2
    )

    def sampler(prompts):
        return [
            Sample(text=next(actions), prompt_ids=[1], completion_ids=[2], logprobs=None)
            for _ in prompts
        ]

    trees = rollout_trees(envs, sampler, group_size=2, max_depth=2, seeds=[0])
    config = GRPOConfig(model_path="m", group_size=2, max_turns=2, queries_per_step=1)
    samples, advantages, stats = samples_from_trees(trees, config)
    record = step_metrics(stats, step=1, world=1)
    assert len(samples) == 6 and record["samples"] == 6
    # depth 1: accepting weak's wrong draft is a false accept, rejecting it a true reject
    assert (record["verify/fp"], record["verify/tn"], record["verify/tp"], record["verify/fn"]) == (
        2,
        2,
        0,
        0,
    )
    assert record["verify/accuracy"] == 0.5
    # calls: weak 2 (depth 0) + mid 2 (after each reject) -> half each; per episode 1 + 0.5
    assert record["usage/weak"] == record["usage/mid"] == 0.5
    assert record["calls_per_episode/weak"] == 1.0 and record["calls_per_episode/mid"] == 0.5
    # episodes end correct exactly when the draft was re-routed to mid: half of them
    assert record["accuracy"] == 0.5
    assert record["routing_accuracy"] == 0.5  # weak wrong twice, mid right twice
    # the accept/reject group at depth 1 has advantages of opposite sign, rejecting wins
    by_text = {s.text: a for s, a in zip(samples, advantages, strict=True)}
    assert (
        by_text["<verdict>False</verdict><model>mid</model>"]
        > 0
        > by_text["<verdict>True</verdict>"]
    )


# -- command line -----------------------------------------------------------------------------------


def test_cli_train_grpo_end_to_end(tmp_path, capsys):
    from orchenv.cli import main

    path = policy_path(0)
    out = tmp_path / "run"
    code = main(
        [
            "train", "grpo",
            "--model", str(path), "--tokenizer", str(path / "tokenizer"),
            "--env", "orch/MathRoute-v0", "-e", "max_turns=2",
            "--max-turns", "2", "--group-size", "2", "--queries-per-step", "2",
            "--steps", "2", "--lr", "1e-3", "--max-new-tokens", "4",
            "--max-prompt-tokens", "512", "--checkpoint-every", "1", "--device", "cpu",
            "--output-dir", str(out), "--no-progress", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    final = json.loads(capsys.readouterr().out)
    assert final["step"] == 2 and "reward/node_mean" in final
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert (out / "checkpoint-2" / "model.safetensors").is_file()
    saved = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert saved["config"]["max_turns"] == 2 and saved["config"]["env_kwargs"] == {"max_turns": 2}


def test_cli_reports_config_errors(capsys):
    from orchenv.cli import main

    assert main(["train", "grpo", "--model", "m", "--group-size", "1"]) == 2
    assert "group_size must be >= 2" in capsys.readouterr().err


def test_building_the_cli_parser_does_not_import_torch():
    code = (
        "import sys, orchenv.cli; orchenv.cli.build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


def test_tensorboard_scalars_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    train(grpo_config(policy_path(0), tmp_path, total_steps=1, log_tensorboard=True))
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


# -- zero-advantage samples -----------------------------------------------------------------------


def test_skipping_zero_advantage_samples_leaves_the_update_unchanged(tmp_path):
    """Skipping is on by default and only saves compute: the weights after a step match a
    run that trains on every sample (the normaliser still counts the skipped tokens)."""
    assert GRPOConfig(model_path="m").skip_zero_advantage is True
    common = {"total_steps": 2, "max_grad_norm": None, "learning_rate": 1.0, "adam_eps": 10.0}
    common["micro_batch_size"] = 5  # kept samples are re-packed into fewer micro-batches
    common["max_new_tokens"] = 1  # one token: most groups are 4 malformed actions, all tied
    skip = train(grpo_config(policy_path(0), tmp_path / "s", **common))
    full = train(grpo_config(policy_path(0), tmp_path / "f", skip_zero_advantage=False, **common))
    for s, f in zip(skip.metrics, full.metrics, strict=True):
        assert s["samples"] == f["samples"] == 32
        zero = round(s["advantage/zero_fraction"] * s["samples"])
        assert zero > 0 and s["samples_skipped"] == zero and f["samples_skipped"] == 0
        assert s["tokens/trained"] < f["tokens/trained"]
        assert s["loss"] == pytest.approx(f["loss"], abs=1e-6)
    pa, pb = _params(skip), _params(full)
    for name in pa:
        torch.testing.assert_close(pa[name], pb[name], atol=1e-6, rtol=1e-5)


def test_zero_advantage_samples_stay_when_kl_or_entropy_needs_them(tmp_path):
    for extra in ({"kl_coef": 0.1}, {"entropy_coef": 0.01}):
        config = grpo_config(
            policy_path(0), tmp_path / str(extra), total_steps=1, max_new_tokens=1, **extra
        )
        result = train(config)
        record = result.final_metrics
        assert record["advantage/zero_fraction"] > 0 and record["samples_skipped"] == 0
    off = GRPOConfig.from_cli(["--model", "m", "--no-skip-zero-advantage"])
    assert off.skip_zero_advantage is False


def test_a_step_with_only_zero_advantages_trains_nothing(tmp_path):
    """Every agent wrong, no multipliers, no format penalty: every reward is 0, every group
    ties; the step trains no token, still makes its (zero) update, and changes no weight."""
    pool = scripted_pool({WEAK: WRONG, MID: WRONG, STRONG: WRONG})
    kwargs = env_kwargs(pool=pool, use_lagrangian=False, format_penalty=0.0)
    config = grpo_config(policy_path(0), tmp_path, total_steps=1, env_kwargs=kwargs)
    result = train(config)
    record = result.final_metrics
    assert record["advantage/zero_fraction"] == 1.0
    assert record["samples_skipped"] == record["samples"] == 32 and record["updates"] == 1
    assert record["tokens/trained"] == 0 and record["loss"] == 0.0
    before = dict(_load(policy_path(0))[0].named_parameters())
    assert all(torch.equal(p, before[k]) for k, p in result.model.named_parameters())
