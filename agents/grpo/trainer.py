"""The GRPO trainer of seed 000 (section 3.4, appendix E). Read ``train`` top to bottom; a
step draws reset seeds from ``(config.seed, step)`` (so a resumed run repeats an uninterrupted
one), rolls out trees (Algorithm 1) or G episodes per query, turns rewards into advantages
(eq. 5-6), makes one update on every sampled action (eq. 21, the controller's tokens only),
then writes metrics, evaluates and checkpoints on schedule.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from orchenv.agents.grpo import algorithms as grpo
from orchenv.agents.grpo import rundir
from orchenv.agents.grpo.config import GRPOConfig
from orchenv.agents.grpo.dist import Dist, forked_rng, gather, make_dist, share
from orchenv.agents.grpo.generation import (
    ChoicePolicySampler,
    HFPolicySampler,
    PolicySampler,
    VLLMPolicySampler,
    normalise_choice_scores,
)
from orchenv.backends.common import call_seed
from orchenv.backends.hf import HFBackend, choice_logprobs
from orchenv.error import ConfigError, require

logger = logging.getLogger(__name__)

TIMES = ("time/generation_s", "time/rollout_s", "time/update_s")  # summed over processes
Stats = defaultdict[str, float]  # sums, summed over processes before ``step_metrics`` divides
Batch = tuple[list[grpo.Sample], list[float], dict[str, float]]  # actions, advantages, sums


@dataclass
class TrainResult:
    """What ``train`` returns; ``model`` is the trained policy, unwrapped."""

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
    """What an update touches; ``ref_model`` is None without KL or with LoRA (adapter off)."""

    config: GRPOConfig
    model: Any
    policy: Any
    ref_model: Any
    optimizer: torch.optim.Optimizer
    dist: Dist
    amp: bool  # bf16 autocast ("bf16-mixed")
    tokenizer: Any
    pad_id: int


def train(
    config: GRPOConfig, *, on_step: Callable[[dict[str, Any]], None] | None = None
) -> TrainResult:
    """Train ``config.model_path`` on ``config.env_id``; ``on_step(record)`` on process 0."""
    dist = make_dist(config.use_accelerate, config.device)
    run = rundir.RunDir(config, dist)
    # one env per query of this process, reused every step; the env sets the depth
    envs, horizon = make_envs(config, config.split, config.queries_per_step, dist)
    eval_envs, eval_horizon = (
        ([], 0)
        if not config.eval_every
        else make_envs(config, config.eval_split, config.eval_episodes, dist)
    )
    learner = make_learner(config, dist, run)
    sampler = make_sampler(learner)

    history: list[dict[str, Any]] = []
    checkpoint: Path | None = None
    for step in range(run.start_step + 1, config.total_steps + 1):
        t_step = time.perf_counter()
        # 1. this step's queries (the same on every process; each takes its share)
        rng = np.random.default_rng([config.seed, step])  # a pure function of (seed, step)
        all_seeds = rng.integers(0, 2**31 - 1, size=config.queries_per_step).tolist()
        sampler.reseed(call_seed(config.seed, f"grpo-step/{step}/rank/{dist.process_index}", ()))
        sampler.sync_weights(learner.policy)

        # 2-3. rollouts, returns, advantages
        t0 = time.perf_counter()
        seeds = [all_seeds[i] for i in share(dist, config.queries_per_step)]
        kwargs: dict[str, Any] = {"group_size": config.group_size, "seeds": seeds}
        if config.mode == "tree":
            trees = grpo.rollout_trees(envs, sampler, max_depth=horizon, **kwargs)
            samples, advantages, stats = samples_from_trees(trees, config)
        else:
            groups = grpo.rollout_trajectories(envs, sampler, max_steps=horizon, **kwargs)
            samples, advantages, stats = samples_from_trajectories(groups, config)
        stats["time/rollout_s"] += time.perf_counter() - t0
        stats.update(sampler.pop_stats())

        # 4. the policy update (without the samples that cannot change it)
        t0 = time.perf_counter()
        skip = skips_zero_advantage(config)
        stats.update(update(learner, samples, advantages, step, skip_zero_advantage=skip))
        stats["time/update_s"] += time.perf_counter() - t0

        # 5. metrics, evaluation, checkpoint
        record = step_metrics(summed(gather(dist, stats)), step, dist.num_processes)
        if config.eval_every and (step % config.eval_every == 0 or step == config.total_steps):
            record.update(evaluate(eval_envs, eval_horizon, sampler, config, dist))
        record["time/step_s"] = time.perf_counter() - t_step
        history.append(record)
        run.log(record)
        if on_step is not None and dist.is_main_process:
            on_step(record)
        if step == config.total_steps or (
            config.checkpoint_every and step % config.checkpoint_every == 0
        ):
            checkpoint = run.save(step, learner.policy, learner.tokenizer, learner.optimizer)

    run.close()
    for env in envs + eval_envs:
        env.close()
    sampler.close()
    last = max(run.start_step, config.total_steps)
    return TrainResult(run.path, last, history, checkpoint, learner.policy, learner.tokenizer)


def summed(parts: list[dict[str, float]]) -> dict[str, float]:
    """Statistics of several processes added key by key (keys may differ between them)."""
    return {key: sum(p.get(key, 0.0) for p in parts) for key in set().union(*parts)}


def make_envs(config: GRPOConfig, split: str, n: int, dist: Dist) -> tuple[list[Any], int]:
    """This process's share of ``n`` envs of ``split``, and their horizon (``max_turns``)."""
    kwargs = {**config.env_kwargs, "split": split}
    if config.max_turns is not None:
        kwargs["max_turns"] = config.max_turns
    mine = len(share(dist, n))
    try:
        envs = [gym.make(config.env_id, **kwargs) for _ in range(max(mine, 1))]
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {config.env_id!r} with {sorted(kwargs)}: {exc}") from exc
    horizon = envs[0].unwrapped.max_turns  # type: ignore[attr-defined]
    for spare in envs[mine:]:  # a process without a share only read the horizon
        spare.close()
    return envs[:mine], horizon


