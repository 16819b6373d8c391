"""The algorithmic core of seed 000's multi-turn GRPO: rollouts, returns, advantages, loss.

Everything here is a small pure function (or a dataclass) so the trainer reads top
to bottom and each piece is tested on hand-computed numbers:

- ``rollout_trees``: Algorithm 1 (appendix E.2). Every active state of every query
  branches into G sampled controller actions; ``fork()`` gives each action its own
  copy of the environment, so the G children of a state all start from the same
  prefix and the group-relative baseline of eq. (6)/(16) compares like with like.
- ``rollout_trajectories``: standard (trajectory-level) GRPO for comparison: G
  independent episodes per query, one advantage per episode.
- ``node_returns``: the recursive discounted return of eq. (5)/(14): the value of
  the state an action leads to is estimated by the mean return of the G actions
  sampled there.
- ``group_advantages`` / ``trajectory_advantages``: eq. (6)/(16), the return minus
  the group mean; dividing by the group's standard deviation is optional (seed 000
  omits it so that the estimator (17) stays proportional to the policy gradient,
  eq. (19)-(24); OrchMAS-style A-GRPO keeps it).
- ``build_batch`` / ``token_logprobs`` / ``token_entropy`` / ``kl_k3`` /
  ``policy_loss``: the token-level GRPO surrogate (eq. 21-24) with PPO clipping,
  computed only on tokens the controller generated.

torch is imported at module level: this module belongs to the ``train`` extra.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from orchenv.core import OrchestrationEnv

__all__ = [
    "AGGREGATIONS",
    "Sample",
    "Sampler",
    "Trajectory",
    "Tree",
    "TreeNode",
    "build_batch",
    "group_advantages",
    "kl_k3",
    "node_returns",
    "policy_loss",
    "rollout_trajectories",
    "rollout_trees",
    "token_entropy",
    "token_logprobs",
    "trajectory_advantages",
]

#: ways ``policy_loss`` reduces per-token losses to a scalar
AGGREGATIONS = ("token-mean", "sequence-mean")


# -- data -------------------------------------------------------------------------------


@dataclass
class Sample:
    """One generated controller action: its text and the token ids it was sampled as."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    #: log-probability of each completion token under the sampling policy (None: unknown)
    logprobs: list[float] | None = None


#: chat prompts -> one Sample each, in the same order
Sampler = Callable[[list[list[dict[str, str]]]], list[Sample]]


@dataclass
class TreeNode:
    """One sampled controller action and what the environment made of it."""

    id: int
    #: node whose action led to the state this node acted in; None at depth 0
    parent: int | None
    #: nodes sampled from the same state share a group id (the baseline of eq. 6)
    group: int
    #: 0 = first controller turn
    depth: int
    #: the prompt: ``info["messages"]`` of the state acted in
    messages: list[dict[str, str]]
    sample: Sample
    #: the env's (Lagrangian-modified, eq. 3) reward for this action
    reward: float
    #: terminated or truncated after this action
    done: bool
    #: the step's info (``privileged``, ``constraint_costs``, ...) for metrics
    info: dict[str, Any]
    #: the G nodes sampled from the next state (empty at a leaf)
    children: list[int] = field(default_factory=list)


@dataclass
class Tree:
    """The rollout tree of one query (Algorithm 1); ``nodes[i].id == i``."""

    query_seed: int | None
    task_id: str | None
    nodes: list[TreeNode]
    #: group id -> node ids
    groups: dict[int, list[int]]


@dataclass
class Trajectory:
    """One episode of trajectory-mode GRPO.

    ``nodes`` are the steps in order; ``nodes[k].parent`` is ``nodes[k - 1].id``.
    ``episode_return`` is the undiscounted sum of the step rewards (the
    trajectory-level reward of standard GRPO; Table 9 uses gamma = 1).
    """

    nodes: list[TreeNode]
    episode_return: float


# -- rollouts ----------------------------------------------------------------------------


def _fork(env: Any) -> OrchestrationEnv:
    """A fresh copy of ``env``'s state (through any wrappers), so ``env`` itself is never stepped."""
    base = env.unwrapped
    if not isinstance(base, OrchestrationEnv):
        raise TypeError(
            f"rollouts need orchenv environments (OrchestrationEnv, which can fork()); "
            f"got {type(base).__name__}"
        )
    return base.fork()


