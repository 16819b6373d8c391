"""The organizational topology of Puppeteer episodes (seed 003, section 3.3), and scripted
puppeteers for the paper's fixed baselines.

Seed 003 folds a serialized orchestration back into a directed graph: the agents are the
nodes and the order in which the puppeteer activated them gives the edges. ``AgentTrace``
records, per finished episode, which agent each branch called at each step (from the env's
``info["called_agents"]``); ``topology`` turns one episode's sequences into that graph and
measures it; ``ScriptedPuppeteer`` plays a fixed list of agents (a single model answering
once, Self-Refine), as a controller for the eval harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from orchenv.error import ConfigError

#: one episode: for each branch, the agents it called in order (``MODEL:PATTERN``/``MODEL:TOOL``)
Sequences = list[list[str]]


class AgentTrace(gym.Wrapper):  # type: ignore[type-arg]
    """Records the agent sequence of every finished episode in ``episodes`` (one
    ``Sequences`` per episode, in the order the episodes ended). ``terminate`` and malformed
    actions call nobody and add nothing; an episode that is reset before it ends is dropped."""

    def __init__(self, env: gym.Env) -> None:  # type: ignore[type-arg]
        super().__init__(env)
        self.episodes: list[Sequences] = []
        self._current: Sequences = []

    def reset(self, **kwargs: Any) -> Any:
        self._current = []
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        for b, agent in enumerate(info.get("called_agents") or []):
            while len(self._current) <= b:
                self._current.append([])
            self._current[b].append(str(agent))
        if terminated or truncated:
            self.episodes.append(self._current)
            self._current = []
        return obs, reward, terminated, truncated, info


def trajectory_graph(sequences: Sequences) -> tuple[set[str], set[tuple[str, str]]]:
    """Fold one episode into seed 003's directed graph: a node per distinct agent activated
    (in any branch), an edge ``u -> v`` when ``v`` acted right after ``u`` in the same
    branch. Activating an agent again reuses its node, so repeated activations close cycles
    (a self-loop when one agent acts twice in a row); branches that call the same agent
    share its node (the paper's cross-branch links). The task (source) and ``terminate``
    (sink) are not agents and are left out."""
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    for branch in sequences:
        nodes.update(branch)
        edges.update(zip(branch, branch[1:], strict=False))
    return nodes, edges


def graph_density(nodes: set[str], edges: set[tuple[str, str]]) -> float:
    """How tightly the activated agents are connected: distinct edges over the ``n * n``
    possible directed edges (self-loops included, since an agent may follow itself); 0 for
    an episode with no agent. A few agents that keep handing work to each other (the
    paper's compaction) score high, a long chain of distinct agents scores low."""
    n = len(nodes)
    return len(edges) / (n * n) if n else 0.0


def count_cycles(nodes: set[str], edges: set[tuple[str, str]]) -> int:
    """The number of elementary directed cycles of the graph (closed routes that visit no
    node twice; self-loops count): how often the orchestration returned to an agent that
    had already acted, the paper's cyclicality. Exhaustive search, fine for the few nodes an
    episode has (at most width x episode length)."""
    order = sorted(nodes)
    index = {v: i for i, v in enumerate(order)}
    succ: dict[int, list[int]] = {i: [] for i in range(len(order))}
    for u, v in edges:
        succ[index[u]].append(index[v])
    count = 0
    for start in range(len(order)):  # count each cycle once, from its smallest node
        stack = [(start, iter(succ[start]))]
        on_path = {start}
        while stack:
            node, children = stack[-1]
            nxt = next(children, None)
            if nxt is None:
                stack.pop()
                on_path.discard(node)
            elif nxt == start:
                count += 1
            elif nxt > start and nxt not in on_path:
                on_path.add(nxt)
                stack.append((nxt, iter(succ[nxt])))
    return count


def topology(sequences: Sequences) -> dict[str, float]:
    """One episode's topology: ``agents`` (activations, all branches), ``distinct`` (nodes),
    ``edges``, ``density`` (``graph_density``) and ``cycles`` (``count_cycles``)."""
    nodes, edges = trajectory_graph(sequences)
    return {
        "agents": float(sum(len(b) for b in sequences)),
        "distinct": float(len(nodes)),
        "edges": float(len(edges)),
        "density": graph_density(nodes, edges),
        "cycles": float(count_cycles(nodes, edges)),
    }


class ScriptedPuppeteer:
    """Names the agents of ``script`` in order (one per step; ``terminate`` may be one of
    them), then terminates: a fixed workflow such as one ``MODEL:reasoning`` call (the
    paper's pure-model rows) or reasoning, critique, modify (Self-Refine). Without a
    ``script``: the calibrated single call, the reasoning agent of the pool's model best at
    the task's family by its public single-call quality (``PuppeteerEnv.single_call_model``;
    per family, never per task), then terminate (a board's baseline row)."""

    privileged = False

    def __init__(self, script: Sequence[str] | None = None) -> None:
        self.script = None if script is None else list(script)
        self.steps = 0
        self._env: Any = None

    def bind(self, env: Any) -> None:
        """Keep the env, for the default script's public single-call model."""
        self._env = getattr(env, "unwrapped", env)

    def reset(self, seed: int | None = None) -> None:
        self.steps = 0

    def act(self, obs: str, info: dict[str, Any]) -> str:
        script = self.script
        if script is None:
            single = getattr(self._env, "single_call_model", None)
            if single is None:
                raise ConfigError(
                    "scripted-puppeteer without a script plays the env's single-call model, "
                    "but it was not bound to a Puppeteer env (bind(env)); pass script=[...] "
                    "(agent names) instead"
                )
            script = [f"{single()}:reasoning"]
        agent = script[self.steps] if self.steps < len(script) else "terminate"
        self.steps += 1
        return f"<agent>{agent}</agent>"
