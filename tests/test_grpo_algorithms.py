"""Seed 000's multi-turn GRPO pieces (orchenv.agents.grpo.algorithms) on hand-computed cases.

Every expected number below is worked out by hand in the comments next to it.
Scripted pool (tests/scenario.py): weak answers wrong, mid and strong answer right;
alpha = 0.5, lambda = 0.25 / 0.125 / 0 (strong / mid / weak). Per-turn rewards:

    route weak (wrong)                 0.5 * (0 - 0)              = 0
    route mid (right)                  0.5 * (1 - 0.125)          = 0.4375
    route strong (right)               0.5 * (1 - 0.25)           = 0.375
    accept a wrong draft               0.5 * 0                    = 0
    accept a right draft               0.5 * 1                    = 0.5
    reject a wrong draft -> strong     0.5 * (1 - 0.25) + 0.5 * 1 = 0.875
    bare False on strong's right draft 0 (wrong verdict, nobody called; ends the episode)
"""

from __future__ import annotations

import math
import re

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from scenario import MID, RIGHT, STRONG, WEAK, WRONG, scripted_pool, tiny_source  # noqa: E402

import orchenv  # noqa: E402, F401  (registers the orch/ ids)
from orchenv.agents.grpo import (  # noqa: E402
    Sample,
    Tree,
    TreeNode,
    build_batch,
    group_advantages,
    kl_k3,
    node_returns,
    policy_loss,
    rollout_trajectories,
    rollout_trees,
    token_entropy,
    token_logprobs,
    trajectory_advantages,
)
from orchenv.agents.grpo.algorithms import loss_units  # noqa: E402
from orchenv.envs.mathroute.env import MathRouteEnv  # noqa: E402
from orchenv.envs.mathroute.protocol import route_text, verdict_text  # noqa: E402

EPS = 1e-6


def close(tensor, expected) -> None:
    torch.testing.assert_close(tensor, torch.tensor(expected, dtype=tensor.dtype))


# -- hand-built trees: returns and advantages ------------------------------------------------


def _node(nid, parent, group, depth, reward, done, children=()):
    sample = Sample(text=f"a{nid}", prompt_ids=[1], completion_ids=[2])
    return TreeNode(
        id=nid,
        parent=parent,
        group=group,
        depth=depth,
        messages=[{"role": "user", "content": "q"}],
        sample=sample,
        reward=reward,
        done=done,
        info={},
        children=list(children),
    )


def three_level_tree() -> Tree:
    """G = 2, depths 0-2; node 1 ends the episode at once, node 3 at depth 1.

    group 0 (depth 0): n0 r=0.5 -> {n2, n3};   n1 r=0.25 done
    group 1 (depth 1): n2 r=1.0 -> {n4, n5};   n3 r=0.0 done
    group 2 (depth 2): n4 r=0.5 (depth-limit leaf, not done); n5 r=-1.0 done
    """
    nodes = [
        _node(0, None, 0, 0, 0.5, False, (2, 3)),
        _node(1, None, 0, 0, 0.25, True),
        _node(2, 0, 1, 1, 1.0, False, (4, 5)),
        _node(3, 0, 1, 1, 0.0, True),
        _node(4, 2, 2, 2, 0.5, False),
        _node(5, 2, 2, 2, -1.0, True),
    ]
    return Tree(query_seed=0, task_id="t", nodes=nodes, groups={0: [0, 1], 1: [2, 3], 2: [4, 5]})


def test_node_returns_gamma_one():
    q = node_returns(three_level_tree(), gamma=1.0)
    # leaves: Q4 = 0.5, Q5 = -1.0, Q3 = 0.0, Q1 = 0.25 (no children: Q = r)
    # Q2 = 1.0 + mean(0.5, -1.0) = 1.0 - 0.25 = 0.75
    # Q0 = 0.5 + mean(Q2, Q3) = 0.5 + 0.375 = 0.875
    expected = {0: 0.875, 1: 0.25, 2: 0.75, 3: 0.0, 4: 0.5, 5: -1.0}
    assert q == pytest.approx(expected)


def test_node_returns_gamma_half():
    q = node_returns(three_level_tree(), gamma=0.5)
    # Q2 = 1.0 + 0.5 * (-0.25) = 0.875;  Q0 = 0.5 + 0.5 * mean(0.875, 0.0) = 0.71875
    expected = {0: 0.71875, 1: 0.25, 2: 0.875, 3: 0.0, 4: 0.5, 5: -1.0}
    assert q == pytest.approx(expected)


def test_node_returns_gamma_zero_is_the_immediate_reward():
    tree = three_level_tree()
    assert node_returns(tree, gamma=0.0) == pytest.approx({n.id: n.reward for n in tree.nodes})


def test_node_returns_does_not_depend_on_node_order():
    tree = three_level_tree()
    shuffled = Tree(tree.query_seed, tree.task_id, tree.nodes[::-1], tree.groups)
    assert node_returns(shuffled) == node_returns(tree)


