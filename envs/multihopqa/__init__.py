"""Seed 004 (RCR-Router) multihop QA: ``orch/MultihopQA-v0`` (+ Full / Static routing), its
synthetic knowledge base and loaders, and its simulated role agents."""

from orchenv.envs.multihopqa.env import MultihopQAEnv

__all__ = ["MultihopQAEnv"]
