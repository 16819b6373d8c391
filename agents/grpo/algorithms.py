"""Seed 000's multi-turn GRPO as small pure functions, each tested on hand-computed numbers.

- ``rollout_trees``: Algorithm 1 (appendix E.2); every state branches into G actions,
  each on its own ``fork()`` of the env, so a group's baseline compares like with like.
- ``rollout_trajectories``: standard GRPO for comparison, G episodes per query.
- ``node_returns``: eq. (5)/(14), Q = r + gamma * mean Q of the actions sampled next.
- ``group_advantages`` / ``trajectory_advantages``: eq. (6)/(16), Q minus the group
  mean; seed 000 does not divide by the std, so the estimator (17) stays proportional
  to the policy gradient (eq. 19-24); ``normalize_std`` is classic / A-GRPO.
- ``build_batch`` ... ``policy_loss``: the clipped token-level surrogate (eq. 21-24)
  on the tokens the controller generated, and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from orchenv.agents.grpo.config import AGGREGATIONS
from orchenv.core import OrchestrationEnv

#: one chat prompt: ``info["messages"]`` of a state
Messages = list[dict[str, str]]


@dataclass
class Sample:
    """One generated controller action: its text and the token ids it was sampled as."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None  # per completion token, under the sampler


class Sampler(Protocol):
    """What rollouts need from a policy: chat prompts in, one ``Sample`` each out, in order.

    Any such callable works (tests pass functions); the trainer's samplers add seeding,
    counters and weight sync (``generation.PolicySampler``).
    """

    def __call__(self, prompts: list[Messages], /) -> list[Sample]: ...


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
    """One episode of trajectory-mode GRPO: its steps in order and the undiscounted sum
    of their rewards (standard GRPO's trajectory reward; Table 9 has gamma = 1)."""

    nodes: list[TreeNode]
    episode_return: float


# -- rollouts ----------------------------------------------------------------------------------


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
    """Algorithm 1: one tree per query (``envs[i]`` reset with ``seeds[i]``), G actions per state.

    Each depth makes ONE sampler call holding every active state's prompt G times
    (contiguously, trees in order); each sampled text steps its own fork of the state.
    Nodes at ``max_depth`` are leaves (``done`` may be False). The reset envs are never
    stepped; forks are of ``env.unwrapped``, so wrappers apply to the reset only.
    ``branch_once``: only reset states branch, later states take one action each
    (stepped in place): G separate episodes per query, and ``group`` is the depth.
    """
    if group_size < 1 or max_depth < 1:
        raise ValueError(f"group_size and max_depth must be >= 1, got {group_size}, {max_depth}")
    seed_list = _per_query("seeds", seeds, len(envs))
    option_list = _per_query("options", options, len(envs))
    trees: list[Tree] = []
    active: list[_Active] = []
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seed_list[i], options=option_list[i])
        trees.append(Tree(seed_list[i], info.get("task_id"), nodes=[], groups={}))
        active.append(_Active(i, env, info, node=None))

    for depth in range(max_depth):
        if not active:
            break
        width = 1 if (branch_once and depth > 0) else group_size
        samples = list(sampler([s.info["messages"] for s in active for _ in range(width)]))
        if len(samples) != len(active) * width:
            raise ValueError(
                f"the sampler returned {len(samples)} samples for {len(active) * width} prompts; "
                "it must return exactly one Sample per prompt, in order"
            )
        next_active: list[_Active] = []
        for k, state in enumerate(active):
            tree = trees[state.query]
            group = depth if branch_once else len(tree.groups)
            for sample in samples[k * width : (k + 1) * width]:
                env = state.env if (width == 1 and state.node is not None) else _fork(state.env)
                _, reward, terminated, truncated, info = env.step(sample.text)
                node = TreeNode(
                    len(tree.nodes), state.node, group, depth, state.info["messages"], sample,
                    float(reward), bool(terminated or truncated), info,
                )  # fmt: skip
                tree.nodes.append(node)
                tree.groups.setdefault(group, []).append(node.id)
                if state.node is not None:
                    tree.nodes[state.node].children.append(node.id)
                if not node.done and depth + 1 < max_depth:
                    next_active.append(_Active(state.query, env, info, node.id))
        active = next_active
    return trees