def _sample_batch(sampler: Sampler, prompts: list[list[dict[str, str]]]) -> list[Sample]:
    samples = list(sampler(prompts))
    if len(samples) != len(prompts):
        raise ValueError(
            f"the sampler returned {len(samples)} samples for {len(prompts)} prompts; "
            "it must return exactly one Sample per prompt, in order"
        )
    return samples


def _per_query(name: str, values: Sequence[Any] | None, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries for {n} environments; give one each")
    return list(values)


@dataclass
class _Active:
    """A state waiting to be branched: its env, the info it was reached with, its node."""

    query: int
    env: Any
    info: dict[str, Any]
    node: int | None  # the node whose action led here (None: the reset state)


def rollout_trees(
    envs: Sequence[OrchestrationEnv],
    sampler: Sampler,
    *,
    group_size: int,
    max_depth: int,
    seeds: Sequence[int | None],
    options: Sequence[dict | None] | None = None,
) -> list[Tree]:
    """Algorithm 1 of seed 000: one rollout tree per query, G actions from every state.

    ``envs[i]`` is reset with ``seeds[i]`` (and ``options[i]``) and becomes the root
    state of tree i. At each depth every active state of every tree contributes its
    ``info["messages"]`` G times (contiguously, trees in order) to ONE ``sampler``
    call; for each state, G ``fork()``s are stepped with the G sampled texts. Forks
    that did not end the episode are the next depth's states. The reset envs are
    never stepped, so callers can reuse them.

    The tree stops at ``max_depth`` controller turns: nodes at the last depth are
    leaves (``done`` keeps what the env said, so it may be False) and get no
    children. Forks are taken from ``env.unwrapped``: wrappers apply to the reset
    only, so reward or action wrappers are bypassed while stepping.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    seed_list = _per_query("seeds", seeds, len(envs))
    option_list = _per_query("options", options, len(envs))

    trees: list[Tree] = []
    active: list[_Active] = []
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seed_list[i], options=option_list[i])
        trees.append(
            Tree(query_seed=seed_list[i], task_id=info.get("task_id"), nodes=[], groups={})
        )
        active.append(_Active(query=i, env=env, info=info, node=None))

    for depth in range(max_depth):
        if not active:
            break
        prompts = [state.info["messages"] for state in active for _ in range(group_size)]
        samples = _sample_batch(sampler, prompts)
        next_active: list[_Active] = []
        for k, state in enumerate(active):
            tree = trees[state.query]
            group = len(tree.groups)
            tree.groups[group] = []
            for g in range(group_size):
                sample = samples[k * group_size + g]
                child = _fork(state.env)
                _, reward, terminated, truncated, info = child.step(sample.text)
                node = TreeNode(
                    id=len(tree.nodes),
                    parent=state.node,
                    group=group,
                    depth=depth,
                    messages=state.info["messages"],
                    sample=sample,
                    reward=float(reward),
                    done=bool(terminated or truncated),
                    info=info,
                )
                tree.nodes.append(node)
                tree.groups[group].append(node.id)
                if state.node is not None:
                    tree.nodes[state.node].children.append(node.id)
                if not node.done and depth + 1 < max_depth:
                    next_active.append(_Active(state.query, child, info, node.id))
        active = next_active
    return trees


def rollout_trajectories(
    envs: Sequence[OrchestrationEnv],
    sampler: Sampler,
    *,
    group_size: int,
    max_steps: int,
    seeds: Sequence[int | None],
    options: Sequence[dict | None] | None = None,
) -> list[list[Trajectory]]:
    """Standard GRPO rollouts: G independent episodes per query, in lockstep.

    ``envs[i]`` is reset with ``seeds[i]`` and forked G times, so the G episodes of
    a query share its task. Each step makes ONE ``sampler`` call over every
    unfinished episode (queries in order, episodes in order within a query). An
    episode stops when the env ends it or after ``max_steps`` steps.

    Returns, per query, G ``Trajectory`` objects. Node ids are unique across the
    G episodes of a query; ``group`` is the step index (the cohort of the query's
    episodes at that turn; only step 0 is a true same-state group, so advantages
    here come from ``trajectory_advantages``, broadcast to every step).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    seed_list = _per_query("seeds", seeds, len(envs))
    option_list = _per_query("options", options, len(envs))

    episodes: list[list[list[TreeNode]]] = []  # query -> episode -> nodes
    next_id = [0] * len(envs)
    active: list[tuple[int, int, _Active]] = []  # (query, episode, state)
    for i, env in enumerate(envs):
        _, info = env.reset(seed=seed_list[i], options=option_list[i])
        episodes.append([[] for _ in range(group_size)])
        for g in range(group_size):
            active.append((i, g, _Active(query=i, env=_fork(env), info=info, node=None)))

    for step in range(max_steps):
        if not active:
            break
        samples = _sample_batch(sampler, [state.info["messages"] for _, _, state in active])
        still: list[tuple[int, int, _Active]] = []
        for (i, g, state), sample in zip(active, samples, strict=True):
            _, reward, terminated, truncated, info = state.env.step(sample.text)
            node = TreeNode(
                id=next_id[i],
                parent=state.node,
                group=step,
                depth=step,
                messages=state.info["messages"],
                sample=sample,
                reward=float(reward),
                done=bool(terminated or truncated),
                info=info,
            )
            next_id[i] += 1
            path = episodes[i][g]
            if path:
                path[-1].children.append(node.id)
            path.append(node)
            if not node.done:
                still.append((i, g, _Active(i, state.env, info, node.id)))
        active = still

    return [
        [Trajectory(nodes=path, episode_return=sum(n.reward for n in path)) for path in query]
        for query in episodes
    ]


# -- returns and advantages ----------------------------------------------------------------


def node_returns(tree: Tree, gamma: float = 1.0) -> dict[int, float]:
    """Eq. (5)/(14)-(15): Q(node) = r(node) + gamma * V(next state), bottom-up.

    V(next state) is the mean Q of the G actions sampled from it (the node's
    ``children``); a node without children (the episode ended, or the tree's depth
    limit was reached) has Q = r, the terminal condition V = 0 of eq. (5).
    """
    by_id = {node.id: node for node in tree.nodes}
    q: dict[int, float] = {}
    for node in sorted(tree.nodes, key=lambda n: n.depth, reverse=True):
        value = 0.0
        if node.children:
            missing = [c for c in node.children if c not in q]
            if missing:
                bad = [c for c in missing if c not in by_id or by_id[c].depth <= node.depth]
                raise ValueError(
                    f"node {node.id} lists children {bad or missing} that are not deeper nodes "
                    "of this tree"
                )
            value = sum(q[c] for c in node.children) / len(node.children)
        q[node.id] = node.reward + gamma * value
    return q


def _relative(values: Sequence[float], normalize_std: bool, eps: float) -> list[float]:
    """Eq. (6)/(16): value minus the group mean, optionally over (population std + eps)."""
    n = len(values)
    if n <= 1:
        return [0.0] * n
    mean = sum(values) / n
    centred = [v - mean for v in values]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / n)
    return [c / (std + eps) for c in centred]


