"""Seed 000's multi-turn GRPO as small pure functions, each tested on hand-computed numbers:
rollouts (Algorithm 1), returns (eq. 5), advantages (eq. 6) and the loss (eq. 21).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from orchenv.agents.grpo.config import AGGREGATIONS
from orchenv.core import OrchestrationEnv
from orchenv.discrete import current_choices

#: one chat prompt: ``info["messages"]`` of a state
Messages = list[dict[str, str]]


@dataclass
class Sample:
    """One generated controller action: its text and the token ids it was sampled as."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None  # per completion token, under the sampler
    #: choice mode: the token ids of every available choice (``completion_ids`` is the picked
    #: one's) and the picked index; ``logprobs`` is then ``[log pi(pick)]`` over the choices
    choice_ids: list[list[int]] | None = None
    chosen: int | None = None


#: what rollouts need from a policy: chat prompts in, one ``Sample`` each out, in order
Sampler = Callable[[list[Messages]], list[Sample]]


@dataclass
class TreeNode:
    """One sampled controller action and what the environment made of it."""

    id: int
    parent: int | None  # the node whose action led to this node's state; None at depth 0
    group: int  # nodes sampled from the same state share it: the baseline of eq. 6
    depth: int  # 0 = first controller turn
    messages: Messages  # the prompt: info["messages"] of the state acted in
    sample: Sample
    reward: float  # the env's reward (MathRoute: Lagrangian-modified, eq. 3)
    done: bool  # terminated or truncated after this action
    info: dict[str, Any]  # the step's info, for metrics
    children: list[int] = field(default_factory=list)  # the G nodes sampled next


@dataclass
class Tree:
    """The rollout tree of one query; ``nodes[i].id == i``, ``groups``: id -> node ids."""

    query_seed: int | None
    task_id: str | None
    nodes: list[TreeNode]
    groups: dict[int, list[int]]


@dataclass
class Trajectory:
    """One episode of standard GRPO: its steps and their undiscounted reward sum (Table 9)."""

    nodes: list[TreeNode]
    episode_return: float


def rollout_trees(
    envs: Sequence[OrchestrationEnv],
    sampler: Sampler,
    *,
    group_size: int,
    max_depth: int,
    seeds: Sequence[int | None],
    options: Sequence[dict | None] | None = None,
    branch_once: bool = False,
) -> list[Tree]:
    """Algorithm 1: one tree per query, each state's G actions stepping their own ``fork()``, one
    sampler call per depth. ``branch_once``: only reset states branch (G separate episodes)."""
    if group_size < 1 or max_depth < 1:
        raise ValueError(f"group_size and max_depth must be >= 1, got {group_size}, {max_depth}")
    options = [None] * len(envs) if options is None else options
    if not len(seeds) == len(options) == len(envs):
        raise ValueError(f"give one of seeds and options per env ({len(envs)} envs)")
    trees: list[Tree] = []
    # the states to expand: (query, env, info it was reached with, node id or None at reset)
    active: list[tuple[int, Any, dict[str, Any], int | None]] = []
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seeds[i], options=options[i])
        trees.append(Tree(seeds[i], info.get("task_id"), nodes=[], groups={}))
        active.append((i, env, info, None))

    for depth in range(max_depth):
        if not active:
            break
        width = 1 if (branch_once and depth > 0) else group_size
        prompts = [info["messages"] for _, _, info, _ in active for _ in range(width)]
        if getattr(sampler, "needs_choices", False):  # choice mode: each state's choices
            choices = [current_choices(env.unwrapped) for _, env, _, _ in active]
            rows = [c for c in choices for _ in range(width)]
            samples = sampler(prompts, choices=rows)  # type: ignore[call-arg]
        else:
            samples = sampler(prompts)
        if len(samples) != len(active) * width:
            raise ValueError(f"the sampler must return one Sample per prompt, not {len(samples)}")
        next_active: list[Any] = []
        for k, (query, state_env, state_info, parent) in enumerate(active):
            tree = trees[query]
            group = depth if branch_once else len(tree.groups)
            for sample in samples[k * width : (k + 1) * width]:
                env = state_env if parent is not None and width == 1 else state_env.unwrapped.fork()
                _, reward, terminated, truncated, info = env.step(sample.text)
                node = TreeNode(
                    len(tree.nodes), parent, group, depth, state_info["messages"], sample,
                    float(reward), bool(terminated or truncated), info,
                )  # fmt: skip
                tree.nodes.append(node)
                tree.groups.setdefault(group, []).append(node.id)
                if parent is not None:
                    tree.nodes[parent].children.append(node.id)
                if not node.done and depth + 1 < max_depth:
                    next_active.append((query, env, info, node.id))
        active = next_active
    return trees