def test_node_returns_rejects_dangling_children():
    tree = three_level_tree()
    tree.nodes[1].children = [99]
    with pytest.raises(ValueError, match="children"):
        node_returns(tree)


def test_group_advantages_without_std():
    tree = three_level_tree()
    adv = group_advantages(tree, node_returns(tree, gamma=1.0))
    # group 0: mean(0.875, 0.25) = 0.5625 -> +0.3125, -0.3125
    # group 1: mean(0.75, 0.0) = 0.375   -> +0.375, -0.375
    # group 2: mean(0.5, -1.0) = -0.25   -> +0.75, -0.75
    expected = {0: 0.3125, 1: -0.3125, 2: 0.375, 3: -0.375, 4: 0.75, 5: -0.75}
    assert adv == pytest.approx(expected)


def test_group_advantages_with_std():
    tree = three_level_tree()
    adv = group_advantages(tree, node_returns(tree, gamma=1.0), normalize_std=True, eps=EPS)
    # G = 2: the population std is half the gap, so each advantage is +-gap/2 / (gap/2 + eps)
    expected = {
        0: 0.3125 / (0.3125 + EPS),
        1: -0.3125 / (0.3125 + EPS),
        2: 0.375 / (0.375 + EPS),
        3: -0.375 / (0.375 + EPS),
        4: 0.75 / (0.75 + EPS),
        5: -0.75 / (0.75 + EPS),
    }
    assert adv == pytest.approx(expected, rel=1e-12)
    # eps = 0 gives exactly +-1 for a two-member group with distinct returns
    exact = group_advantages(tree, node_returns(tree), normalize_std=True, eps=0.0)
    assert exact == pytest.approx({0: 1, 1: -1, 2: 1, 3: -1, 4: 1, 5: -1})


def test_group_advantages_group_of_three_with_std():
    nodes = [_node(i, None, 0, 0, r, True) for i, r in enumerate([1.0, 0.0, 0.5])]
    tree = Tree(None, None, nodes, {0: [0, 1, 2]})
    q = node_returns(tree)
    # mean 0.5; population std = sqrt((0.25 + 0.25 + 0) / 3) = sqrt(1/6) = 0.4082483
    assert group_advantages(tree, q) == pytest.approx({0: 0.5, 1: -0.5, 2: 0.0})
    std = math.sqrt(1 / 6)
    assert group_advantages(tree, q, normalize_std=True) == pytest.approx(
        {0: 0.5 / (std + EPS), 1: -0.5 / (std + EPS), 2: 0.0}
    )
    assert 0.5 / std == pytest.approx(1.2247449)


def test_constant_group_and_singletons_get_zero_advantage():
    constant = [_node(i, None, 0, 0, 0.3, True) for i in range(3)]
    # singletons: G = 1 at both depths (n3 -> n4)
    singles = [_node(3, None, 1, 0, 2.0, False, (4,)), _node(4, 3, 2, 1, -7.0, True)]
    tree = Tree(None, None, constant + singles, {0: [0, 1, 2], 1: [3], 2: [4]})
    q = node_returns(tree)
    assert q[3] == pytest.approx(2.0 - 7.0) and q[4] == -7.0
    for normalize_std in (False, True):
        adv = group_advantages(tree, q, normalize_std=normalize_std)
        assert set(adv) == {0, 1, 2, 3, 4}
        assert all(math.isfinite(a) for a in adv.values())
        # constant group: (0.3 - 0.3) / (0 + eps) = 0; singleton groups: 0 by definition
        assert adv == pytest.approx(dict.fromkeys(range(5), 0.0), abs=1e-9)


def test_trajectory_advantages_by_hand():
    returns = [1.0, 0.0, 0.5, 0.5]
    # mean 0.5 -> [0.5, -0.5, 0, 0]; population std = sqrt((0.25 + 0.25) / 4) = sqrt(0.125)
    assert trajectory_advantages(returns) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    std = math.sqrt(0.125)
    assert trajectory_advantages(returns, normalize_std=True) == pytest.approx(
        [0.5 / (std + EPS), -0.5 / (std + EPS), 0.0, 0.0]
    )
    assert 0.5 / std == pytest.approx(math.sqrt(2))
    assert trajectory_advantages([3.0]) == [0.0]
    assert trajectory_advantages([2.0, 2.0], normalize_std=True) == [0.0, 0.0]


# -- tree rollouts on the scripted pool ------------------------------------------------------

_AUTHOR = re.compile(r"Proposed solution from (\w+):")


def _author(messages) -> str | None:
    found = _AUTHOR.search(messages[-1]["content"])
    return found.group(1) if found else None


def tree_policy(messages, g: int) -> str:
    """Action g of a group: route weak / strong; accept / reject (to strong, or bare False)."""
    author = _author(messages)
    if author is None:
        return route_text((WEAK, STRONG, MID)[g], note="difficulty")
    if g == 0:
        return verdict_text(True, note="looks fine")
    return verdict_text(False, None if author == STRONG else STRONG, note="step 1 is wrong")