def group_advantages(
    tree: Tree,
    returns: Mapping[int, float],
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> dict[int, float]:
    """Eq. (6)/(16): A(node) = Q(node) - mean of Q over the node's group.

    ``normalize_std`` divides by the group's population std + ``eps`` (A-GRPO /
    classic GRPO); seed 000 leaves it off (appendix E.1.2). A group of one has
    no baseline to compare with and gets advantage 0.
    """
    out: dict[int, float] = {}
    for ids in tree.groups.values():
        advs = _relative([returns[i] for i in ids], normalize_std, eps)
        for node_id, adv in zip(ids, advs, strict=True):
            out[node_id] = adv
    return out


def trajectory_advantages(
    episode_returns: Sequence[float], *, normalize_std: bool = False, eps: float = 1e-6
) -> list[float]:
    """Standard GRPO: each of the G episodes of one query against their mean return.

    The same formula as ``group_advantages``; the caller gives every step of an
    episode its episode's advantage.
    """
    return _relative(list(episode_returns), normalize_std, eps)


# -- token level ----------------------------------------------------------------------------


def build_batch(
    samples: Sequence[Sample], *, pad_id: int, max_len: int | None = None
) -> dict[str, Tensor]:
    """Right-padded training tensors; only the controller's own tokens are trained on.

    Returns ``input_ids`` and ``attention_mask`` [B, T] (prompt + completion, then
    ``pad_id``), and, aligned with next-token prediction (position t predicts
    ``input_ids[:, t + 1]``), ``targets`` [B, T-1], ``loss_mask`` [B, T-1] (float,
    1 exactly where the target is a completion token: the prompt, i.e. everything
    the env and the agents wrote, and padding are 0) and ``old_logprobs`` [B, T-1]
    (the sampler's logprobs at those positions, 0 elsewhere or when absent).

    Truncation, when prompt + completion exceed ``max_len``: the prompt loses
    tokens from the left (its start: the system prompt) and the completion is kept
    whole. If the completion alone does not fit, the last prompt token is kept (so
    the first completion token still has a position predicting it) and the
    completion keeps its head; the cut tail is not trained on. A truncated prompt
    changes the context the logprobs are computed in, so set ``max_len`` to cover
    the longest prompt + response when you can. With an empty prompt the first
    completion token has no predicting position and is not trained on.
    """
    if not samples:
        raise ValueError("build_batch needs at least one sample")
    if max_len is not None and max_len < 2:
        raise ValueError(f"max_len must be >= 2 (one context token and one target), got {max_len}")
    rows: list[tuple[list[int], list[int], list[float] | None]] = []
    for index, sample in enumerate(samples):
        prompt, completion = list(sample.prompt_ids), list(sample.completion_ids)
        logprobs = None if sample.logprobs is None else [float(x) for x in sample.logprobs]
        if logprobs is not None and len(logprobs) != len(completion):
            raise ValueError(
                f"sample {index} has {len(logprobs)} logprobs for {len(completion)} completion "
                "tokens; give one per completion token (or None)"
            )
        if max_len is not None and len(prompt) + len(completion) > max_len:
            keep = min(len(prompt), max(max_len - len(completion), 1))
            prompt = prompt[len(prompt) - keep :]
            completion = completion[: max_len - len(prompt)]
            if logprobs is not None:
                logprobs = logprobs[: len(completion)]
        rows.append((prompt, completion, logprobs))

    width = max(len(p) + len(c) for p, c, _ in rows)
    if width == 0:
        raise ValueError("every sample is empty (no prompt and no completion tokens)")
    batch = len(rows)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    loss_mask = torch.zeros((batch, width - 1), dtype=torch.float32)
    old_logprobs = torch.zeros((batch, width - 1), dtype=torch.float32)
    for b, (prompt, completion, logprobs) in enumerate(rows):
        ids = prompt + completion
        if ids:
            input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[b, : len(ids)] = 1
        # completion token j sits at len(prompt) + j and is predicted from the position before
        first = max(len(prompt), 1)
        for pos in range(first, len(ids)):
            loss_mask[b, pos - 1] = 1.0
            if logprobs is not None:
                old_logprobs[b, pos - 1] = logprobs[pos - len(prompt)]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "loss_mask": loss_mask,
        "old_logprobs": old_logprobs,
        "targets": input_ids[:, 1:].clone(),
    }


