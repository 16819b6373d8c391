"""``orchenv demos`` (issue 31 item 3): chat-format demonstrations that TRL's SFTTrainer reads,
read back through ``orchenv.schema``, and one LoRA SFT step on the tiny local Qwen2 (CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import orchenv  # noqa: F401  (registers the env ids)
from orchenv.cli import main
from orchenv.demos import DEMO_RECORD, load_demos, to_sft_dataset
from orchenv.error import DataError


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos") / "demos.jsonl"
    rc = main(
        [
            "demos",
            "orch/MathRoute-v0",
            "--controller",
            "cascade",
            "--episodes",
            "12",
            "--min-reward",
            "0.5",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    return out


def test_demos_are_prompt_completion_chats_with_the_episode_reward(demos: Path, capsys) -> None:
    records = load_demos(demos)
    assert records, "no demonstration kept"
    for r in records:
        assert r["reward"] >= 0.5  # --min-reward filters whole episodes
        assert [m["role"] for m in r["prompt"]] == ["system", "user"]
        assert r["completion"][0]["role"] == "assistant"
        assert r["env_id"] == "orch/MathRoute-v0" and r["controller"] == "cascade"
    # the route turn's action names a solver and the verify turn's gives a verdict
    phases = {r["phase"] for r in records}
    assert phases <= {"route", "verify"} and "route" in phases
    route = next(r for r in records if r["phase"] == "route")
    assert "<model>" in route["completion"][0]["content"]
    # episodes below the threshold are left out, so fewer episodes than played are kept
    lines = [json.loads(line) for line in demos.read_text().splitlines()]
    assert len(lines) == len(records)


def test_min_reward_drops_episodes_and_an_empty_result_fails_loudly(tmp_path: Path, capsys):
    out = tmp_path / "none.jsonl"
    args = ["demos", "orch/MathRoute-v0", "--controller", "random", "--episodes", "3"]
    rc = main([*args, "--min-reward", "100", "--out", str(out), "--no-progress"])
    assert rc == 2
    assert "no demonstrations kept" in capsys.readouterr().err


def test_seeds_give_the_tasks_orchenv_run_plays(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        main(["demos", "orch/MathRoute-v0", "--controller", "cascade", "--episodes", "3",
              "--seed", "7", "--out", str(path), "--no-progress"])  # fmt: skip
    assert a.read_text() == b.read_text()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["orch/NoSuch-v0", "--controller", "cascade"], "See `orchenv list`"),
        (["orch/MathRoute-v0", "--controller", "no-such"], "no-such"),
        (["orch/MathRoute-v0", "--controller", "cascade", "-c", "bogus=1"], "does not take"),
        (["orch/MathRoute-v0", "--min-reward", "nan"], "finite"),
    ],
)
def test_unknown_ids_and_controllers_are_helpful_errors(tmp_path, capsys, args, words) -> None:
    rc = main(["demos", *args, "--episodes", "1", "--out", str(tmp_path / "x.jsonl")])
    assert rc == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def _good() -> dict:
    return {
        "env_id": "orch/MathRoute-v0",
        "controller": "cascade",
        "episode": 0,
        "turn": 0,
        "reward": 1.0,
        "prompt": [{"role": "user", "content": "Problem: 1+1"}],
        "completion": [{"role": "assistant", "content": "<model>A</model>"}],
    }


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("x" * 100, "malformed"),
        ('{"a": ' * 200 + "1" + "}" * 200, "deep"),
        (json.dumps({**_good(), "reward": 10**400})[:-1] + "}", "digits"),
        (json.dumps({**_good(), "reward": 1e300}), "finite number"),
        (json.dumps({**_good(), "reward": float("nan")}), "NaN"),
        (
            json.dumps({**_good(), "completion": [{"role": "assistant", "content": "\ud800"}]}),
            "lone surrogate",
        ),  # fmt: skip
        (json.dumps({**_good(), "prompt": [{"role": "tool", "content": "x"}]}), "one of"),
        (
            json.dumps({**_good(), "prompt": [{"role": "user", "content": "x" * 1_000_001}]}),
            "at most",
        ),  # fmt: skip
        (json.dumps({**_good(), "rewrd": 1}), "did you mean 'reward'"),
        (json.dumps({k: v for k, v in _good().items() if k != "completion"}), "neither"),
        (json.dumps({**_good(), "completion": [{"role": "user", "content": "x"}]}), "assistant"),
    ],
)
def test_hostile_files_fail_with_the_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_good()) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        load_demos(path)
    assert "line 2" in str(exc.value) and words.lower() in str(exc.value).lower()


def test_a_ten_megabyte_line_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"prompt": "' + "x" * 10_000_000 + '"}\n')
    with pytest.raises(DataError, match="longer than"):
        load_demos(path)


def test_the_schema_accepts_what_demos_write(demos: Path) -> None:
    first = json.loads(demos.read_text().splitlines()[0])
    assert DEMO_RECORD.validate(first, "x") == first
    assert math.isfinite(first["reward"])


def test_one_lora_sft_step_on_the_tiny_qwen2(demos: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    from tiny_model import tiny_qwen2_path

    from orchenv.agents.sft import run_sft

    dataset = to_sft_dataset(demos)
    assert dataset.column_names == ["prompt", "completion"]
    summary = run_sft(
        demos, tiny_qwen2_path(), tmp_path / "tuned", max_steps=1, batch_size=2, max_length=2048
    )
    assert summary["steps"] == 1 and math.isfinite(summary["train_loss"])
    assert summary["lora"]["merged"]
    # the merged model is a plain transformers folder the hf backend loads
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "tuned")
    assert not any("lora" in name for name, _ in model.named_parameters())
