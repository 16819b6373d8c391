"""Masked PPO in one readable file (CleanRL style) on an orchenv env, against its yardsticks.

The env is trained on through ``orchenv.discrete.make_discrete_env`` (Discrete(n) actions with
``env.action_masks()``, a float feature vector), on its train split and its default reward.
The greedy policy is then played on the audit's test tasks beside the yardsticks of
``orchenv baselines``: random valid choices, the best fixed plan (a task-blind sequence),
the paper's skill at the realistic level and the privileged upper bound, all with 95%
intervals. A learner that only ties the best fixed plan has learned a plan, not the skill.

    pip install "orchenv[train]"
    python examples/cleanrl_ppo_masked.py                       # BudgetRoute, 20k steps
    python examples/cleanrl_ppo_masked.py --env-id orch/MathRoute-v0 --timesteps 40000
"""

from __future__ import annotations

import argparse
from collections import deque

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical
from tqdm.auto import tqdm

import orchenv  # noqa: F401  (registers the orch/ ids)
from orchenv.discrete import MaskedPolicyController, make_discrete_env
from orchenv.runner import format_yardsticks, yardsticks


def layer(n_in: int, n_out: int, std: float = 2**0.5) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """Separate actor and critic MLPs; masked choices get a logit of -1e8."""

    def __init__(self, n_obs: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(n_obs, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(), layer(hidden, 1, 1.0)
        )
        self.actor = nn.Sequential(
            layer(n_obs, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, n_actions, 0.01),
        )

    def dist(self, obs: torch.Tensor, mask: torch.Tensor) -> Categorical:
        return Categorical(logits=self.actor(obs).masked_fill(~mask, -1e8))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


class GreedyPolicy:
    """The trained actor with sb3's ``predict`` signature, so ``MaskedPolicyController`` plays
    it on the text env (its greedy choice among the available ones)."""

    def __init__(self, agent: Agent, observation_space) -> None:
        self.agent, self.observation_space = agent, observation_space

    def predict(self, obs, deterministic: bool = True, action_masks=None):
        with torch.no_grad():
            o = torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0)
            m = torch.as_tensor(np.asarray(action_masks, dtype=bool)).unsqueeze(0)
            return int(self.agent.dist(o, m).probs.argmax()), None


def train(args: argparse.Namespace) -> tuple[Agent, object]:
    torch.manual_seed(args.seed)
    envs = [make_discrete_env(args.env_id, split="train") for _ in range(args.num_envs)]
    obs = np.stack([env.reset(seed=args.seed + i)[0] for i, env in enumerate(envs)])
    masks = np.stack([env.action_masks() for env in envs])
    agent = Agent(obs.shape[1], int(envs[0].action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    n, T = args.num_envs, args.num_steps
    buf = {k: [] for k in ("obs", "mask", "action", "logp", "reward", "done", "value")}
    returns, running = deque(maxlen=200), np.zeros(n)
    updates = max(args.timesteps // (n * T), 1)
    bar = tqdm(range(updates), desc="masked PPO", unit="update")
    for _ in bar:
        for v in buf.values():
            v.clear()
        for _ in range(T):  # collect n * T steps
            o, m = torch.as_tensor(obs), torch.as_tensor(masks)
            with torch.no_grad():
                dist = agent.dist(o, m)
                action = dist.sample()
                buf["logp"].append(dist.log_prob(action))
                buf["value"].append(agent.value(o))
            buf["obs"].append(o), buf["mask"].append(m), buf["action"].append(action)
            rewards, dones = np.zeros(n, np.float32), np.zeros(n, np.float32)
            for i, env in enumerate(envs):
                obs[i], r, terminated, truncated, _ = env.step(int(action[i]))
                rewards[i], running[i] = float(r), running[i] + float(r)
                if terminated or truncated:
                    dones[i] = 1.0
                    returns.append(running[i])
                    running[i] = 0.0
                    obs[i], _ = env.reset()
                masks[i] = env.action_masks()
            buf["reward"].append(torch.as_tensor(rewards))
            buf["done"].append(torch.as_tensor(dones))
        with torch.no_grad():  # generalised advantage estimation
            next_value = agent.value(torch.as_tensor(obs))
            advantages, last = torch.zeros(T, n), torch.zeros(n)
            for t in reversed(range(T)):
                value_next = next_value if t == T - 1 else buf["value"][t + 1]
                alive = 1.0 - buf["done"][t]
                delta = buf["reward"][t] + args.gamma * value_next * alive - buf["value"][t]
                last = delta + args.gamma * args.gae_lambda * alive * last
                advantages[t] = last
            targets = advantages + torch.stack(buf["value"])
        b_obs, b_mask = torch.cat(buf["obs"]), torch.cat(buf["mask"])
        b_action, b_logp = torch.cat(buf["action"]), torch.cat(buf["logp"])
        b_adv, b_target = advantages.reshape(-1), targets.reshape(-1)
        for _ in range(args.epochs):  # clipped policy loss, value loss, entropy bonus
            for idx in torch.randperm(n * T).split(args.minibatch):
                dist = agent.dist(b_obs[idx], b_mask[idx])
                ratio = (dist.log_prob(b_action[idx]) - b_logp[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
                policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
                value_loss = 0.5 * (agent.value(b_obs[idx]) - b_target[idx]).pow(2).mean()
                loss = policy_loss + 0.5 * value_loss - args.ent_coef * dist.entropy().mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        if returns:
            bar.set_postfix(train_return=f"{np.mean(returns):.3f}", refresh=False)
    space = envs[0].observation_space
    for env in envs:
        env.close()
    return agent, space


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", default="orch/BudgetRoute-v0")
    p.add_argument("--timesteps", type=int, default=20_000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=64, help="steps per env per update")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatch", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--eval-tasks", type=int, default=100, help="test tasks for the comparison")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # a small MLP: one thread is fastest on CPU
    agent, space = train(args)
    learner = MaskedPolicyController(GreedyPolicy(agent, space))
    rows, report = yardsticks(
        args.env_id,
        tasks=args.eval_tasks,
        seed=args.seed,
        trained={"masked PPO (this run)": learner},
    )
    print(format_yardsticks(rows, report))


if __name__ == "__main__":
    main()
