"""TRL's GRPOTrainer on an orchenv env through ``orchenv.integrations.trl`` (CPU, tiny policy).

What users rely on: three real GRPO steps run on ``orch/MathRoute-v0`` (three turns); the
completion the trainer learns from has the controller's tokens in the loss and the env's
out of it; the env's reward (not a text heuristic) is what the trainer's advantages use.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from grpo_env import env_kwargs, policy_path  # noqa: E402

from orchenv.integrations.episode import followup_ids  # noqa: E402
from orchenv.integrations.trl import OrchRollout  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_trl_grpo_trains_on_mathroute_with_env_masks_and_rewards(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = policy_path(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", padding_side="left")
    rollout = OrchRollout("orch/MathRoute-v0", env_kwargs(max_turns=3), max_turn_tokens=4)
    dataset = rollout.dataset(4)

    replies: list[list[int]] = []  # every sampled reply, in generation order
    generate = rollout.generate

    def recording_generate(trainer, contexts):
        out = generate(trainer, contexts)
        replies.extend(out)
        return out

    rollout.generate = recording_generate  # type: ignore[method-assign]
    rewards_seen: list[list[float]] = []

    def reward(prompts, completions, **kwargs):
        out = rollout.reward_func(prompts, completions, **kwargs)
        rewards_seen.append(out)
        return out

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=1024,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        beta=0.0,
        scale_rewards="none",  # advantages = reward - group mean (seed 000, eq. 6)
    )
    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=dataset,
        reward_funcs=reward,
        rollout_func=rollout,
    )
    batches: list[dict] = []
    compute_loss = trainer.compute_loss

    def recording_loss(model, inputs, *a, **k):
        batches.append({k2: v for k2, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs, *a, **k)

    trainer.compute_loss = recording_loss  # type: ignore[method-assign]
    trainer.train()

    assert trainer.state.global_step == 3
    # -- masks: policy tokens 1, env tokens 0, for the last batch's episodes -----------------
    episodes = rollout.last_batch
    assert len(episodes) == 4 and any(len(e.rewards) > 1 for e in episodes)  # multi-turn
    generated = sorted(map(tuple, replies[-sum(len(e.actions) for e in episodes) :]))
    for e in episodes:
        runs, start = [], 0  # maximal runs of equal mask values
        for k in range(1, len(e.response_mask) + 1):
            if k == len(e.response_mask) or e.response_mask[k] != e.response_mask[start]:
                runs.append((e.response_mask[start], e.response_ids[start:k]))
                start = k
        env_runs = [ids for m, ids in runs if m == 0]
        assert [m for m, _ in runs][0] == 1 and len(env_runs) == len(e.rewards) - 1
        for ids, info in zip(env_runs, e.infos, strict=False):  # env text = the next prompt
            expected = followup_ids(tokenizer, info["messages"])
            assert ids[-len(expected) :] == expected and len(ids) - len(expected) in (0, 1)
        policy_runs = [tuple(ids) for m, ids in runs if m == 1]
        assert len(policy_runs) == len(e.actions)  # one run of policy tokens per turn
        assert all(run in generated for run in policy_runs)  # exactly what was sampled
    # the mask the trainer multiplies into its loss is the env mask (TRL shuffles the rows)
    last = batches[-1]
    mask = last["tool_mask"] * last["completion_mask"]
    assert mask.shape[0] == len(episodes)
    by_ids = {tuple(e.response_ids): e for e in episodes}
    matched = []
    for row in range(mask.shape[0]):
        n = int(last["completion_mask"][row].sum())
        e = by_ids[tuple(last["completion_ids"][row, :n].tolist())]
        assert mask[row, :n].tolist() == e.response_mask and mask[row, n:].sum() == 0
        matched.append(e)
    # -- rewards: the env's folded reward is what the trainer scores and normalises -----------
    assert len(rewards_seen) == 3
    expected = [e.reward("discounted", 1.0) for e in episodes]
    assert rewards_seen[-1] == pytest.approx(expected)
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["reward"] for h in logged] == pytest.approx([sum(r) / 4 for r in rewards_seen])
    mean = sum(expected) / 4
    advantages = [e.reward("discounted", 1.0) - mean for e in matched]
    assert last["advantages"].tolist() == pytest.approx(advantages, abs=1e-5)
    assert any(k.startswith("orch/accuracy") or k == "orch/turns" for h in logged for k in h)


def test_reward_folds_and_the_paper_defaults():
    from orchenv.error import ConfigError
    from orchenv.integrations.episode import default_fold, fold_rewards

    rewards = [0.5, -1.0, 2.0]
    assert fold_rewards(rewards, "discounted", 0.5) == pytest.approx(0.5 - 0.5 + 0.5)
    assert fold_rewards(rewards, "terminal") == 2.0 and fold_rewards(rewards, "sum") == 1.5
    assert default_fold("orch/MathRoute-v0") == "discounted"  # seed 000: per-turn rewards
    assert default_fold("orch/MultihopQA-v0") == "terminal"
    with pytest.raises(ConfigError, match="reward fold must be one of"):
        fold_rewards(rewards, "mean")


def test_a_reply_over_the_token_budget_ends_the_episode_with_masks_intact():
    from transformers import AutoTokenizer

    from orchenv.integrations.episode import TokenEpisode

    tokenizer = AutoTokenizer.from_pretrained(policy_path(0) / "tokenizer")
    messages = [{"role": "system", "content": "solvers"}, {"role": "user", "content": "2 3"}]
    episode = TokenEpisode(tokenizer, max_response_tokens=5)
    episode.start({"messages": messages})
    text = episode.policy_turn([tokenizer.convert_tokens_to_ids("easy")] * 7)
    assert text.split() == ["easy"] * 5 and episode.truncated  # cut at the budget
    assert episode.env_turn(0.25, False, {"messages": messages}) is None and episode.done
    assert episode.response_mask == [1] * 5 and len(episode.response_ids) == 5
    metrics = episode.metrics()
    assert metrics["truncated"] == 1.0 and metrics["turns"] == 1.0


def test_prompts_the_rollout_did_not_make_are_rejected():
    from orchenv.error import ConfigError

    rollout = OrchRollout("orch/MathRoute-v0", env_kwargs(max_turns=1))

    class Trainer:
        processing_class = None
        args = None

    with pytest.raises(ConfigError, match="build the train dataset with the same OrchRollout"):
        rollout([[{"role": "user", "content": "hi"}]], Trainer())
    rollout.close()
