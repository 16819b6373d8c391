"""A verified submission end to end: evaluate, bundle, verify, tamper, build the board.

The same steps on the command line (docs/leaderboard.md):

    orchenv board key maintainer/board.key
    orchenv eval orch/MathRoute-v0 --controller random --episodes 50 --out runs/mine
    orchenv submit runs/mine --out bundles/mine
    orchenv verify bundles/mine --rerun --key maintainer/board.key
    orchenv leaderboard bundles/mine runs/other --key maintainer/board.key --out board
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import orchenv  # noqa: F401 - registers the envs
from orchenv.eval import EvalConfig, build_leaderboard, evaluate
from orchenv.verify import verify_bundle, write_bundle
from orchenv.verify.keys import read_key, write_key

ENV_ID = "orch/MathRoute-v0"

with tempfile.TemporaryDirectory() as tmp:
    root = Path(tmp)
    # 1. a run, and its bundle (a simulated pool: its calls are re-recorded from the simulator)
    evaluate(EvalConfig(ENV_ID, controller="random", episodes=50), root / "run", progress=False)
    bundle = write_bundle(root / "run", root / "bundle")

    # 2. verification re-executes the declared controller against the recording, re-derives
    #    every episode and signs the verdict with the maintainer's key (never in a bundle)
    key = read_key(write_key(root / "maintainer" / "board.key"))
    report = verify_bundle(bundle, oracle_episodes=20, rerun=True, key=key)
    lo, hi = report.score["accuracy_ci95"]
    print(
        f"honest bundle: {report.verdict}, accuracy {report.score['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]"
    )
    print(f"  execution: {report.execution}")
    print(f"  env gameability gap (orchenv audit): {report.audit['gameability_gap']}")

    # 3. a tampered copy: a cheaper price for the strongest agent, written into the pool file
    tampered = root / "tampered"
    shutil.copytree(bundle, tampered)
    pool = json.loads((tampered / "pool.json").read_text())
    strongest = pool["agents"][-1]
    strongest.pop("price", None)
    strongest.update(price_prompt=0.01, price_completion=0.01)
    (tampered / "pool.json").write_text(json.dumps(pool))
    bad = verify_bundle(tampered, oracle_episodes=0)
    print(f"tampered bundle: {bad.verdict}")
    for check in bad.failures():
        print(f"  {check.name}: {check.reason[:150]}")

    # 4. the board trusts verdicts signed with its key: the re-executed bundle is ranked and
    #    linked (by the env's primary metric, the return), the plain run listed apart
    evaluate(
        EvalConfig(ENV_ID, controller="single", controller_kwargs={"agent": 2}, episodes=50),
        root / "other",
        progress=False,
    )
    board = build_leaderboard([bundle, root / "other"], root / "board", plots=False, key=key)
    for row in board.rows:
        rank = row.rank if row.rank is not None else "-"
        print(
            f"  #{rank} {row.controller:<22} {row.verification:<10} {row.metric} "
            f"{row.primary:.3f} [{row.primary_low:.3f}, {row.primary_high:.3f}], "
            f"accuracy {row.accuracy:.3f}"
        )
