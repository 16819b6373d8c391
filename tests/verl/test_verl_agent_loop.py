"""verl's agent loop contract for ``orchenv.integrations.verl`` (CPU, tiny Qwen2).

Runs only inside verl's own venv (``scripts/setup_verl_venv.sh``; verl pins transformers
below the main venv's). The loop is built the way verl's ``AgentLoopWorker`` builds it
(``hydra.utils.instantiate`` of the registered entry, verl's ``DictConfigWrap``), with a
server manager whose replies come from the tiny model: teacher-forced through a script of
valid actions (``action_choices()`` of a twin env), so every number is known in advance,
and log-probabilities are the model's. Checked: prompt ids, response ids and mask (every env
token 0, every controller token 1), the folded reward, per-turn scores, metrics, verl's own
``as_dict`` tensors, for MathRoute (discounted sum) and MultihopQA (terminal reward).
"""

from __future__ import annotations

import asyncio

import pytest

# the submodule, not ``verl``: with tests/ on sys.path this folder is a namespace package
# named ``verl`` wherever the real one is not installed
pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="verl is not installed here: run inside .venv-verl (scripts/setup_verl_venv.sh)",
)
torch = pytest.importorskip("torch")

import gymnasium as gym  # noqa: E402
import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source  # noqa: E402
from tiny_model import tiny_qwen2_path  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopOutput,
    DictConfigWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import orchenv  # noqa: E402, F401
from orchenv.integrations import verl as orch_verl  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    path = tiny_qwen2_path()
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


class TinyServer:
    """verl's server-manager contract (``await generate(request_id, *, prompt_ids,
    sampling_params) -> TokenOutput``) on the tiny model, forcing ``script`` replies."""

    def __init__(self, model, tokenizer, script: list[str]):
        self.model, self.tokenizer, self.script = model, tokenizer, list(script)
        self.requests: list[tuple[str, list[int], dict]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
        if not self.script:  # unscripted: the model's own greedy reply
            with torch.no_grad():
                out = self.model.generate(
                    torch.tensor([list(prompt_ids)]),
                    max_new_tokens=int(sampling_params.get("max_tokens", 8)),
                    do_sample=False,
                )
            return TokenOutput(token_ids=out[0, len(prompt_ids) :].tolist())
        text = self.script.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [
            self.tokenizer.eos_token_id
        ]
        with torch.no_grad():
            logits = self.model(torch.tensor([list(prompt_ids) + ids])).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], -1)
        picked = logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        return TokenOutput(token_ids=ids, log_probs=picked, stop_reason="completed")


def make_loop(server, tokenizer, **loop_kwargs):
    """As AgentLoopWorker._run_agent_loop does: instantiate the registry entry with hydra."""
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 8192}},
         "data": {}}
    )  # fmt: skip
    entry = {**_agent_loop_registry[orch_verl.AGENT_NAME], **loop_kwargs}
    return hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )


def scripted_episode(env_id, env_kwargs, task_id, picks):
    """Play a twin env with valid actions (``action_choices()``) to know the episode."""
    env = gym.make(env_id, **env_kwargs)
    _, info = env.reset(seed=0, options={"task_id": task_id})
    actions, rewards, infos = [], [], [info]
    for pick in picks:
        choices = [c for c in env.unwrapped.action_choices() if c]
        actions.append(choices[pick % len(choices)])
        _, reward, term, trunc, info = env.step(actions[-1])
        rewards.append(reward)
        infos.append(info)
        if term or trunc:
            break
    return actions, rewards, infos


def runs_of(mask, ids):
    out, start = [], 0
    for k in range(1, len(mask) + 1):
        if k == len(mask) or mask[k] != mask[start]:
            out.append((mask[start], ids[start:k]))
            start = k
    return out


