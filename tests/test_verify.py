"""Issue 30: `orchenv submit` / `orchenv verify`. An honest bundle verifies (simulated pool and a
live local server); every tampering case of the issue is caught with a clear reason, also when
the tamperer recomputes every digest (``_reseal``), since verify re-derives rather than trusts.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401 - registers the envs
from orchenv.cli import main
from orchenv.eval.harness import EvalConfig, episode_seed, evaluate
from orchenv.verify import verify_bundle, write_bundle
from orchenv.verify.bundle import MANIFEST, digest_files, file_digests
from orchenv.verify.checks import FAIL, PASS, constant_tokens_check

ENV = "orch/MathRoute-v0"
N = 40  # episodes per run: enough verdicts for the alignment check, a second or so to verify
ORACLE = 10  # episodes the oracle check searches in these tests


# -- helpers --------------------------------------------------------------------------------------
def _rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        row.pop("line_digest", None)
        rows.append(row)
    return rows


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Episode lines with freshly computed line digests (as a careful tamperer would)."""
    out = []
    for row in rows:
        body = json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode()
        digest = hashlib.blake2b(body, digest_size=16).hexdigest()
        out.append(body[:-1] + f',"line_digest":"{digest}"}}\n'.encode())
    path.write_bytes(b"".join(out))


def _calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_calls(path: Path, calls: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(c) + "\n" for c in calls), encoding="utf-8")