class RecordingSampler:
    """Canned controller texts by position within each group of G; records every call."""

    def __init__(self, group_size: int, policy=tree_policy) -> None:
        self.group_size = group_size
        self.policy = policy
        self.calls: list[list[list[dict[str, str]]]] = []
        self.returned: list[Sample] = []

    def __call__(self, prompts):
        self.calls.append(prompts)
        out = []
        for i, messages in enumerate(prompts):
            text = self.policy(messages, i % self.group_size)
            out.append(Sample(text, prompt_ids=[7, 8, 9], completion_ids=[len(text)]))
        self.returned.extend(out)
        return out


def make_env(**kwargs) -> MathRouteEnv:
    kwargs.setdefault("reward", "paper")  # the per-turn eq. (3) rewards worked out above
    pool = scripted_pool({WEAK: WRONG, MID: RIGHT, STRONG: RIGHT})
    return MathRouteEnv(pool=pool, task_source=tiny_source(), **kwargs)


def replay(node_path: list[TreeNode], seed, options=None, **env_kwargs):
    """Step a fresh env along a path of nodes; return the last step's result."""
    env = make_env(**env_kwargs)
    env.reset(seed=seed, options=options)
    result = None
    for node in node_path:
        result = env.step(node.sample.text)
    return result


def path_to(tree: Tree, node: TreeNode) -> list[TreeNode]:
    path = [node]
    while path[0].parent is not None:
        path.insert(0, tree.nodes[path[0].parent])
    return path


def test_tree_structure_rewards_and_returns():
    env = make_env()
    sampler = RecordingSampler(group_size=2)
    (tree,) = rollout_trees([env], sampler, group_size=2, max_depth=3, seeds=[0])

    # depth 0: n0 weak (0), n1 strong (0.375); depth 1 after n0: n2 accept wrong (0, done),
    # n3 reject -> strong (0.875); after n1: n4 accept right (0.5, done), n5 bare False
    # (0, done); depth 2 after n3: n6 accept right (0.5, done), n7 bare False (0, done).
    # 2 + 2 * 2 (both depth-0 nodes go on) + 1 * 2 (only n3 goes on) = 8 nodes.
    assert [n.id for n in tree.nodes] == list(range(8))
    assert [n.reward for n in tree.nodes] == pytest.approx([0, 0.375, 0, 0.875, 0.5, 0, 0.5, 0])
    assert [n.done for n in tree.nodes] == [False, False, True, False, True, True, True, True]
    assert [n.depth for n in tree.nodes] == [0, 0, 1, 1, 1, 1, 2, 2]
    assert [n.parent for n in tree.nodes] == [None, None, 0, 0, 1, 1, 3, 3]
    assert [n.children for n in tree.nodes] == [[2, 3], [4, 5], [], [6, 7], [], [], [], []]
    assert tree.groups == {0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}
    assert [n.group for n in tree.nodes] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert tree.query_seed == 0 and tree.task_id == tree.nodes[0].info["task_id"]
    assert tree.nodes[3].info["called_agent"] == STRONG
    assert list(tree.nodes[3].info["constraint_costs"]) == [0, 0, 1]
    assert tree.nodes[3].info["privileged"]["judged_draft_correct"] is False

    # one sampler call per depth, with every active state's prompt repeated G times
    assert [len(c) for c in sampler.calls] == [2, 4, 2]
    assert sampler.calls[1] == [
        tree.nodes[0].info["messages"],
        tree.nodes[0].info["messages"],
        tree.nodes[1].info["messages"],
        tree.nodes[1].info["messages"],
    ]
    for node in tree.nodes:  # each node acted in its parent's next state
        parent = tree.nodes[node.parent] if node.parent is not None else None
        assert node.messages == (parent.info["messages"] if parent else sampler.calls[0][0])
    # Sample objects are passed through untouched
    assert all(n.sample is s for n, s in zip(tree.nodes, sampler.returned, strict=True))

    # eq. (5) with gamma = 1: Q6 = 0.5, Q7 = 0 -> Q3 = 0.875 + 0.25 = 1.125; Q0 = 0 + mean(0,
    # 1.125) = 0.5625; Q1 = 0.375 + mean(0.5, 0) = 0.625
    q = node_returns(tree)
    assert q == pytest.approx(
        {0: 0.5625, 1: 0.625, 2: 0.0, 3: 1.125, 4: 0.5, 5: 0.0, 6: 0.5, 7: 0.0}
    )
    # eq. (6): group 0 mean 0.59375 -> -0.03125, +0.03125; group 1 mean 0.5625; groups 2, 3
    # mean 0.25
    assert group_advantages(tree, q) == pytest.approx(
        {0: -0.03125, 1: 0.03125, 2: -0.5625, 3: 0.5625, 4: 0.25, 5: -0.25, 6: 0.25, 7: -0.25}
    )


