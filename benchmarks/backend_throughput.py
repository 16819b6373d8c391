"""Local-model backends: completions/s and tokens/s of ``hf`` vs ``vllm`` on one model and prompt set.

Both run the same chat prompts (math problems from the procedural source) through
``AgentPool.call_many`` in one process, ``hf`` first. ``vllm`` needs a CUDA GPU and
``pip install "orchenv[vllm]"``; without them the script measures ``hf`` alone and
says why vLLM was skipped. The GPU comparison has NOT been run in this repository
(no GPU was available); run it on a GPU machine and record the figures in
``benchmarks/README.md``.

    python benchmarks/backend_throughput.py --model PATH_OR_HUB_ID [--prompts 64] [--max-new-tokens 256]
    python benchmarks/backend_throughput.py --tiny   # CPU smoke run on a 2-layer model built locally
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from orchenv.backends.vllm_backend import cuda_available
from orchenv.envs.mathroute.mathgen import ProceduralMathSource
from orchenv.error import OrchEnvError
from orchenv.pool import AgentPool, AgentSpec, CallContext


def measure(backend_name: str, backend: object, model: str, prompts: int) -> tuple[float, float]:
    spec = AgentSpec(name="agent", model=model, tier=0, backend=backend_name)
    pool = AgentPool([spec], {backend_name: backend})  # type: ignore[dict-item]
    source = ProceduralMathSource(seed=0)
    tasks = [source.get("test", i) for i in range(prompts)]
    calls = [
        (
            "agent",
            [{"role": "user", "content": f"Solve step by step.\n{t.prompt}"}],
            CallContext(task=t),
        )
        for t in tasks
    ]
    pool.call_many(calls[:2])  # load weights, warm up
    start = time.perf_counter()
    out = pool.call_many(calls)
    elapsed = time.perf_counter() - start
    pool.close()
    return len(out) / elapsed, sum(c.completion_tokens for c in out) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="local model directory or hub id (cached locally)")
    parser.add_argument(
        "--tiny", action="store_true", help="build a 2-layer model locally (CPU smoke run)"
    )
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_model import build_tiny_qwen2

        args.model = str(build_tiny_qwen2(Path(tempfile.mkdtemp())))
    if not args.model:
        parser.error("give --model PATH or --tiny")

    from orchenv.backends.hf import HFBackend

    hf = HFBackend(model=args.model, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    hf_cps, hf_tps = measure("hf", hf, args.model, args.prompts)
    print(f"hf     {hf_cps:8.2f} completions/s  {hf_tps:10.1f} tokens/s")
    if not cuda_available():
        print("vllm   skipped: no CUDA GPU on this machine (vLLM needs one)")
        return
    try:
        from orchenv.backends.vllm_backend import VLLMBackend

        vllm = VLLMBackend(model=args.model, max_tokens=args.max_new_tokens)
        v_cps, v_tps = measure("vllm", vllm, args.model, args.prompts)
    except OrchEnvError as exc:
        print(f"vllm   skipped: {exc}")
        return
    print(f"vllm   {v_cps:8.2f} completions/s  {v_tps:10.1f} tokens/s")
    print(f"ratio vllm / hf: {v_cps / hf_cps:.1f}x completions/s, {v_tps / hf_tps:.1f}x tokens/s")


if __name__ == "__main__":
    main()
