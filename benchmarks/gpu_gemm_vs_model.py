"""GPU GEMMs measured against the GEMM model's spec-only price, on the GPU this runs on.

    python benchmarks/gpu_gemm_vs_model.py OUT.json [TARGET]      (TARGET: default h200)

Each shape's time is the median over 15 replays of a CUDA graph of 20 back-to-back calls (the
host's per-op dispatch, some 17 us a torch op on an H200 host, is out of it), after a second of
large products to bring the clocks up; bf16 through ``torch.mm``, fp8 through
``torch._scaled_mm`` (unit scales, bf16 out; shapes whose n or k is not a multiple of 16 are
skipped). The error is ``predict(gemm_work(...), target) / measured - 1``, the published table's
convention. Last, a triad-like ``add`` of three 1 GiB arrays for the achieved DRAM rate. Needs a
GPU with PyTorch; nothing is fitted on what it prints.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (m, n, k): squares, the cuBLASLt guide's odd and tall-skinny shapes, decode and prefill GEMMs
#: of Llama-sized models, and a 128-row k_proj of a tensor-parallel prefill.
SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (1024, 2145, 1024),
          (802816, 192, 768), (16, 12288, 5376), (128, 12288, 5376), (2048, 22016, 4096), (128, 256, 8192))


def bench(fn: Callable[[], Any], reps: int = 15, inner: int = 20) -> float:
    """Seconds per call: the median over ``reps`` replays of a CUDA graph of ``inner`` calls."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / inner)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    import torch

    from pytest_charz import predict
    from pytest_charz.published import GemmCase
    from pytest_charz.published.score import gemm_work

    if not argv:
        print(__doc__)
        return 2
    out_path, target = argv[0], (argv[1] if len(argv) > 1 else "h200")
    warm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    started = time.time()
    while time.time() - started < 1.0:   # clocks up
        torch.mm(warm, warm)
    torch.cuda.synchronize()
    del warm
    rows: list[dict[str, Any]] = []
    for dtype in ("bf16", "fp8"):
        for m, n, k in SHAPES:
            if dtype == "fp8" and (n % 16 or k % 16):
                continue   # _scaled_mm needs dimensions divisible by 16
            if dtype == "bf16":
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
                measured = bench(lambda: torch.mm(a, b))
            else:
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
                one = torch.tensor(1.0, device="cuda")
                measured = bench(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            predicted = predict(gemm_work(GemmCase(m, n, k, dtype)), target=target).time_s
            rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "measured_s": measured, "predicted_s": predicted,
                         "tflops": 2.0 * m * n * k / measured / 1e12, "error": predicted / measured - 1.0})
            print(f"{dtype} {m}x{n}x{k}: {measured * 1e6:9.1f} us {2.0 * m * n * k / measured / 1e12:7.1f} TFLOP/s  "
                  f"predicted {predicted * 1e6:9.1f} us  error {predicted / measured - 1.0:+.3f}", flush=True)
            del a, b
            torch.cuda.empty_cache()
    x = torch.empty(2**28, device="cuda")
    y, z = torch.randn_like(x), torch.randn_like(x)
    seconds = bench(lambda: torch.add(y, z, alpha=2.0, out=x), inner=5)
    rate = 3 * x.numel() * 4 / seconds
    print(f"triad-like add of three 1 GiB arrays: {rate / 1e12:.2f} TB/s", flush=True)
    with open(out_path, "w") as handle:
        json.dump({"target": target, "gemms": rows, "triad_bytes_per_s": rate}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