def test_tree_rewards_match_stepping_a_fresh_env():
    (tree,) = rollout_trees([make_env()], RecordingSampler(2), group_size=2, max_depth=3, seeds=[5])
    for node in tree.nodes:
        _, reward, terminated, truncated, info = replay(path_to(tree, node), seed=5)
        assert reward == node.reward
        assert (terminated or truncated) == node.done
        assert info["messages"] == node.info["messages"]
        assert info["agent_calls"] == node.info["agent_calls"]
        assert list(info["constraint_costs"]) == list(node.info["constraint_costs"])


def test_parent_env_is_never_stepped_and_forks_are_independent():
    env = make_env()
    (tree,) = rollout_trees([env], RecordingSampler(2), group_size=2, max_depth=3, seeds=[0])
    backend = env.pool._backends["scripted"]
    # only the three routing actions (n0 weak, n1 strong, n3 strong) called an agent
    assert [name for name, *_ in backend.calls] == [WEAK, STRONG, STRONG]
    # the reset env still sits at its first turn and can be played
    assert env.turn == 0 and env.transcript == [] and env.meter.calls == {}
    _, reward, terminated, *_ = env.step(route_text(MID))
    assert reward == pytest.approx(0.4375) and not terminated
    # siblings saw only their own history: n3's episode called weak then strong, n4's only strong
    assert tree.nodes[3].info["agent_calls"] == {WEAK: 1, STRONG: 1}
    assert tree.nodes[4].info["agent_calls"] == {STRONG: 1}
    assert tree.nodes[2].info["agent_calls"] == {WEAK: 1}


def test_depth_limit_leaves_are_not_done_and_have_no_children():
    sampler = RecordingSampler(2)
    (tree,) = rollout_trees([make_env()], sampler, group_size=2, max_depth=2, seeds=[0])
    assert len(tree.nodes) == 6 and len(sampler.calls) == 2
    n3 = tree.nodes[3]
    assert not n3.done and n3.children == []
    q = node_returns(tree)
    assert q[3] == pytest.approx(0.875)  # Q = r at the depth limit
    assert q[0] == pytest.approx(0.0 + (0.0 + 0.875) / 2)


def test_several_queries_share_one_sampler_call_per_depth():
    envs = [make_env() for _ in range(3)]
    sampler = RecordingSampler(2)
    options = [{"task_index": i} for i in range(3)]
    trees = rollout_trees(
        envs, sampler, group_size=2, max_depth=3, seeds=[10, 11, 12], options=options
    )
    assert len(sampler.calls) == 3
    assert [len(c) for c in sampler.calls] == [6, 12, 6]  # 3 trees x (2, 4, 2)
    copies = [re.search(r"copy (\d)", m[-1]["content"]).group(1) for m in sampler.calls[0]]
    assert copies == ["0", "0", "1", "1", "2", "2"]  # trees in order, G contiguous copies
    assert [t.task_id for t in trees] == ["t0", "t1", "t2"]
    assert [t.query_seed for t in trees] == [10, 11, 12]
    for tree in trees:  # ids and groups are per tree
        assert [n.id for n in tree.nodes] == list(range(8))
        assert sorted(tree.groups) == [0, 1, 2, 3]
        assert [n.reward for n in tree.nodes] == pytest.approx([0, 0.375, 0, 0.875, 0.5, 0, 0.5, 0])
        assert all(n.info["task_id"] == tree.task_id for n in tree.nodes)


def test_tree_rollouts_are_deterministic_on_the_simulated_pool():
    """Wrapped envs (gym.make) with the simulated pool: same seeds, same trees."""

    def run():
        envs = [gym.make("orch/MathRoute-v0") for _ in range(3)]
        sampler = RecordingSampler(3)
        trees = rollout_trees(envs, sampler, group_size=3, max_depth=3, seeds=[0, 1, 2])
        return trees, sampler

    (first, s1), (second, s2) = run(), run()
    assert s1.calls == s2.calls
    for a, b in zip(first, second, strict=True):
        assert a.task_id == b.task_id and a.groups == b.groups
        assert [(n.reward, n.done, n.parent, n.children) for n in a.nodes] == [
            (n.reward, n.done, n.parent, n.children) for n in b.nodes
        ]
        assert [n.info["messages"] for n in a.nodes] == [n.info["messages"] for n in b.nodes]


def test_rollout_argument_checks():
    with pytest.raises(ValueError, match="seeds"):
        rollout_trees([make_env()], RecordingSampler(2), group_size=2, max_depth=1, seeds=[0, 1])
    with pytest.raises(ValueError, match="one Sample per prompt"):
        rollout_trees([make_env()], lambda prompts: [], group_size=2, max_depth=1, seeds=[0])
    with pytest.raises(ValueError, match="group_size"):
        rollout_trees([make_env()], RecordingSampler(2), group_size=0, max_depth=1, seeds=[0])


# -- trajectory rollouts ---------------------------------------------------------------------


def trajectory_policy(messages, g: int) -> str:
    """Episode g of 3 routes weak / strong / mid; drafts by weak are rejected, others accepted."""
    author = _author(messages)
    if author is None:
        return route_text((WEAK, STRONG, MID)[g])
    if author == WEAK:
        return verdict_text(False, STRONG)
    return verdict_text(True)


