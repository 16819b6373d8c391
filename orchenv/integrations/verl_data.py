"""verl dataset rows (parquet) for orchenv episodes; needs neither verl nor torch.

verl's ``RLHFDataset`` reads a ``prompt`` column (chat messages) and passes every other
column to the agent loop. Each row here is one episode of a registered env: the prompt is
the env's first-turn ``info["messages"]`` (so verl's prompt-length filter sees the real
prompt), ``agent_name`` selects ``orchenv.integrations.verl``'s loop, and
``extra_info["orch"]`` says how to rebuild the episode: env id, ``env_kwargs`` and
``reset_options`` as JSON strings (a fixed parquet schema whatever the env takes), split,
task id and reset seed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchenv.error import require
from orchenv.integrations.episode import make_env, parse_env_kwargs, reset_env

#: ``info`` keys copied into a row's reset options, so a re-run draws the same episode
PINNED_INFO = ("budget_mode",)
AGENT_NAME = "orchenv"  # orchenv.integrations.verl.AGENT_NAME (that module needs verl)


def verl_rows(
    env_id: str,
    *,
    split: str = "train",
    n: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per task of ``split`` (the first ``n``; None: all), reset with seed
    ``seed + i``; ``env_kwargs`` must be JSON-serialisable (preset names, file paths)."""
    kwargs = {**parse_env_kwargs(dict(env_kwargs or {})), "split": split}
    encoded = json.dumps({k: v for k, v in kwargs.items() if k != "split"}, sort_keys=True)
    env = make_env(env_id, kwargs)
    try:
        source = env.unwrapped.task_source
        total = source.size(split)
        count = total if n is None else min(n, total)
        rows = []
        for i in range(count):
            task = source.get(split, i)
            info = reset_env(env, seed=seed + i, task_id=task.id)
            pinned = {k: info[k] for k in PINNED_INFO if info.get(k) is not None}
            rows.append(
                {
                    "data_source": env_id,
                    "prompt": [dict(m) for m in info["messages"]],
                    "agent_name": AGENT_NAME,
                    "ability": "orchestration",
                    "reward_model": {"style": "env", "ground_truth": str(task.answer or "")},
                    "extra_info": {
                        "index": i,
                        "orch": {
                            "env_id": env_id,
                            "env_kwargs": encoded,
                            "split": split,
                            "task_id": str(task.id),
                            "seed": seed + i,
                            "reset_options": json.dumps(pinned, sort_keys=True),
                        },
                    },
                }
            )
    finally:
        env.close()
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as verl reads them (pandas + pyarrow, the ``data`` extra)."""
    pandas = require("pandas", "data", "writing verl parquet files")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pandas.DataFrame(rows).to_parquet(out)
    return out
