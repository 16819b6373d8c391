"""Write ``deploy/<family>/openenv.yaml`` for each orchenv id family (OpenEnv 0.10 manifest,
``spec_version: 1``, ``runtime: fastapi``, a ``validation:`` block).

``floor_margin`` (OpenEnv: the gap the best trivial policy must leave below the maximum) is
the lower 95% bound of the smallest gameability gap among the family's ids in
``docs/audit_tables.md`` (``orchenv audit``, issue 25), read from that file, never typed
in; 0 where an interval reaches 0. ``tests/test_serve_deploy.py`` checks the files are
what this script writes and that OpenEnv's own manifest parser accepts them.

    python deploy/make_manifests.py
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "audit_tables.md"

#: family -> (ids, extras besides serve, declared reward range, one-line description)
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[float, float], str]] = {
    "mathroute": (
        ("orch/MathRoute-v0", "orch/MathRouteSystem2-v0"),
        (),
        (-1.0, 1.0),
        "seed 000 critique-and-routing controller over a math solver pool",
    ),
    "budgetroute": (
        ("orch/BudgetRoute-v0",),
        (),
        (-1.0, 1.0),
        "seed 001 CoRL: answer or consult paid experts under a dollar budget",
    ),
    "orchmas": (
        ("orch/OrchMAS-v0",),
        (),
        (-1.0, 1.0),
        "seed 002 OrchMAS: one executor with a free-form role per turn",
    ),
    "puppeteer": (
        ("orch/Puppeteer-v0",),
        (),
        (-1.0, 1.0),
        "seed 003 Puppeteer: name the next agent (model x reasoning pattern, tool, terminate)",
    ),
    "webshop": (
        ("orch/WebShop-v0",),
        ("webshop",),
        (0.0, 1.0),
        "seed 004 WebShop: search, browse, choose options and buy",
    ),
    "alfworld": (
        ("orch/ALFWorld-v0", "orch/ALFWorldRoles-v0"),
        ("alfworld",),
        (0.0, 1.0),
        "seed 004 ALFWorld household commands, and the role-routing controller",
    ),
    "multihopqa": (
        ("orch/MultihopQA-v0", "orch/MultihopQAFull-v0", "orch/MultihopQAStatic-v0"),
        (),
        (-1.0, 1.0),
        "seed 004 multihop QA over routed shared memory (PettingZoo seats: planner, searcher, "
        "recommender)",
    ),
}

_ROW = re.compile(
    r"^\| `(?P<id>orch/[^`]+)` \|.*?\| (?P<gap>-?[0-9.]+) \[(?P<lo>-?[0-9.]+), (?P<hi>-?[0-9.]+)\] vs"
)


def audit_gaps(text: str) -> dict[str, tuple[float, float, float]]:
    """env id -> (gap, low, high) from the summary table of docs/audit_tables.md."""
    out = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            out[match["id"]] = (float(match["gap"]), float(match["lo"]), float(match["hi"]))
    return out


def manifest(family: str, gaps: dict[str, tuple[float, float, float]]) -> str:
    ids, extras, (low, high), description = FAMILIES[family]
    missing = [i for i in ids if i not in gaps]
    if missing:
        raise SystemExit(f"{TABLE} has no gameability gap for {missing}")
    floor = max(0.0, min(gaps[i][1] for i in ids))
    data = {
        "spec_version": 1,
        "name": f"orchenv-{family}",
        "version": "0.1.0",
        "type": "space",
        "runtime": "fastapi",
        # uvicorn factory: the id and options come from `orchenv serve` (ORCHENV_SERVE_CONFIG)
        "app": "orchenv.serve.app:app_from_env",
        "port": 8000,
        "description": description,
        "orchenv": {
            "ids": list(ids),
            "install": f"pip install 'orchenv[{','.join(('serve', *extras))}]'",
            "serve": f"orchenv serve {ids[0]} --host 0.0.0.0 --port 8000",
            "gameability_gap": {
                i: {"gap": gaps[i][0], "ci95": [gaps[i][1], gaps[i][2]]} for i in ids
            },
            "gameability_source": "docs/audit_tables.md (orchenv audit)",
            "seats": family in {"multihopqa", "webshop", "alfworld"},
        },
        "validation": {
            "reward": {"range": [low, high], "oracle_tolerance": 0.0, "floor_margin": floor},
            "resources": {
                "cpu": 1.0,
                "memory_mb": 2048,
                "disk_mb": 2048,
                "episode_timeout_s": 300.0,
            },
            "capabilities": {
                "verifier": {"kind": "reward_channel"},
                "set_state": True,
                "task_api": True,
            },
            "types": {"tags": ["orchestration", "multi-agent", "text"]},
            "network": {"mode": "no-network"},
        },
    }
    header = (
        f"# OpenEnv manifest for orchenv's {family} family: written by deploy/make_manifests.py\n"
        "# from docs/audit_tables.md (floor_margin = the lowest 95% bound of the family's\n"
        "# gameability gaps); edit the script, not this file. Serving: docs/serve.md.\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, width=100)


def main() -> None:
    gaps = audit_gaps(TABLE.read_text(encoding="utf-8"))
    for family in FAMILIES:
        path = ROOT / "deploy" / family / "openenv.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(manifest(family, gaps), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
