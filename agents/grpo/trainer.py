"""The GRPO trainer of seed 000 (section 3.4, appendix E): ``train(config) -> TrainResult``.

Read ``train`` top to bottom; per step it

1. draws ``queries_per_step`` reset seeds from ``(config.seed, step)``;
2. rolls out the current policy (``rollout``): trees (Algorithm 1) or G episodes per
   query (trajectory mode), as deep as the env's ``max_turns``;
3. turns rewards into advantages: Q = r + gamma * mean Q of the children (eq. 5),
   A = Q - mean Q of the group (eq. 6), no std normalisation by default (E.1.2);
4. makes one optimizer update on every sampled action (``update``): the clipped
   surrogate of eq. (21) on the controller's own tokens only;
5. writes metrics, evaluates and checkpoints on schedule.

All randomness derives from ``(config.seed, step)``: query seeds, per-row sampling
generators and a forked torch RNG around each update, so a resumed run repeats the
uninterrupted one. Processes: ``dist.py``; the run directory: ``rundir.py``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from orchenv.agents.grpo import rundir
from orchenv.agents.grpo.algorithms import (
    Sample,
    Trajectory,
    Tree,
    TreeNode,
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
from orchenv.agents.grpo.dist import Dist, autocast, forked_rng, make_dist
from orchenv.agents.grpo.generation import HFPolicySampler, PolicySampler, VLLMPolicySampler
from orchenv.backends.hf import HFBackend, call_seed
from orchenv.error import ConfigError, require

logger = logging.getLogger(__name__)

#: metric keys that measure time; they differ between otherwise identical runs
TIMING_PREFIXES = ("time/", "throughput/")


@dataclass
class TrainResult:
    """What ``train`` returns: the run directory, the last step, this call's metrics (one
    dict per step), its newest checkpoint, and the trained policy (unwrapped) and tokenizer."""

    output_dir: Path
    step: int
    metrics: list[dict[str, Any]]
    checkpoint: Path | None
    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)

    @property
    def final_metrics(self) -> dict[str, Any]:
        return self.metrics[-1] if self.metrics else {}


@dataclass
class Learner:
    """What an update touches: ``model`` as ``dist`` prepared it, ``policy`` unwrapped, and the
    frozen reference (None without the KL term, or with LoRA: the adapter-free policy)."""

    model: Any
    policy: Any
    ref_model: Any
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    dist: Dist
    autocast_dtype: torch.dtype | None
    pad_id: int


def train(
    config: GRPOConfig, *, on_step: Callable[[dict[str, Any]], None] | None = None
) -> TrainResult:
    """Train ``config.model_path`` on ``config.env_id``; ``on_step(record)`` on process 0."""
    config.validate()
    dist = make_dist(config.use_accelerate, config.device)
    out_dir = Path(config.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    resume_dir = rundir.resume_dir(config, out_dir)
    start_step = rundir.read_state(resume_dir)["step"] if resume_dir else 0
    if resume_dir is None and dist.is_main and rundir.checkpoints(out_dir):
        logger.warning("%s holds checkpoints; this fresh run overwrites them", out_dir)
    if start_step >= config.total_steps:
        logger.warning("checkpoint %s is at step %d >= total_steps", resume_dir, start_step)

    # one env per query of this process, reused every step; the env sets the depth
    local_queries = dist.share(config.queries_per_step)
    envs, horizon = make_envs(config, config.split, config.queries_per_step, dist)
    eval_envs: list[Any] = []  # built at the first evaluation
    learner, tokenizer = make_learner(config, dist, resume_dir)
    sampler = make_sampler(config, learner, tokenizer)
    log = rundir.MetricsLog(out_dir, start_step, config.log_tensorboard) if dist.is_main else None

    history: list[dict[str, Any]] = []
    checkpoint: Path | None = None
    for step in range(start_step + 1, config.total_steps + 1):
        t_step = time.perf_counter()
        # 1. this step's queries (the same on every process; each takes its share)
        all_seeds = query_seeds(config.seed, step, config.queries_per_step)
        sampler.reseed(call_seed(config.seed, f"grpo-step/{step}/rank/{dist.rank}", ()))
        sampler.sync_weights(learner.policy)

        # 2-3. rollouts, returns, advantages
        t0 = time.perf_counter()
        seeds = [all_seeds[i] for i in local_queries]
        samples, advantages, stats = rollout(envs, sampler, config, horizon, seeds)
        stats["time/rollout_s"] = time.perf_counter() - t0
        stats.update(sampler.pop_stats())
        if config.skip_zero_advantage:
            kept = [i for i, a in enumerate(advantages) if a != 0.0] or [0]
            samples, advantages = [samples[i] for i in kept], [advantages[i] for i in kept]

        # 4. the policy update
        t0 = time.perf_counter()
        stats.update(update(learner, samples, advantages, config, step))
        stats["time/update_s"] = time.perf_counter() - t0

        # 5. metrics, evaluation, checkpoint
        record = step_metrics(dist.gather(stats), step, dist.world)
        if config.eval_every and (step % config.eval_every == 0 or step == config.total_steps):
            if not eval_envs:
                eval_envs, eval_horizon = make_envs(
                    config, config.eval_split, config.eval_episodes, dist
                )
            record.update(evaluate(eval_envs, eval_horizon, sampler, config, dist))
        record["time/step_s"] = time.perf_counter() - t_step
        history.append(record)
        if log is not None:
            log.write(record)
            if on_step is not None:
                on_step(record)
        if step == config.total_steps or (
            config.checkpoint_every and step % config.checkpoint_every == 0
        ):
            checkpoint = rundir.save_checkpoint(
                out_dir, step, learner.policy, tokenizer, learner.optimizer, config, dist
            )

    if log is not None:
        log.close()
    for env in envs + eval_envs:
        env.close()
    sampler.close()
    return TrainResult(
        out_dir, max(start_step, config.total_steps), history, checkpoint, learner.policy, tokenizer
    )


def query_seeds(seed: int, step: int, n: int) -> list[int]:
    """The reset seeds of step ``step``'s queries: a pure function of (seed, step)."""
    rng = np.random.default_rng([int(seed), int(step)])
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=n)]