def make_learner(config: GRPOConfig, dist: Dist, run: rundir.RunDir) -> Learner:
    """Policy (LoRA, checkpointing), AdamW, reference model and tokenizer, placed by ``dist``."""
    auto = "bf16-mixed" if dist.device.type == "cuda" else "fp32"
    precision = auto if config.precision == "auto" else config.precision
    if precision == "bf16" and config.learning_rate < 1e-4:
        logger.warning("bf16 weights drop updates at lr=%g: use bf16-mixed", config.learning_rate)
    loader = HFBackend(
        device=str(dist.device),
        dtype="bfloat16" if precision == "bf16" else "float32",
        local_files_only=config.local_files_only,
        trust_remote_code=config.trust_remote_code,
    )
    tokenizer_path = config.tokenizer_path or config.model_path
    weights = run.resume_from if (run.resume_from and config.lora is None) else config.model_path
    with forked_rng(config.seed, torch.device("cpu")):  # inits of missing weights, if any
        loaded = loader.load("policy", str(weights), tokenizer_path)
    model = loaded.model
    if config.lora is not None:
        peft = require("peft", "train", "LoRA training (GRPOConfig.lora)")
        if run.resume_from is not None:
            model = peft.PeftModel.from_pretrained(model, str(run.resume_from), is_trainable=True)
        else:
            settings = peft.LoraConfig(
                r=config.lora.r,
                lora_alpha=config.lora.alpha,
                lora_dropout=config.lora.dropout,
                target_modules=config.lora.target_modules,
                task_type="CAUSAL_LM",
            )
            with forked_rng(config.seed, torch.device("cpu")):  # the adapter's init
                model = peft.get_peft_model(model, settings)
    if config.gradient_checkpointing:
        kwargs = {"use_reentrant": False}  # works with LoRA's frozen inputs
        if callable(getattr(model, "activation_checkpointing_enable", None)):  # transformers 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # training forward passes; generate() turns it on itself
    model.train()
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=config.learning_rate,
        betas=config.adam_betas,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    run.restore(optimizer)  # when resuming
    ref_model = None  # with LoRA: the policy with its adapter disabled
    if config.kl_coef > 0 and config.lora is None:
        with forked_rng(config.seed, torch.device("cpu")):
            ref_model = loader.load("reference", config.model_path, tokenizer_path).model
        ref_model.requires_grad_(False)
    model, optimizer = dist.prepare(model, optimizer)
    amp = precision == "bf16-mixed"
    policy = dist.unwrap_model(model)
    tokenizer, pad_id = loaded.tokenizer, loaded.pad_id
    return Learner(config, model, policy, ref_model, optimizer, dist, amp, tokenizer, pad_id)