def check_episode(output, server, tokenizer, model, actions, rewards, infos):
    assert isinstance(output, AgentLoopOutput)
    # prompt: the reset messages through the chat template (generation prompt included)
    text = tokenizer.apply_chat_template(infos[0]["messages"], tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
    assert output.prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    # response: controller runs (mask 1) alternate with env runs (mask 0)
    runs = runs_of(output.response_mask, output.response_ids)
    assert [m for m, _ in runs] == [1, 0] * (len(actions) - 1) + [1]
    eos = tokenizer.eos_token_id
    for (_, ids), action in zip(runs[0::2], actions, strict=True):
        assert ids == tokenizer(action, add_special_tokens=False)["input_ids"] + [eos]
    for (_, ids), info in zip(runs[1::2], infos[1:], strict=False):
        env_text = tokenizer.decode(ids)
        assert env_text.startswith("\n<|im_start|>user\n")
        assert env_text.endswith("<|im_start|>assistant\n")
        assert infos and info["messages"][-1]["content"] in env_text  # the env's next prompt
    # each generation saw exactly the sequence so far, under one sticky request id
    assert len({r for r, _, _ in server.requests}) == 1
    for (_, prompt, _), (start, _) in zip(server.requests, _starts(runs), strict=True):
        assert prompt == output.prompt_ids + output.response_ids[:start]
    # the log-probabilities are the model's for the controller's tokens, 0 elsewhere
    full = torch.tensor([output.prompt_ids + output.response_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(full).logits[0].float(), -1)
    n = len(output.prompt_ids)
    for k, (tok, m) in enumerate(zip(output.response_ids, output.response_mask, strict=True)):
        expected = float(logp[n + k - 1, tok]) if m else 0.0
        assert output.response_logprobs[k] == pytest.approx(expected, abs=1e-4)
    assert output.extra_fields["turn_scores"] == pytest.approx(rewards)
    # verl's own conversion: reward at the last response token, masks as int64
    tensors = output.as_dict()
    assert tensors["response_mask"].tolist() == output.response_mask
    assert tensors["rm_scores"][-1] == pytest.approx(output.reward_score)
    assert tensors["rm_scores"][:-1].abs().sum() == 0


def _starts(runs):
    """(offset in the response, ids) of each controller run."""
    out, offset = [], 0
    for m, ids in runs:
        if m == 1:
            out.append((offset, ids))
        offset += len(ids)
    return out


def test_mathroute_episode_tokens_masks_rewards_metrics(tiny):
    model, tokenizer = tiny
    kwargs = {"pool": scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: WRONG}),
              "task_source": tiny_source(), "max_turns": 3}  # fmt: skip
    actions, rewards, infos = scripted_episode("orch/MathRoute-v0", kwargs, "t1", [0, 0, 1])
    assert len(actions) >= 2  # route, then verify: a multi-turn episode
    server = TinyServer(model, tokenizer, actions)
    # objects in env_kwargs (a built pool) come from the loop config; rows name the task
    loop = make_loop(server, tokenizer, env_id="orch/MathRoute-v0", env_kwargs=kwargs)
    row = {"raw_prompt": infos[0]["messages"],
           "extra_info": {"index": 0, "orch": {"task_id": "t1", "seed": 0}}}  # fmt: skip
    output = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, **row))
    check_episode(output, server, tokenizer, model, actions, rewards, infos)
    assert output.reward_score == pytest.approx(sum(rewards))  # seed 000: gamma = 1 sum
    metrics = output.extra_fields["reward_extra_info"]
    final = infos[-1]
    assert metrics["turns"] == len(actions) and metrics["truncated"] == 0.0
    assert metrics["cost_usd"] == pytest.approx(final["episode_cost_usd"])
    if "correct" in final:
        assert metrics["accuracy"] == float(final["correct"])
    calls = [c["agent"] for i in infos[1:] for c in i.get("calls") or []]
    for agent in (WEAK, MID, STRONG):
        assert metrics[f"calls/{agent}"] == calls.count(agent)
    assert metrics["invalid_fraction"] == 0.0
    # a discounted fold with gamma 0.5 from the loop config
    server = TinyServer(model, tokenizer, actions)
    loop = make_loop(server, tokenizer, env_id="orch/MathRoute-v0", env_kwargs=kwargs, gamma=0.5)
    output = asyncio.run(loop.run({"temperature": 1.0}, **row))
    assert output.reward_score == pytest.approx(sum(0.5**t * r for t, r in enumerate(rewards)))


def test_multihopqa_episode_terminal_reward_from_a_dataset_row(tiny):
    model, tokenizer = tiny
    task_id = "mhqa-0/train/1405"  # two hops, then finish: answered right at the third turn
    actions, rewards, infos = scripted_episode(
        "orch/MultihopQA-v0", {"split": "train", "max_turns": 3}, task_id, [0, 2, -1]
    )
    assert len(actions) == 3 and rewards[-1] > 0 and infos[-1]["correct"]
    server = TinyServer(model, tokenizer, actions)
    loop = make_loop(server, tokenizer)  # everything from the row, as the dataset writes it
    orch = {"env_id": "orch/MultihopQA-v0", "env_kwargs": '{"max_turns": 3}',
            "split": "train", "task_id": task_id, "seed": 0}  # fmt: skip
    row = {"raw_prompt": infos[0]["messages"], "extra_info": {"index": 3, "orch": orch}}
    output = asyncio.run(loop.run({"temperature": 1.0}, **row))
    check_episode(output, server, tokenizer, model, actions, rewards, infos)
    assert output.reward_score == pytest.approx(rewards[-1])  # terminal (seed 004)
    metrics = output.extra_fields["reward_extra_info"]
    assert set(metrics) >= set(orch_verl.BASE_METRICS)
    assert metrics["turns"] == 3 and metrics["accuracy"] == 1.0
    assert metrics["calls/searcher"] >= 1 and metrics["invalid_fraction"] == 0.0


def test_rows_without_an_env_are_rejected_with_the_fix(tiny):
    model, tokenizer = tiny
    loop = make_loop(TinyServer(model, tokenizer, []), tokenizer)
    with pytest.raises(orchenv.error.ConfigError, match="extra_info.orch.env_id"):
        asyncio.run(loop.run({}, raw_prompt=[], extra_info={"index": 0}))
