"""Write verl parquet files of orchenv episodes (one row per task id).

    python examples/verl/build_dataset.py orch/MathRoute-v0 --out data/verl/mathroute
    python examples/verl/build_dataset.py orch/BudgetRoute-v0 --out data/verl/budgetroute

writes OUT_train.parquet and OUT_test.parquet (``--splits``), rows as
``orchenv.integrations.verl_data.verl_rows`` makes them (needs the ``data`` extra).
"""

from __future__ import annotations

import argparse
import json

from orchenv.integrations.verl_data import verl_rows, write_parquet


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("--out", required=True, help="path prefix of the parquet files")
    parser.add_argument("--splits", nargs="+", default=["train", "test"])
    parser.add_argument("--limit", type=int, default=None, help="tasks per split (default all)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object passed to gym.make")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split in args.splits:
        rows = verl_rows(
            args.env_id,
            split=split,
            n=args.limit,
            env_kwargs=json.loads(args.env_kwargs),
            seed=args.seed,
        )
        path = write_parquet(rows, f"{args.out}_{split}.parquet")
        print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    main()
