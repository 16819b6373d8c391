"""docs/serve.md's TRL section, end to end on CPU (issue 36): the docs' ``OrchEnvTool`` and
dataset, TRL's ``GRPOTrainer(environment_factory=OrchEnvTool)`` on a tiny Qwen2, one optimizer
step against a real ``orchenv serve orch/MathRoute-v0`` subprocess.

Two models. The tiny random one (``tiny_qwen2_path()``) learns nothing and writes no tool
call: the test shows the wiring runs (TRL probes the class, renders ``act`` as a tool, resets
one served episode per rollout with the row's seed, takes the reward from ``get_reward``). A
copy overfit in seconds to write one ``act`` tool call shows the other half: TRL parses the
call, ``act`` steps the served episode, and the env's reward reaches the trainer's log.

The tiny tokenizer's own template has no ``tools`` section, and TRL refuses a template that
cannot render a tool-calling conversation (``supports_tool_calling``) and parses tool calls
only for chat templates it knows (``add_response_schema``); so the test gives the tokenizer
(in memory or in its own copy, never the shared model directory) TRL's copy of the Qwen2.5
chat template, the template of the docs' ``Qwen/Qwen2.5-0.5B-Instruct``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv")
pytest.importorskip("trl")
pytest.importorskip("datasets")
from test_serve import Server, _doc_block  # noqa: E402
from tiny_model import tiny_qwen2_path  # noqa: E402

DOCS_URL = "http://127.0.0.1:8000"
ROWS = 2  # the docs' dataset, its first rows (seeds 0 and 1)
GENERATIONS = 2  # GRPO's group: each row is played this many times
ROUTE = "<model>Qwen2.5-7B-Instruct</model>"  # a valid first MathRoute turn (reward -0.125)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server("orch/MathRoute-v0", "-v")  # -v: the server logs each reset's seed
    try:
        yield started.wait()
    finally:
        started.stop()


def _docs_namespace(server: Server) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    environment = _doc_block("trl environment").replace(DOCS_URL, server.url)
    exec(compile(environment, "serve.md", "exec"), namespace)
    exec(compile(_doc_block("trl dataset"), "serve.md", "exec"), namespace)
    return namespace


def _counted(tool_class: type, calls: dict[str, list[Any]]) -> type:
    """The docs' class, counting what TRL does with it without changing what it does."""

    class CountedOrchEnvTool(tool_class):  # type: ignore[misc,valid-type]
        def reset(self, **kwargs: Any) -> str:
            calls["reset"].append(kwargs.get("seed"))
            return super().reset(**kwargs)

        def act(self, text: str) -> str:
            """Send your turn to the environment and read what comes back.

            Args:
                text: your turn, in the format the environment's prompt asks for.
            """
            calls["act"].append(text)
            return super().act(text)

        def get_reward(self) -> float:
            reward = super().get_reward()
            calls["get_reward"].append(reward)
            return reward

    return CountedOrchEnvTool


def _train_one_step(
    server: Server, model_path: Path, tokenizer: Any, output_dir: Path, max_completion_length: int
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The docs' trainer block, small: one step; returns the tool's calls and the step's log."""
    from trl import GRPOConfig, GRPOTrainer

    namespace = _docs_namespace(server)
    dataset = namespace["dataset"].select(range(ROWS))
    calls: dict[str, list[Any]] = {"reset": [], "act": [], "get_reward": []}
    args = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=1,
        per_device_train_batch_size=ROWS * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=max_completion_length,
        max_tool_calling_iterations=1,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(model_path),
        processing_class=tokenizer,
        args=args,
        train_dataset=dataset,
        environment_factory=_counted(namespace["OrchEnvTool"], calls),
    )
    before = len(server.stderr())
    trainer.train()

    assert trainer.state.global_step == 1
    # every rollout reset a served episode with its row's seed, and was scored by the env
    assert sorted(calls["reset"]) == sorted(list(range(ROWS)) * GENERATIONS), calls
    rewards = calls["get_reward"]
    assert len(rewards) == ROWS * GENERATIONS and all(map(math.isfinite, rewards)), calls
    deadline = time.monotonic() + 10
    while len(re.findall(r"seed=\d", server.stderr()[before:])) < len(rewards):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    served = sorted(int(s) for s in re.findall(r"seed=(\d+)", server.stderr()[before:]))
    assert served == sorted(calls["reset"]), server.stderr()[-2000:]
    log = next(h for h in trainer.state.log_history if "loss" in h)
    # the trainer's logged reward is the env's, and its tool count is the act calls
    assert log["rewards/CountedOrchEnvTool/mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert log["tools/call_frequency"] == pytest.approx(len(calls["act"]) / len(rewards))
    return calls, log


def test_docs_trl_trainer_runs_one_step_on_a_tiny_random_model(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    model_path = tiny_qwen2_path()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.chat_template = qwen2_5_chat_template  # tool-capable, known to TRL
    calls, log = _train_one_step(server, model_path, tokenizer, tmp_path / "run", 16)
    # a random model writes no tool call: no act, reward 0 everywhere, nothing to learn from
    assert calls["act"] == [] and set(calls["get_reward"]) == {0.0}, calls
    assert log["reward_std"] == 0.0 and log["loss"] == 0.0, log


def _overfit_to_call_act(model_path: Path, server: Server, out: Path) -> Path:
    """A copy of the tiny model trained (about 40 Adam steps) to answer the docs' rendered
    prompts with one ``act`` tool call sending ``ROUTE``; saved with the Qwen2.5 template."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.config.max_position_embeddings = 8192  # RoPE; the prompts with tools pass 512
    namespace = _docs_namespace(server)
    tool = namespace["OrchEnvTool"]()
    call = {"name": "act", "arguments": {"text": ROUTE}}
    target = "<tool_call>\n" + json.dumps(call) + "\n</tool_call><|im_end|>"
    target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
    examples = []
    for seed in range(ROWS):
        content = namespace["INSTRUCTION"] + tool.reset(seed=seed)
        prompt_ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": content}],
            tools=[tool.act],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        ids = torch.tensor([list(prompt_ids) + target_ids])
        labels = ids.clone()
        labels[0, : len(prompt_ids)] = -100
        examples.append((ids, labels))
    tool.client.close()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    loss = torch.tensor(float("inf"))
    for _ in range(25):
        for ids, labels in examples:
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if loss.item() < 0.01:
            break
    assert loss.item() < 0.05, f"the tiny model did not learn the tool call: loss {loss.item()}"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_docs_trl_trainer_steps_the_served_env_through_act(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer

    model_path = _overfit_to_call_act(tiny_qwen2_path(), server, tmp_path / "caller")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    calls, log = _train_one_step(server, model_path, tokenizer, tmp_path / "run", 2048)
    # TRL parsed the model's tool calls and act stepped the served episode: the route turn's
    # reward (-0.125, the env's cost of the call) is what the trainer logged
    assert ROUTE in calls["act"], calls
    assert any(r != 0.0 for r in calls["get_reward"]), calls
    assert log["tools/call_frequency"] > 0, log