def rollout_trajectories(
    envs: Sequence[OrchestrationEnv], sampler: Sampler, *, max_steps: int, **kwargs: Any
) -> list[list[Trajectory]]:
    """Standard GRPO: G independent episodes per query from the same reset, in lockstep.

    ``rollout_trees`` with ``branch_once`` (``kwargs``: its group_size, seeds, options).
    Node ids are unique within a query; ``group`` is the step index (only step 0 is a
    same-state group: use ``trajectory_advantages``, broadcast to every step).
    """
    trees = rollout_trees(envs, sampler, max_depth=max_steps, branch_once=True, **kwargs)
    return [[_chain(tree, node) for node in tree.nodes if node.parent is None] for tree in trees]


@dataclass
class _Active:
    """A state waiting to be expanded: its env, the info it was reached with, its node."""

    query: int
    env: Any
    info: dict[str, Any]
    node: int | None  # None: the reset state


def _fork(env: Any) -> OrchestrationEnv:
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise TypeError(f"rollouts need OrchestrationEnv (fork()), got {type(base).__name__}")
    return base.fork()


def _per_query(name: str, values: Sequence[Any] | None, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries for {n} environments; give one each")
    return list(values)


def _chain(tree: Tree, node: TreeNode) -> Trajectory:
    path = [node]
    while path[-1].children:
        path.append(tree.nodes[path[-1].children[0]])
    return Trajectory(nodes=path, episode_return=sum(n.reward for n in path))


# -- returns and advantages --------------------------------------------------------------------


def node_returns(tree: Tree, gamma: float = 1.0) -> dict[int, float]:
    """Eq. (5): Q(node) = r(node) + gamma * mean Q of its children, bottom-up.

    A node without children (the episode ended, or the depth limit) has Q = r: V = 0.
    """
    by_id = {node.id: node for node in tree.nodes}
    q: dict[int, float] = {}
    for node in sorted(tree.nodes, key=lambda n: n.depth, reverse=True):
        missing = [c for c in node.children if c not in q]
        if missing:
            bad = [c for c in missing if c not in by_id or by_id[c].depth <= node.depth]
            raise ValueError(
                f"node {node.id} lists children {bad or missing} that are not deeper nodes"
            )
        value = sum(q[c] for c in node.children) / len(node.children) if node.children else 0.0
        q[node.id] = node.reward + gamma * value
    return q


def group_advantages(
    tree: Tree, returns: Mapping[int, float], *, normalize_std: bool = False, eps: float = 1e-6
) -> dict[int, float]:
    """Eq. (6): A(node) = Q(node) - mean Q of its group (a group of one gets 0).

    ``normalize_std`` divides by the group's population std + ``eps`` (classic GRPO).
    """
    out: dict[int, float] = {}
    for ids in tree.groups.values():
        advs = trajectory_advantages(
            [returns[i] for i in ids], normalize_std=normalize_std, eps=eps
        )
        out.update(zip(ids, advs, strict=True))
    return out


def trajectory_advantages(
    episode_returns: Sequence[float], *, normalize_std: bool = False, eps: float = 1e-6
) -> list[float]:
    """Each of a query's G episode returns minus their mean (the formula of eq. 6)."""
    n = len(episode_returns)
    if n <= 1:
        return [0.0] * n
    mean = sum(episode_returns) / n
    centred = [v - mean for v in episode_returns]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / n)
    return [c / (std + eps) for c in centred]


# -- token level -------------------------------------------------------------------------------


def build_batch(
    samples: Sequence[Sample], *, pad_id: int, max_len: int | None = None
) -> dict[str, Tensor]:
    """Right-padded training tensors in which only the controller's own tokens count.

    ``input_ids``, ``attention_mask`` [B, T]; aligned with next-token prediction
    (position t predicts token t + 1): ``targets``, ``loss_mask`` (1 exactly where the
    target is a completion token; prompts, i.e. all the env and agents wrote, and
    padding are 0) and ``old_logprobs`` (the sampler's, 0 elsewhere), [B, T-1].

    Over ``max_len`` the prompt loses its start; a completion longer than that keeps
    its head and one prompt token to be predicted from. An empty prompt's first
    completion token has no predicting position and is not trained on.
    """
    if not samples:
        raise ValueError("build_batch needs at least one sample")
    rows: list[tuple[list[int], list[int], list[float] | None]] = []
    for index, sample in enumerate(samples):
        prompt, completion, logprobs = sample.prompt_ids, sample.completion_ids, sample.logprobs
        if logprobs is not None and len(logprobs) != len(completion):
            raise ValueError(
                f"sample {index} has {len(logprobs)} logprobs for {len(completion)} completion "
                "tokens; give one per completion token (or None)"
            )
        if max_len is not None and len(prompt) + len(completion) > max_len:
            keep = min(len(prompt), max(max_len - len(completion), 1))
            prompt = prompt[len(prompt) - keep :]
            completion = completion[: max_len - len(prompt)]
            logprobs = None if logprobs is None else logprobs[: len(completion)]
        rows.append((list(prompt), list(completion), logprobs))

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