def make_sampler(learner: Learner) -> PolicySampler:
    """transformers ``generate`` on the live policy, or a vLLM engine synced every step."""
    config = learner.config
    names = ("temperature", "top_p", "max_new_tokens", "max_prompt_tokens", "seed")
    decoding = {name: getattr(config, name) for name in names}  # the samplers' own names
    if config.action_space == "choices":
        decoding.pop("max_new_tokens")  # a choice is scored whole, never generated
        return ChoicePolicySampler(
            learner.policy,
            learner.tokenizer,
            amp=learner.amp,
            max_new_tokens=0,
            choice_score=config.choice_score,
            enumerate_choices=config.choice_enumerate,
            **decoding,
        )
    if config.generation_backend == "vllm":
        backend_kwargs = {
            "gpu_memory_utilization": config.vllm_gpu_memory_utilization,
            "engine_kwargs": config.vllm_kwargs,
            "trust_remote_code": config.trust_remote_code,
        }
        return VLLMPolicySampler(config.model_path, backend_kwargs, **decoding)
    batch_size = config.generation_batch_size
    return HFPolicySampler(
        learner.policy, learner.tokenizer, batch_size=batch_size, amp=learner.amp, **decoding
    )


def samples_from_trees(trees: Sequence[grpo.Tree], config: GRPOConfig) -> Batch:
    """Eq. (5)-(6) per tree. A node at depth d carries 1 / G^(d+1) of its tree's probability
    mass, so weighted sums are per-episode expectations (accuracy, calls, cost)."""
    stats, weighted = Stats(float, queries=len(trees)), []
    for tree in trees:
        q = grpo.node_returns(tree, config.gamma)
        adv = grpo.group_advantages(tree, q, normalize_std=config.normalize_std)
        roots = [q[n.id] for n in tree.nodes if n.parent is None]
        stats["episode_return"] += sum(roots) / len(roots)
        weighted += [(n, adv[n.id], config.group_size ** -(n.depth + 1)) for n in tree.nodes]
    return count_samples(weighted, stats)


def samples_from_trajectories(
    groups: Sequence[Sequence[grpo.Trajectory]], config: GRPOConfig
) -> Batch:
    """Standard GRPO: each episode's return against its group, broadcast to its turns."""
    stats, weighted = Stats(float, queries=len(groups)), []
    for episodes in groups:
        returns = [t.episode_return for t in episodes]
        advs = grpo.trajectory_advantages(returns, normalize_std=config.normalize_std)
        stats["episode_return"] += sum(returns) / len(returns)
        for episode, a in zip(episodes, advs, strict=True):
            weighted += [(n, a, 1.0 / len(episodes)) for n in episode.nodes]
    return count_samples(weighted, stats)


def count_samples(weighted: list[tuple[grpo.TreeNode, float, float]], stats: Stats) -> Batch:
    """Add every (node, advantage, weight) to ``stats``; return samples, advantages, stats."""
    for node, advantage, weight in weighted:
        info, privileged = node.info, node.info.get("privileged") or {}
        stats["samples"] += 1
        stats["reward_sum"] += node.reward
        stats["abs_advantage_sum"] += abs(advantage)
        stats["zero_advantage"] += advantage == 0.0
        stats["invalid"] += bool(info.get("invalid_action"))
        stats["cost_weighted"] += weight * float(info.get("cost_usd") or 0.0)
        if node.done and "correct" in info:
            stats["terminal_weight"] += weight
            stats["correct_weighted"] += weight * bool(info["correct"])
        if "response_correct" in privileged:
            stats["routed"] += 1
            stats["routed_correct"] += bool(privileged["response_correct"])
        verdict, judged = info.get("verdict"), privileged.get("judged_draft_correct")
        if verdict is not None and judged is not None:
            cell = ("tp" if judged else "fp") if verdict else ("fn" if judged else "tn")
            stats[f"verify/{cell}"] += 1
        for call in info.get("calls") or ():
            if call.get("agent") is not None:
                stats[f"calls/{call['agent']}"] += 1
                stats[f"calls_weighted/{call['agent']}"] += weight
    return [n.sample for n, _, _ in weighted], [a for _, a, _ in weighted], stats