def test_trajectories_share_the_task_and_step_in_lockstep():
    sampler = RecordingSampler(3, policy=trajectory_policy)
    envs = [make_env(), make_env()]
    options = [{"task_index": 1}, {"task_index": 2}]
    groups = rollout_trajectories(
        envs, sampler, group_size=3, max_steps=5, seeds=[3, 4], options=options
    )
    # episode 0: weak (0) -> reject, strong (0.875) -> accept (0.5): 3 steps, return 1.375
    # episode 1: strong (0.375) -> accept (0.5): return 0.875
    # episode 2: mid (0.4375) -> accept (0.5): return 0.9375
    # lockstep over both queries: 6 episodes, then 6, then only the two episode-0s
    assert [len(c) for c in sampler.calls] == [6, 6, 2]
    assert len(groups) == 2
    for query, task in zip(groups, ["t1", "t2"], strict=True):
        assert len(query) == 3
        assert [len(t.nodes) for t in query] == [3, 2, 2]
        assert [t.episode_return for t in query] == pytest.approx([1.375, 0.875, 0.9375])
        rewards = [[n.reward for n in t.nodes] for t in query]
        assert rewards == [[0, 0.875, 0.5], [0.375, 0.5], [0.4375, 0.5]]  # exact in binary
        first_prompts = [t.nodes[0].messages for t in query]
        assert first_prompts[0] == first_prompts[1] == first_prompts[2]
        assert all(n.info["task_id"] == task for t in query for n in t.nodes)
        ids = [n.id for t in query for n in t.nodes]
        assert sorted(ids) == list(range(7))  # unique across the query's episodes
        for t in query:
            assert t.nodes[-1].done
            for k, node in enumerate(t.nodes):
                assert node.depth == node.group == k
                assert node.parent == (t.nodes[k - 1].id if k else None)
                assert node.children == ([t.nodes[k + 1].id] if k + 1 < len(t.nodes) else [])
        # mean 3.1875 / 3 = 1.0625 -> [0.3125, -0.1875, -0.125]
        returns = [t.episode_return for t in query]
        assert trajectory_advantages(returns) == pytest.approx([0.3125, -0.1875, -0.125])
    # the reset envs were forked, never stepped
    assert all(env.turn == 0 for env in envs)


def test_trajectories_stop_at_max_steps():
    sampler = RecordingSampler(3, policy=trajectory_policy)
    (query,) = rollout_trajectories([make_env()], sampler, group_size=3, max_steps=1, seeds=[0])
    assert len(sampler.calls) == 1
    assert [len(t.nodes) for t in query] == [1, 1, 1]
    assert [t.episode_return for t in query] == pytest.approx([0.0, 0.375, 0.4375])
    assert not any(t.nodes[0].done for t in query)


# -- build_batch -------------------------------------------------------------------------------