def _prediction_logits(logits: Tensor, length: int | None = None) -> Tensor:
    """Logits at the positions that predict a next token, [B, T-1, V], in float32."""
    if length is None or logits.shape[1] == length + 1:
        logits = logits[:, :-1]
    elif logits.shape[1] != length:
        raise ValueError(f"logits have {logits.shape[1]} positions for {length} targets")
    return logits.float()


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log pi(o_t | q, o_<t) of eq. (21) per position, [B, T-1], from the model's logits.

    logit[target] - logsumexp: log_softmax + gather without a second [B, T, V] tensor.
    """
    logits = _prediction_logits(logits, targets.shape[1])
    picked = torch.gather(logits, -1, targets.unsqueeze(-1).long()).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution, [B, T-1], from the model's [B, T, V] logits."""
    logp = torch.log_softmax(_prediction_logits(logits), dim=-1)
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
    """The clipped GRPO surrogate of eq. (21), negated, on masked tokens only.

    Per token: -min(ratio * A, clip(ratio, 1 - clip_eps, 1 + clip_eps_high) * A) +
    kl_coef * k3 - entropy_coef * entropy, ratio = exp(lp - old); ``advantages`` is
    [B] or [B, T-1]. Masked-out positions contribute nothing, not even NaN.
    "token-mean" divides by the batch's token count; "sequence-mean" averages each
    sequence, then the sequences with tokens. On-policy the gradient is eq. (24)'s.

    Stats (token means): clip_fraction, ratio, approx_kl (k3 of KL(old || new)), kl,
    entropy (when given) and num_tokens.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if (kl_coef and ref_logprobs is None) or (entropy_coef and entropy is None):
        raise ValueError("kl_coef needs ref_logprobs and entropy_coef needs entropy")
    active = loss_mask > 0
    mask = active.to(logprobs.dtype)
    zeros = torch.zeros_like(logprobs)
    adv = advantages.detach().to(device=logprobs.device, dtype=logprobs.dtype)
    adv = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(logprobs)

    log_ratio = torch.where(active, logprobs - old_logprobs.detach(), zeros)  # before exp()
    ratio = torch.exp(log_ratio)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    is_clipped = clipped < unclipped
    per_token = -torch.where(is_clipped, clipped, unclipped)
    kl = None
    if ref_logprobs is not None:
        kl = kl_k3(torch.where(active, logprobs, zeros), torch.where(active, ref_logprobs, zeros))
        per_token = per_token + kl_coef * kl if kl_coef else per_token
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * torch.where(active, entropy, zeros)
    per_token = torch.where(active, per_token, zeros)
    if aggregation == "token-mean":
        loss = per_token.sum() / mask.sum().clamp(min=1.0)
    else:
        counts = mask.sum(dim=-1)
        has_tokens = (counts > 0).to(per_token.dtype)
        per_sequence = per_token.sum(dim=-1) / counts.clamp(min=1.0)
        loss = (per_sequence * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)

    with torch.no_grad():
        count = mask.sum()

        def token_mean(values: Tensor) -> float:
            return float(
                (torch.where(active, values.detach(), zeros) * mask).sum() / count.clamp(min=1.0)
            )

        stats = {
            "clip_fraction": token_mean(is_clipped.to(logprobs.dtype)),
            "ratio": token_mean(ratio) if count > 0 else 0.0,
            "approx_kl": token_mean((ratio - 1.0) - log_ratio),
            "num_tokens": float(count),
        }
        if kl is not None:
            stats["kl"] = token_mean(kl)
        if entropy is not None:
            stats["entropy"] = token_mean(entropy)
    return loss, stats