def rollout_trajectories(
    envs: Sequence[OrchestrationEnv], sampler: Sampler, *, max_steps: int, **kwargs: Any
) -> list[list[Trajectory]]:
    """Standard GRPO: G episodes per query from the same reset, stepped in lockstep."""
    out = []
    for tree in rollout_trees(envs, sampler, max_depth=max_steps, branch_once=True, **kwargs):
        episodes = []
        for path in ([n] for n in tree.nodes if n.parent is None):
            while path[-1].children:
                path.append(tree.nodes[path[-1].children[0]])
            episodes.append(Trajectory(path, sum(n.reward for n in path)))
        out.append(episodes)
    return out


def node_returns(tree: Tree, gamma: float = 1.0) -> dict[int, float]:
    """Eq. (5): Q(node) = r(node) + gamma * mean Q of its children, bottom-up (leaves: Q = r)."""
    q: dict[int, float] = {}
    for node in sorted(tree.nodes, key=lambda n: n.depth, reverse=True):
        if any(c not in q for c in node.children):
            raise ValueError(f"node {node.id} lists children {node.children} not all deeper")
        value = sum(q[c] for c in node.children) / len(node.children) if node.children else 0.0
        q[node.id] = node.reward + gamma * value
    return q


def group_advantages(
    tree: Tree, returns: Mapping[int, float], *, normalize_std: bool = False, eps: float = 1e-6
) -> dict[int, float]:
    """Eq. (6): A(node) = Q(node) - mean Q of its group (``trajectory_advantages`` per group)."""
    out: dict[int, float] = {}
    for ids in tree.groups.values():
        values = [returns[i] for i in ids]
        advs = trajectory_advantages(values, normalize_std=normalize_std, eps=eps)
        out.update(zip(ids, advs, strict=True))
    return out


def trajectory_advantages(
    returns: Sequence[float], *, normalize_std: bool = False, eps: float = 1e-6
) -> list[float]:
    """Each return minus the group mean, over the population std + ``eps`` if ``normalize_std``."""
    n = len(returns)
    if n <= 1:
        return [0.0] * n
    centred = [v - sum(returns) / n for v in returns]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / n)
    return [c / (std + eps) for c in centred]


def build_batch(
    samples: Sequence[Sample], *, pad_id: int, max_len: int | None = None
) -> dict[str, Tensor]:
    """Right-padded next-token tensors in which only the controller's tokens count; over
    ``max_len`` the prompt loses its start (keeping one token), then the completion its tail."""
    rows = []
    for sample in samples:
        prompt, completion, logprobs = sample.prompt_ids, sample.completion_ids, sample.logprobs
        if logprobs is not None and len(logprobs) != len(completion):
            raise ValueError(f"{len(logprobs)} logprobs for {len(completion)} completion tokens")
        if max_len is not None and len(prompt) + len(completion) > max_len:
            prompt = prompt[len(prompt) - min(len(prompt), max(max_len - len(completion), 1)) :]
            completion = completion[: max_len - len(prompt)]
        rows.append((list(prompt), list(completion), logprobs and logprobs[: len(completion)]))

    width = max(2, max(len(p) + len(c) for p, c, _ in rows))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    old_logprobs = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for b, (prompt, completion, logprobs) in enumerate(rows):
        ids = prompt + completion
        input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[b, : len(ids)] = 1
        first = max(len(prompt), 1)  # completion token j sits at len(prompt) + j
        loss_mask[b, first - 1 : len(ids) - 1] = 1.0
        if logprobs is not None and len(ids) > first:
            old_logprobs[b, first - 1 : len(ids) - 1] = torch.tensor(
                logprobs[first - len(prompt) :], dtype=torch.float32
            )
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "loss_mask": loss_mask,
        "old_logprobs": old_logprobs,
        "targets": input_ids[:, 1:].clone(),
    }