def step_metrics(s: dict[str, float], step: int, world: int) -> dict[str, Any]:
    """Turn summed statistics into the step's metrics record."""
    s = defaultdict(float, s)
    n, queries = max(s["samples"], 1), max(s["queries"], 1)

    def ratio(num: str, den: str, scale: float = 1.0) -> float | None:
        return scale * s[num] / s[den] if s[den] > 0 else None

    cells = {c: int(s[f"verify/{c}"]) for c in ("tp", "fp", "tn", "fn")}
    judged = sum(cells.values())
    record: dict[str, Any] = {
        "step": step,
        "reward/node_mean": s["reward_sum"] / n,  # per sampled action
        "reward/episode": s["episode_return"] / queries,  # the root value
        "accuracy": ratio("correct_weighted", "terminal_weight"),  # of episodes, tree-weighted
        "routing_accuracy": ratio("routed_correct", "routed"),  # the routed agent was right
        "invalid_fraction": s["invalid"] / n,
        "cost_per_episode_usd": s["cost_weighted"] / queries,
        "advantage/abs_mean": s["abs_advantage_sum"] / n,
        "advantage/zero_fraction": s["zero_advantage"] / n,
        "queries": int(s["queries"]),
        "samples": int(s["samples"]),
        "samples_skipped": int(s["samples_skipped"]),  # advantage 0: no forward/backward
        **{f"verify/{c}": v for c, v in cells.items()},
        "verify/accuracy": (cells["tp"] + cells["tn"]) / judged if judged else None,
    }
    calls = {k.removeprefix("calls/"): v for k, v in s.items() if k.startswith("calls/")}
    for agent in sorted(calls):
        record[f"usage/{agent}"] = calls[agent] / sum(calls.values())  # share of all calls
        record[f"calls_per_episode/{agent}"] = s[f"calls_weighted/{agent}"] / queries
    for key in ("tokens/prompt", "tokens/generated", "tokens/trained", "truncated_prompts"):
        record[key] = int(s[key])
    for key in sorted(k for k in s if k.startswith("loss/")):  # token means
        record[key] = s[key] / s["tokens/trained"]
    for key in ("loss", "grad_norm", "updates", "learning_rate") + TIMES:  # process means
        record[key] = s[key] / world
    record["throughput/generation_tokens_per_s"] = ratio("tokens/generated", TIMES[0], world)
    record["throughput/update_tokens_per_s"] = ratio("tokens/update_input", TIMES[2], world)
    return record


def skips_zero_advantage(config: GRPOConfig) -> bool:
    """Whether the update may leave out samples whose advantage is 0. Their surrogate term is
    ``-min(rho * 0, clip(rho) * 0) = 0`` with a zero gradient, so only a KL or entropy term
    could make them matter; then they stay (``skip_zero_advantage=False``: always stay)."""
    return config.skip_zero_advantage and config.kl_coef == 0 and config.entropy_coef == 0


