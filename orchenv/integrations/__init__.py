"""Adapters that hand orchenv environments to existing RL training engines.

- ``orchenv.integrations.episode``: what every adapter shares, written by hand because no
  maintained library turns a multi-turn Gymnasium text env into one token sequence with a
  loss mask: chat template, the env's text as masked tokens, per-turn rewards folded into
  one trajectory reward, episode metrics.
- ``orchenv.integrations.trl``: a ``rollout_func`` for TRL's ``GRPOTrainer``.
- ``orchenv.integrations.verl``: an agent loop for verl (``verl.experimental.agent_loop``).

Core modules: they reach envs only through ``gymnasium.make`` with a registered id.
"""
