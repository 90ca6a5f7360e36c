"""Capture speed and memory: Llama-2-70B prefill (batch 1, seq 2048) and decode (batch 1,
context 2048) on the meta device.

Acceptance: each capture's median wall time under 60 s and the process's peak RSS under 2 GiB.
Run: ``.venv/bin/python benchmarks/bench_capture.py``
"""
from __future__ import annotations

import resource
import statistics
import sys
import time


def llama2_70b_config() -> object:
    import transformers

    return transformers.LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
                                    max_position_embeddings=4096, torch_dtype="bfloat16")


def main(repeats: int = 3) -> int:
    import torch
    import transformers

    from pytest_charz.workloads.capture_phases import capture_phase

    start = time.perf_counter()
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(llama2_70b_config()).to(torch.bfloat16)
    print(f"model on meta: {time.perf_counter() - start:.2f} s")
    ok = True
    for phase, sizes in (("prefill", {"seq": 2048}), ("decode", {"context": 2048})):
        times_s = []
        for _ in range(repeats):
            start = time.perf_counter()
            graph = capture_phase(model, phase, 1, name="llama-2-70b", **sizes)
            times_s.append(time.perf_counter() - start)
        median_s = statistics.median(times_s)
        ok &= median_s < 60
        print(f"{phase}: {len(graph.ops)} ops, {graph.total_flops / 1e12:.2f} TFLOP, "
              f"{graph.total_bytes / 1e9:.1f} GB, median {median_s:.2f} s of {repeats} "
              f"({', '.join(f'{t:.2f}' for t in times_s)})")
    peak_rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux
    ok &= peak_rss_gib < 2
    print(f"peak RSS: {peak_rss_gib:.2f} GiB")
    print("PASS" if ok else "FAIL: over 60 s or 2 GiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