# -- setup: environments, policy, sampler --------------------------------------------------------


def make_envs(config: GRPOConfig, split: str, n: int, dist: Dist) -> tuple[list[Any], int]:
    """This process's share of ``n`` envs of ``split``, and their horizon.

    The horizon (tree depth, episode length) is the made env's ``max_turns``: the env
    owns its turn limit; ``config.max_turns``, when set, reaches it through gym.make.
    """
    kwargs = {**config.env_kwargs, "split": split}
    if config.max_turns is not None:
        kwargs["max_turns"] = config.max_turns
    share = len(dist.share(n))
    try:
        envs = [gym.make(config.env_id, **kwargs) for _ in range(max(share, 1))]
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {config.env_id!r} with {sorted(kwargs)}: {exc}") from exc
    horizon = getattr(envs[0].unwrapped, "max_turns", None)
    if not (isinstance(horizon, int) and horizon >= 1):
        raise ConfigError(f"{config.env_id} has no max_turns >= 1 for the rollout depth")
    for spare in envs[share:]:  # a process without a share only read the horizon
        spare.close()
    return envs[:share], horizon


def make_learner(config: GRPOConfig, dist: Dist, resume_dir: Path | None) -> tuple[Learner, Any]:
    """Policy (LoRA, checkpointing), AdamW, reference model and tokenizer, placed by ``dist``."""
    precision = config.precision
    if precision == "auto":
        precision = "bf16-mixed" if dist.device.type == "cuda" else "fp32"
    if precision == "bf16" and config.learning_rate < 1e-4:
        logger.warning(
            "bf16 weights swallow most updates at lr=%g: use bf16-mixed", config.learning_rate
        )
    loader = HFBackend(
        device=str(dist.device),
        dtype="bfloat16" if precision == "bf16" else "float32",
        local_files_only=config.local_files_only,
        trust_remote_code=config.trust_remote_code,
    )
    tokens = config.tokenizer_path or config.model_path
    weights = resume_dir if (resume_dir and config.lora is None) else config.model_path
    with forked_rng(config.seed, torch.device("cpu")):  # inits of missing weights, if any
        loaded = loader.load("policy", str(weights), tokens)
    model = loaded.model if config.lora is None else _add_lora(loaded.model, config, resume_dir)
    if config.gradient_checkpointing:
        kwargs = {"use_reentrant": False}  # works with LoRA's frozen inputs
        if callable(getattr(model, "activation_checkpointing_enable", None)):  # transformers 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # training forward passes; generate() turns it on itself
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=config.learning_rate,
        betas=config.adam_betas,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    if resume_dir is not None:
        state = torch.load(resume_dir / "optimizer.pt", map_location=dist.device, weights_only=True)
        optimizer.load_state_dict(state)
        rundir.restore_rng(resume_dir, dist.rank)
        logger.info("resumed from %s", resume_dir)
    ref_model = None  # with LoRA: the policy with its adapter disabled
    if config.kl_coef > 0 and config.lora is None:
        with forked_rng(config.seed, torch.device("cpu")):
            ref_model = loader.load("reference", config.model_path, tokens).model
        ref_model.requires_grad_(False)
    model, optimizer = dist.prepare(model, optimizer)
    amp = torch.bfloat16 if precision == "bf16-mixed" else None
    learner = Learner(
        model, dist.unwrap(model), ref_model, optimizer, params, dist, amp, loaded.pad_id
    )
    return learner, loaded.tokenizer