def _prediction_logits(logits: Tensor, length: int | None = None) -> Tensor:
    """Logits at the positions that predict a next token ([B, T-1, V]), in float32."""
    if logits.dim() != 3:
        raise ValueError(f"logits must be [batch, time, vocab], got shape {tuple(logits.shape)}")
    if length is None or logits.shape[1] == length + 1:
        logits = logits[:, :-1]
    elif logits.shape[1] != length:
        raise ValueError(
            f"logits have {logits.shape[1]} positions for {length} targets; pass the model's "
            "logits for input_ids ([B, T, V]) with targets [B, T-1]"
        )
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(target) per position, [B, T-1]: the log pi_theta(o_t | q, o_<t) of eq. (21).

    ``logits`` are the model's output for ``input_ids`` ([B, T, V]; already-shifted
    [B, T-1, V] is accepted too). Computed as logit[target] - logsumexp(logits) in
    float32, the numerically stable form of log_softmax + gather that does not
    keep a second [B, T, V] tensor.
    """
    logits = _prediction_logits(logits, targets.shape[1])
    picked = torch.gather(logits, -1, targets.unsqueeze(-1).long()).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution, [B, T-1], from the model's [B, T, V] logits."""
    logits = _prediction_logits(logits)
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token KL(pi || pi_ref) estimate k3 = exp(d) - d - 1 with d = ref - lp; >= 0.

    Unbiased for tokens sampled from pi and never negative (the GRPO paper's KL term).
    """
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def _aggregate(per_token: Tensor, mask: Tensor, aggregation: str) -> Tensor:
    if aggregation == "token-mean":
        return per_token.sum() / mask.sum().clamp(min=1.0)
    counts = mask.sum(dim=-1)
    per_sequence = per_token.sum(dim=-1) / counts.clamp(min=1.0)
    has_tokens = (counts > 0).to(per_token.dtype)
    return (per_sequence * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)


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
    """The clipped GRPO surrogate (eq. 21), negated, on the controller's tokens only.

    Per token: ratio = exp(lp - old), objective = min(ratio * A, clip(ratio, 1 -
    clip_eps, 1 + clip_eps_high) * A) (``clip_eps_high`` defaults to ``clip_eps``;
    a larger one is DAPO's clip-higher), loss = -objective + kl_coef * k3(lp, ref)
    - entropy_coef * entropy. ``advantages`` is [B] (one per sequence, broadcast
    over its tokens) or [B, T-1]. Positions where ``loss_mask`` is 0 contribute
    nothing, not even NaN or inf from their inputs.

    ``aggregation``: "token-mean" sums over all masked tokens and divides by their
    number in the batch; "sequence-mean" averages each sequence over its own
    tokens, then over the sequences that have any. On-policy (old = lp.detach())
    the ratio is 1 and the gradient is -A * grad lp averaged: eq. (24)'s estimator.

    Returns (loss, stats); stats are token means over masked tokens:
    ``clip_fraction`` (tokens whose clipped term was the smaller, i.e. no
    gradient), ``ratio``, ``approx_kl`` (k3 estimate of KL(old || new)), ``kl``
    (k3 against the reference, when given), ``entropy`` (when given), and
    ``num_tokens``.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if kl_coef != 0.0 and ref_logprobs is None:
        raise ValueError("kl_coef != 0 needs ref_logprobs (the reference policy's logprobs)")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy (token_entropy of the logits)")
    if logprobs.shape != loss_mask.shape or old_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"loss_mask {tuple(loss_mask.shape)} must have the same [B, T-1] shape"
        )
    active = loss_mask > 0
    mask = active.to(logprobs.dtype)
    zeros = torch.zeros_like(logprobs)
    adv = advantages.detach().to(device=logprobs.device, dtype=logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    adv = adv.expand_as(logprobs)

    # mask inputs before exp(): padded positions may hold anything
    log_ratio = torch.where(active, logprobs - old_logprobs.detach(), zeros)
    ratio = torch.exp(log_ratio)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    is_clipped = clipped < unclipped
    per_token = -torch.where(is_clipped, clipped, unclipped)

    kl = None
    if ref_logprobs is not None:
        kl = kl_k3(torch.where(active, logprobs, zeros), torch.where(active, ref_logprobs, zeros))
        if kl_coef != 0.0:
            per_token = per_token + kl_coef * kl
    if entropy is not None and entropy_coef != 0.0:
        per_token = per_token - entropy_coef * torch.where(active, entropy, zeros)
    per_token = torch.where(active, per_token, zeros)
    loss = _aggregate(per_token, mask, aggregation)

    with torch.no_grad():
        count = mask.sum()
        denom = count.clamp(min=1.0)

        def token_mean(values: Tensor) -> float:
            return float((torch.where(active, values.detach(), zeros) * mask).sum() / denom)

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