def test_build_batch_masks_exactly_the_completion_predictions():
    a = Sample("a", prompt_ids=[5, 6, 7], completion_ids=[8, 9], logprobs=[-0.1, -0.2])
    b = Sample("b", prompt_ids=[3], completion_ids=[4, 5, 6])
    batch = build_batch([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [3, 4, 5, 6, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert batch["targets"].tolist() == [[6, 7, 8, 9], [4, 5, 6, 0]]
    # a: positions 2 and 3 predict 8 and 9; b: positions 0-2 predict 4, 5, 6; padding is 0
    assert batch["loss_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 0]]
    close(batch["old_logprobs"], [[0, 0, -0.1, -0.2], [0, 0, 0, 0]])
    # by construction: the masked targets are the completions, in order
    mask = batch["loss_mask"].bool()
    assert batch["targets"][0][mask[0]].tolist() == [8, 9]
    assert batch["targets"][1][mask[1]].tolist() == [4, 5, 6]
    assert batch["loss_mask"].dtype == torch.float32 and batch["input_ids"].dtype == torch.long


def test_build_batch_truncates_the_prompt_from_the_left():
    a = Sample("a", prompt_ids=[5, 6, 7], completion_ids=[8, 9], logprobs=[-0.1, -0.2])
    b = Sample("b", prompt_ids=[3], completion_ids=[4, 5, 6])
    batch = build_batch([a, b], pad_id=0, max_len=4)
    # a (5 tokens) loses its first prompt token; b (4 tokens) fits
    assert batch["input_ids"].tolist() == [[6, 7, 8, 9], [3, 4, 5, 6]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    close(batch["old_logprobs"], [[0, -0.1, -0.2], [0, 0, 0]])


def test_build_batch_keeps_the_head_of_an_overlong_completion():
    c = Sample("c", [1, 2, 3], [10, 11, 12, 13, 14], logprobs=[-1.0, -2.0, -3.0, -4.0, -5.0])
    batch = build_batch([c], pad_id=0, max_len=4)
    # the last prompt token stays as context for the first completion token; the tail goes
    assert batch["input_ids"].tolist() == [[3, 10, 11, 12]]
    assert batch["loss_mask"].tolist() == [[1, 1, 1]]
    assert batch["old_logprobs"].tolist() == [[-1.0, -2.0, -3.0]]


def test_build_batch_edge_cases():
    # no prompt: the first completion token has no predicting position
    batch = build_batch([Sample("x", [], [10, 11, 12], [-1.0, -2.0, -3.0])], pad_id=0)
    assert batch["loss_mask"].tolist() == [[1, 1]]
    assert batch["old_logprobs"].tolist() == [[-2.0, -3.0]]
    # an empty completion trains on nothing
    batch = build_batch([Sample("", [1, 2], []), Sample("y", [1], [2])], pad_id=9)
    assert batch["input_ids"].tolist() == [[1, 2], [1, 2]]
    assert batch["loss_mask"].tolist() == [[0], [1]]
    with pytest.raises(ValueError, match="logprobs"):
        build_batch([Sample("z", [1], [2, 3], [-1.0])], pad_id=0)
    with pytest.raises(ValueError):
        build_batch([], pad_id=0)


# -- token-level math ---------------------------------------------------------------------------


def test_token_logprobs_and_entropy_by_hand():
    # one position predicting with logits [0, ln 3]: p = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])  # [1, T=2, V=2]
    targets = torch.tensor([[1]])
    close(token_logprobs(logits, targets), [[math.log(0.75)]])
    # already-shifted logits give the same
    close(token_logprobs(logits[:, :1], targets), [[math.log(0.75)]])
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.5623351
    close(token_entropy(logits), [[h]])
    close(token_entropy(torch.zeros(1, 3, 4)), [[math.log(4)] * 2])
    # stable for huge logits
    big = torch.tensor([[[1e4, 0.0], [0.0, 0.0]]])
    assert token_logprobs(big, torch.tensor([[1]])).item() == pytest.approx(-1e4)


def test_kl_k3_by_hand():
    lp = torch.tensor([math.log(0.5), math.log(0.5), -1.3])
    ref = torch.tensor([math.log(0.25), math.log(1.0), -1.3])
    # d = ln 0.5: 0.5 + 0.693147 - 1 = 0.193147; d = ln 2: 2 - 0.693147 - 1 = 0.306853; d = 0: 0
    assert kl_k3(lp, ref).tolist() == pytest.approx([0.1931472, 0.3068528, 0.0])
    x = torch.linspace(-5, 5, 41)
    assert (kl_k3(x, x.flip(0)) >= 0).all()


def test_on_policy_gradient_is_minus_advantage_times_grad_logprob():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 5, generator=gen).requires_grad_(True)
    targets = torch.tensor([[1, 4, 2], [0, 3, 3]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.5, -0.5])
    lp = token_logprobs(logits, targets)
    loss, stats = policy_loss(lp, lp.detach(), adv, mask)
    loss.backward()
    # loss = -(1.5 * 2 + (-0.5) * 1) / 3 masked tokens
    assert loss.item() == pytest.approx(-2.5 / 3)
    assert stats["ratio"] == pytest.approx(1.0) and stats["clip_fraction"] == 0.0
    assert stats["approx_kl"] == pytest.approx(0.0) and stats["num_tokens"] == 3
    # d(-A_b lp_bt / N)/dlogits[b, t] = -(A_b / N) mask_bt (onehot(target) - softmax(logits))
    with torch.no_grad():
        probs = torch.softmax(logits[:, :-1], dim=-1)
        onehot = torch.nn.functional.one_hot(targets, 5).float()
        expected = -(adv[:, None, None] / 3) * mask[..., None] * (onehot - probs)
        expected = torch.cat([expected, torch.zeros(2, 1, 5)], dim=1)  # last position: no target
    torch.testing.assert_close(logits.grad, expected)

    # sequence-mean: loss = -(1.5 + (-0.5)) / 2; gradient weights A_b / (n_b * 2)
    logits.grad = None
    lp = token_logprobs(logits, targets)
    loss, _ = policy_loss(lp, lp.detach(), adv, mask, aggregation="sequence-mean")
    loss.backward()
    assert loss.item() == pytest.approx(-0.5)
    with torch.no_grad():
        weights = torch.tensor([1.5 / (2 * 2), -0.5 / (1 * 2)])
        expected = -weights[:, None, None] * mask[..., None] * (onehot - probs)
        expected = torch.cat([expected, torch.zeros(2, 1, 5)], dim=1)
    torch.testing.assert_close(logits.grad, expected)


def _clip_case(clip_eps_high=None):
    ratios = [1.5, 1.5, 0.5, 0.5, 1.25]
    lp = torch.tensor([[math.log(r)] for r in ratios], requires_grad=True)
    old = torch.zeros(5, 1)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    loss, stats = policy_loss(lp, old, adv, torch.ones(5, 1), clip_eps_high=clip_eps_high)
    loss.backward()
    return loss.item(), lp.grad.squeeze(-1).tolist(), stats


def test_clipping_by_hand():
    loss, grad, stats = _clip_case()
    # eps 0.2, band [0.8, 1.2]; objective min(r A, clip(r) A), loss = -objective:
    # r 1.5  A +1: min(1.5, 1.2) = 1.2   clipped, loss -1.2, no gradient
    # r 1.5  A -1: min(-1.5, -1.2) = -1.5 loss 1.5, d/dlp = -A r = 1.5
    # r 0.5  A +1: min(0.5, 0.8) = 0.5   loss -0.5, d/dlp = -0.5
    # r 0.5  A -1: min(-0.5, -0.8) = -0.8 clipped, loss 0.8, no gradient
    # r 1.25 A +1: min(1.25, 1.2) = 1.2  clipped, loss -1.2, no gradient
    # token mean: (-1.2 + 1.5 - 0.5 + 0.8 - 1.2) / 5 = -0.12
    assert loss == pytest.approx(-0.12)
    assert grad == pytest.approx([0.0, 1.5 / 5, -0.5 / 5, 0.0, 0.0])
    assert stats["clip_fraction"] == pytest.approx(3 / 5)
    assert stats["ratio"] == pytest.approx((1.5 + 1.5 + 0.5 + 0.5 + 1.25) / 5)


def test_clip_higher_by_hand():
    loss, grad, stats = _clip_case(clip_eps_high=0.28)
    # band [0.8, 1.28]: r 1.5 A +1 -> 1.28 (clipped); r 1.25 A +1 -> 1.25 (inside the band)
    # (-1.28 + 1.5 - 0.5 + 0.8 - 1.25) / 5 = -0.146
    assert loss == pytest.approx(-0.146)
    assert grad == pytest.approx([0.0, 1.5 / 5, -0.5 / 5, 0.0, -1.25 / 5])
    assert stats["clip_fraction"] == pytest.approx(2 / 5)


def test_kl_and_entropy_terms():
    lp = torch.tensor([[math.log(0.5), math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25), math.log(1.0)]])
    entropy = torch.tensor([[0.7, 0.1]])
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(
        lp,
        lp.detach(),
        torch.tensor([0.0]),
        mask,
        ref_logprobs=ref,
        kl_coef=0.1,
        entropy=entropy,
        entropy_coef=0.01,
    )
    # A = 0: loss = 0.1 * mean(0.193147, 0.306853) - 0.01 * mean(0.7, 0.1) = 0.025 - 0.004
    assert loss.item() == pytest.approx(0.1 * 0.25 - 0.01 * 0.4)
    assert stats["kl"] == pytest.approx(0.25) and stats["entropy"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, lp.detach(), torch.tensor([0.0]), mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(lp, lp.detach(), torch.tensor([0.0]), mask, aggregation="sum")


def test_aggregation_modes_differ_on_uneven_lengths():
    lp = torch.zeros(3, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0, 100.0])  # the empty row must not count
    token, _ = policy_loss(lp, lp.detach(), adv, mask, aggregation="token-mean")
    seq, _ = policy_loss(lp, lp.detach(), adv, mask, aggregation="sequence-mean")
    # token-mean: (-1 * 3 + 2 * 1) / 4 = -0.25; sequence-mean: (-1 + 2) / 2 = 0.5
    assert token.item() == pytest.approx(-0.25)
    assert seq.item() == pytest.approx(0.5)


def test_masked_positions_cannot_leak_nan_or_inf():
    # unmasked, exp(lp - old) at the padded position would be exp(1e30) = inf: inf * 0 is NaN
    lp = torch.tensor([[-0.5, 0.0]], requires_grad=True)
    old = torch.tensor([[-0.5, -1e30]])
    ref = torch.tensor([[-0.5, float("inf")]])
    ent = torch.tensor([[0.3, float("nan")]])
    mask = torch.tensor([[1.0, 0.0]])
    loss, stats = policy_loss(
        lp,
        old,
        torch.tensor([2.0]),
        mask,
        ref_logprobs=ref,
        kl_coef=0.5,
        entropy=ent,
        entropy_coef=0.1,
    )
    loss.backward()
    assert loss.item() == pytest.approx(-2.0 - 0.1 * 0.3)
    assert torch.isfinite(lp.grad).all() and lp.grad[0, 1] == 0
    assert all(math.isfinite(v) for v in stats.values())


# -- masking proof on a real (tiny) causal LM ---------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm():
    from tiny_model import tiny_qwen2_path

    path = tiny_qwen2_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.eval()  # no dropout: repeated forwards are bit-identical
    return model, tokenizer


def _tiny_batch(tokenizer):
    samples = []
    for problem, reply in [
        ("What is 12 + 30?", "<thinking>easy</thinking><model>weak</model>"),
        ("Solve 3x + 4 = 19 for x, then compute 7 * 8 - 6.", "<verdict>True</verdict>"),
    ]:
        messages = [{"role": "system", "content": "Route."}, {"role": "user", "content": problem}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        completion_ids.append(tokenizer.eos_token_id)
        samples.append(Sample(reply, prompt_ids, completion_ids))
    return build_batch(samples, pad_id=tokenizer.pad_token_id), samples


def _loss_and_grads(model, batch, old, adv, **kwargs):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    lp = token_logprobs(logits, batch["targets"])
    loss, _ = policy_loss(lp, old, adv, batch["loss_mask"], **kwargs)
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    return loss.detach(), grads, lp.detach()


def test_prompt_targets_do_not_touch_the_loss_or_the_gradients(tiny_lm):
    model, tokenizer = tiny_lm
    batch, samples = _tiny_batch(tokenizer)
    mask = batch["loss_mask"]
    n_prompt = [len(s.prompt_ids) for s in samples]
    assert mask.sum().item() == sum(len(s.completion_ids) for s in samples)
    assert all(mask[b, : n - 1].sum() == 0 for b, n in enumerate(n_prompt))

    adv = torch.tensor([1.0, -0.7])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        # an off-policy reference point, so the loss value depends on the completion's logprobs
        old = token_logprobs(logits, batch["targets"]) + 0.05
    loss, grads, _ = _loss_and_grads(model, batch, old, adv)
    assert any(g.abs().sum() > 0 for g in grads)

    vocab = model.config.vocab_size
    # perturb every masked target (prompt and padding positions): nothing changes, bit for bit
    scrambled = dict(batch)
    targets = batch["targets"].clone()
    masked = mask == 0
    targets[masked] = (targets[masked] + 17) % vocab
    scrambled["targets"] = targets
    loss2, grads2, _ = _loss_and_grads(model, scrambled, old, adv)
    assert torch.equal(loss, loss2)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads2, strict=True))

    # perturb one completion target: the loss and the gradients change
    b, t = 1, n_prompt[1]  # the second completion token of sample 1
    assert mask[b, t] == 1
    changed = dict(batch)
    targets = batch["targets"].clone()
    targets[b, t] = (targets[b, t] + 17) % vocab
    changed["targets"] = targets
    loss3, grads3, _ = _loss_and_grads(model, changed, old, adv)
    assert not torch.equal(loss, loss3)
    assert any(not torch.equal(a, c) for a, c in zip(grads, grads3, strict=True))


def test_a_single_unmasked_token_gives_exactly_its_own_term(tiny_lm):
    model, tokenizer = tiny_lm
    batch, samples = _tiny_batch(tokenizer)
    b, t = 0, len(samples[0].prompt_ids)  # predicts sample 0's second completion token
    single = dict(batch)
    single["loss_mask"] = torch.zeros_like(batch["loss_mask"])
    single["loss_mask"][b, t] = 1.0
    adv = torch.tensor([0.8, -3.0])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        old = token_logprobs(logits, batch["targets"]) - 0.1  # ratio e^0.1 = 1.105, inside 1.2
    loss, grads, lp = _loss_and_grads(model, single, old, adv)
    ratio = math.exp(lp[b, t].item() - old[b, t].item())
    assert ratio == pytest.approx(math.exp(0.1), rel=1e-5)
    assert loss.item() == pytest.approx(-0.8 * ratio)  # unclipped: -A r for that token alone

    # the gradient is that of the single term -A * exp(lp_bt - old_bt)
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    term = -0.8 * torch.exp(token_logprobs(logits, batch["targets"])[b, t] - old[b, t])
    term.backward()
    expected = [p.grad for p in model.parameters() if p.grad is not None]
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_gradient_reaches_prompt_embeddings_but_not_padding(tiny_lm):
    """Context legitimately carries gradient; positions after the last target carry none."""
    model, tokenizer = tiny_lm
    batch, samples = _tiny_batch(tokenizer)
    embeds = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits
    lp = token_logprobs(logits, batch["targets"])
    loss, _ = policy_loss(lp, lp.detach(), torch.tensor([1.0, 1.0]), batch["loss_mask"])
    loss.backward()
    per_position = embeds.grad.abs().sum(-1)
    for b, sample in enumerate(samples):
        length = len(sample.prompt_ids) + len(sample.completion_ids)
        assert (per_position[b, : len(sample.prompt_ids)] > 0).all()
        # the last token predicts nothing and padding is never attended to by a target
        assert (per_position[b, length - 1 :] == 0).all()


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
@pytest.mark.parametrize(("prompt", "completion", "max_len"), [
    (3, 2, None), (0, 2, None), (1, 0, None), (6, 3, 5), (2, 9, 4), (5, 5, 1),
])  # fmt: skip
def test_loss_units_count_what_build_batch_trains(prompt, completion, max_len, aggregation):
    """The trainer's normaliser for skipped samples must equal build_batch's loss mask."""
    sample = Sample("x", list(range(1, prompt + 1)), list(range(1, completion + 1)))
    mask = build_batch([sample], pad_id=0, max_len=max_len)["loss_mask"]
    expected = int(mask.sum()) if aggregation == "token-mean" else int(mask.sum() > 0)
    assert loss_units(sample, max_len=max_len, aggregation=aggregation) == expected
