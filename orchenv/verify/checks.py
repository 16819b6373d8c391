"""``orchenv verify BUNDLE``: re-derive a submitted run's score and cost, check its integrity.

Written by hand (no library verifies orchestration-env submissions). Every check ends in a
verdict: ``pass``, ``fail`` (the bundle is not verified), ``warn`` (shown beside the score,
does not block) or ``not checked`` (named with why: e.g. no local tokenizer). Nothing the run
computed is trusted: the replay (``orchenv.verify.replay``) re-derives each episode from the
env, the submitted actions and the recorded answers, and every claimed number is compared
with the re-derived one.

Checks, in order:

``bundle``           the manifest's file digests match the files (edits after submission)
``files``            run.json, episodes.jsonl (line digests) and summary.json pass
                     ``orchenv.schema`` (finite numbers only: a NaN or Infinity is refused)
``plan``             every (seed, episode) of the declared plan is there exactly once, no
                     other; episode seeds match; in play order where the env carries state
``privileged``       a controller that reads ground truth is declared privileged
``prices``           every agent's price is orchenv's table price for its model; models the
                     table does not price are named; entries retrieved more than
                     ``STALE_DAYS`` from the run's date are named as out of date
``replay``           each episode replays to the submitted outcome (correct, score, reward,
                     turns, final answer, invalid actions, agent calls)
``split``            each episode's task is the one the declared split gives at its seed
``recorded_answers`` deterministic (simulated) agents: each recorded answer and its token
                     counts are what the backend gives for that request
``requests``         every call the replay makes is in the recording with the same prompt
                     hash, agent and model; recorded calls the replay never makes are counted
``cost``             each episode's cost equals its recorded server tokens x table prices
``tokens``           each episode's tokens equal the sum of its recorded calls
``summary``          summary.json's pooled numbers equal the re-derived ones
``tokenizer``        completion tokens re-counted with the model's ``tokenizer.json`` when one
                     is in a local model folder or the Hugging Face cache (else ``not
                     checked``; nothing is downloaded)
statistical checks (no re-run; each threshold and its reason is in ``THRESHOLDS``):
``outcome_alignment``  verdict informedness (Youden's J) vs the same controller on another split
``oracle``             claimed-correct episodes the per-query oracle cannot solve
``constant_tokens``    identical token counts across different prompts
``cost_floor``         recorded call costs below the price table's floor
``audit``              the env's gameability gap from ``orchenv audit`` (information)

Output: ``verified.json`` (every verdict, the re-derived score with its 95% interval, the
audit gap, the digests of the files verified, and a sha256 over all of it: a seal against
later edits, not a cryptographic signature) and ``verification.md`` (the same, for people).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import orchenv
from orchenv.error import DataError, OrchEnvError
from orchenv.runner import wilson_interval
from orchenv.verify.bundle import (
    CALLS,
    FORMAT,
    MANIFEST,
    MAX_FILE_BYTES,
    POOL,
    REFERENCE,
    RUN_FIELDS,
    RUN_FILES,
    bad_files,
    digest_files,
    file_digests,
    live_agents,
    plan_order,
)
from orchenv.verify.replay import (
    DETERMINISTIC_BACKENDS,
    LIVE_BACKENDS,
    CallStats,
    CheckingBackend,
    Problems,
    ReplayedEpisode,
    build_pool,
    env_pool_env,
    episode_diffs,
    make_replay_env,
    replay_episodes,
)

logger = logging.getLogger(__name__)

VERIFIED_FILE = "verified.json"
REPORT_FILE = "verification.md"
VERIFICATION_FORMAT = "orchenv-verification"
PASS, FAIL, WARN, NOT_CHECKED, INFO = "pass", "fail", "warn", "not checked", "info"

#: price entries retrieved this many days from the run's date are named as out of date
STALE_DAYS = 183

THRESHOLDS: dict[str, tuple[float, str]] = {
    "outcome_alignment_margin": (
        0.05,
        "A controller does not know which split it plays, so on two splits drawn from the same "
        "generator its verdicts are as informed about the answer key (Youden's J: acceptance "
        "of right drafts + rejection of wrong ones - 1, which does not move with the share of "
        "right drafts) up to sampling noise. Flagged when the 95% (MOVER) interval of (J on "
        "the submitted split - J on the reference split) lies wholly above this margin, the "
        "audit's 0.05 tolerance.",
    ),
    "oracle_episodes": (
        200,
        "How many episodes the per-query oracle is searched on (exhaustively; it needs every "
        "agent's answer to every branch, so only deterministic pools). Any claimed-correct "
        "episode on a task no sequence of choices solves is impossible: zero tolerance.",
    ),
    "oracle_seconds": (
        20.0,
        "Wall-clock budget of the per-query oracle search. Its search is exhaustive, so its time "
        "grows with the branching of the env (OrchMAS enumerates every role sequence): past the "
        "budget it stops and says 'not checked' for the episodes it did not reach, instead of "
        "holding verification for minutes. Impossible episodes found within the budget still "
        "fail the bundle.",
    ),
    "constant_tokens_share": (
        0.5,
        "Token counts depend on the prompt and the answer; one (prompt, completion) token pair "
        "covering more than half of the calls with different prompts is what self-reported "
        "constant counts look like (RouterArena PR #191).",
    ),
    "constant_tokens_min_prompts": (
        20,
        "Below this many distinct prompts a repeated count can be chance: not judged.",
    ),
    "tokenizer_tolerance": (
        0.05,
        "A server's completion count may include an end-of-turn token or two: counts are "
        "flagged when they differ from the tokenizer's by more than max(2 tokens, 5%); the "
        "check fails when more than 5% of the checked calls disagree.",
    ),
}


@dataclass
class Check:
    name: str
    verdict: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class VerifyReport:
    bundle: str
    verdict: str  # "verified" or "failed"
    checks: list[Check]
    score: dict[str, Any]
    audit: dict[str, Any]
    files: dict[str, str]
    bundle_sha256: str | None
    run: dict[str, Any]
    seconds: float
    #: "re-executed" (the registered controller replayed every submitted action: ranked on a
    #: board) or "replay only" (the log is consistent; listed as such, never ranked)
    execution: str = "replay only"

    @property
    def verified(self) -> bool:
        return self.verdict == "verified"

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == FAIL]

    def to_dict(self, key: bytes | None = None) -> dict[str, Any]:
        """The verdict as written to verified.json; signed with the board's ``key``
        (HMAC-SHA256, ``orchenv.verify.keys``) when one is given."""
        body = {
            "format": VERIFICATION_FORMAT,
            "version": 1,
            "orchenv": orchenv.__version__,
            "verified_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "bundle": self.bundle,
            "verdict": self.verdict,
            "execution": self.execution,
            "run": self.run,
            "score": self.score,
            "audit": self.audit,
            "files": self.files,
            "bundle_sha256": self.bundle_sha256,
            "seconds": round(self.seconds, 3),
            "thresholds": {k: {"value": v, "why": why} for k, (v, why) in THRESHOLDS.items()},
            "checks": [asdict(c) for c in self.checks],
        }
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
        body["seal_sha256"] = hashlib.sha256(canon.encode()).hexdigest()
        if key is not None:
            from orchenv.verify.keys import SIGNATURE, sign

            body[SIGNATURE] = sign(body, key)
        return body


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


# -- reading the bundle -------------------------------------------------------------------------
def _read_manifest(root: Path) -> dict[str, Any]:
    from orchenv.eval.harness import read_json_file

    path = root / MANIFEST
    if not path.is_file():
        raise DataError(
            f"{path} does not exist: {root} is not a submission bundle (make one with "
            "`orchenv submit RUN_DIR --out BUNDLE`)"
        )
    manifest = read_json_file(path)
    if manifest.get("format") != FORMAT:
        raise DataError(f"{path}: format is {manifest.get('format')!r}, not {FORMAT!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise DataError(f"{path}: 'files' must map file names to sha256 digests")
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts:
            raise DataError(f"{path}: file name {name!r} points outside the bundle")
    return manifest


def _load_store(path: Path) -> tuple[Any, list[dict[str, Any]]]:
    from orchenv.backends.replay import iter_records, key_from_fields
    from orchenv.backends.store import OccurrenceStore
    from orchenv.eval.rundir import check_regular

    store = OccurrenceStore()
    records: list[dict[str, Any]] = []
    try:  # a FIFO, symlink or oversize file is refused before it is opened
        if check_regular(path, MAX_FILE_BYTES) == 0:
            return store, records
    except FileNotFoundError:
        return store, records
    for record in iter_records(path):
        key = key_from_fields(
            record["task_id"], record["agent"], record.get("prompt_sha256"), record["turn"]
        )
        record["_key"] = key
        if store.load(key, record):
            records.append(record)
    return store, records


# -- prices -------------------------------------------------------------------------------------
_RETRIEVED = re.compile(r"retrieved (\d{4})-(\d{2})(?:-(\d{2}))?")


def _retrieved(source: str) -> date | None:
    m = _RETRIEVED.search(source)
    if not m:
        return None
    return date(int(m.group(1)), int(m.group(2)), int(m.group(3) or 15))


def _check_prices(
    pool_doc: Mapping[str, Any], run_date: str | None, pool_source: str = "document"
) -> tuple[Check, dict[str, tuple[float, float] | None]]:
    """Each agent's table price (or None: unpriced) and the ``prices`` verdict."""
    from orchenv.pricing import price_table

    table = price_table()
    by_model: dict[str, Any] = {}
    for known in table.values():
        by_model.setdefault(known.model, known)
    prices: dict[str, tuple[float, float] | None] = {}
    fails, warns, used = [], [], {}
    try:
        when = date.fromisoformat(str(run_date)[:10]) if run_date else None
    except ValueError:
        when = None
    for agent in pool_doc.get("agents", []):
        name, model = str(agent.get("name")), str(agent.get("model"))
        key = agent.get("price")
        entry: Any = None
        if isinstance(key, str):
            entry = table.get(key)
            if entry is None:
                fails.append(f"agent {name!r}: price key {key!r} is not in orchenv's price table")
            elif entry.model != model:
                fails.append(
                    f"agent {name!r} is model {model!r} but its price key {key!r} prices "
                    f"{entry.model!r}: a price key must name the agent's own model"
                )
        else:
            entry = by_model.get(model)
        explicit = ("price_prompt" in agent) or ("price_completion" in agent) or key is None
        if entry is None:
            prices[name] = None
            if key is None:
                warns.append(
                    f"model {model!r} (agent {name!r}) is not priced by orchenv's table; "
                    + (
                        "the env's own price for the agent is used"
                        if pool_source == "env"
                        else "its recorded costs are used as submitted"
                    )
                )
            continue
        prices[name] = (entry.prompt, entry.completion)
        used[name] = {"key": entry.key, "prompt": entry.prompt, "completion": entry.completion}
        if explicit:
            pp = float(agent.get("price_prompt", 0.0))
            pc = float(agent.get("price_completion", 0.0))
            if not (_close(pp, entry.prompt) and _close(pc, entry.completion)):
                fails.append(
                    f"agent {name!r} (model {model!r}) is priced ${pp:g} / ${pc:g} per 1M "
                    f"tokens in the bundle, but orchenv's table says ${entry.prompt:g} / "
                    f"${entry.completion:g} ({entry.key}: {entry.source[:120]})"
                )
        got = _retrieved(entry.source)
        if when is not None and got is not None and abs((when - got).days) > STALE_DAYS:
            warns.append(
                f"price of {model!r} was retrieved {got:%Y-%m}, {abs((when - got).days)} days "
                f"from the run's date {when}: out of date for this run"
            )
        elif got is None:
            warns.append(f"price of {model!r} names no retrieval date")
    details = {"prices": used, "run_date": run_date, "problems": fails + warns}
    if fails:
        return Check(
            "prices",
            FAIL,
            fails[0] + (f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""),
            details,
        ), prices
    if warns:
        return Check("prices", WARN, "; ".join(warns[:3]), details), prices
    return Check("prices", PASS, "every agent is priced at orchenv's table price", details), prices


