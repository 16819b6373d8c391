"""docs/serve.md's TRL section, end to end on CPU (issue 36): the docs' ``OrchEnvTool`` and
dataset, TRL's ``GRPOTrainer(environment_factory=OrchEnvTool)`` on a tiny random Qwen2, one
optimizer step against a real ``orchenv serve orch/MathRoute-v0`` subprocess.

The tiny model is random, so it learns nothing; the test shows the wiring runs: TRL probes the
class, renders ``act`` as a tool, resets one served episode per rollout (the server logs each
reset with the row's seed) and takes the reward from ``OrchEnvTool.get_reward``.

The tiny tokenizer's own template has no ``tools`` section, and TRL refuses a template that
cannot render a tool-calling conversation (``supports_tool_calling``) and parses tool calls
only for chat templates it knows (``add_response_schema``); so the test gives the tokenizer
(in memory, not the shared model directory) TRL's copy of the Qwen2.5 chat template, the
template of the docs' ``Qwen/Qwen2.5-0.5B-Instruct``.
"""

from __future__ import annotations

import math
import re
import time
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


def test_docs_trl_trainer_runs_one_step_on_a_tiny_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    server = Server("orch/MathRoute-v0", "-v")
    try:
        server.wait()
        namespace: dict[str, Any] = {}
        environment = _doc_block("trl environment").replace(DOCS_URL, server.url)
        exec(compile(environment, "serve.md", "exec"), namespace)
        exec(compile(_doc_block("trl dataset"), "serve.md", "exec"), namespace)
        dataset = namespace["dataset"].select(range(ROWS))

        # count what TRL does with the docs' class, without changing what it does
        calls: dict[str, list[Any]] = {"reset": [], "act": [], "get_reward": []}

        class CountedOrchEnvTool(namespace["OrchEnvTool"]):  # type: ignore[misc,valid-type]
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

        model_path = tiny_qwen2_path()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        tokenizer.chat_template = qwen2_5_chat_template  # tool-capable, known to TRL
        args = GRPOConfig(
            output_dir=str(tmp_path / "trl-serve"),
            max_steps=1,
            per_device_train_batch_size=ROWS * GENERATIONS,
            num_generations=GENERATIONS,
            max_completion_length=16,
            max_tool_calling_iterations=2,
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
            environment_factory=CountedOrchEnvTool,
        )
        trainer.train()

        assert trainer.state.global_step == 1
        # every rollout reset a served episode with its row's seed, and was scored by the env
        assert sorted(calls["reset"]) == sorted(list(range(ROWS)) * GENERATIONS), calls
        rewards = calls["get_reward"]
        assert len(rewards) == ROWS * GENERATIONS and all(map(math.isfinite, rewards)), calls
        log = next(h for h in trainer.state.log_history if "loss" in h)
        assert "rewards/CountedOrchEnvTool/mean" in log, log
        deadline = time.monotonic() + 10
        while len(re.findall(r"seed=\d", server.stderr())) < len(rewards):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        served = sorted(int(s) for s in re.findall(r"seed=(\d+)", server.stderr()))
        assert served == sorted(calls["reset"]), server.stderr()[-2000:]
        # the trainer's logged reward is the env's, and its tool count is the act calls; a random
        # model writes no tool call (this run: 0 act calls, reward 0, loss 0, weights unchanged)
        assert log["rewards/CountedOrchEnvTool/mean"] == pytest.approx(sum(rewards) / len(rewards))
        assert log["tools/call_frequency"] == pytest.approx(len(calls["act"]) / len(rewards))
    finally:
        server.stop()