def _reseal(bundle: Path) -> None:
    """Recompute the manifest's digests after an edit (digests are not a signature)."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"] = file_digests(bundle, sorted(manifest["files"]))
    manifest["bundle_sha256"] = digest_files(manifest["files"])
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _verify(bundle: Path, **kwargs: Any):
    return verify_bundle(bundle, oracle_episodes=kwargs.pop("oracle_episodes", ORACLE), **kwargs)


def _stronger(env: Any) -> list[str]:
    return [a for a in env.valid_agents() if a in env.pool.stronger_than(env.draft_agent)]


class _Verdicts:
    """Random routing; verdicts either a fair coin (honest) or the draft's true correctness
    (what answers revised in line with the key look like). Not registered: `my-policy`."""

    def __init__(self, seed: int, aligned: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.aligned = aligned
        self.env: Any = None

    def bind(self, env: Any) -> None:
        self.env = env

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: str, info: dict) -> str:
        from orchenv.envs.mathroute.protocol import route_text, verdict_text

        env = self.env
        if env.draft_agent is None:
            agents = env.valid_agents()
            return route_text(agents[int(self.rng.integers(len(agents)))])
        accept = bool(env.draft_correct) if self.aligned else bool(self.rng.random() < 0.5)
        stronger = _stronger(env)
        return verdict_text(True) if accept or not stronger else verdict_text(False, stronger[0])


def _policy_run(tmp: Path, name: str, split: str, aligned: bool) -> Path:
    config = EvalConfig(ENV, controller="my-policy", split=split, episodes=N, seeds=[0])
    out = tmp / name
    evaluate(config, out, controller_factory=lambda s: _Verdicts(s, aligned), progress=False)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("verify")
    out: dict[str, Path] = {}
    for split in ("train", "test"):
        config = EvalConfig(ENV, controller="random", split=split, episodes=N, seeds=[0])
        evaluate(config, tmp / f"run-{split}", progress=False)
        out[split] = tmp / f"run-{split}"
    out["honest"] = write_bundle(out["train"], tmp / "honest")
    out["policy-ref"] = _policy_run(tmp, "policy-test", "test", aligned=False)
    out["policy-honest"] = _policy_run(tmp, "policy-train", "train", aligned=False)
    out["policy-aligned"] = _policy_run(tmp, "policy-aligned", "train", aligned=True)
    return out


# -- honest bundles -------------------------------------------------------------------------------
def test_an_honest_bundle_verifies_and_writes_its_report(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    report = _verify(bundle)
    assert report.verified, [(c.name, c.reason) for c in report.failures()]
    for name in ("replay", "split", "recorded_answers", "requests", "cost", "tokens", "summary"):
        assert report.check(name).verdict == PASS, name
    summary = json.loads((bundle / "summary.json").read_text())["pooled"]
    assert report.score["accuracy"] == summary["accuracy"]
    assert report.score["accuracy_ci95"][0] < summary["accuracy"] < report.score["accuracy_ci95"][1]
    data = json.loads((bundle / "verified.json").read_text())
    assert data["verdict"] == "verified" and len(data["seal_sha256"]) == 64
    assert "gameability gap" in (bundle / "verification.md").read_text()


def test_cli_submit_and_verify(runs, tmp_path, capsys):
    bundle = tmp_path / "cli-bundle"
    assert main(["submit", str(runs["test"]), "--out", str(bundle)]) == 0
    assert main(["verify", str(bundle), "--oracle-episodes", "5"]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    assert main(["submit", str(runs["test"]), "--out", str(bundle)]) == 2  # not empty


@pytest.mark.timeout(120)
def test_a_bundle_recorded_against_a_live_local_server_verifies(tmp_path, monkeypatch):
    from orchenv.pool import make_pool
    from orchenv.testing.fake_openai import FakeOpenAIServer
    from orchenv.verify import checks

    # the fake server counts words, not a real tokenizer's tokens: a Qwen tokenizer cached on
    # the machine would rightly disagree with it (the re-count has its own test below)
    monkeypatch.setattr(checks, "_tokenizer_file", lambda model: None)

    def reply(body: dict) -> str:  # depends on the request, so a crossed answer would show
        return f"Steps. \\boxed{{{sum(len(m['content']) for m in body['messages']) % 7}}}"

    run = tmp_path / "live-run"
    with FakeOpenAIServer(reply=reply) as server:
        kwargs = {"base_url": server.url, "timeout_s": 10.0}
        pool = make_pool(
            "system1", backend="openai", backend_kwargs=kwargs, record_to=run / "calls.jsonl"
        )
        env = gym.make(ENV, pool=pool)
        config = EvalConfig(
            ENV, env_kwargs={"backend": "openai", "backend_kwargs": kwargs}, episodes=8
        )
        evaluate(config, run, env=env, progress=False)
        env.close()
    bundle = write_bundle(run, tmp_path / "live-bundle")
    report = _verify(bundle)  # the server is gone: everything comes from the recording
    assert report.verified, [(c.name, c.reason) for c in report.failures()]
    assert report.check("replay").verdict == PASS
    assert report.check("oracle").verdict == "not checked"  # live agents
    assert report.check("tokenizer").verdict == "not checked"
    assert report.check("prices").verdict == PASS  # server tokens x the table's prices
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["calls_source"].startswith("recorded during the run")


def test_a_live_run_without_its_recording_is_refused(tmp_path):
    from orchenv.error import ConfigError

    run = tmp_path / "run"
    config = EvalConfig(ENV, episodes=2)
    evaluate(config, run, progress=False)
    run_json = json.loads((run / "run.json").read_text())
    run_json["env_kwargs"] = {"backend": "openai"}
    (run / "run.json").write_text(json.dumps(run_json))
    with pytest.raises(ConfigError, match="cannot be re-derived"):
        write_bundle(run, tmp_path / "b")


# -- tampering ------------------------------------------------------------------------------------
def _failed(report: Any, name: str) -> str:
    check = report.check(name)
    assert check.verdict == FAIL, (name, check.verdict, check.reason)
    assert not report.verified
    return check.reason


def test_an_edit_without_resealing_breaks_the_bundle_digest(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    (bundle / "pool.json").write_text((bundle / "pool.json").read_text() + " ")
    assert "pool.json changed after the bundle was written" in _failed(_verify(bundle), "bundle")


def test_a_flipped_correct_is_caught(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    rows = _rows(bundle / "episodes.jsonl")
    wrong = next(r for r in rows if not r["correct"])
    wrong["correct"] = True
    _write_rows(bundle / "episodes.jsonl", rows)
    _reseal(bundle)
    report = _verify(bundle)
    reason = _failed(report, "replay")
    assert f"episode {wrong['episode']}: correct is True in the submission" in reason
    assert "the replay gives False" in reason


def test_an_agent_answer_replaced_by_the_right_one_is_caught(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    rows = _rows(bundle / "episodes.jsonl")
    calls = _calls(bundle / "calls.jsonl")
    call = next(c for c in calls if not c["completion"]["meta"]["correct"])
    env = gym.make(ENV, split="train")
    row = next(r for r in rows if r["task_id"] == call["task_id"])
    env.reset(seed=episode_seed(row["seed"], row["episode"]))
    gold = env.unwrapped.task.answers[0]
    wrong = call["completion"]["meta"]["answer"]
    call["completion"]["text"] = call["completion"]["text"].replace(
        f"\\boxed{{{wrong}}}", f"\\boxed{{{gold}}}"
    )
    call["completion"]["meta"].update(correct=True, answer=gold)
    _write_calls(bundle / "calls.jsonl", calls)
    _reseal(bundle)
    reason = _failed(_verify(bundle), "recorded_answers")
    assert "is not what the pool's deterministic 'simulated' backend answers" in reason


def test_a_changed_price_is_caught(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    pool = json.loads((bundle / "pool.json").read_text())
    agent = pool["agents"][-1]
    del agent["price"]
    agent.update(price_prompt=0.001, price_completion=0.002)  # the "old", cheaper price
    (bundle / "pool.json").write_text(json.dumps(pool))
    calls = _calls(bundle / "calls.jsonl")
    for c in calls:  # and the recorded costs to match it
        if c["agent"] == agent["name"]:
            comp = c["completion"]
            comp["cost_usd"] = (
                comp["prompt_tokens"] * 0.001 + comp["completion_tokens"] * 0.002
            ) / 1e6
    _write_calls(bundle / "calls.jsonl", calls)
    _reseal(bundle)
    report = _verify(bundle)
    assert "but orchenv's table says" in _failed(report, "prices")
    assert "differ from server tokens x table prices" in _failed(report, "cost")
    assert "below the price table's floor" in _failed(report, "cost_floor")


def test_shrunk_token_counts_are_caught(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    calls = _calls(bundle / "calls.jsonl")
    for c in calls:
        c["completion"]["completion_tokens"] //= 2
    _write_calls(bundle / "calls.jsonl", calls)
    _reseal(bundle)
    report = _verify(bundle)
    assert "backend meters" in _failed(report, "recorded_answers")
    assert "completion_tokens is" in _failed(report, "tokens")


def test_constant_token_counts_are_flagged():
    records = [
        {
            "prompt_sha256": f"h{i}",
            "_key": f"k{i}",
            "completion": {"prompt_tokens": 100, "completion_tokens": 50},
        }
        for i in range(30)
    ]
    check = constant_tokens_check(records)
    assert check.verdict == FAIL and "counts fixed at a constant" in check.reason
    records[0]["completion"]["prompt_tokens"] = 7
    assert constant_tokens_check(records[:10]).verdict == "not checked"  # too few prompts to judge


def test_a_task_from_another_split_is_caught(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    rows = _rows(bundle / "episodes.jsonl")
    other = _rows(runs["test"] / "episodes.jsonl")
    swap = next(o for o in other if o["correct"])  # an episode of the test split that went well
    n = next(i for i, r in enumerate(rows) if not r["correct"])
    keep = {k: rows[n][k] for k in ("run_key", "split", "seed", "episode", "episode_seed")}
    rows[n] = {**swap, **keep}
    _write_rows(bundle / "episodes.jsonl", rows)
    _reseal(bundle)
    reason = _failed(_verify(bundle), "split")
    assert "is not the task the declared split gives" in reason
    assert "its id says split 'test'" in reason


def test_answers_aligned_with_the_key_after_the_fact_are_flagged(runs, tmp_path):
    honest = write_bundle(runs["policy-honest"], tmp_path / "h", reference=runs["policy-ref"])
    report = _verify(honest)
    assert report.check("outcome_alignment").verdict == PASS, report.check("outcome_alignment")
    assert report.check("privileged").verdict == "not checked"  # not a registered controller
    aligned = write_bundle(runs["policy-aligned"], tmp_path / "a", reference=runs["policy-ref"])
    report = _verify(aligned)
    reason = _failed(report, "outcome_alignment")
    assert "beyond what the same controller does on another split" in reason
    assert report.check("replay").verdict == PASS  # internally consistent: only statistics see it


def test_a_privileged_controller_declared_unprivileged_is_caught(tmp_path):
    run = tmp_path / "oracle"
    evaluate(EvalConfig(ENV, controller="oracle", episodes=4), run, progress=False)
    for name in ("run.json", "summary.json"):
        data = json.loads((run / name).read_text())
        if name == "run.json":
            data["privileged"] = False
        else:
            data["run"]["privileged"] = data["pooled"]["privileged"] = False
        (run / name).write_text(json.dumps(data))
    bundle = write_bundle(run, tmp_path / "b")
    reason = _failed(_verify(bundle, oracle_episodes=0), "privileged")
    assert "reads ground truth (privileged) but the run declares privileged: false" in reason


@pytest.mark.parametrize("bad", ["NaN", "Infinity"])
def test_a_non_finite_summary_is_refused_with_a_reason(runs, tmp_path, bad):
    bundle = _copy(runs["honest"], tmp_path, "b")
    text = (bundle / "summary.json").read_text()
    pooled_at = text.index('"pooled"')
    at = text.index('"accuracy":', pooled_at)
    end = text.index(",", at)
    (bundle / "summary.json").write_text(text[:at] + f'"accuracy": {bad}' + text[end:])
    _reseal(bundle)
    reason = _failed(_verify(bundle), "files")
    assert "summary.json" in reason and bad in reason


# -- hostile bundles: refused with a reason, never a crash or a hang -------------------------------
def _nan_cost(bundle: Path) -> None:
    text = (bundle / "calls.jsonl").read_text()
    at = text.index('"cost_usd":')
    (bundle / "calls.jsonl").write_text(text[:at] + '"cost_usd":NaN' + text[text.index(",", at) :])


def _deep_meta(bundle: Path) -> None:
    calls = _calls(bundle / "calls.jsonl")
    lines = [json.dumps(c) for c in calls]
    lines[0] = lines[0].replace('"meta": {', '"meta": {"x": ' + "[" * 5000 + "]" * 5000 + ", ", 1)
    (bundle / "calls.jsonl").write_text("\n".join(lines) + "\n")


def _huge_answer(bundle: Path) -> None:
    calls = _calls(bundle / "calls.jsonl")
    calls[0]["completion"]["text"] = "\ud800" + "9" * 10_000_000  # lone surrogate, 10 MB
    (bundle / "calls.jsonl").write_text(
        "".join(json.dumps(c) + "\n" for c in calls), encoding="utf-8", errors="surrogatepass"
    )


@pytest.mark.parametrize(
    ("tamper", "check", "words"),
    [
        (_nan_cost, "replay", "cannot be replayed"),
        (_deep_meta, "replay", "cannot be replayed"),
        (_huge_answer, "recorded_answers", "is not what the pool's deterministic"),
    ],
)
def test_hostile_calls_are_refused_with_a_reason(runs, tmp_path, tamper, check, words):
    bundle = _copy(runs["honest"], tmp_path, "b")
    tamper(bundle)
    _reseal(bundle)
    assert words in _failed(_verify(bundle, oracle_episodes=0), check)


def test_a_manifest_pointing_outside_the_bundle_or_a_missing_bundle_is_refused(runs, tmp_path):
    from orchenv.error import DataError

    bundle = _copy(runs["honest"], tmp_path, "b")
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"]["../../etc/passwd"] = "0" * 64
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="points outside the bundle"):
        verify_bundle(bundle)
    assert main(["verify", str(tmp_path / "nothing")]) == 2


def test_the_example_runs():
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "examples" / "verified_submission.py"
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "honest bundle: verified, accuracy" in result.stdout
    assert "tampered bundle: failed" in result.stdout and "but orchenv's table" in result.stdout


def test_server_token_counts_are_recounted_with_a_local_tokenizer(tmp_path):
    from types import SimpleNamespace

    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    from orchenv.verify.checks import tokenizer_check

    words = [f"w{i}" for i in range(50)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    tok.save(str(model_dir / "tokenizer.json"))
    specs = [
        SimpleNamespace(name="a", model=str(model_dir)),
        SimpleNamespace(name="b", model="no/such-model"),
    ]

    def record(agent: str, n_words: int, counted: int) -> dict:
        text = " ".join(words[:n_words])
        return {
            "agent": agent,
            "task_id": "t",
            "completion": {"text": text, "completion_tokens": counted, "token_source": "server"},
        }

    honest = [record("a", n, n + 1) for n in range(5, 45)] + [record("b", 5, 3)]  # +1: an end token
    check = tokenizer_check(honest, specs)
    assert check.verdict == PASS and "not checked for no/such-model" in check.reason
    shrunk = [record("a", n, n // 2) for n in range(5, 45)]
    check = tokenizer_check(shrunk, specs)
    assert check.verdict == FAIL and "disagree with the model's tokenizer" in check.reason
    assert tokenizer_check([record("b", 5, 5)], specs).verdict == "not checked"


def test_a_plan_far_beyond_its_log_is_refused_at_once(runs, tmp_path):
    bundle = _copy(runs["honest"], tmp_path, "b")
    run = json.loads((bundle / "run.json").read_text())
    run["seeds"] = list(range(1000))
    run["episodes"] = 1_000_000  # a billion planned episodes: never materialised
    (bundle / "run.json").write_text(json.dumps(run))
    _reseal(bundle)
    assert "plans 1,000,000,000 episodes; the log has 40" in _failed(_verify(bundle), "plan")


def test_an_env_built_pool_verifies_and_its_pool_file_cannot_be_swapped(tmp_path):
    """OrchMAS builds its pool in code: the bundle describes it, verify rebuilds it from the
    env and re-derives answers from its own deterministic backend."""
    run = tmp_path / "run"
    evaluate(
        EvalConfig("orch/OrchMAS-v0", controller="env-random", episodes=4), run, progress=False
    )
    bundle = write_bundle(run, tmp_path / "b")
    assert json.loads((bundle / MANIFEST).read_text())["pool_source"] == "env"
    report = _verify(bundle, oracle_episodes=0)
    assert report.verified, [(c.name, c.reason) for c in report.failures()]
    assert report.check("pool").verdict == PASS
    assert "re-derived" in report.check("recorded_answers").reason
    pool = json.loads((bundle / "pool.json").read_text())
    pool["agents"][0]["price_completion"] = 0.0
    (bundle / "pool.json").write_text(json.dumps(pool))
    _reseal(bundle)
    assert "pool.json differs from the pool orch/OrchMAS-v0 builds" in _failed(
        _verify(bundle, oracle_episodes=0), "pool"
    )