# -- privileged controllers ---------------------------------------------------------------------
def _check_privileged(run: Mapping[str, Any]) -> Check:
    from orchenv.controllers import CONTROLLERS

    name = str(run.get("controller"))
    declared = bool(run.get("privileged", False))
    try:
        cls = CONTROLLERS.resolve(name)
    except (OrchEnvError, ImportError, AttributeError):
        return Check(
            "privileged",
            NOT_CHECKED if not declared else PASS,
            f"controller {name!r} is not registered in this orchenv, so whether it reads ground "
            "truth cannot be checked; the statistical checks below apply",
            {"declared": declared},
        )
    privileged = bool(getattr(cls, "privileged", False))
    if not privileged:  # it can also be set per instance (e.g. a verifier mode)
        try:
            from orchenv.controllers import make_controller

            kwargs = dict(run.get("controller_kwargs") or {})
            import inspect

            if "seed" in inspect.signature(cls).parameters:
                kwargs["seed"] = 0
            privileged = bool(getattr(make_controller(name, **kwargs), "privileged", False))
        except Exception as exc:  # noqa: BLE001 - building may need a model; the class says no
            logger.debug("could not build %s to read privileged: %s", name, exc)
    details = {"declared": declared, "controller_reads_ground_truth": privileged}
    if privileged and not declared:
        return Check(
            "privileged",
            FAIL,
            f"controller {name!r} reads ground truth (privileged) but the run declares "
            "privileged: false; it must be listed apart, never ranked",
            details,
        )
    if privileged:
        return Check(
            "privileged", PASS, f"{name!r} is privileged and declared so (listed apart)", details
        )
    return Check("privileged", PASS, f"{name!r} does not read ground truth", details)