def update(
    learner: Learner,
    samples: list[grpo.Sample],
    advantages: list[float],
    step: int,
    *,
    skip_zero_advantage: bool = False,
) -> Stats:
    """Step 4: micro-batches accumulated into one update (or ``grad_accum_steps`` each), each
    weighted by its share of all processes' tokens: the micro-batch size changes nothing.

    ``skip_zero_advantage``: samples with advantage 0 get no forward or backward pass, but
    their tokens still count in the normaliser of the update they belong to, so the update is
    the one computed over every sample (up to float summation order); an update left with
    nothing to train runs one zero-weight sample, so every process still steps AdamW (whose
    momentum moves the weights even on a zero gradient) and joins DDP's all-reduce."""
    config, dist, optimizer = learner.config, learner.dist, learner.optimizer
    size = config.micro_batch_size
    micro = [range(i, min(i + size, len(samples))) for i in range(0, len(samples), size)]
    # every process makes as many updates: the count of micro-batches over all processes
    n_micro = max(gather(dist, len(micro)))
    per_update = config.grad_accum_steps or n_micro
    use_old = config.use_sampler_logprobs and all(s.logprobs is not None for s in samples)
    max_len = config.max_prompt_tokens + config.max_new_tokens
    choices = config.action_space == "choices"  # one unit per sample: log pi(pick)

    def units_of(sample: grpo.Sample) -> int:
        if choices:
            return 1
        return grpo.loss_units(sample, max_len=max_len, aggregation=config.aggregation)

    out = defaultdict(float, loss=0.0, grad_norm=0.0, learning_rate=optimizer.param_groups[0]["lr"])
    out["samples_skipped"] = 0.0
    for first in range(0, n_micro, per_update):
        members = [i for m in range(first, min(first + per_update, len(micro))) for i in micro[m]]
        # the normaliser: every sample of this update on every process, skipped ones included
        mine = sum(units_of(samples[i]) for i in members)
        total_units = sum(gather(dist, float(mine)))
        kept = [i for i in members if not (skip_zero_advantage and advantages[i] == 0.0)]
        out["samples_skipped"] += len(members) - len(kept)
        chunks = [kept[j : j + size] for j in range(0, len(kept), size)]
        placeholder = not chunks  # nothing to train here: one sample with weight 0
        if placeholder:
            chunks = [members[:1] or [0]]
        batches: list[tuple[dict[str, Any], float]] = []
        for idx in chunks:
            if choices:
                batch: dict[str, Any] = {
                    "advantages": torch.tensor([advantages[i] for i in idx], dtype=torch.float32),
                    "samples": [samples[i] for i in idx],
                }
                batches.append((batch, 0.0 if placeholder else float(len(idx))))
                continue
            batch = grpo.build_batch(
                [samples[i] for i in idx], pad_id=learner.pad_id, max_len=max_len
            )
            batch["advantages"] = torch.tensor([advantages[i] for i in idx], dtype=torch.float32)
            mask = batch["loss_mask"]
            count = mask.sum() if config.aggregation == "token-mean" else (mask.sum(-1) > 0).sum()
            batches.append((batch, 0.0 if placeholder else float(count)))
        optimizer.zero_grad(set_to_none=True)
        for k, (batch, units) in enumerate(batches):
            # DDP averages gradients over processes: scale by world to get the global sum
            weight = units * dist.num_processes / total_units if total_units > 0 else 0.0
            sync = dist.no_sync(learner.model) if k < len(batches) - 1 else nullcontext()
            seed = call_seed(
                config.seed, f"grpo-update/{step}/{dist.process_index}/{first + k}", ()
            )
            with sync, forked_rng(seed, dist.device):
                loss, stats = micro_batch_loss(learner, batch, use_old)
                dist.backward(loss * weight)
            if units > 0:
                out["loss"] += float(loss.detach()) * weight / dist.num_processes
                tokens = stats.pop("num_tokens")
                out["tokens/trained"] += tokens
                out["tokens/update_input"] += stats.pop("update_input", 0.0) or float(
                    batch["attention_mask"].sum()
                )
                for key, value in stats.items():
                    out[f"loss/{key}"] += value * tokens
        max_norm = config.max_grad_norm if config.max_grad_norm is not None else math.inf
        params = [p for group in optimizer.param_groups for p in group["params"]]
        out["grad_norm"] += float(dist.clip_grad_norm_(params, max_norm))
        optimizer.step()
        out["updates"] += 1
    out["loss"] /= max(out["updates"], 1)  # per-update means
    out["grad_norm"] /= max(out["updates"], 1)
    optimizer.zero_grad(set_to_none=True)
    return out


def reference_logprobs(
    learner: Learner, logprobs_of: Callable[[Any], torch.Tensor]
) -> torch.Tensor | None:
    """The KL term's reference log-probabilities (None when ``kl_coef`` is 0), no gradient:
    ``logprobs_of`` the reference model, or under LoRA the policy with its adapter off."""
    if learner.config.kl_coef <= 0:
        return None
    with torch.no_grad():
        if learner.ref_model is not None:
            return logprobs_of(learner.ref_model)
        with learner.policy.disable_adapter():  # LoRA: the policy without its adapter
            return logprobs_of(learner.policy)


def micro_batch_loss(
    learner: Learner, batch: dict[str, Any], use_old: bool
) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. (21) on one micro-batch: logprobs of the controller's tokens under the policy."""
    config, device = learner.config, learner.dist.device
    if config.action_space == "choices":
        return choice_micro_batch_loss(learner, batch, use_old)
    input_ids, attention = batch["input_ids"].to(device), batch["attention_mask"].to(device)
    targets, mask = batch["targets"].to(device), batch["loss_mask"].to(device)

    def logprobs_of(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 logits / T (the distribution the sampler drew from) and the targets' logprobs."""
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=learner.amp):
            logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
        logits = logits.float()
        if config.temperature != 1.0:
            logits = logits / config.temperature
        return logits, grpo.token_logprobs(logits, targets)

    logits, logprobs = logprobs_of(learner.model)
    ref_logprobs = reference_logprobs(learner, lambda model: logprobs_of(model)[1])
    if config.entropy_coef > 0:
        entropy = grpo.token_entropy(logits)
    else:  # reported anyway; one sequence at a time keeps the extra memory small
        with torch.no_grad():
            entropy = torch.cat([grpo.token_entropy(row[None]) for row in logits.detach()])
    old = batch["old_logprobs"].to(device) if use_old else logprobs.detach()
    names = ("clip_eps", "clip_eps_high", "kl_coef", "entropy_coef", "aggregation")
    kwargs = {name: getattr(config, name) for name in names}  # named as in policy_loss
    kwargs.update(ref_logprobs=ref_logprobs, entropy=entropy)
    return grpo.policy_loss(logprobs, old, batch["advantages"].to(device), mask, **kwargs)