def loss_units(sample: Sample, *, max_len: int | None, aggregation: str) -> int:
    """What ``sample`` adds to a step's loss normaliser: its trained tokens (``token-mean``,
    after ``build_batch``'s truncation) or 1 when it has any (``sequence-mean``)."""
    prompt, completion = len(sample.prompt_ids), len(sample.completion_ids)
    if max_len is not None and prompt + completion > max_len:
        prompt = min(prompt, max(max_len - completion, 1))
        completion = min(completion, max_len - prompt)
    tokens = prompt + completion - max(prompt, 1)  # loss_mask's ones in build_batch
    return max(tokens, 0) if aggregation == "token-mean" else int(tokens > 0)


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log pi(o_t | q, o_<t) of eq. (21), [B, T-1], as logit[target] - logsumexp (no copy)."""
    if logits.shape[1] == targets.shape[1] + 1:
        logits = logits[:, :-1]
    logits = logits.float()
    picked = torch.gather(logits, -1, targets.unsqueeze(-1).long()).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution, [B, T-1], from the model's [B, T, V] logits."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 = exp(d) - d - 1, d = ref - lp: unbiased for KL(pi || ref), never < 0."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    aggregation: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """The clipped surrogate of eq. (21), negated, + kl_coef * k3 - entropy_coef * entropy, on
    masked tokens only (no inf or NaN leaks), a token or sequence mean; stats are token means."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if (kl_coef and ref_logprobs is None) or (entropy_coef and entropy is None):
        raise ValueError("kl_coef needs ref_logprobs and entropy_coef needs entropy")
    active = loss_mask > 0
    zeros = torch.zeros_like(logprobs)

    def masked(values: Tensor) -> Tensor:  # where() rather than *, so inf / NaN cannot leak
        return torch.where(active, values, zeros)

    adv = advantages.detach().to(device=logprobs.device, dtype=logprobs.dtype)
    adv = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(logprobs)
    log_ratio = masked(logprobs - old_logprobs.detach())
    ratio = torch.exp(log_ratio)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped, clipped = ratio * adv, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    is_clipped = clipped < unclipped
    per_token = -torch.where(is_clipped, clipped, unclipped)
    kl = None if ref_logprobs is None else kl_k3(masked(logprobs), masked(ref_logprobs))
    if kl is not None and kl_coef:
        per_token = per_token + kl_coef * kl
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * masked(entropy)
    per_token, counts = masked(per_token), active.to(logprobs.dtype).sum(dim=-1)
    if aggregation == "token-mean":
        loss = per_token.sum() / counts.sum().clamp(min=1.0)
    else:
        per_sequence = per_token.sum(dim=-1) / counts.clamp(min=1.0)  # 0 without tokens
        loss = per_sequence.sum() / (counts > 0).sum().clamp(min=1)

    means = {"clip_fraction": is_clipped.to(logprobs.dtype), "ratio": ratio, "kl": kl}
    means.update(approx_kl=ratio - 1.0 - log_ratio, entropy=entropy)
    stats = {"num_tokens": float(counts.sum())}
    for key, value in means.items():
        if value is not None:
            stats[key] = float(masked(value.detach()).sum()) / max(stats["num_tokens"], 1.0)
    return loss, stats
