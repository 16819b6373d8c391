"""Seed 004 (RCR-Router) multihop QA: ``orch/MultihopQA-v0`` (+ Full / Static routing).

- ``env``: the team's rules (``MultihopQAGame``), the Gymnasium view (``MultihopQAEnv``),
  the PettingZoo views and ``run_team`` (every role played by pool agents);
- ``metrics``: appendix A's metrics and the judge's Answer Quality Score;
- ``agents``: the simulated role agents;
- ``search``: the Searcher's tool, BM25 over a task's paragraphs;
- ``world`` and ``synth``: the synthetic knowledge base and its questions
  (``SyntheticMultihopSource``, task source ``"multihop-synth"``);
- ``loaders``: HotpotQA, MuSiQue and 2WikiMultihopQA (task source ``"multihop-file"``).
"""

from orchenv.envs.multihopqa.env import MultihopQAEnv

__all__ = ["MultihopQAEnv"]
