"""The GRPO trainer of seed 000 (section 3.4, appendix E): ``train(config) -> TrainResult``.

Read ``train`` top to bottom; it is the whole algorithm. Per step:

1. ``queries_per_step`` reset seeds drawn from ``(config.seed, step)``;
2. rollouts with the current policy: rollout trees (Algorithm 1: every state
   branches into G sampled actions, each on its own ``fork()`` of the env) or, in
   trajectory mode, G independent episodes per query;
3. returns and advantages: Q = r + gamma * mean Q of the children (eq. 5) and
   A = Q - mean Q of the group (eq. 6), no std normalisation by default (E.1.2);
   trajectory mode gives every turn its episode's advantage;
4. one optimizer update on all sampled actions (micro-batched, gradients
   accumulated): the clipped token-level surrogate of eq. (21) on the
   controller's own tokens only (prompts, agent replies and padding are masked);
5. metrics to ``output_dir/metrics.jsonl`` (and TensorBoard), a checkpoint every
   ``checkpoint_every`` steps, an evaluation every ``eval_every`` steps.

Randomness: every random choice derives from ``(config.seed, step)`` (query seeds,
per-row sampling generators, and a forked torch RNG around each update for any
dropout), so the trainer never seeds or consumes the process-wide RNGs and a
resumed run repeats the uninterrupted one exactly. Checkpoints still save the
global python / numpy / torch (and CUDA) RNG states and a resume restores them:
that is the only global-RNG write in this package, for code outside the
trainer's control (an env or backend that draws from a global RNG).

Data parallel (``accelerate``; UNTESTED beyond one CPU process): each process
rolls out its share of the step's queries (query i goes to process i mod N),
gradients are all-reduced by DDP, the loss is normalised by the global token
(or sequence) count, and process 0 writes metrics and checkpoints.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from orchenv.agents.grpo.algorithms import (
    AGGREGATIONS,
    Sample,
    build_batch,
    group_advantages,
    node_returns,
    policy_loss,
    rollout_trajectories,
    rollout_trees,
    token_entropy,
    token_logprobs,
    trajectory_advantages,
)
from orchenv.agents.grpo.config import GRPOConfig
from orchenv.backends.hf import _load_error, _transformers_version, call_seed
from orchenv.error import ConfigError, OrchEnvError, require

logger = logging.getLogger(__name__)

_PURPOSE = "GRPO training (orchenv.agents.grpo)"
CHECKPOINT_PREFIX = "checkpoint-"
#: metric keys that measure time; they differ between otherwise identical runs
TIMING_PREFIXES = ("time/", "throughput/")


@dataclass
class TrainResult:
    """What ``train`` returns: where things are and what happened."""

    output_dir: Path
    #: the last completed step
    step: int
    #: one dict per step run in this call (what metrics.jsonl got)
    metrics: list[dict[str, Any]]
    #: the newest checkpoint written in this call (None: none written)
    checkpoint: Path | None
    #: the trained policy (unwrapped; a peft model with LoRA) and its tokenizer
    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)

    @property
    def final_metrics(self) -> dict[str, Any]:
        return self.metrics[-1] if self.metrics else {}


def train(
    config: GRPOConfig, *, on_step: Callable[[dict[str, Any]], None] | None = None
) -> TrainResult:
    """Train ``config.model_path`` on ``config.env_id`` with multi-turn GRPO.

    ``on_step`` is called with each step's metrics (on process 0), e.g. to drive a
    progress bar.
    """
    config.validate()
    if config.aggregation not in AGGREGATIONS:  # config.py keeps a torch-free copy
        raise ConfigError(f"aggregation must be one of {AGGREGATIONS}, got {config.aggregation!r}")
    transformers = require("transformers", "train", _PURPOSE)

    # -- processes, output directory, where to start ------------------------------------------
    accelerator = _make_accelerator(config)
    rank = accelerator.process_index if accelerator else 0
    world = accelerator.num_processes if accelerator else 1
    is_main = rank == 0
    out_dir = Path(config.output_dir)
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    resume_dir = _resume_dir(config, out_dir)
    start_step = _read_state(resume_dir)["step"] if resume_dir else 0
    if resume_dir is None and is_main and _checkpoints(out_dir):
        logger.warning(
            "%s already holds checkpoints and this run starts fresh: its metrics.jsonl and "
            "checkpoints of the same steps are overwritten (pass resume_from='latest' to go on)",
            out_dir,
        )
    if start_step >= config.total_steps:
        logger.warning("checkpoint %s is at step %d >= total_steps", resume_dir, start_step)

    # -- environments: one per query of this process, reused every step ---------------------
    env_kwargs = _env_kwargs(config, config.split)
    local_queries = list(range(rank, config.queries_per_step, world))
    envs = [_make_env(config.env_id, env_kwargs) for _ in local_queries]
    eval_envs: list[Any] = []  # built at the first evaluation

    # -- device and precision --------------------------------------------------------------------
    if accelerator is not None:
        device = accelerator.device
    elif config.device:
        device = torch.device(config.device)
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = config.precision
    if precision == "auto":
        precision = "bf16-mixed" if device.type == "cuda" else "fp32"
    weight_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    autocast_dtype = torch.bfloat16 if precision == "bf16-mixed" else None

    # -- tokenizer and policy (LoRA, gradient checkpointing) ---------------------------------
    tokenizer = _load_tokenizer(transformers, config)
    lora_resume = resume_dir if (resume_dir and config.lora is not None) else None
    weights_from = str(resume_dir) if (resume_dir and config.lora is None) else config.model_path
    model = _load_model(transformers, config, weights_from, weight_dtype)
    if config.lora is not None:
        model = _add_lora(model, config, lora_resume)
    if config.gradient_checkpointing:
        _enable_checkpointing(model)
    model.config.use_cache = False  # training forward passes; generate() turns it on itself
    model.to(device)
    model.train()
    if precision == "bf16" and config.learning_rate < 1e-4:
        logger.warning(
            "precision='bf16' keeps weights in bf16, whose resolution (~0.4%% of a weight) "
            "swallows most updates at learning_rate=%g; prefer 'bf16-mixed'",
            config.learning_rate,
        )

    # -- optimizer ----------------------------------------------------------------------------------
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=config.learning_rate,
        betas=config.adam_betas,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    if resume_dir is not None:
        optimizer.load_state_dict(
            torch.load(resume_dir / "optimizer.pt", map_location=device, weights_only=True)
        )
        _restore_rng(resume_dir, rank)
        logger.info("resumed from %s at step %d", resume_dir, start_step)

    # -- reference policy for the KL term (only when it is used) ------------------------------
    ref_model = None
    if config.kl_coef > 0 and config.lora is None:
        ref_model = _load_model(transformers, config, config.model_path, weight_dtype)
        ref_model.to(device).eval().requires_grad_(False)
    # with LoRA the reference is the same model with its adapter disabled

    if accelerator is not None:
        model, optimizer = accelerator.prepare(model, optimizer)
    policy = accelerator.unwrap_model(model) if accelerator else model

    # -- sampler ------------------------------------------------------------------------------------
    sampler = _make_sampler(config, policy, tokenizer, device, autocast_dtype)
    pad_id = int(tokenizer.pad_token_id)

    # -- logs -------------------------------------------------------------------------------------
    metrics_path = out_dir / "metrics.jsonl"
    if is_main:
        _truncate_metrics(metrics_path, start_step)
    writer = _tensorboard(out_dir) if (config.log_tensorboard and is_main) else None

    history: list[dict[str, Any]] = []
    last_checkpoint: Path | None = None
    for step in range(start_step + 1, config.total_steps + 1):
        t_step = time.perf_counter()

        # 1. this step's queries (the same on every process; each takes its share)
        all_seeds = query_seeds(config.seed, step, config.queries_per_step)
        seeds = [all_seeds[i] for i in local_queries]
        sampler.reseed(call_seed(config.seed, f"grpo-step/{step}/rank/{rank}", ()))
        if hasattr(sampler, "sync_weights"):
            sampler.sync_weights(policy)

        # 2-3. rollouts, returns, advantages
        t_rollout = time.perf_counter()
        if config.mode == "tree":
            trees = rollout_trees(
                envs,
                sampler,
                group_size=config.group_size,
                max_depth=config.max_turns,
                seeds=seeds,
            )
            samples, advantages, stats = samples_from_trees(trees, config)
        else:
            groups = rollout_trajectories(
                envs,
                sampler,
                group_size=config.group_size,
                max_steps=config.max_turns,
                seeds=seeds,
            )
            samples, advantages, stats = samples_from_trajectories(groups, config)
        rollout_s = time.perf_counter() - t_rollout
        gen = sampler.pop_stats()
        if config.skip_zero_advantage:
            kept = [i for i, a in enumerate(advantages) if a != 0.0] or [0]
            samples = [samples[i] for i in kept]
            advantages = [advantages[i] for i in kept]

        # 4. the policy update
        t_update = time.perf_counter()
        update = _update(
            model=model,
            policy=policy,
            ref_model=ref_model,
            optimizer=optimizer,
            params=params,
            accelerator=accelerator,
            samples=samples,
            advantages=advantages,
            config=config,
            device=device,
            autocast_dtype=autocast_dtype,
            pad_id=pad_id,
            step=step,
            rank=rank,
        )
        update_s = time.perf_counter() - t_update

        # 5. metrics, evaluation, checkpoint
        stats.update(
            {
                "tokens/prompt": gen["prompt_tokens"],
                "tokens/generated": gen["completion_tokens"],
                "truncated_prompts": gen["truncated_prompts"],
                "time/generation_s": gen["seconds"],
                "time/rollout_s": rollout_s,
                "time/update_s": update_s,
            }
        )
        stats.update(update)
        record = step_metrics(_gather(stats, accelerator), step, world)
        if config.eval_every and (step % config.eval_every == 0 or step == config.total_steps):
            if not eval_envs:
                eval_kwargs = _env_kwargs(config, config.eval_split)
                eval_envs = [
                    _make_env(config.env_id, eval_kwargs)
                    for _ in range(rank, config.eval_episodes, world)
                ]
            record.update(_evaluate(eval_envs, sampler, config, rank, world, accelerator))
        record["time/step_s"] = time.perf_counter() - t_step
        history.append(record)
        if is_main:
            with metrics_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
            if writer is not None:
                for key, value in record.items():
                    if isinstance(value, (int, float)) and key != "step":
                        writer.add_scalar(key, value, step)
                writer.flush()
            if on_step is not None:
                on_step(record)
        checkpoint_due = config.checkpoint_every and step % config.checkpoint_every == 0
        if checkpoint_due or step == config.total_steps:
            last_checkpoint = _save_checkpoint(
                out_dir, step, policy, tokenizer, optimizer, config, accelerator, rank
            )

    if writer is not None:
        writer.close()
    for env in envs + eval_envs:
        env.close()
    if hasattr(sampler, "close"):
        sampler.close()
    return TrainResult(
        output_dir=out_dir,
        step=max(start_step, config.total_steps),
        metrics=history,
        checkpoint=last_checkpoint,
        model=policy,
        tokenizer=tokenizer,
    )


# =============================================================================================
# seeds
# =============================================================================================


def query_seeds(seed: int, step: int, n: int) -> list[int]:
    """The reset seeds of step ``step``'s queries: a pure function of (seed, step)."""
    rng = np.random.default_rng([int(seed), int(step)])
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=n)]