# -- audit gap ---------------------------------------------------------------------------------
def audit_gap(env_id: str, audit_file: str | Path | None = None) -> dict[str, Any]:
    """The env's gameability gap from ``orchenv audit``: an audit report JSON when given,
    else the row of ``docs/audit_tables.md`` in this checkout."""
    if audit_file is not None:
        from orchenv.audit import AuditReport

        report = AuditReport.from_json(Path(audit_file).read_text(encoding="utf-8"))
        return {"gameability_gap": report.gameability_gap, "source": str(audit_file)}
    docs = Path(orchenv.__file__).resolve().parents[1] / "docs" / "audit_tables.md"
    if docs.is_file():
        for line in docs.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] == f"`{env_id}`" and len(cells) >= 9:
                return {
                    "gameability_gap": cells[8],
                    "flagged": cells[9] if len(cells) > 9 else "",
                    "source": "docs/audit_tables.md",
                }
    return {"gameability_gap": None, "source": f"not available: run `orchenv audit {env_id}`"}


# -- statistics ---------------------------------------------------------------------------------
def informedness(
    accepted_right: int, right: int, rejected_wrong: int, wrong: int
) -> tuple[float, float, float]:
    """Youden's J of verdicts (acceptance rate of right drafts + rejection rate of wrong
    drafts - 1) with its 95% interval by MOVER (Zou & Donner) from the two Wilson intervals.
    J is 0 for any truth-blind verdict rule and 1 for verdicts that follow the key, whatever
    the share of right drafts (raw agreement is not: always accepting agrees with the key as
    often as drafts are right, which differs between splits)."""
    tpr, tnr = accepted_right / right, rejected_wrong / wrong
    l1, u1 = wilson_interval(accepted_right, right)
    l2, u2 = wilson_interval(rejected_wrong, wrong)
    j = tpr + tnr - 1
    return j, j - math.hypot(tpr - l1, tnr - l2), j + math.hypot(u1 - tpr, u2 - tnr)


def difference(
    a: tuple[float, float, float], b: tuple[float, float, float]
) -> tuple[float, float, float]:
    """a - b with its 95% MOVER interval, from two (estimate, low, high) triples."""
    d = a[0] - b[0]
    return d, d - math.hypot(a[0] - a[1], b[2] - b[0]), d + math.hypot(a[2] - a[0], b[0] - b[1])


def _verdict_counts(eps: Sequence[ReplayedEpisode]) -> tuple[int, int, int, int]:
    return (
        sum(e.accepted_right for e in eps),
        sum(e.right_drafts for e in eps),
        sum(e.rejected_wrong for e in eps),
        sum(e.wrong_drafts for e in eps),
    )


def _alignment(main: list[ReplayedEpisode], ref: list[ReplayedEpisode] | None) -> Check:
    name = "outcome_alignment"
    counts = _verdict_counts(main)
    if counts[1] == 0 or counts[3] == 0:
        return Check(
            name,
            NOT_CHECKED,
            "not applicable: the env reports no verdicts on both right and wrong drafts "
            f"({counts[1]} right, {counts[3]} wrong)",
        )
    j = informedness(*counts)
    details: dict[str, Any] = {"informedness": list(j), "verdicts": list(counts)}
    text = (
        f"verdict informedness (Youden's J vs the answer key) {j[0]:.3f} [{j[1]:.3f}, "
        f"{j[2]:.3f}] over {counts[1] + counts[3]} verdicts"
    )
    if ref is None:
        return Check(
            name,
            NOT_CHECKED,
            text + "; no reference run on another split in the bundle (`orchenv submit "
            "--reference RUN_DIR`), so nothing to compare with",
            details,
        )
    ref_counts = _verdict_counts(ref)
    if ref_counts[1] == 0 or ref_counts[3] == 0:
        return Check(name, NOT_CHECKED, text + "; the reference run lacks verdicts", details)
    k = informedness(*ref_counts)
    d = difference(j, k)
    margin = float(THRESHOLDS["outcome_alignment_margin"][0])
    details.update({"reference_informedness": list(k), "difference": list(d)})
    text += (
        f" on the submitted split, {k[0]:.3f} [{k[1]:.3f}, {k[2]:.3f}] on the reference split: "
        f"difference {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"
    )
    if d[1] > margin:
        return Check(
            name,
            FAIL,
            text + f", wholly above the {margin} margin: choices agree with the answer key "
            "beyond what the same controller does on another split (aligned after the fact?)",
            details,
        )
    return Check(name, PASS, text + f"; not above the {margin} margin", details)


def constant_tokens_check(records: Sequence[Mapping[str, Any]]) -> Check:
    first: dict[str, tuple[int, int]] = {}
    for r in records:
        h = r.get("prompt_sha256") or r["_key"]
        c = r["completion"]
        first.setdefault(h, (int(c["prompt_tokens"]), int(c["completion_tokens"])))
    need = int(THRESHOLDS["constant_tokens_min_prompts"][0])
    if len(first) < need:
        return Check(
            "constant_tokens", NOT_CHECKED, f"{len(first)} distinct prompts (< {need}): not judged"
        )
    pair, count = Counter(first.values()).most_common(1)[0]
    share = count / len(first)
    limit = float(THRESHOLDS["constant_tokens_share"][0])
    details = {"distinct_prompts": len(first), "most_common": list(pair), "share": share}
    if share > limit:
        return Check(
            "constant_tokens",
            FAIL,
            f"{count} of {len(first)} different prompts ({share:.0%}) report the same token "
            f"counts {pair[0]} + {pair[1]}: counts fixed at a constant, not metered",
            details,
        )
    return Check(
        "constant_tokens",
        PASS,
        f"most common token pair covers {share:.0%} of {len(first)} prompts",
        details,
    )


def _guarded_pool(
    run: Mapping[str, Any], pool_doc: Mapping[str, Any]
) -> tuple[Check, dict[str, tuple[float, float] | None]]:
    """For a pool the env builds in code: the bundle's pool.json must describe that pool (its
    agents, models, prices and backends), and its prices are orchenv's own."""
    try:
        env, pool = env_pool_env(run)
        env.close()
    except (OrchEnvError, OSError, ValueError, TypeError) as exc:
        return Check("pool", FAIL, f"the env cannot build the run's pool: {exc}"), {}
    own = {a.name: (a.price_prompt, a.price_completion) for a in pool.agents}
    keys = ("name", "model", "price_prompt", "price_completion", "backend")
    built = {a.name: tuple(getattr(a, k) for k in keys) for a in pool.agents}
    doc = {str(a.get("name")): tuple(a.get(k) for k in keys) for a in pool_doc.get("agents", [])}
    diffs = [n for n in sorted(set(built) | set(doc)) if built.get(n) != doc.get(n)]
    if diffs:
        return (
            Check(
                "pool",
                FAIL,
                f"pool.json differs from the pool {run.get('env_id')} builds for agent(s) "
                f"{', '.join(diffs[:5])} (model, price or backend)",
            ),
            dict(own),
        )
    return Check("pool", PASS, f"pool.json is the pool {run.get('env_id')} builds"), dict(own)


