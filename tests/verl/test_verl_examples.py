"""examples/verl/ up to the GPU: verl's hydra config system composes both example configs
with the papers' settings; the agent-loop files instantiate the loop with them; the dataset
builder's parquet loads through verl's own ``RLHFDataset`` and its rows drive an episode.

Runs only inside verl's venv (scripts/setup_verl_venv.sh).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="verl is not installed here: run inside .venv-verl (scripts/setup_verl_venv.sh)",
)
torch = pytest.importorskip("torch")

import hydra  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from test_verl_agent_loop import TinyServer, make_loop, runs_of  # noqa: E402
from tiny_model import tiny_qwen2_path  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from orchenv.integrations import verl as orch_verl  # noqa: E402
from orchenv.integrations.verl_data import verl_rows, write_parquet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verl"


def composed(name: str):
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(config_name=name)


def test_mathroute_grpo_config_mirrors_table_9():
    c = composed("mathroute_grpo")
    assert c.data.train_batch_size == 128  # batch size
    assert c.actor_rollout_ref.rollout.n == 4  # group size
    assert c.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 3  # turns
    assert c.actor_rollout_ref.actor.optim.lr == 1e-6
    assert c.actor_rollout_ref.rollout.temperature == 1.0
    assert c.actor_rollout_ref.rollout.val_kwargs.temperature == 0.0
    assert c.trainer.total_training_steps == 400
    assert c.data.max_prompt_length == 3072
    assert c.algorithm.adv_estimator == "grpo" and c.algorithm.norm_adv_by_std_in_grpo is False
    assert c.actor_rollout_ref.actor.use_kl_loss is False
    assert c.actor_rollout_ref.rollout.agent.default_agent_loop == orch_verl.AGENT_NAME
    # verl's defaults fill everything the file leaves out
    assert c.critic.optim.lr is not None and "ppo_epochs" in c.actor_rollout_ref.actor


def test_budgetroute_ppo_config_mirrors_appendix_a():
    c = composed("budgetroute_ppo")
    actor, critic = c.actor_rollout_ref.actor, c.critic
    assert c.algorithm.adv_estimator == "gae"
    assert (actor.optim.lr, critic.optim.lr) == (1e-6, 1e-5)
    assert (actor.optim.lr_warmup_steps_ratio, critic.optim.lr_warmup_steps_ratio) == (0.285, 0.015)
    assert c.data.train_batch_size == 512 and actor.ppo_mini_batch_size == 256
    assert actor.ppo_micro_batch_size_per_gpu * c.trainer.n_gpus_per_node == 64
    assert c.data.max_prompt_length + c.data.max_response_length == 4096
    assert (actor.kl_loss_coef, actor.clip_ratio) == (0.001, 0.2)
    rollout = c.actor_rollout_ref.rollout
    assert (rollout.temperature, rollout.top_p, rollout.gpu_memory_utilization) == (1.0, 1.0, 0.6)
    assert rollout.tensor_model_parallel_size == 1 and rollout.n == 1
    assert actor.fsdp_config.param_offload and actor.fsdp_config.optimizer_offload
    assert c.trainer.total_training_steps == 500


@pytest.mark.parametrize(
    ("file", "fold", "turn_tokens"),
    [
        ("agent_loop_mathroute.yaml", "discounted", 2048),
        ("agent_loop_budgetroute.yaml", "terminal", 500),
    ],
)
def test_agent_loop_files_instantiate_the_loop(file, fold, turn_tokens):
    from transformers import AutoTokenizer

    (entry,) = OmegaConf.load(EXAMPLES / file)  # as AgentLoopWorker reads the file
    assert entry.name == orch_verl.AGENT_NAME
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 64, "response_length": 64}}, "data": {}}
    )
    loop = hydra.utils.instantiate(
        config={k: v for k, v in entry.items() if k != "name"},
        trainer_config=DictConfigWrap(config=config),
        server_manager=None,
        tokenizer=AutoTokenizer.from_pretrained(tiny_qwen2_path()),
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )
    assert isinstance(loop, orch_verl.OrchEnvAgentLoop)
    assert (loop.reward_fold, loop.max_turn_tokens) == (fold, turn_tokens)


def test_dataset_parquet_loads_in_verl_and_drives_episodes(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    path = tiny_qwen2_path()
    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(path).eval(),
        AutoTokenizer.from_pretrained(path),
    )
    for env_id in ("orch/MathRoute-v0", "orch/BudgetRoute-v0"):
        rows = verl_rows(env_id, split="train", n=2, env_kwargs={"max_turns": 2})
        file = write_parquet(rows, tmp_path / f"{env_id.split('/')[1]}.parquet")
        data_config = OmegaConf.create(
            {"prompt_key": "prompt", "max_prompt_length": 4096, "return_raw_chat": True,
             "filter_overlong_prompts": False, "truncation": "error"}
        )  # fmt: skip
        dataset = RLHFDataset(data_files=[str(file)], tokenizer=tokenizer, config=data_config)
        assert len(dataset) == 2
        item = dataset[1]
        assert item["agent_name"] == orch_verl.AGENT_NAME
        orch = item["extra_info"]["orch"]
        assert (
            orch["env_id"] == env_id and orch["task_id"] == rows[1]["extra_info"]["orch"]["task_id"]
        )
        server = TinyServer(model, tokenizer, [])  # the tiny model's own replies
        loop = make_loop(server, tokenizer, max_turn_tokens=6)
        output = asyncio.run(loop.run({"temperature": 1.0}, **item))
        text = tokenizer.apply_chat_template(list(item["raw_prompt"]), tokenize=False,
                                             add_generation_prompt=True)  # fmt: skip
        assert output.prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
        turns = len(output.extra_fields["turn_scores"])
        assert turns <= 2, "the rows set max_turns=2: the loop must stop there"
        assert output.extra_fields["reward_extra_info"]["turns"] == turns
        assert [m for m, _ in runs_of(output.response_mask, output.response_ids)] == [1, 0] * (
            turns - 1
        ) + [1]
        assert all(p["max_tokens"] <= 6 for _, _, p in server.requests)