@contextlib.contextmanager
def _forked_rng(seed: int, device: torch.device):  # noqa: ANN202
    """Run a block on a private copy of torch's RNG seeded with ``seed`` (dropout, inits)."""
    cuda = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed % (2**63))
        yield


# =============================================================================================
# environments
# =============================================================================================


def _env_kwargs(config: GRPOConfig, split: str) -> dict[str, Any]:
    """gym.make kwargs: the user's, plus ``split`` and ``max_turns`` where the env takes them."""
    kwargs = dict(config.env_kwargs)
    accepted = _env_parameters(config.env_id)
    if accepted is None or "split" in accepted:
        kwargs["split"] = split
    elif split != "train":
        raise ConfigError(f"{config.env_id} takes no `split` argument; cannot use split={split!r}")
    if "max_turns" not in kwargs and (accepted is None or "max_turns" in accepted):
        kwargs["max_turns"] = config.max_turns
    elif isinstance(kwargs.get("max_turns"), int) and kwargs["max_turns"] > config.max_turns:
        logger.warning(
            "env max_turns=%d exceeds the tree depth max_turns=%d: episodes still running "
            "at the last depth are cut there (their Q is their last reward)",
            kwargs["max_turns"],
            config.max_turns,
        )
    return kwargs


def _env_parameters(env_id: str) -> set[str] | None:
    """Keyword arguments the env's entry point takes (None: unknown or **kwargs)."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"unknown env id {env_id!r}: {exc}. See `orchenv list`.") from exc
    entry: Any = spec.entry_point
    try:
        if isinstance(entry, str):
            from gymnasium.envs.registration import load_env_creator

            entry = load_env_creator(entry)
        params = inspect.signature(entry).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def _make_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    try:
        return gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {env_id!r} with {sorted(kwargs)}: {exc}") from exc


# =============================================================================================
# model, tokenizer, sampler
# =============================================================================================


def _load_tokenizer(transformers: Any, config: GRPOConfig) -> Any:
    path = config.tokenizer_path or config.model_path
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            path,
            local_files_only=config.local_files_only,
            trust_remote_code=config.trust_remote_code,
        )
    except Exception as exc:
        raise _load_error("tokenizer", path, config.local_files_only, exc) from exc
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ConfigError(f"the tokenizer at {path!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_model(transformers: Any, config: GRPOConfig, path: str, dtype: torch.dtype) -> Any:
    # transformers renamed `torch_dtype` to `dtype` in 4.56
    dtype_kw = "dtype" if _transformers_version(transformers) >= (4, 56) else "torch_dtype"
    try:
        with _forked_rng(config.seed, torch.device("cpu")):  # inits of missing weights, if any
            return transformers.AutoModelForCausalLM.from_pretrained(
                path,
                **{dtype_kw: dtype},
                local_files_only=config.local_files_only,
                trust_remote_code=config.trust_remote_code,
            )
    except Exception as exc:
        raise _load_error("model", path, config.local_files_only, exc) from exc


def _add_lora(model: Any, config: GRPOConfig, resume_dir: Path | None) -> Any:
    """Wrap the model with a trainable LoRA adapter (new, or the checkpoint's)."""
    peft = require("peft", "train", "LoRA training (GRPOConfig.lora)")
    if resume_dir is not None:
        return peft.PeftModel.from_pretrained(model, str(resume_dir), is_trainable=True)
    assert config.lora is not None
    lora = peft.LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=config.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    with _forked_rng(config.seed, torch.device("cpu")):  # adapter init draws random numbers
        return peft.get_peft_model(model, lora)


def _enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing, non-reentrant (works with LoRA's frozen inputs)."""
    kwargs = {"use_reentrant": False}
    if callable(getattr(model, "activation_checkpointing_enable", None)):  # transformers >= 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _make_sampler(
    config: GRPOConfig, policy: Any, tokenizer: Any, device: torch.device, autocast_dtype: Any
) -> Any:
    if config.generation_backend == "vllm":
        from orchenv.agents.grpo.generation import VLLMPolicySampler

        return VLLMPolicySampler(
            config.model_path,
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            max_prompt_tokens=config.max_prompt_tokens,
            seed=config.seed,
            gpu_memory_utilization=config.vllm_gpu_memory_utilization,
            engine_kwargs=config.vllm_kwargs,
            trust_remote_code=config.trust_remote_code,
        )
    from orchenv.agents.grpo.generation import HFPolicySampler

    return HFPolicySampler(
        policy,
        tokenizer,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        max_prompt_tokens=config.max_prompt_tokens,
        batch_size=config.generation_batch_size,
        seed=config.seed,
        autocast_dtype=autocast_dtype,
    )


# =============================================================================================
# rollouts -> (samples, advantages, statistics)
# =============================================================================================


def samples_from_trees(
    trees: Sequence[Any], config: GRPOConfig
) -> tuple[list[Sample], list[float], dict]:
    """Eq. (5)-(6) per tree; every node's sample with its advantage, plus rollout statistics.

    A node at depth d stands for probability mass 1 / G^(d+1) of its tree (each
    state's G children split its mass), so weighted sums are per-episode
    expectations under the sampling policy: accuracy, calls, cost per episode.
    """
    samples: list[Sample] = []
    advantages: list[float] = []
    acc = _Stats()
    for tree in trees:
        q = node_returns(tree, config.gamma)
        adv = group_advantages(tree, q, normalize_std=config.normalize_std)
        roots = [n for n in tree.nodes if n.parent is None]
        acc.add("episode_return", sum(q[n.id] for n in roots) / max(len(roots), 1))
        for node in tree.nodes:
            samples.append(node.sample)
            advantages.append(adv[node.id])
            acc.node(node, adv[node.id], weight=config.group_size ** -(node.depth + 1))
    acc.add("queries", len(trees))
    return samples, advantages, acc.sums


def samples_from_trajectories(
    groups: Sequence[Sequence[Any]], config: GRPOConfig
) -> tuple[list[Sample], list[float], dict]:
    """Standard GRPO: each episode's return against its group, broadcast to its turns."""
    samples: list[Sample] = []
    advantages: list[float] = []
    acc = _Stats()
    for episodes in groups:
        returns = [t.episode_return for t in episodes]
        advs = trajectory_advantages(returns, normalize_std=config.normalize_std)
        acc.add("episode_return", sum(returns) / len(returns))
        for trajectory, a in zip(episodes, advs, strict=True):
            for node in trajectory.nodes:
                samples.append(node.sample)
                advantages.append(a)
                acc.node(node, a, weight=1.0 / len(episodes))
    acc.add("queries", len(groups))
    return samples, advantages, acc.sums


class _Stats:
    """Sums and counts of rollout statistics (summed across processes before dividing)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value)

    def node(self, node: Any, advantage: float, weight: float) -> None:
        info = node.info
        privileged = info.get("privileged") or {}
        self.add("samples", 1)
        self.add("reward_sum", node.reward)
        self.add("abs_advantage_sum", abs(advantage))
        self.add("zero_advantage", advantage == 0.0)
        self.add("invalid", bool(info.get("invalid_action")))
        self.add("cost_weighted", weight * float(info.get("cost_usd") or 0.0))
        if node.done and "correct" in info:
            self.add("terminal_weight", weight)
            self.add("correct_weighted", weight * bool(info["correct"]))
        if "response_correct" in privileged:
            self.add("routed", 1)
            self.add("routed_correct", bool(privileged["response_correct"]))
        verdict, judged = info.get("verdict"), privileged.get("judged_draft_correct")
        if verdict is not None and judged is not None:
            cell = ("tp" if judged else "fp") if verdict else ("fn" if judged else "tn")
            self.add(f"verify/{cell}", 1)
        for call in info.get("calls") or ():
            agent = call.get("agent")
            if agent is not None:
                self.add(f"calls/{agent}", 1)
                self.add(f"calls_weighted/{agent}", weight)


def _gather(stats: dict[str, float], accelerator: Any) -> dict[str, float]:
    """Sum every process's statistics (keys may differ: agents called on one process only)."""
    if accelerator is None or accelerator.num_processes == 1:
        return dict(stats)
    from accelerate.utils import gather_object

    total: dict[str, float] = {}
    for part in gather_object([stats]):
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


def step_metrics(s: dict[str, float], step: int, world: int) -> dict[str, Any]:
    """Turn summed statistics into the step's metrics record."""
    n = max(s.get("samples", 0.0), 1.0)
    queries = max(s.get("queries", 0.0), 1.0)

    def ratio(num: str, den: str) -> float | None:
        return s[num] / s[den] if s.get(den) else None

    record: dict[str, Any] = {
        "step": step,
        # mean reward per sampled action, and mean return per query (the root value)
        "reward/node_mean": s.get("reward_sum", 0.0) / n,
        "reward/episode": s.get("episode_return", 0.0) / queries,
        # final correctness of episodes (terminal nodes, weighted per episode)
        "accuracy": ratio("correct_weighted", "terminal_weight"),
        # the routed agent answered correctly
        "routing_accuracy": ratio("routed_correct", "routed") if s.get("routed") else None,
        "invalid_fraction": s.get("invalid", 0.0) / n,
        "cost_per_episode_usd": s.get("cost_weighted", 0.0) / queries,
        "advantage/abs_mean": s.get("abs_advantage_sum", 0.0) / n,
        "advantage/zero_fraction": s.get("zero_advantage", 0.0) / n,
        "queries": int(s.get("queries", 0)),
        "samples": int(s.get("samples", 0)),
    }
    cells = {c: int(s.get(f"verify/{c}", 0)) for c in ("tp", "fp", "tn", "fn")}
    record.update({f"verify/{c}": v for c, v in cells.items()})
    judged = sum(cells.values())
    record["verify/accuracy"] = (cells["tp"] + cells["tn"]) / judged if judged else None
    total_calls = sum(v for k, v in s.items() if k.startswith("calls/"))
    for key in sorted(s):
        if key.startswith("calls/"):
            agent = key.split("/", 1)[1]
            record[f"usage/{agent}"] = s[key] / total_calls  # share of all agent calls
            record[f"calls_per_episode/{agent}"] = s.get(f"calls_weighted/{agent}", 0.0) / queries
    # the update's numbers are per process means or sums
    for key in ("loss", "grad_norm", "updates", "learning_rate"):
        if key in s:
            record[key] = s[key] / world
    for key in sorted(s):
        if key.startswith("loss/") and s.get("loss_tokens"):
            record[key] = s[key] / s["loss_tokens"]
    for key in ("tokens/prompt", "tokens/generated", "tokens/trained", "truncated_prompts"):
        record[key] = int(s.get(key, 0))
    # times: the slowest process is what everyone waited for (sums over world / world is a
    # mean; good enough on balanced shards)
    for key in ("time/generation_s", "time/rollout_s", "time/update_s"):
        record[key] = s.get(key, 0.0) / world
    gen_s, upd_s = record["time/generation_s"], record["time/update_s"]
    record["throughput/generation_tokens_per_s"] = (
        record["tokens/generated"] / gen_s if gen_s > 0 else None
    )
    record["throughput/update_tokens_per_s"] = (
        s.get("tokens/update_input", 0.0) / upd_s if upd_s > 0 else None
    )
    return record


# =============================================================================================
# the update
# =============================================================================================


def _update(
    *,
    model: Any,
    policy: Any,
    ref_model: Any,
    optimizer: Any,
    params: list[Any],
    accelerator: Any,
    samples: list[Sample],
    advantages: list[float],
    config: GRPOConfig,
    device: torch.device,
    autocast_dtype: Any,
    pad_id: int,
    step: int,
    rank: int,
) -> dict[str, float]:
    """One step's optimisation: micro-batches, accumulated into one (or more) updates.

    The loss of each micro-batch is weighted by its share of the update's tokens
    (token-mean) or sequences (sequence-mean), counted over all processes, so
    the accumulated gradient is that of the whole batch's aggregated loss,
    whatever the micro-batch size or the number of processes.
    """
    world = accelerator.num_processes if accelerator else 1
    size = config.micro_batch_size
    micro = [list(range(i, min(i + size, len(samples)))) for i in range(0, len(samples), size)]
    # every process must run the same number of backward passes (DDP syncs in each);
    # processes with fewer samples run zero-weight passes on their first micro-batch
    n_micro = _max_over_processes(len(micro), accelerator)
    per_update = config.grad_accum_steps or n_micro
    use_old = config.use_sampler_logprobs and all(s.logprobs is not None for s in samples)
    max_len = config.max_prompt_tokens + config.max_new_tokens
    out = {
        "loss": 0.0,
        "grad_norm": 0.0,
        "updates": 0.0,
        "learning_rate": optimizer.param_groups[0]["lr"],
        "loss_tokens": 0.0,
        "tokens/trained": 0.0,
        "tokens/update_input": 0.0,
    }
    for first in range(0, n_micro, per_update):
        chunk = list(range(first, min(first + per_update, n_micro)))
        batches = []
        for m in chunk:
            real = m < len(micro)
            idx = micro[m] if real else micro[0]
            batch = build_batch([samples[i] for i in idx], pad_id=pad_id, max_len=max_len)
            batch["advantages"] = torch.tensor([advantages[i] for i in idx], dtype=torch.float32)
            mask = batch["loss_mask"]
            if config.aggregation == "token-mean":
                units = float(mask.sum())
            else:
                units = float((mask.sum(dim=-1) > 0).sum())
            batches.append((batch, units if real else 0.0))
        total_units = _sum_over_processes(sum(u for _, u in batches), accelerator)
        optimizer.zero_grad(set_to_none=True)
        update_loss = 0.0
        for k, (batch, units) in enumerate(batches):
            # DDP averages gradients over processes: scale by world to get the global sum
            weight = units * world / total_units if total_units > 0 else 0.0
            last = k == len(batches) - 1
            sync = (
                contextlib.nullcontext()
                if (accelerator is None or last)
                else (accelerator.no_sync(model))
            )
            seed = call_seed(config.seed, f"grpo-update/{step}/{rank}/{first + k}", ())
            with sync, _forked_rng(seed, device):
                loss, stats = _micro_batch_loss(
                    model, policy, ref_model, batch, config, device, autocast_dtype, use_old
                )
                scaled = loss * weight
                if accelerator is not None:
                    accelerator.backward(scaled)
                else:
                    scaled.backward()
            if units > 0:
                update_loss += float(loss.detach()) * weight / world
                tokens = stats.pop("num_tokens")
                out["loss_tokens"] += tokens
                out["tokens/trained"] += tokens
                out["tokens/update_input"] += float(batch["attention_mask"].sum())
                for key, value in stats.items():
                    out[f"loss/{key}"] = out.get(f"loss/{key}", 0.0) + value * tokens
        max_norm = config.max_grad_norm if config.max_grad_norm is not None else math.inf
        if accelerator is not None:
            norm = accelerator.clip_grad_norm_(params, max_norm)
        else:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        optimizer.step()
        out["grad_norm"] += float(norm)
        out["loss"] += update_loss
        out["updates"] += 1
    # per-update means (summed over processes later, divided by world)
    n_updates = max(out["updates"], 1.0)
    out["loss"] /= n_updates
    out["grad_norm"] /= n_updates
    optimizer.zero_grad(set_to_none=True)
    return out


def _micro_batch_loss(
    model: Any,
    policy: Any,
    ref_model: Any,
    batch: dict[str, torch.Tensor],
    config: GRPOConfig,
    device: torch.device,
    autocast_dtype: Any,
    use_old: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. (21) on one micro-batch: logprobs of the controller's tokens under the policy."""
    input_ids = batch["input_ids"].to(device)
    attention = batch["attention_mask"].to(device)
    targets = batch["targets"].to(device)
    mask = batch["loss_mask"].to(device)
    logits = _logits(model, input_ids, attention, autocast_dtype, config.temperature)
    logprobs = token_logprobs(logits, targets)
    old = batch["old_logprobs"].to(device) if use_old else logprobs.detach()
    ref_logprobs = None
    if config.kl_coef > 0:
        with torch.no_grad():
            if ref_model is not None:
                ref_logits = _logits(
                    ref_model, input_ids, attention, autocast_dtype, config.temperature
                )
            else:  # LoRA: the base model is the adapter-free policy
                with policy.disable_adapter():
                    ref_logits = _logits(
                        policy, input_ids, attention, autocast_dtype, config.temperature
                    )
            ref_logprobs = token_logprobs(ref_logits, targets)
            del ref_logits
    entropy = token_entropy(logits) if config.entropy_coef > 0 else None
    loss, stats = policy_loss(
        logprobs,
        old,
        batch["advantages"].to(device),
        mask,
        clip_eps=config.clip_eps,
        clip_eps_high=config.clip_eps_high,
        ref_logprobs=ref_logprobs,
        kl_coef=config.kl_coef,
        entropy=entropy,
        entropy_coef=config.entropy_coef,
        aggregation=config.aggregation,
    )
    if entropy is None:
        stats["entropy"] = _masked_entropy(logits.detach(), mask)
    return loss, stats


def _logits(
    model: Any, input_ids: Any, attention: Any, autocast_dtype: Any, temperature: float
) -> torch.Tensor:
    """The model's logits [B, T, V] in float32, divided by the sampling temperature.

    Dividing by the temperature makes the update's distribution the one the sampler
    drew from (and recorded logprobs of); at Table 9's temperature 1 it is a no-op.
    """
    autocast = (
        torch.autocast(device_type=input_ids.device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    with autocast:
        logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
    logits = logits.float()
    return logits / temperature if temperature != 1.0 else logits


def _masked_entropy(logits: torch.Tensor, mask: torch.Tensor, chunk: int = 1024) -> float:
    """Mean next-token entropy over the controller's tokens, in chunks (memory).

    ``logits`` [B, T, V] are the model's; position t predicts token t + 1 (``mask`` [B, T-1]).
    """
    with torch.no_grad():
        rows = logits[:, :-1][mask > 0]
        if rows.shape[0] == 0:
            return 0.0
        total = 0.0
        for i in range(0, rows.shape[0], chunk):
            logp = torch.log_softmax(rows[i : i + chunk], dim=-1)
            total += float(-(logp.exp() * logp).sum())
        return total / rows.shape[0]


def _max_over_processes(value: int, accelerator: Any) -> int:
    if accelerator is None or accelerator.num_processes == 1:
        return value
    t = torch.tensor([value], device=accelerator.device)
    return int(accelerator.gather(t).max())


def _sum_over_processes(value: float, accelerator: Any) -> float:
    if accelerator is None or accelerator.num_processes == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=accelerator.device)
    return float(accelerator.reduce(t, reduction="sum"))


# =============================================================================================
# evaluation
# =============================================================================================


def _evaluate(
    envs: list[Any], sampler: Any, config: GRPOConfig, rank: int, world: int, accelerator: Any
) -> dict[str, Any]:
    """Greedy (eval_temperature) episodes on ``eval_split``; the same episodes every time."""
    greedy = sampler.with_settings(temperature=config.eval_temperature)
    greedy.reseed(call_seed(config.seed, f"grpo-eval/{rank}", ()))
    seeds = [config.seed + 1_000_003 + i for i in range(rank, config.eval_episodes, world)]
    groups = rollout_trajectories(
        envs, greedy, group_size=1, max_steps=config.max_turns, seeds=seeds
    )
    s = _Stats()
    for (episode,) in groups:
        s.add("episodes", 1)
        s.add("return", episode.episode_return)
        last = episode.nodes[-1]
        s.add("correct", bool(last.info.get("correct")))
        s.add("cost", sum(float(n.info.get("cost_usd") or 0.0) for n in episode.nodes))
        for node in episode.nodes:
            s.add("actions", 1)
            s.add("invalid", bool(node.info.get("invalid_action")))
            for call in node.info.get("calls") or ():
                if call.get("agent") is not None:
                    s.add(f"calls/{call['agent']}", 1)
    t = _gather(s.sums, accelerator)
    n = max(t.get("episodes", 0.0), 1.0)
    out: dict[str, Any] = {
        "eval/reward": t.get("return", 0.0) / n,
        "eval/accuracy": t.get("correct", 0.0) / n,
        "eval/cost_per_episode_usd": t.get("cost", 0.0) / n,
        "eval/invalid_fraction": t.get("invalid", 0.0) / max(t.get("actions", 0.0), 1.0),
    }
    calls = sum(v for k, v in t.items() if k.startswith("calls/"))
    for key in sorted(t):
        if key.startswith("calls/"):
            out[f"eval/usage/{key.split('/', 1)[1]}"] = t[key] / calls
    return out


# =============================================================================================
# checkpoints
# =============================================================================================


def _save_checkpoint(
    out_dir: Path,
    step: int,
    policy: Any,
    tokenizer: Any,
    optimizer: Any,
    config: GRPOConfig,
    accelerator: Any,
    rank: int,
) -> Path:
    """``checkpoint-STEP/``: weights (or the LoRA adapter), tokenizer, optimizer, RNG, state.

    Written to a temporary directory and renamed when complete, so a crash during
    saving never leaves a checkpoint that "latest" would pick up half-written.
    """
    final = out_dir / f"{CHECKPOINT_PREFIX}{step}"
    tmp = out_dir / f".{CHECKPOINT_PREFIX}{step}.tmp"
    is_main = rank == 0
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        policy.save_pretrained(tmp)  # peft saves the adapter only
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        state = {
            "step": step,
            "lora": config.lora is not None,
            "world_size": accelerator.num_processes if accelerator else 1,
            "config": config.to_dict(),
        }
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    _barrier(accelerator)
    torch.save(_rng_state(), tmp / f"rng_state_{rank}.pt")
    _barrier(accelerator)
    if is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _prune_checkpoints(out_dir, config.keep_last_checkpoints)
        logger.info("saved %s", final)
    _barrier(accelerator)
    return final


def _barrier(accelerator: Any) -> None:
    if accelerator is not None:
        accelerator.wait_for_everyone()


def _checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for path in out_dir.glob(f"{CHECKPOINT_PREFIX}*"):
        suffix = path.name[len(CHECKPOINT_PREFIX) :]
        if suffix.isdigit() and (path / "trainer_state.json").is_file():
            found.append((int(suffix), path))
    return sorted(found)


def _prune_checkpoints(out_dir: Path, keep: int | None) -> None:
    if keep is None:
        return
    for _, path in _checkpoints(out_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def _resume_dir(config: GRPOConfig, out_dir: Path) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start."""
    if config.resume_from is None:
        return None
    if config.resume_from == "latest":
        found = _checkpoints(out_dir)
        if not found:
            logger.info("resume_from='latest': no checkpoint in %s, starting fresh", out_dir)
            return None
        return found[-1][1]
    path = Path(config.resume_from)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(
            f"resume_from={config.resume_from!r} is not a checkpoint directory (no "
            f"trainer_state.json); give a {CHECKPOINT_PREFIX}STEP directory or 'latest'"
        )
    state = _read_state(path)
    if bool(state.get("lora")) != (config.lora is not None):
        raise ConfigError(
            f"{path} was trained {'with' if state.get('lora') else 'without'} LoRA; resume "
            "with the same setting"
        )
    return path


def _read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise OrchEnvError(f"cannot read {path / 'trainer_state.json'}: {exc}") from exc


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(path: Path, rank: int) -> None:
    """Put the global RNGs back as they were at the checkpoint (see the module docstring)."""
    file = path / f"rng_state_{rank}.pt"
    if not file.is_file():
        file = path / "rng_state_0.pt"
    if not file.is_file():
        logger.warning("%s has no RNG state; global RNGs are left as they are", path)
        return
    state = torch.load(file, weights_only=False)  # python / numpy states are not tensors
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines after ``step`` (a resumed run rewrites them) or all on a fresh start."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except json.JSONDecodeError:
            continue
    path.write_text("".join(k + "\n" for k in kept), encoding="utf-8")


# =============================================================================================
# processes and logging
# =============================================================================================


def _make_accelerator(config: GRPOConfig) -> Any:
    """An ``accelerate.Accelerator`` when asked for or launched with several processes."""
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if not (config.use_accelerate or launched):
        return None
    accelerate = require("accelerate", "train", "data-parallel GRPO (use_accelerate)")
    cpu = config.device == "cpu"
    return accelerate.Accelerator(cpu=cpu)


def _tensorboard(out_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning(
            "log_tensorboard=True but tensorboard is not installed (pip install tensorboard); "
            "metrics go to metrics.jsonl only"
        )
        return None
    return SummaryWriter(log_dir=str(out_dir / "tensorboard"))


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without its timing entries (for comparing runs)."""
    return {k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)}


__all__ = [
    "TrainResult",
    "comparable",
    "query_seeds",
    "samples_from_trajectories",
    "samples_from_trees",
    "step_metrics",
    "train",
]