def choice_micro_batch_loss(
    learner: Learner, batch: dict[str, Any], use_old: bool
) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. (21) in choice mode: the "sequence" is the pick, its log-probability
    ``log softmax(scores / T)[pick]`` over the state's available choices (``scores``: each
    choice's summed token log-probability, recomputed under the policy), with the same
    advantages, clipping, KL (k3 on the choice distribution's pick) and entropy (of the
    choice distribution) as the text mode."""
    config, device = learner.config, learner.dist.device
    samples: list[grpo.Sample] = batch["samples"]
    # with gradient checkpointing the forward cannot return a cache: rows of prompt + choice
    share = not config.gradient_checkpointing

    # samples of one state (a group's G picks) share one forward pass
    states: dict[tuple, int] = {}
    for sample in samples:
        if sample.choice_ids is None or sample.chosen is None:
            raise ValueError("a choice-mode update needs samples from ChoicePolicySampler")
        key = (tuple(sample.prompt_ids), tuple(map(tuple, sample.choice_ids)))
        states.setdefault(key, len(states))
    slot = [states[(tuple(s.prompt_ids), tuple(map(tuple, s.choice_ids or ())))] for s in samples]

    def pick_logprobs(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        dists = []
        for prompt, choice_ids in states:  # in first-seen order: the slot numbers
            scores = choice_logprobs(
                model, prompt, choice_ids, pad_id=learner.pad_id, share_prompt=share,
                amp=learner.amp,
            )  # fmt: skip
            scores = normalise_choice_scores(scores, choice_ids, config.choice_score)
            dists.append(torch.log_softmax(scores / config.temperature, dim=-1))
        picks = [dists[k][s.chosen] for k, s in zip(slot, samples, strict=True)]
        entropies = [-(dists[k].exp() * dists[k]).sum() for k in slot]
        return torch.stack(picks)[:, None], torch.stack(entropies)[:, None]

    logprobs, entropy = pick_logprobs(learner.model)
    ref_logprobs = reference_logprobs(learner, lambda model: pick_logprobs(model)[0])
    if use_old:
        old = torch.tensor([[s.logprobs[0]] for s in samples], device=device)  # type: ignore[index]
    else:
        old = logprobs.detach()
    mask = torch.ones_like(logprobs)
    names = ("clip_eps", "clip_eps_high", "kl_coef", "entropy_coef", "aggregation")
    kwargs = {name: getattr(config, name) for name in names}  # named as in policy_loss
    kwargs.update(
        ref_logprobs=ref_logprobs, entropy=entropy if config.entropy_coef else entropy.detach()
    )
    loss, stats = grpo.policy_loss(logprobs, old, batch["advantages"].to(device), mask, **kwargs)
    stats["update_input"] = float(sum(len(p) + sum(map(len, c)) for p, c in states))
    return loss, stats


def evaluate(
    envs: list[Any], horizon: int, sampler: PolicySampler, config: GRPOConfig, dist: Dist
) -> dict[str, Any]:
    """Greedy episodes of ``eval_split``, the same every time, measured as in training."""
    greedy = sampler.with_settings(temperature=config.eval_temperature)
    greedy.reseed(call_seed(config.seed, f"grpo-eval/{dist.process_index}", ()))
    seeds = [config.seed + 1_000_003 + i for i in share(dist, config.eval_episodes)]
    groups = grpo.rollout_trajectories(envs, greedy, group_size=1, max_steps=horizon, seeds=seeds)
    stats = samples_from_trajectories(groups, config)[2]
    record = step_metrics(summed(gather(dist, stats)), 0, dist.num_processes)
    record["reward"] = record["reward/episode"]
    keys = ("reward", "accuracy", "cost_per_episode_usd", "invalid_fraction")
    return {f"eval/{k}": v for k, v in record.items() if k in keys or k.startswith("usage/")}


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without its timing entries (for comparing runs)."""
    return {k: v for k, v in record.items() if not k.startswith(("time/", "throughput/"))}