def _add_lora(model: Any, config: GRPOConfig, resume_dir: Path | None) -> Any:
    """Wrap the model with a trainable LoRA adapter (new, or the checkpoint's)."""
    peft = require("peft", "train", "LoRA training (GRPOConfig.lora)")
    if resume_dir is not None:
        return peft.PeftModel.from_pretrained(model, str(resume_dir), is_trainable=True)
    assert config.lora is not None
    lora = config.lora
    settings = peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=lora.target_modules, task_type="CAUSAL_LM",
    )  # fmt: skip
    with forked_rng(config.seed, torch.device("cpu")):  # the adapter's init draws numbers
        return peft.get_peft_model(model, settings)


def make_sampler(config: GRPOConfig, learner: Learner, tokenizer: Any) -> PolicySampler:
    """transformers ``generate`` on the live policy, or a vLLM engine synced every step."""
    decoding = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_new_tokens": config.max_new_tokens,
        "max_prompt_tokens": config.max_prompt_tokens,
        "seed": config.seed,
    }
    if config.generation_backend == "vllm":
        return VLLMPolicySampler(
            config.model_path,
            gpu_memory_utilization=config.vllm_gpu_memory_utilization,
            engine_kwargs=config.vllm_kwargs,
            trust_remote_code=config.trust_remote_code,
            **decoding,
        )
    return HFPolicySampler(
        learner.policy,
        tokenizer,
        batch_size=config.generation_batch_size,
        autocast_dtype=learner.autocast_dtype,
        **decoding,
    )


# -- rollouts -> (samples, advantages, statistics) -----------------------------------------------


def rollout(
    envs: list[Any], sampler: PolicySampler, config: GRPOConfig, horizon: int, seeds: list[int]
) -> tuple[list[Sample], list[float], dict[str, float]]:
    """Steps 2-3: rollouts with the current policy, then every sample with its advantage."""
    kwargs = {"group_size": config.group_size, "seeds": seeds}
    if config.mode == "tree":
        return samples_from_trees(rollout_trees(envs, sampler, max_depth=horizon, **kwargs), config)
    groups = rollout_trajectories(envs, sampler, max_steps=horizon, **kwargs)
    return samples_from_trajectories(groups, config)


def samples_from_trees(
    trees: Sequence[Tree], config: GRPOConfig
) -> tuple[list[Sample], list[float], dict[str, float]]:
    """Eq. (5)-(6) per tree: every node's sample and advantage, and rollout statistics.

    A node at depth d carries probability mass 1 / G^(d+1) of its tree, so weighted
    sums are per-episode expectations under the sampling policy (accuracy, calls, cost).
    """
    stats, weighted = _Stats(), []
    for tree in trees:
        q = node_returns(tree, config.gamma)
        adv = group_advantages(tree, q, normalize_std=config.normalize_std)
        roots = [n for n in tree.nodes if n.parent is None]
        stats.add("episode_return", sum(q[n.id] for n in roots) / max(len(roots), 1))
        weighted += [(n, adv[n.id], config.group_size ** -(n.depth + 1)) for n in tree.nodes]
    return stats.collect(weighted, queries=len(trees))


def samples_from_trajectories(
    groups: Sequence[Sequence[Trajectory]], config: GRPOConfig
) -> tuple[list[Sample], list[float], dict[str, float]]:
    """Standard GRPO: each episode's return against its group, broadcast to its turns."""
    stats, weighted = _Stats(), []
    for episodes in groups:
        returns = [t.episode_return for t in episodes]
        advs = trajectory_advantages(returns, normalize_std=config.normalize_std)
        stats.add("episode_return", sum(returns) / len(returns))
        for episode, a in zip(episodes, advs, strict=True):
            weighted += [(n, a, 1.0 / len(episodes)) for n in episode.nodes]
    return stats.collect(weighted, queries=len(groups))