def _preset_pool(run: Mapping[str, Any], pool_doc: Mapping[str, Any]) -> Check:
    """pool.json must be the preset run.json names (with the run's ``-e backend=`` override,
    as ``orchenv submit`` writes it): weak agents given a strong agent's accuracy, or any
    other edit, is refused. A pool file that is not a shipped preset cannot be vouched for:
    ``warn`` (the board keeps such runs in their own group)."""
    from orchenv.pool import check_pool_data, list_presets, load_preset_data

    name = run.get("pool")
    if not isinstance(name, str) or name not in list_presets():
        return Check(
            "pool",
            WARN,
            f"the run's pool {str(name)[:200]!r} is not a shipped preset, so pool.json cannot be "
            "compared with it; the board groups it apart from preset runs",
        )
    data = dict(load_preset_data(name))
    env_kwargs = run.get("env_kwargs") or {}
    backend = env_kwargs.get("backend") if isinstance(env_kwargs, Mapping) else None
    if isinstance(backend, str):
        data["agents"] = [{**a, "backend": backend} for a in data["agents"]]
    want = check_pool_data(data, f"pool preset {name!r}")
    if want == dict(pool_doc):
        return Check("pool", PASS, f"pool.json is the preset {name!r}")
    have = {str(a.get("name")): a for a in pool_doc.get("agents", [])}
    wanted = {str(a.get("name")): a for a in want["agents"]}
    diffs = [n for n in sorted(set(have) | set(wanted)) if have.get(n) != wanted.get(n)]
    where = f"agent(s) {', '.join(diffs[:5])}" if diffs else "its fields outside the agents list"
    return Check(
        "pool",
        FAIL,
        f"pool.json differs from the preset {name!r} that run.json names, in {where}: a "
        "submission plays the named preset, unchanged",
        {"agents": diffs},
    )