class _Stats:
    """Sums of rollout statistics (summed across processes before ``step_metrics`` divides)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value)

    def collect(
        self, weighted: list[tuple[TreeNode, float, float]], queries: int
    ) -> tuple[list[Sample], list[float], dict[str, float]]:
        """Count every (node, advantage, weight); return samples, advantages and the sums."""
        for node, advantage, weight in weighted:
            info, privileged = node.info, node.info.get("privileged") or {}
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
                if call.get("agent") is not None:
                    self.add(f"calls/{call['agent']}", 1)
                    self.add(f"calls_weighted/{call['agent']}", weight)
        self.add("queries", queries)
        return [n.sample for n, _, _ in weighted], [a for _, a, _ in weighted], self.sums


def step_metrics(s: dict[str, float], step: int, world: int) -> dict[str, Any]:
    """Turn summed statistics into the step's metrics record."""
    n, queries = max(s.get("samples", 0.0), 1.0), max(s.get("queries", 0.0), 1.0)

    def ratio(num: str, den: str) -> float | None:
        return s[num] / s[den] if s.get(den) else None

    record: dict[str, Any] = {
        "step": step,
        "reward/node_mean": s.get("reward_sum", 0.0) / n,  # per sampled action
        "reward/episode": s.get("episode_return", 0.0) / queries,  # the root value
        "accuracy": ratio("correct_weighted", "terminal_weight"),  # of episodes, tree-weighted
        "routing_accuracy": ratio("routed_correct", "routed"),  # the routed agent was right
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
    calls = sum(v for k, v in s.items() if k.startswith("calls/"))
    for agent in sorted(k[len("calls/") :] for k in s if k.startswith("calls/")):
        record[f"usage/{agent}"] = s[f"calls/{agent}"] / calls  # share of all agent calls
        record[f"calls_per_episode/{agent}"] = s.get(f"calls_weighted/{agent}", 0.0) / queries
    for key in ("loss", "grad_norm", "updates", "learning_rate"):  # per-process means
        if key in s:
            record[key] = s[key] / world
    for key in sorted(s):
        if key.startswith("loss/") and s.get("loss_tokens"):
            record[key] = s[key] / s["loss_tokens"]
    for key in ("tokens/prompt", "tokens/generated", "tokens/trained", "truncated_prompts"):
        record[key] = int(s.get(key, 0))
    for key in ("time/generation_s", "time/rollout_s", "time/update_s"):  # mean over processes
        record[key] = s.get(key, 0.0) / world
    gen_s, upd_s = record["time/generation_s"], record["time/update_s"]
    record["throughput/generation_tokens_per_s"] = (
        record["tokens/generated"] / gen_s if gen_s > 0 else None
    )
    record["throughput/update_tokens_per_s"] = (
        s.get("tokens/update_input", 0.0) / upd_s if upd_s > 0 else None
    )
    return record


# -- the update ------------------------------------------------------------------------------------


def update(
    learner: Learner, samples: list[Sample], advantages: list[float], config: GRPOConfig, step: int
) -> dict[str, float]:
    """Step 4: micro-batches accumulated into one update (or ``grad_accum_steps`` chunks).

    Each micro-batch's loss is weighted by its share of the update's tokens (token-mean)
    or sequences (sequence-mean) over all processes, so the accumulated gradient is the
    whole batch's, whatever the micro-batch size or the number of processes.
    """
    dist, optimizer, size = learner.dist, learner.optimizer, config.micro_batch_size
    micro = [list(range(i, min(i + size, len(samples)))) for i in range(0, len(samples), size)]
    # every process runs as many backward passes (DDP syncs in each): zero-weight extras
    n_micro = dist.max(len(micro))
    per_update = config.grad_accum_steps or n_micro
    use_old = config.use_sampler_logprobs and all(s.logprobs is not None for s in samples)
    max_len = config.max_prompt_tokens + config.max_new_tokens
    out = dict.fromkeys(("loss", "grad_norm", "updates", "loss_tokens", "tokens/trained"), 0.0)
    out.update({"tokens/update_input": 0.0, "learning_rate": optimizer.param_groups[0]["lr"]})
    for first in range(0, n_micro, per_update):
        batches = []
        for m in range(first, min(first + per_update, n_micro)):
            idx = micro[m] if m < len(micro) else micro[0]
            batch = build_batch([samples[i] for i in idx], pad_id=learner.pad_id, max_len=max_len)
            batch["advantages"] = torch.tensor([advantages[i] for i in idx], dtype=torch.float32)
            mask = batch["loss_mask"]
            units = mask.sum() if config.aggregation == "token-mean" else (mask.sum(-1) > 0).sum()
            batches.append((batch, float(units) if m < len(micro) else 0.0))
        total_units = dist.sum(sum(u for _, u in batches))
        optimizer.zero_grad(set_to_none=True)
        for k, (batch, units) in enumerate(batches):
            # DDP averages gradients over processes: scale by world to get the global sum
            weight = units * dist.world / total_units if total_units > 0 else 0.0
            sync = dist.no_sync(learner.model) if k < len(batches) - 1 else nullcontext()
            seed = call_seed(config.seed, f"grpo-update/{step}/{dist.rank}/{first + k}", ())
            with sync, forked_rng(seed, dist.device):
                loss, stats = micro_batch_loss(learner, batch, config, use_old)
                dist.backward(loss * weight)
            if units > 0:
                out["loss"] += float(loss.detach()) * weight / dist.world
                tokens = stats.pop("num_tokens")
                out["loss_tokens"] += tokens
                out["tokens/trained"] += tokens
                out["tokens/update_input"] += float(batch["attention_mask"].sum())
                for key, value in stats.items():
                    out[f"loss/{key}"] = out.get(f"loss/{key}", 0.0) + value * tokens
        max_norm = config.max_grad_norm if config.max_grad_norm is not None else math.inf
        out["grad_norm"] += float(dist.clip_grad_norm(learner.params, max_norm))
        optimizer.step()
        out["updates"] += 1
    out["loss"] /= max(out["updates"], 1.0)  # per-update means
    out["grad_norm"] /= max(out["updates"], 1.0)
    optimizer.zero_grad(set_to_none=True)
    return out


def micro_batch_loss(
    learner: Learner, batch: dict[str, torch.Tensor], config: GRPOConfig, use_old: bool
) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. (21) on one micro-batch: logprobs of the controller's tokens under the policy."""
    device = learner.dist.device
    input_ids, attention = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    targets, mask = batch["targets"].to(device), batch["loss_mask"].to(device)

    def logits_of(model: Any) -> torch.Tensor:
        """float32 logits / T: the distribution the sampler drew from (T = 1 in Table 9)."""
        with autocast(learner.autocast_dtype, device):
            logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
        logits = logits.float()
        return logits / config.temperature if config.temperature != 1.0 else logits

    logits = logits_of(learner.model)
    logprobs = token_logprobs(logits, targets)
    ref_logprobs = None
    if config.kl_coef > 0:
        with torch.no_grad():
            if learner.ref_model is not None:
                ref_logprobs = token_logprobs(logits_of(learner.ref_model), targets)
            else:  # LoRA: the reference is the policy without its adapter
                with learner.policy.disable_adapter():
                    ref_logprobs = token_logprobs(logits_of(learner.policy), targets)
    entropy = token_entropy(logits) if config.entropy_coef > 0 else None
    loss, stats = policy_loss(
        logprobs,
        batch["old_logprobs"].to(device) if use_old else logprobs.detach(),
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
    if entropy is None:  # report it anyway, over the controller's tokens, in chunks
        with torch.no_grad():
            rows = logits.detach()[:, :-1][mask > 0]
            total = 0.0
            for i in range(0, rows.shape[0], 1024):
                logp = torch.log_softmax(rows[i : i + 1024], dim=-1)
                total += float(-(logp.exp() * logp).sum())
            stats["entropy"] = total / max(rows.shape[0], 1)
    return loss, stats


# -- evaluation ------------------------------------------------------------------------------------


def evaluate(
    envs: list[Any], horizon: int, sampler: PolicySampler, config: GRPOConfig, dist: Dist
) -> dict[str, Any]:
    """Greedy (eval_temperature) episodes on ``eval_split``, the same ones every time, measured
    like training episodes: eval/reward, accuracy, cost_per_episode_usd, invalid_fraction,
    usage/AGENT."""
    greedy = sampler.with_settings(temperature=config.eval_temperature)
    greedy.reseed(call_seed(config.seed, f"grpo-eval/{dist.rank}", ()))
    seeds = [config.seed + 1_000_003 + i for i in dist.share(config.eval_episodes)]
    groups = rollout_trajectories(envs, greedy, group_size=1, max_steps=horizon, seeds=seeds)
    record = step_metrics(dist.gather(samples_from_trajectories(groups, config)[2]), 0, dist.world)
    record["reward"] = record["reward/episode"]
    keys = ("reward", "accuracy", "cost_per_episode_usd", "invalid_fraction")
    return {f"eval/{k}": v for k, v in record.items() if k in keys or k.startswith("usage/")}


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without its timing entries (for comparing runs)."""
    return {k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)}