def _guarded(name: str, run_check: Any) -> Check:
    """``run_check()``, or ``not checked`` with the reason when the check itself cannot run
    on this bundle (the verifier reports, it does not crash)."""
    try:
        return run_check()  # type: ignore[no-any-return]
    except (OrchEnvError, OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        return Check(name, NOT_CHECKED, f"could not run: {type(exc).__name__}: {str(exc)[:300]}")


class _OutOfBudget(Exception):
    """The oracle search ran past ``oracle_seconds``."""


def _oracle(
    rows: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    pool_doc: Mapping[str, Any],
    limit: int,
    pool_source: str = "document",
    seconds: float | None = None,
) -> Check:
    from orchenv.discrete import available, current_choices
    from orchenv.eval.harness import episode_seed
    from orchenv.pool import make_pool

    live = live_agents(pool_doc, pool_source)
    if live:
        return Check(
            "oracle",
            NOT_CHECKED,
            f"agents {', '.join(map(str, live))} are live: the oracle needs every agent's "
            "answer on every branch",
        )
    import tempfile

    env_kwargs = dict(run.get("env_kwargs") or {})
    if pool_source == "env":
        env, _ = env_pool_env(run)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pool.json"
            path.write_text(json.dumps(pool_doc), encoding="utf-8")
            pool = make_pool(path, backend_kwargs=env_kwargs.get("backend_kwargs") or {})
        env = make_replay_env(str(run["env_id"]), env_kwargs, pool, run.get("split"))
    try:
        base = env.unwrapped
        if not hasattr(base, "action_choices") or not callable(getattr(base, "fork", None)):
            return Check("oracle", NOT_CHECKED, "the env has no discrete action set to search")
        getter = getattr(base, "lifetime_state", None)
        env.reset(seed=0)
        if callable(getter) and getter() is not None:
            return Check(
                "oracle",
                NOT_CHECKED,
                "the env carries state across episodes (budgets): per-query search does not apply",
            )

        budget = float(THRESHOLDS["oracle_seconds"][0]) if seconds is None else seconds
        deadline = time.perf_counter() + budget

        def solvable(node: Any, depth: int = 0) -> bool:
            if time.perf_counter() > deadline:
                raise _OutOfBudget
            choices = current_choices(node)
            for k in available(choices):
                child = node.fork()
                _, _, term, trunc, info = child.step(choices[k])
                if term or trunc:
                    if info.get("correct"):
                        return True
                elif depth < 32 and solvable(child, depth + 1):
                    return True
            return False

        checked = solved = impossible = 0
        out_of_budget = False
        examples: list[str] = []
        for row in list(rows)[:limit]:
            env.reset(seed=episode_seed(int(row["seed"]), int(row["episode"])))
            try:
                ok = solvable(base)
            except _OutOfBudget:
                out_of_budget = True
                break
            checked += 1
            solved += ok
            if row.get("correct") and not ok:
                impossible += 1
                if len(examples) < 5:
                    examples.append(
                        f"seed {row['seed']} episode {row['episode']} ({row.get('task_id')})"
                    )
    except (OrchEnvError, NotImplementedError, ValueError, TypeError, RecursionError) as exc:
        return Check("oracle", NOT_CHECKED, f"the oracle search failed: {exc}")
    finally:
        env.close()
    claimed = sum(bool(r.get("correct")) for r in list(rows)[:checked])
    lo, hi = wilson_interval(solved, checked) if checked else (0.0, 1.0)
    wanted = min(limit, len(rows))
    details = {
        "episodes": checked,
        "episodes_wanted": wanted,
        "out_of_budget": out_of_budget,
        "oracle_accuracy": solved / checked if checked else 0.0,
        "oracle_ci95": [lo, hi],
        "claimed_correct": claimed,
        "impossible": impossible,
    }
    if impossible:
        return Check(
            "oracle",
            FAIL,
            f"{impossible} claimed-correct episode(s) are on tasks no sequence of choices solves "
            f"(e.g. {examples[0]}): accuracy {claimed}/{checked} above the per-query oracle's "
            f"{solved}/{checked}",
            details,
        )
    if out_of_budget:
        return Check(
            "oracle",
            NOT_CHECKED,
            f"not checked past its {budget:g} s budget: searched {checked} of {wanted} "
            f"episodes (none impossible; claimed {claimed}/{checked} correct, oracle "
            f"{solved}/{checked}); the other {wanted - checked} are not checked",
            details,
        )
    return Check(
        "oracle",
        PASS,
        f"claimed {claimed}/{checked} correct, per-query oracle {solved}/{checked} on the first {checked} episodes",
        details,
    )


def tokenizer_check(records: Sequence[Mapping[str, Any]], specs: Sequence[Any]) -> Check:
    """Re-count each server-metered completion with its model's ``tokenizer.json`` (the
    ``tokenizers`` library; a local model folder or the Hugging Face cache, never a
    download) and flag counts off by more than ``tokenizer_tolerance``."""
    name = "tokenizer"
    server = [r for r in records if r["completion"].get("token_source") == "server"]
    if not server:
        return Check(name, NOT_CHECKED, "no call has server-reported token counts to re-count")
    model_of = {s.name: s.model for s in specs}
    files = {m: _tokenizer_file(m) for m in set(model_of.values())}
    missing = sorted(m for m, f in files.items() if f is None)
    if len(missing) == len(files):
        return Check(
            name,
            NOT_CHECKED,
            f"no tokenizer.json for {', '.join(missing)} in a local model folder or the "
            "Hugging Face cache: not checked",
            {"no_local_tokenizer": missing},
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Check(name, NOT_CHECKED, "the tokenizers library is not installed")
    loaded: dict[str, Any] = {}
    checked = disagree = 0
    examples: list[str] = []
    tol = float(THRESHOLDS["tokenizer_tolerance"][0])
    for r in server:
        model = model_of.get(r["agent"])
        path = files.get(model) if model is not None else None
        if model is None or path is None:
            continue
        if model not in loaded:
            try:
                loaded[model] = Tokenizer.from_file(str(path))
            except Exception as exc:  # noqa: BLE001 - a damaged file: named, not fatal
                files[model] = None
                missing.append(f"{model} (unreadable: {str(exc)[:80]})")
                continue
        c = r["completion"]
        n = len(loaded[model].encode(c["text"], add_special_tokens=False).ids)
        checked += 1
        if abs(n - int(c["completion_tokens"])) > max(2, tol * n):
            disagree += 1
            if len(examples) < 3:
                examples.append(
                    f"{r['agent']} on {r['task_id']}: server {c['completion_tokens']}, "
                    f"tokenizer {n}"
                )
    details = {"checked": checked, "disagree": disagree, "no_local_tokenizer": missing}
    if not checked:
        return Check(name, NOT_CHECKED, "no tokenizer could count any call", details)
    if disagree > tol * checked:
        return Check(
            name,
            FAIL,
            f"{disagree} of {checked} server completion counts disagree with the model's "
            f"tokenizer by more than max(2, {tol:.0%}) (e.g. {examples[0]})",
            details,
        )
    extra = f"; not checked for {', '.join(missing)} (no local tokenizer)" if missing else ""
    return Check(name, PASS, f"{checked - disagree} of {checked} counts agree{extra}", details)


def _tokenizer_file(model: str) -> Path | None:
    """``model``'s ``tokenizer.json``: in a local model folder, or in the Hugging Face cache
    (looked up without a download)."""
    local = Path(model) / "tokenizer.json"
    try:
        if local.is_file():
            return local
    except OSError:
        pass
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model, "tokenizer.json")
    except Exception:  # noqa: BLE001 - a malformed repo id is simply not cached
        return None
    return Path(found) if isinstance(found, str) else None


# -- the verifier -------------------------------------------------------------------------------
def _problem_check(name: str, problems: Problems, kinds: tuple[str, ...], ok: str) -> Check:
    n = problems.total(*kinds)
    if n:
        first = problems.first(*kinds)
        return Check(
            name, FAIL, f"{n} problem(s); first: {first[0]}", {"count": n, "examples": first}
        )
    return Check(name, PASS, ok)


def _replay_part(
    root: Path,
    run: Mapping[str, Any],
    rows: list[dict[str, Any]],
    pool_doc: Mapping[str, Any],
    prices: Mapping[str, tuple[float, float] | None],
    pool_source: str = "document",
    rerun: tuple[str, dict[str, Any]] | None = None,
) -> tuple[list[ReplayedEpisode], Problems, CallStats, list[dict[str, Any]], list[Any]]:
    """Replay ``rows`` against ``root``'s recording. A pool document is rebuilt with every
    backend answering from the recording; a pool the env builds is the env's own, its
    backends wrapped the same way (its deterministic ones kept to re-derive answers)."""
    from orchenv.eval.harness import episode_seed
    from orchenv.pool import make_backend

    store, records = _load_store(root / CALLS)
    problems, stats = Problems(), CallStats()
    env_kwargs = dict(run.get("env_kwargs") or {})
    backend = CheckingBackend(store, prices, {}, problems, stats)
    override = (env_kwargs.get("backend_kwargs") or {}).get("model")
    if isinstance(override, str):
        backend.model_overrides.append(override)
    if pool_source == "env":
        env, pool = env_pool_env(run)

        def wrap(name: str, original: Any) -> Any:
            if name not in LIVE_BACKENDS:
                backend.simulators[name] = original
            return backend

        if pool.agents:  # an env whose learner acts alone (WebShop) has nothing to wrap
            pool.wrap_backends(wrap)
        specs: list[Any] = list(pool.agents)
    else:
        backend.simulators.update(
            {
                b: make_backend(b, **dict(env_kwargs.get("backend_kwargs") or {}))
                for b in {str(a.get("backend", "simulated")) for a in pool_doc["agents"]}
                if b in DETERMINISTIC_BACKENDS
            }
        )
        pool, specs = build_pool(pool_doc, backend, str(root / POOL))
        env = make_replay_env(str(run["env_id"]), env_kwargs, pool, run.get("split"))
    try:
        replayed = replay_episodes(env, rows, backend, episode_seed=episode_seed, rerun=rerun)
    finally:
        env.close()
    unused = [r for r in records if (r["_key"], int(r.get("occurrence") or 0)) not in stats.used]
    if unused:
        problems.add(
            "unused_calls",
            f"{len(unused)} recorded call(s) are never made by the replay (e.g. task "
            f"{unused[0]['task_id']!r}, agent {unused[0]['agent']!r}, turn {unused[0]['turn']})",
        )
    return replayed, problems, stats, records, specs


def remove_verdicts(root: Path) -> list[str]:
    """Delete any ``verified.json`` / ``verification.md`` in ``root`` (a verdict shipped in a
    bundle, or left by an earlier verification): done before anything is read, so a bundle
    that cannot be verified never keeps a verdict. Returns the names removed."""
    import shutil

    removed = []
    for name in (VERIFIED_FILE, REPORT_FILE):
        path = root / name
        if not os.path.lexists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(name)
    if removed:
        logger.warning("%s: removed a verdict found before verification: %s", root, removed)
    return removed


def verify_bundle(
    bundle: str | Path,
    *,
    audit_file: str | Path | None = None,
    oracle_episodes: int | None = None,
    write: bool = True,
    key: bytes | None = None,
    oracle_seconds: float | None = None,
    rerun: bool = False,
) -> VerifyReport:
    """Verify ``bundle`` (module docstring); writes ``verified.json`` and ``verification.md``
    into it unless ``write=False``, signed with the board's ``key`` when given
    (``orchenv.verify.keys``).

    With ``write``, any verdict already in the bundle is removed before anything is read, and
    an error that stops verification (an unreadable manifest, a bug) still writes a failed
    verdict naming it before the error propagates."""
    start = time.perf_counter()
    root = Path(bundle)
    if write and root.is_dir():
        remove_verdicts(root)
    try:
        return _verify_bundle(
            root, start, audit_file, oracle_episodes, write, key, oracle_seconds, rerun
        )
    except Exception as exc:
        if write and root.is_dir():
            failed = VerifyReport(
                bundle=str(root),
                verdict="failed",
                checks=[Check("error", FAIL, f"verification stopped: {exc}"[:2000])],
                score={},
                audit={},
                files={},
                bundle_sha256=None,
                run={},
                seconds=time.perf_counter() - start,
            )
            write_report(failed, root, key)
        raise


def _verify_bundle(
    root: Path,
    start: float,
    audit_file: str | Path | None,
    oracle_episodes: int | None,
    write: bool,
    key: bytes | None,
    oracle_seconds: float | None = None,
    rerun: bool = False,
) -> VerifyReport:
    from orchenv.eval.harness import load_summary, read_episode_log, read_json_file
    from orchenv.schema import RUN_INFO

    checks: list[Check] = []
    manifest = _read_manifest(root)
    names = sorted(manifest["files"])
    every = sorted(
        {*names, *RUN_FILES, POOL, CALLS, *(f"{REFERENCE}/{n}" for n in (*RUN_FILES, CALLS))}
    )
    refused = bad_files(root, every)
    current = file_digests(root, names)
    changed = [n for n in names if current.get(n) != manifest["files"][n]]
    sealed = digest_files(manifest["files"]) == manifest.get("bundle_sha256")
    if changed or not sealed:
        what = (
            f"{', '.join(changed)} changed after the bundle was written"
            if changed
            else "bundle_sha256 does not match its file list"
        )
        checks.append(Check("bundle", FAIL, what, {"changed": changed}))
    else:
        checks.append(Check("bundle", PASS, f"{len(names)} files match their digests"))
    run_files = file_digests(root, sorted(set(RUN_FILES) | set(names)))  # sealed in the report

    def finish(score: dict[str, Any], audit: dict[str, Any], run: dict[str, Any]) -> VerifyReport:
        verdict = "failed" if any(c.verdict == FAIL for c in checks) else "verified"
        report = VerifyReport(
            checks=checks,
            score=score,
            audit=audit,
            run=run,
            verdict=verdict,
            seconds=time.perf_counter() - start,
            bundle=str(root),
            files=run_files,
            bundle_sha256=manifest.get("bundle_sha256"),
            execution="re-executed"
            if any(c.name == "execution" and c.verdict == PASS for c in checks)
            else "replay only",
        )
        if write:
            write_report(report, root, key)
        return report

    if refused:  # never opened: a FIFO would hang, a link could point out of the bundle
        checks.append(
            Check(
                "files",
                FAIL,
                f"{len(refused)} file(s) cannot be read as bundle files; first: {refused[0]}",
                {"refused": refused[:KEEP_EXAMPLES]},
            )
        )
        return finish({}, {}, {})
    try:
        run = read_json_file(root / "run.json", RUN_INFO)
        rows = read_episode_log(root / "episodes.jsonl")
        summary = load_summary(root)
        pool_doc = read_json_file(root / POOL)
        from orchenv.pool import check_pool_data

        pool_doc = check_pool_data(pool_doc, str(root / POOL))
    except (OrchEnvError, OSError) as exc:
        checks.append(Check("files", FAIL, f"cannot be read as orchenv wrote them: {exc}"))
        return finish({}, {}, {})
    checks.append(
        Check(
            "files",
            PASS,
            "run.json, episodes.jsonl (line digests), summary.json and pool.json pass the schema",
        )
    )
    declared = manifest.get("run") or {}
    mismatch = [
        k
        for k in ("env_id", "pool", "split", "controller", "seeds", "episodes", "privileged")
        if k in declared and declared.get(k) != run.get(k)
    ]
    pooled = summary["pooled"]
    if pooled.get("privileged", run.get("privileged")) != run.get("privileged"):
        mismatch.append("privileged (summary.json)")
    run_view = {k: run.get(k) for k in RUN_FIELDS}

    # plan: every (seed, episode) once
    seeds, n_eps = list(run.get("seeds") or []), int(run.get("episodes") or 0)
    seen: Counter[tuple[int, int]] = Counter((int(r["seed"]), int(r["episode"])) for r in rows)
    declared_n = len(seeds) * n_eps
    if declared_n > 2 * len(rows) + 1000:  # never materialise a plan the log cannot fill
        checks.append(
            Check(
                "plan", FAIL, f"run.json plans {declared_n:,} episodes; the log has {len(rows):,}"
            )
        )
        return finish({}, {}, {})
    plan = {(s, i) for s in seeds for i in range(n_eps)}
    missing = sorted(plan - set(seen))
    extra = sorted(set(seen) - plan)
    twice = sorted(p for p, c in seen.items() if c > 1)
    ordered = plan_order(rows, seeds)
    problems_plan = []
    if mismatch:
        problems_plan.append(f"the manifest and run.json disagree on {', '.join(mismatch)}")
    if missing:
        problems_plan.append(
            f"{len(missing)} planned episode(s) missing, e.g. seed {missing[0][0]} episode {missing[0][1]}"
        )
    if extra:
        problems_plan.append(
            f"{len(extra)} episode(s) outside the plan, e.g. seed {extra[0][0]} episode {extra[0][1]}"
        )
    if twice:
        problems_plan.append(
            f"{len(twice)} episode(s) logged twice, e.g. seed {twice[0][0]} episode {twice[0][1]}"
        )
    if any("env_state" in r for r in rows) and [(r["seed"], r["episode"]) for r in rows] != [
        (r["seed"], r["episode"]) for r in ordered
    ]:
        problems_plan.append(
            "the env carries state across episodes but the log is not in play order"
        )
    checks.append(
        Check("plan", FAIL, "; ".join(problems_plan))
        if problems_plan
        else Check(
            "plan", PASS, f"{len(plan)} episodes: seeds {seeds} x {n_eps}, each once, in order"
        )
    )
    checks.append(_check_privileged(run))
    pool_source = str(manifest.get("pool_source") or "document")
    price_check, prices = _check_prices(pool_doc, manifest.get("run_date"), pool_source)
    if pool_source == "env":
        pool_check, own = _guarded_pool(run, pool_doc)
        checks.append(pool_check)
        for agent, price in own.items():  # orchenv's own price where the table has none
            if prices.get(agent) is None:
                prices[agent] = price
    else:
        checks.append(_preset_pool(run, pool_doc))
    checks.append(price_check)

    # replay
    rows_in_plan = [r for r in ordered if (int(r["seed"]), int(r["episode"])) in plan]
    first_rows: dict[tuple[int, int], dict[str, Any]] = {}
    for r in rows_in_plan:
        first_rows.setdefault((int(r["seed"]), int(r["episode"])), r)
    rows_in_plan = list(first_rows.values())
    execution = None
    if rerun:
        from orchenv.verify.bundle import rerunnable

        try:
            execution = rerunnable(run)
        except DataError as exc:
            checks.append(Check("execution", FAIL, str(exc)))
            return finish({}, {}, run_view)
        if execution is None:
            checks.append(
                Check(
                    "execution",
                    FAIL,
                    f"controller {str(run.get('controller'))[:100]!r} is not registered in this "
                    "orchenv, so it cannot be re-executed (submit a registered controller with "
                    "its kwargs)",
                )
            )
            return finish({}, {}, run_view)
    try:
        replayed, problems, stats, records, specs = _replay_part(
            root, run, rows_in_plan, pool_doc, prices, pool_source, execution
        )
    except (OrchEnvError, OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        checks.append(Check("replay", FAIL, f"the run cannot be replayed: {exc}"))
        return finish({}, audit_gap(str(run.get("env_id")), audit_file), run_view)
    by_kind: dict[str, list[str]] = {}
    for row, ep in zip(rows_in_plan, replayed, strict=True):
        for kind, msg in episode_diffs(row, ep):
            by_kind.setdefault(kind, []).append(msg)

    def diff_check(name: str, ok: str) -> Check:
        msgs = by_kind.get(name, [])
        if msgs:
            return Check(
                name,
                FAIL,
                f"{len(msgs)} episode(s) differ; first: {msgs[0]}",
                {"count": len(msgs), "examples": msgs[:KEEP_EXAMPLES]},
            )
        return Check(name, PASS, ok)

    n = len(replayed)
    if execution is not None:
        label = str(run.get("controller_label") or execution[0])
        checks.append(
            diff_check(
                "execution",
                f"re-executed: {label} (seeded as orchenv eval seeds it) took every submitted "
                f"action in all {n} episodes",
            )
        )
    else:
        checks.append(
            Check(
                "execution",
                INFO,
                "replay only: the log is consistent with the env and the recorded calls, but "
                "nothing shows the declared controller produced these actions (they could "
                "have been chosen after seeing outcomes); `orchenv verify --rerun` re-executes "
                "a registered controller",
            )
        )
    checks.append(
        diff_check(
            "replay",
            f"all {n} episodes replay to their submitted outcome (correct, score, reward, turns, answer, calls)",
        )
    )
    checks.append(
        diff_check(
            "split", f"every task is the declared split {run.get('split')!r}'s task at its seed"
        )
    )
    checks.append(
        _problem_check(
            "recorded_answers",
            problems,
            ("answer_replaced", "tokens_changed"),
            f"{stats.checked_against_backend} recorded answers re-derived from their deterministic backend"
            if stats.checked_against_backend
            else "no agent call was made"
            if not stats.calls
            else "no deterministic agent to re-derive answers from (live agents: see tokenizer)",
        )
    )
    req = _problem_check(
        "requests",
        problems,
        ("missing_call", "inconsistent_request"),
        f"all {stats.calls} calls made by the replay are recorded with the same prompt hash, agent and model",
    )
    if req.verdict == PASS and problems.total("unused_calls"):
        req = Check("requests", WARN, problems.first("unused_calls")[0])
    checks.append(req)
    cost_msgs = by_kind.get("cost", []) + problems.first("call_cost")
    if cost_msgs:
        checks.append(
            Check(
                "cost",
                FAIL,
                f"{len(by_kind.get('cost', []))} episode cost(s) and {problems.total('call_cost')} recorded call cost(s) differ from server tokens x table prices; first: {cost_msgs[0]}",
                {"examples": cost_msgs[:KEEP_EXAMPLES]},
            )
        )
    else:
        checks.append(
            Check(
                "cost",
                PASS,
                f"${stats.recomputed_cost:.6g} over {stats.calls} calls, as recorded tokens x table prices",
            )
        )
    checks.append(diff_check("tokens", "every episode's tokens are the sum of its recorded calls"))

    # summary vs re-derived
    correct = sum(e.correct for e in replayed)
    lo, hi = wilson_interval(correct, n)
    score: dict[str, Any] = {
        "episodes": n,
        "accuracy": correct / n if n else 0.0,
        "accuracy_ci95": [lo, hi],
        "mean_cost_usd": sum(e.cost_usd for e in replayed) / n if n else 0.0,
        "mean_reward": sum(e.reward for e in replayed) / n if n else 0.0,
        "mean_turns": sum(e.turns for e in replayed) / n if n else 0.0,
        "mean_tokens": sum(e.prompt_tokens + e.completion_tokens for e in replayed) / n
        if n
        else 0.0,
        "controller_cost_usd": sum(
            float((r.get("metrics") or {}).get("controller_cost_usd", 0.0)) for r in rows_in_plan
        ),
    }
    sdiff = []
    if int(pooled["episodes"]) != n:
        sdiff.append(f"episodes {pooled['episodes']} claimed, {n} replayed")
    score_key: str
    for score_key, rel in (
        ("accuracy", 1e-9),
        ("mean_cost_usd", 1e-6),
        ("mean_reward", 1e-9),
        ("mean_turns", 1e-9),
    ):
        if not _close(float(pooled[score_key]), float(score[score_key]), rel):
            sdiff.append(
                f"{score_key} {pooled[score_key]!r} claimed, {score[score_key]!r} re-derived"
            )
    checks.append(
        Check("summary", FAIL, "summary.json differs from the replay: " + "; ".join(sdiff))
        if sdiff
        else Check(
            "summary",
            PASS,
            f"summary.json's accuracy {score['accuracy']:.3f}, cost and reward equal the re-derived ones",
        )
    )
    checks.append(tokenizer_check(records, specs))

    # statistical
    ref_eps = None
    if (root / REFERENCE).is_dir():
        try:
            ref_root = root / REFERENCE
            ref_run = read_json_file(ref_root / "run.json", RUN_INFO)
            ref_rows = plan_order(
                read_episode_log(ref_root / "episodes.jsonl"), ref_run.get("seeds")
            )
            ref_eps, ref_problems, *_ = _replay_part(
                ref_root, ref_run, ref_rows, pool_doc, prices, pool_source
            )
            bad = sum(bool(episode_diffs(r, e)) for r, e in zip(ref_rows, ref_eps, strict=True))
            if bad or ref_problems.total("missing_call", "answer_replaced", "tokens_changed"):
                checks.append(
                    Check(
                        "reference",
                        FAIL,
                        f"the reference run does not replay as submitted ({bad} episode(s) differ)",
                    )
                )
                ref_eps = None
            elif ref_run.get("controller") != run.get("controller") or ref_run.get(
                "split"
            ) == run.get("split"):
                checks.append(
                    Check(
                        "reference",
                        FAIL,
                        "the reference run is not the same controller on another split",
                    )
                )
                ref_eps = None
        except (OrchEnvError, OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
            checks.append(Check("reference", FAIL, f"the reference run cannot be read: {exc}"))
    checks.append(_alignment(replayed, ref_eps))
    limit = int(THRESHOLDS["oracle_episodes"][0]) if oracle_episodes is None else oracle_episodes
    checks.append(
        _guarded(
            "oracle",
            lambda: _oracle(rows_in_plan, run, pool_doc, limit, pool_source, oracle_seconds),
        )
        if limit > 0
        else Check("oracle", NOT_CHECKED, "skipped (oracle_episodes=0)")
    )
    checks.append(constant_tokens_check(records))
    floor = [r for r in records if _below_floor(r, prices)]
    if floor:
        r = floor[0]
        checks.append(
            Check(
                "cost_floor",
                FAIL,
                f"{len(floor)} recorded call cost(s) below the price table's floor for their tokens (e.g. agent {r['agent']!r} on {r['task_id']!r}: ${r['completion']['cost_usd']:.10g})",
                {"count": len(floor)},
            )
        )
    else:
        checks.append(
            Check("cost_floor", PASS, "no recorded call costs less than its tokens at table prices")
        )
    audit = audit_gap(str(run.get("env_id")), audit_file)
    checks.append(
        Check(
            "audit",
            INFO,
            f"gameability gap {audit.get('gameability_gap') or 'unknown'} ({audit.get('source')})",
            audit,
        )
    )
    return finish(score, audit, run_view)


KEEP_EXAMPLES = 20


def _below_floor(
    record: Mapping[str, Any], prices: Mapping[str, tuple[float, float] | None]
) -> bool:
    price = prices.get(record["agent"])
    if price is None:
        return False
    c = record["completion"]
    floor = (int(c["prompt_tokens"]) * price[0] + int(c["completion_tokens"]) * price[1]) / 1e6
    return float(c["cost_usd"]) < floor * (1 - 1e-6) - 1e-15


# -- writing --------------------------------------------------------------------------------------
def write_report(report: VerifyReport, root: Path, key: bytes | None = None) -> tuple[Path, Path]:
    data = report.to_dict(key)
    json_path, md_path = root / VERIFIED_FILE, root / REPORT_FILE
    json_path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    md_path.write_text(render_report(report), encoding="utf-8")
    return json_path, md_path


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_report(report: VerifyReport) -> str:
    from orchenv.eval.rows import fmt_money

    run = report.run
    lines = [
        f"# Verification of `{_md(report.bundle)}`",
        "",
        f"**{report.verdict.upper()}** ({len(report.failures())} failed check(s)); "
        f"orchenv {orchenv.__version__}, {report.seconds:.1f} s.",
        "",
    ]
    if run:
        lines += [
            f"Run: `{_md(run.get('env_id'))}`, pool `{_md(run.get('pool'))}`, split `{_md(run.get('split'))}`, controller `{_md(run.get('controller_label') or run.get('controller'))}`, seeds {run.get('seeds')} x {run.get('episodes')} episodes.",
            "",
        ]
    s = report.score
    if s:
        lines += [
            f"Re-derived score: accuracy {s['accuracy']:.3f} [95% CI {s['accuracy_ci95'][0]:.3f}, {s['accuracy_ci95'][1]:.3f}] over {s['episodes']} episodes; mean cost ${fmt_money(s['mean_cost_usd'])} per episode; mean reward {s['mean_reward']:.3f}.",
            f"Env gameability gap (`orchenv audit`): {report.audit.get('gameability_gap') or 'unknown'} ({report.audit.get('source')}).",
            "",
        ]
    lines += ["| check | verdict | reason |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.verdict} | {_md(c.reason)} |" for c in report.checks]
    lines += ["", "Thresholds of the statistical checks:", ""]
    lines += [f"- `{k}` = {v}: {why}" for k, (v, why) in THRESHOLDS.items()]
    return "\n".join(lines) + "\n"


def _gap_text(audit: Any) -> str | None:
    gap = audit.get("gameability_gap") if isinstance(audit, dict) else None
    if isinstance(gap, dict):  # an AuditReport's gap: {"gap": x, "ci95": [lo, hi], ...}
        return json.dumps(gap, sort_keys=True)[:200]
    return str(gap)[:200] if gap else None


def read_verification(run_dir: str | Path, key: bytes | None = None) -> dict[str, Any] | None:
    """A run directory's ``verified.json`` for the leaderboard: None when there is none;
    otherwise its verdict: ``unsigned`` unless it carries the HMAC of the board's ``key``
    (``orchenv.verify.keys``: a sha256 seal anyone can recompute is not trusted), ``stale``
    when the run files changed after verification."""
    from orchenv.eval.harness import read_json_file
    from orchenv.verify.keys import SIGNATURE, signed_by

    path = Path(run_dir) / VERIFIED_FILE
    if not os.path.lexists(path):
        return None
    try:
        data = read_json_file(path)
    except DataError as exc:
        return {"status": "unreadable", "reason": str(exc), "report": str(path)}
    if data.get("format") != VERIFICATION_FORMAT or not isinstance(data.get("files"), dict):
        return {
            "status": "unreadable",
            "reason": f"{path} is not an orchenv verification",
            "report": str(path),
        }
    body = {k: v for k, v in data.items() if k not in ("seal_sha256", SIGNATURE)}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if hashlib.sha256(canon.encode()).hexdigest() != data.get("seal_sha256"):
        return {
            "status": "stale",
            "reason": f"{path} was edited after it was written",
            "report": str(path),
        }
    if key is None or not signed_by(data, key):
        return {
            "status": "unsigned",
            "reason": (
                "no board key was given, and a verdict anyone can write is not trusted"
                if key is None
                else "not signed with this board's key (written by someone else, or edited)"
            )
            + ": verify it with the board's key (`orchenv verify BUNDLE --key FILE`) or let "
            "the board verify it (`orchenv leaderboard --verify`)",
            "report": str(path),
        }
    names = [str(n) for n in data["files"]]
    if any(n.startswith("/") or ".." in Path(n).parts for n in names):
        return {
            "status": "unreadable",
            "reason": f"{path} names files outside its run",
            "report": str(path),
        }
    now = file_digests(Path(run_dir), sorted(names))
    if any(now.get(k) != v for k, v in data["files"].items()):
        return {
            "status": "stale",
            "reason": "the run's files changed after verification",
            "report": str(path),
        }
    report = Path(run_dir) / REPORT_FILE
    status = "verified" if data.get("verdict") == "verified" else "failed"
    if status == "verified" and data.get("execution") != "re-executed":
        return {
            "gameability_gap": _gap_text(data.get("audit")),
            "status": "consistent",
            "reason": "replay only: consistent with the env and its recorded calls, not "
            "re-executed (`orchenv verify --rerun`), so not ranked",
            "report": str(report if report.is_file() else path),
        }
    failed = [
        c.get("name")
        for c in data.get("checks", [])
        if isinstance(c, dict) and c.get("verdict") == FAIL
    ]
    return {
        "gameability_gap": _gap_text(data.get("audit")),
        "status": status,
        "reason": "all checks passed"
        if status == "verified"
        else f"failed: {', '.join(map(str, failed))}",
        "report": str(report if report.is_file() else path),
    }


__all__ = [
    "THRESHOLDS",
    "Check",
    "VerifyReport",
    "audit_gap",
    "read_verification",
    "verify_bundle",
]
